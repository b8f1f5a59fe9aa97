"""iql: Implicit Q-Learning (Kostrikov, Nair, Levine 2021, arXiv:2110.06169), offline and for
online fine-tuning with the same losses.

Networks: twin critics Q1, Q2 with polyak-averaged targets (buffers: models/sac.py
frozen_copy; they move in ``after_update``), a state value V(s), and a policy. For Box actions
(the paper's) the policy is a Gaussian with mean tanh(f(s)) and a state-independent log std
parameter clamped to [-5, 2], not squashed: the official implementation's
(ikostrikov/implicit_q_learning, NormalTanhPolicy with tanh_squash_distribution=False,
log_std_min -5, the log std starting at 0), CORL's and d3rlpy's form (d3rlpy maps its
parameter through a sigmoid into [-5, 2] instead, starting at -1.5). For Discrete actions
each critic gives Q(s, .) for every action and the policy is categorical (masks obeyed); the
losses are the same with Q(s, a) picked by the dataset action.

With Q_t = min(Q1_target(s, a), Q2_target(s, a)) at the dataset's (s, a):

- value:  L_V = mean(|tau - 1(Q_t - V(s) < 0)| (Q_t - V(s))^2), the expectile loss
  (--iql_expectile tau);
- critics: y = r + gamma (1 - terminated) V(s') (gamma^k from n-step transitions when the
  batch carries discounts, else --iql_gamma), L_Q = mean((Q1 - y)^2 + (Q2 - y)^2), the sum
  over the two critics as the official code and d3rlpy (CORL halves it), replay importance
  weights on it;
- actor (advantage-weighted regression): w = min(exp(beta (Q_t - V(s))), --iql_max_weight),
  L_pi = -mean(w log pi(a | s)); for a Box, log pi of the dataset action clipped into
  [-1 + 1e-5, 1 - 1e-5] (the official D4RL loader's clip; harmless for a Gaussian) under
  Normal(tanh(f(s)), std).

All three from the same weights (as CORL; the official code steps V first and uses the new V
in the other two; d3rlpy 2.8.1 steps Q and V, then weighs the actor with the new V), one
backward pass of their sum: V, Q and w are detached where another loss reads them, so each
parameter gets its own loss's gradient. The actor's learning rate decays by a cosine to 0
over --total_steps (--iql_actor_lr_schedule, the paper's and CORL's). Reward scaling (the
paper's 1000 / return range for MuJoCo) is the replay loop's --reward_scale auto: it applies
to every reward the buffer stores, online ones included.

Acting: deterministic, tanh(f(s)) (the mean); stochastic, a Gaussian sample clipped to
[-1, 1] (the official sampler's clip); both scaled into the env's bounds. Discrete: the
argmax of the allowed logits, or a sample.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from core.argtypes import non_negative_float, positive_float, unit_interval
from models import register_model
from models.base import BaseModel, ReplayModelSteps
from models.bc import (ACTION_EPS, HALF_LOG_2PI, OfflinePolicy, PolicyNet, check_action_space,
                       masked_logits)
from models.dqn import QNetwork
from models.encoders import add_encoder_args, make_encoder
from models.ppo import hidden_sizes
from models.sac import TwinQ, frozen_copy, polyak_update, relu_mlp

LOG_STD_RANGE = (-5.0, 2.0)


def expectile_weights(diff, expectile):
    """|tau - 1(diff < 0)|: tau where diff > 0, 1 - tau where it is below (diff = 0 weighs
    nothing either way)."""
    return torch.where(diff > 0, expectile, 1.0 - expectile)


class ValueNet(nn.Module):
    """encoder -> ReLU MLP -> V(s), [B]."""

    def __init__(self, encoder, sizes):
        super().__init__()
        self.encoder = encoder
        self.mlp = relu_mlp(encoder.features_dim, sizes, 1)

    def forward(self, obs):
        return self.mlp(self.encoder(obs)).squeeze(-1)


class DiscreteTwinQ(nn.Module):
    """Two Q networks of every action (models/dqn.py QNetwork, each with its own encoder);
    ``forward`` returns both, [B, n] each."""

    def __init__(self, make, sizes, num_actions):
        super().__init__()
        self.q1 = QNetwork(make(), sizes, num_actions, dueling=False)
        self.q2 = QNetwork(make(), sizes, num_actions, dueling=False)

    def forward(self, obs):
        return self.q1(obs), self.q2(obs)


@register_model("iql")
class IQLModel(OfflinePolicy, ReplayModelSteps, BaseModel):
    """Implicit Q-Learning: expectile V, twin Q on r + gamma V(s'), AWR Gaussian or
    categorical actor."""
    trainer = "replay"
    update_graph_safe = True
    default_agent = "sac_agent"
    update_metrics = ("critic_loss", "value_loss", "actor_loss", "q_mean", "v_mean", "adv_mean",
                      "weight_mean")
    line_metrics = (("critic_loss", "q loss", ".3f"), ("value_loss", "v loss", ".3f"))

    @staticmethod
    def add_args(parser):
        parser.add_argument("--iql_hidden_sizes", type=hidden_sizes, default=[256, 256],
                            help="widths of the hidden layers of the actor, each critic and "
                                 "the value network (default: 256,256)")
        parser.add_argument("--iql_actor_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the actor (default: %(default)s)")
        parser.add_argument("--iql_critic_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the twin critics "
                                 "(default: %(default)s)")
        parser.add_argument("--iql_value_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of V(s) (default: %(default)s)")
        parser.add_argument("--iql_actor_lr_schedule", choices=["cosine", "constant"],
                            default="cosine",
                            help="the actor's learning rate over the run: cosine decay to 0 "
                                 "at --total_steps (the paper's, official code's and CORL's), "
                                 "or constant (d3rlpy's IQLConfig without a scheduler); the "
                                 "critics' and V's stay constant (default: %(default)s)")
        parser.add_argument("--iql_expectile", type=unit_interval, default=0.7,
                            help="the expectile tau of V's loss |tau - 1(u < 0)| u^2, "
                                 "u = Q_target(s, a) - V(s): 0.5 is the mean, towards 1 the "
                                 "max over the dataset's actions (default: %(default)s, the "
                                 "paper's MuJoCo value and d3rlpy's)")
        parser.add_argument("--iql_beta", type=non_negative_float, default=3.0,
                            help="inverse temperature of the actor's advantage weights "
                                 "exp(beta (Q_target(s, a) - V(s))) (default: %(default)s, the "
                                 "paper's MuJoCo value, d3rlpy's weight_temp)")
        parser.add_argument("--iql_max_weight", type=positive_float, default=100.0,
                            help="the advantage weights are clipped at this value "
                                 "(default: %(default)s)")
        parser.add_argument("--iql_tau", type=unit_interval, default=0.005,
                            help="polyak coefficient of the target critics after every update "
                                 "(default: %(default)s)")
        parser.add_argument("--iql_gamma", type=unit_interval, default=0.99,
                            help="discount of the critics' target r + gamma V(s'), for "
                                 "transitions that carry no discount of their own "
                                 "(default: %(default)s)")
        add_encoder_args(parser)

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        check_action_space(cls, "IQL", observation_space, action_space)

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.setup_spaces()
        self.gamma = args.iql_gamma
        sizes = args.iql_hidden_sizes

        def encoder():
            return make_encoder(args, observation_space)

        if self.discrete:
            self.actor = PolicyNet(encoder(), sizes, self.num_actions)
            self.critic = DiscreteTwinQ(encoder, sizes, self.num_actions)
        else:
            self.log_std_range = LOG_STD_RANGE
            self.actor = PolicyNet(encoder(), sizes, self.action_dim, log_std="parameter")
            shared = encoder()  # the critics' two Q heads share one, as SAC's (none on vectors)
            if self.vector_input(shared):
                self.critic = TwinQ(shared.features_dim, sizes, self.action_dim)
            else:
                self.critic = TwinQ(shared.features_dim, sizes, self.action_dim, encoder=shared)
        self.critic_target = frozen_copy(self.critic)
        self.value = ValueNet(encoder(), sizes)
        self.finish_policy()

    # -- acting ----------------------------------------------------------------------------------
    def std(self):
        return self.actor.log_std.float().clamp(*LOG_STD_RANGE).exp()

    def draw(self, obs):
        """A sample of Normal(tanh(f(s)), std), clipped to [-1, 1]."""
        mean = torch.tanh(self.actor(obs).float())
        return (mean + self.std() * torch.randn_like(mean)).clamp(-1.0, 1.0)

    def numpy_noise(self, squashed):
        std = self.std().detach().cpu().numpy()
        noise = self.acting_rng.standard_normal(squashed.shape).astype("float32")
        return (squashed + std * noise).clip(-1.0, 1.0)

    # -- learning --------------------------------------------------------------------------------
    def q_pair(self, critic, obs, actions):
        """(Q1, Q2) of ``critic`` (the online one or its target) at the dataset's actions, [B]."""
        if self.discrete:
            index = actions.unsqueeze(1)
            return tuple(q.float().gather(1, index).squeeze(1) for q in critic(obs))
        return tuple(q.float() for q in critic(obs, actions))

    def log_prob(self, obs, actions):
        """log pi(a | s) [B] of the dataset actions (module docstring)."""
        if self.discrete:
            logits = masked_logits(self.actor(obs).float(), obs)
            return F.log_softmax(logits, dim=-1).gather(1, actions.unsqueeze(1)).squeeze(1)
        mean = torch.tanh(self.actor(obs).float())
        log_std = self.actor.log_std.float().clamp(*LOG_STD_RANGE)
        a = actions.clamp(-1.0 + ACTION_EPS, 1.0 - ACTION_EPS)
        return (-0.5 * ((a - mean) * torch.exp(-log_std)).pow(2) - log_std
                - HALF_LOG_2PI).sum(-1)

    @torch.no_grad()
    def critic_targets(self, rewards, next_obs, terminated, discounts):
        """r + gamma^k (1 - terminated) V(s')."""
        return rewards + discounts * (1.0 - terminated) * self.value(next_obs).float()

    @torch.no_grad()
    def td_errors(self, batch):
        """|Q1(s, a) - y| per transition, numpy [B] (initial priorities when fine-tuning
        online with --prioritized_replay)."""
        obs, actions, rewards, next_obs, terminated, discounts, _ = self.unpack(batch)
        y = self.critic_targets(rewards, next_obs, terminated, discounts)
        return (self.q_pair(self.critic, obs, actions)[0] - y).abs().cpu().numpy()

    def update_inputs(self, batch):
        return self.unpack(batch)

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights):
        """The critic, value and actor losses' sum, statistics and |Q1 - y| per transition
        (module docstring)."""
        args = self.args
        y = self.critic_targets(rewards, next_obs, terminated, discounts)
        with torch.no_grad():
            q_target = torch.min(*self.q_pair(self.critic_target, obs, actions))
        q1, q2 = self.q_pair(self.critic, obs, actions)
        critic_loss = (weights * ((q1 - y).pow(2) + (q2 - y).pow(2))).mean()

        v = self.value(obs).float()
        diff = q_target - v
        value_loss = (expectile_weights(diff.detach(), args.iql_expectile) * diff.pow(2)).mean()

        with torch.no_grad():
            advantage = diff.detach()
            weight = torch.exp(args.iql_beta * advantage).clamp(max=args.iql_max_weight)
        actor_loss = -(weight * self.log_prob(obs, actions)).mean()

        with torch.no_grad():
            td_errors = (q1.detach() - y).abs()
        scalars = {"critic_loss": critic_loss.detach(), "value_loss": value_loss.detach(),
                   "actor_loss": actor_loss.detach(), "q_mean": q1.detach().mean(),
                   "v_mean": v.detach().mean(), "adv_mean": advantage.mean(),
                   "weight_mean": weight.mean()}
        # disjoint parameters with a gradient path: one backward pass of the sum gives each
        # network the gradient of its own loss
        return critic_loss + value_loss + actor_loss, scalars, td_errors

    def parameter_groups(self):
        """The optimizer's groups, named (the learner sets their rates by name)."""
        args = self.args
        return [
            {"params": list(self.critic.parameters()), "lr": args.iql_critic_lr,
             "name": "critic"},
            {"params": list(self.value.parameters()), "lr": args.iql_value_lr, "name": "value"},
            {"params": list(self.actor.parameters()), "lr": args.iql_actor_lr, "name": "actor"},
        ]

    def configure_optimizer(self):
        # fused: the same update, several times faster on the CPU (see models/ppo.py)
        return torch.optim.Adam(self.parameter_groups(), fused=True)

    def learning_rate(self, progress):
        """Each group's rate at ``progress`` (the fraction of --total_steps done): the actor's
        lr (1 + cos(pi progress)) / 2 with the cosine schedule; None when constant."""
        args = self.args
        if args.iql_actor_lr_schedule != "cosine":
            return None
        scale = 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))
        return {"critic": args.iql_critic_lr, "value": args.iql_value_lr,
                "actor": args.iql_actor_lr * scale}

    @torch.no_grad()
    def after_update(self):
        """Polyak averaging of the target critics: target = tau * online + (1 - tau) * target."""
        polyak_update(self.critic_target, self.critic, self.args.iql_tau)
