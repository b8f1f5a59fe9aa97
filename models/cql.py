"""cql: Conservative Q-Learning (Kumar et al. 2020, arXiv:2006.04779) for Box actions, with
d3rlpy 2.8.1's CQL as the reference for the defaults and the exact form (the Discrete form,
cql_discrete, is models/cql_discrete.py).

Two registered names, because one cannot cleanly cover both action kinds: the agent (and so
its flags) is chosen when the command line is parsed, before the env's action space is known,
and the two forms want different agents (sac_agent: one-step transitions in the env's Box
units; dqn_agent: n-step transitions with their discounts) and flags that clash (SAC's --tau
0.005 after every update against DQN's --tau 1 every --target_update_interval updates).

cql (Box actions): CQL(H) on SAC, ``CQLModel(SACModel)`` (models/sac.py: its tanh-Gaussian
actor, twin critics with polyak targets, learned temperature and flags). The critics' loss
becomes sum_i mean((Q_i(s, a) - y)^2) (both critics' squared errors summed, as d3rlpy and the
official code; SAC halves it) plus, per critic i,

    alpha' * w * (E_s[T * logsumexp_j((Q_i(s, a_j) - log mu(a_j)) / T)] - E_(s,a)~D[Q_i(s, a)]
                  - threshold)

over 3N actions a_j (N = --cql_n_actions): N uniform in [-1, 1]^A with density
mu = 0.5^A, N from the current policy at s and N from the policy at s' (both valued at s,
with mu their detached log-probabilities), the importance-sampled form of the official code,
CORL and d3rlpy. w is --cql_alpha (d3rlpy's conservative_weight), T --cql_temp (1: d3rlpy's
plain logsumexp), and alpha' = exp(log alpha') clipped to [0, 1e6] a Lagrange multiplier:
log alpha' minimizes -alpha' * mean_i w (gap_i - threshold) at --cql_lagrange_lr (d3rlpy's
alpha_learning_rate 1e-4 and alpha_threshold 10: alpha' grows while the gap exceeds the
threshold and shrinks below it; 0 keeps it at --cql_init_lagrange, the fixed-weight CQL of
CORL). All losses come from the same weights (d3rlpy steps alpha' just before the critics
read it). The critics' target is d3rlpy's default, the target critics' min at the policy's
mean action at s' without an entropy term (--cql_backup mean; sample: a drawn next action,
CORL's backup_entropy=False; soft: SAC's entropy-regularized target). The actor and
temperature losses are SAC's (d3rlpy's temperature loss takes exp(log alpha) where SAC's
takes log alpha: the same fixed point). Columns: critic_loss is the TD part, cql_penalty the
term added to it, cql_gap the gap averaged over the two critics, cql_alpha alpha'.

The Discrete form is cql_discrete (models/cql_discrete.py).
"""
import math

import torch
from gymnasium import spaces

from core.argtypes import non_negative_float, positive_float, positive_int
from core.errors import ConfigError
from models import register_model
from models.sac import HALF_LOG_2PI, LOG_2, SACModel, tanh_log_prob_correction


def repeat_rows(obs, k):
    """Each row of a batch (a tensor, or {path: tensor}) ``k`` times in a row: [B * k, ...]."""
    if isinstance(obs, dict):
        return {path: leaf.repeat_interleave(k, dim=0) for path, leaf in obs.items()}
    return obs.repeat_interleave(k, dim=0)


@register_model("cql")
class CQLModel(SACModel):
    """CQL(H) for Box actions: SAC plus the conservative penalty on the critics, with a
    Lagrange multiplier (module docstring)."""
    update_graph_safe = True
    update_metrics = SACModel.update_metrics + ("cql_penalty", "cql_gap", "cql_alpha")
    line_metrics = (("critic_loss", "q loss", ".3f"), ("cql_gap", "gap", ".3f"))

    @staticmethod
    def add_args(parser):
        SACModel.add_args(parser)
        # d3rlpy CQLConfig's learning rates: actor 1e-4, critic 3e-4, temperature 1e-4
        parser.set_defaults(actor_lr=1e-4, alpha_lr=1e-4)
        parser.add_argument("--cql_alpha", type=non_negative_float, default=5.0,
                            help="w, the weight of the conservative penalty in the critics' "
                                 "loss (default: %(default)s, d3rlpy's conservative_weight and "
                                 "the official code's min_q_weight; CORL uses 10 on "
                                 "gym-mujoco)")
        parser.add_argument("--cql_n_actions", type=positive_int, default=10,
                            help="N: the logsumexp runs over N uniform actions, N policy "
                                 "actions at s and N at s' (default: %(default)s, d3rlpy's "
                                 "n_action_samples)")
        parser.add_argument("--cql_temp", type=positive_float, default=1.0,
                            help="T in T * logsumexp(Q / T) (default: %(default)s, as d3rlpy, "
                                 "whose logsumexp has none)")
        parser.add_argument("--cql_lagrange_lr", type=non_negative_float, default=1e-4,
                            help="Adam learning rate of log(alpha'), the Lagrange multiplier "
                                 "of the penalty, which grows while the gap exceeds "
                                 "--cql_target_gap and shrinks below it; 0: alpha' stays at "
                                 "--cql_init_lagrange, a fixed weight (default: %(default)s, "
                                 "d3rlpy's alpha_learning_rate)")
        parser.add_argument("--cql_init_lagrange", type=positive_float, default=1.0,
                            help="initial alpha' (default: %(default)s, d3rlpy's "
                                 "initial_alpha)")
        parser.add_argument("--cql_target_gap", type=float, default=10.0,
                            help="the threshold the penalty's gap is held to, "
                                 "alpha' w (gap - threshold) (default: %(default)s, d3rlpy's "
                                 "alpha_threshold)")
        parser.add_argument("--cql_backup", choices=["mean", "sample", "soft"], default="mean",
                            help="the critics' target at s': mean, the target critics' min at "
                                 "the policy's mean action (d3rlpy's default, soft_q_backup "
                                 "off); sample, at a drawn action, without an entropy term "
                                 "(CORL's); soft, SAC's target with -alpha log pi "
                                 "(default: %(default)s)")

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        if isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"model {cls.__name__} (cql) is CQL on SAC, for continuous (Box) actions; this "
                f"env's action space is {action_space}. For Discrete actions use --model_name "
                f"cql_discrete (CQL on DQN).")
        super().check_spaces(observation_space, action_space)

    def build_networks(self, args):
        super().build_networks(args)
        log_lagrange = torch.full((1,), math.log(args.cql_init_lagrange))
        if args.cql_lagrange_lr > 0:
            self.log_lagrange = torch.nn.Parameter(log_lagrange)
        else:  # fixed: a buffer, in the weights but not stepped
            self.register_buffer("log_lagrange", log_lagrange)

    @property
    def lagrange(self):
        """alpha' = exp(log alpha') clipped to [0, 1e6] (as d3rlpy), with its gradient."""
        return self.log_lagrange.exp().clamp(0.0, 1e6)

    # -- the critics' target --------------------------------------------------------------------
    @torch.no_grad()
    def critic_targets(self, rewards, next_obs, terminated):
        """r + gamma (1 - terminated) min_i Q_i_target(s', a'), a' by --cql_backup."""
        backup = self.args.cql_backup
        if backup == "soft":
            return super().critic_targets(rewards, next_obs, terminated)
        if backup == "mean":
            next_actions = torch.tanh(self.actor(next_obs)[0].float())
        else:
            next_actions, _ = self.sample(next_obs)
        next_q = torch.min(*self.critic_target(next_obs, next_actions)).float()
        return rewards + (1.0 - terminated) * self.args.sac_gamma * next_q

    # -- the penalty ------------------------------------------------------------------------------
    def sample_n(self, obs, n):
        """``n`` squashed actions per row from the current policy and their log-probabilities
        (tanh-corrected): [B, n, A], [B, n]."""
        mu, log_std = (t.float() for t in self.actor(obs))
        noise = torch.randn(mu.shape[0], n, mu.shape[1], device=mu.device)
        u = mu.unsqueeze(1) + log_std.exp().unsqueeze(1) * noise
        log_prob = (-0.5 * noise.pow(2) - log_std.unsqueeze(1) - HALF_LOG_2PI).sum(-1)
        return torch.tanh(u), log_prob - tanh_log_prob_correction(u)

    @torch.no_grad()
    def cql_samples(self, obs, next_obs):
        """The 3N actions of the logsumexp for each row of the batch and the log-density each
        is divided by: [B, 3N, A], [B, 3N]: N uniform in [-1, 1]^A (log 0.5^A), N from the
        policy at s, N from the policy at s' (their log-probabilities). No gradient reaches
        the actor through them (d3rlpy's detach_policy_output)."""
        n = self.args.cql_n_actions
        current, current_log_prob = self.sample_n(obs, n)
        following, following_log_prob = self.sample_n(next_obs, n)
        uniform = torch.rand_like(current) * 2.0 - 1.0
        uniform_log_density = torch.full_like(current_log_prob, -self.action_dim * LOG_2)
        return (torch.cat([uniform, current, following], dim=1),
                torch.cat([uniform_log_density, current_log_prob, following_log_prob], dim=1))

    def critic_values(self, obs, actions):
        """(Q1, Q2) of the online critics at ``k`` actions per row ([B, k, A]): [B, k] each.
        An observation encoder (images) runs once per row, not once per action."""
        critic = self.critic
        batch, k = actions.shape[0], actions.shape[1]
        features = critic.encoder(obs) if critic.encoder is not None else obs
        x = torch.cat([repeat_rows(features, k), actions.reshape(batch * k, -1)], dim=-1)
        return tuple(q(x).float().reshape(batch, k) for q in (critic.q1, critic.q2))

    def conservative_gaps(self, obs, next_obs, data_q):
        """Per critic, E_s[T logsumexp_j((Q_i(s, a_j) - log mu_j) / T)] - E[Q_i(s, a_data)]:
        a tensor [2] (``data_q``: each critic's values at the dataset's actions, [B])."""
        temp = self.args.cql_temp
        actions, log_density = self.cql_samples(obs, next_obs)
        sampled = self.critic_values(obs, actions)
        return torch.stack([
            (temp * torch.logsumexp((q - log_density) / temp, dim=1)).mean() - data.mean()
            for q, data in zip(sampled, data_q)])

    # -- the update -------------------------------------------------------------------------------
    def update_loss(self, obs, actions, rewards, next_obs, terminated, weights):
        """SAC's losses with the critics' squared errors summed and the conservative penalty
        added, plus the Lagrange multiplier's loss (module docstring)."""
        args = self.args
        alpha = self.alpha

        target_q = self.critic_targets(rewards, next_obs, terminated)
        current_q_values = [q.float() for q in self.critic(obs, actions)]
        td_loss = sum((weights * (q - target_q).pow(2)).mean() for q in current_q_values)
        gaps = self.conservative_gaps(obs, next_obs, current_q_values)
        conservative = args.cql_alpha * (gaps - args.cql_target_gap)       # [2]
        lagrange = self.lagrange
        penalty = (lagrange.detach() * conservative).sum()
        critic_loss = td_loss + penalty
        # alpha' ascends on its penalty: its loss -alpha' * conservative, averaged over the
        # critics, reaches log alpha' alone (a buffer without a gradient when it is fixed)
        lagrange_loss = -(lagrange * conservative.detach()).mean()

        # Actor and temperature: SAC's (the critics valued with detached parameters).
        actor_loss, alpha_loss, log_prob = self.actor_and_alpha_losses(obs, alpha)

        with torch.no_grad():
            td_errors = (current_q_values[0] - target_q).abs()
        # critic_loss: the TD part, as SAC's column (the penalty has its own)
        scalars = {"critic_loss": td_loss.detach(), "actor_loss": actor_loss.detach(),
                   "alpha_loss": alpha_loss.detach(), "alpha": alpha.reshape(()),
                   "q_mean": current_q_values[0].detach().mean(),
                   "entropy": -log_prob.detach().mean(), "td_error_mean": td_errors.mean(),
                   "cql_penalty": penalty.detach(), "cql_gap": gaps.detach().mean(),
                   "cql_alpha": lagrange.detach().reshape(())}
        total = critic_loss + actor_loss + alpha_loss
        if isinstance(self.log_lagrange, torch.nn.Parameter):
            total = total + lagrange_loss
        return total, scalars, td_errors

    def parameter_groups(self):
        groups = super().parameter_groups()
        if isinstance(self.log_lagrange, torch.nn.Parameter):
            groups.append({"params": [self.log_lagrange], "lr": self.args.cql_lagrange_lr,
                           "name": "cql_alpha"})
        return groups

    def learning_rate(self, progress):
        rates = super().learning_rate(progress)
        if rates is not None and isinstance(self.log_lagrange, torch.nn.Parameter):
            rates["cql_alpha"] = self.args.cql_lagrange_lr * (1.0 - min(1.0, max(0.0, progress)))
        return rates
