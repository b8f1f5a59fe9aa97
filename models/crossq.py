"""crossq: CrossQ (Bhatt, Palenicek et al., ICLR 2024, openreview.net/forum?id=PczQtTsTIX), SAC
without target networks and with batch renormalization in the critics and the actor.

What differs from models/sac.py:

- **Batch Renormalization** (Ioffe 2017, arXiv:1702.03275) before every linear layer of the
  critics (on their input too) and of the actor's trunk, and after the actor's last hidden
  layer. Plain batch normalization for the first ``--renorm_warmup_steps`` training passes of
  each layer, then the batch statistics corrected towards the running ones (r clipped to
  [1/3, 3], d to [-5, 5]).
- **No target critics.** The critics see (s, a) and (s', a') in **one joint pass** in training
  mode, so the normalization statistics are those of the mixture of current and next
  state-actions (the paper's point: normalizing them separately makes (s', a') look out of
  distribution); the next values are cut from the same pass and detached.
- **Delayed actor and temperature updates**: every ``--policy_delay`` critic updates. The
  gradients ``step`` returns then leave the actor and log(alpha) out, and the learner does not
  step them (core/learning/learner.py: a parameter missing from the gradients is not updated).
- Adam with beta1 = ``--adam_beta1`` (0.5, as the paper and sb3-contrib) for the actor and
  critics, one learning rate of 1e-3 by default, critics of 1024 x 1024 (sb3-contrib's default).

Training and evaluation modes: the model is in eval mode except inside ``step``, which switches
exactly the passes that learn from the batch to training mode (the joint critic pass, the
actor's pass on the current observations); acting, the next actions and the critic's values in
the actor loss use the running statistics, as in sb3-contrib. The running statistics are buffers,
so they travel with the weights to the workers and into checkpoints.

The running statistics change in the process that computes the update, so CrossQ runs with one
learner (the parameter server or the local learner): ``--num_learners`` above 1 is refused.
"""
import contextlib
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from core.argtypes import non_negative_int, positive_float, positive_int
from core.errors import ConfigError
from models import register_model
from models.encoders import resolve_encoder
from models.ppo import hidden_sizes
from models.sac import Actor, SACModel, TwinQ


class BatchRenorm(nn.Module):
    """Batch renormalization of [B, F] inputs over the batch dimension.

    Training mode: x_hat = (x - mean_B) / std_B * r + d, with r = std_B / std_running clipped to
    [1/r_max, r_max] and d = (mean_B - mean_running) / std_running clipped to [-d_max, d_max],
    both constants for the gradient; r = 1 and d = 0 (plain batch norm) during the first
    ``warmup_steps`` training passes. Then the running mean and variance move towards the
    batch's by ``momentum``. Eval mode: x_hat = (x - mean_running) / std_running.
    Output: weight * x_hat + bias. std = sqrt(var + eps), var the biased batch variance (the
    paper's; sb3-contrib's BatchRenorm1d takes the unbiased one, 0.2% apart at CrossQ's joint
    batch of 512)."""

    def __init__(self, num_features, momentum=0.01, eps=1e-3, warmup_steps=100_000,
                 r_max=3.0, d_max=5.0):
        super().__init__()
        self.momentum, self.eps, self.warmup_steps = momentum, eps, warmup_steps
        self.r_max, self.d_max = r_max, d_max
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        x = x.float()  # statistics in float32, also under bf16 autocast
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                training=False, eps=self.eps)
        # Mean, then the centred batch (reused below), then the biased variance: ~10x faster
        # forward here than torch.var_mean over the batch dimension.
        mean = x.mean(0)
        centred = x - mean
        var = centred.square().mean(0)
        inv_std = (var + self.eps).rsqrt()
        weight, bias = self.weight, self.bias
        if int(self.steps) >= self.warmup_steps:
            with torch.no_grad():
                running_std = (self.running_var + self.eps).sqrt()
                r = (inv_std.reciprocal() / running_std).clamp(1.0 / self.r_max, self.r_max)
                d = ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
            # weight * (x_hat * r + d) + bias, with r and d constants for the gradient
            weight, bias = self.weight * r, self.weight * d + self.bias
        # (x - mean) * (weight / std) + bias in one pass over the batch, the per-feature scale
        # formed first (the batch statistics' gradient flows through it); written out op by op
        # the formula took ~40% of a 1024-wide critic's update. Centring before scaling keeps
        # the precision of inputs with a large mean.
        out = torch.addcmul(bias, centred, weight * inv_std)
        with torch.no_grad():
            self.running_mean.lerp_(mean.detach(), self.momentum)
            self.running_var.lerp_(var.detach(), self.momentum)
            self.steps += 1
        return out


def renorm_mlp(in_dim, sizes, out_dim, renorm, last_renorm=False):
    """[BatchRenorm, Linear, ReLU] per hidden layer, then BatchRenorm + Linear head if out_dim
    (the critics), or a closing BatchRenorm if last_renorm (the actor's trunk)."""
    layers, last = [], in_dim
    for size in sizes:
        layers += [renorm(last), nn.Linear(last, size), nn.ReLU()]
        last = size
    if out_dim is not None:
        layers += [renorm(last), nn.Linear(last, out_dim)]
    elif last_renorm:
        layers.append(renorm(last))
    return nn.Sequential(*layers)


@contextlib.contextmanager
def renorm_training(*modules):
    """Batch renormalization layers of ``modules`` in training mode inside the block."""
    layers = [m for module in modules for m in module.modules() if isinstance(m, BatchRenorm)]
    for layer in layers:
        layer.train(True)
    try:
        yield
    finally:
        for layer in layers:
            layer.train(False)


@register_model("crossq")
class CrossQModel(SACModel):
    """CrossQ: SAC with batch-renormalized critics and actor, no target critics, delayed actor."""
    # Only the parameters an update moves: the actor and log(alpha) are left out between
    # policy updates (their .grad is None), so the learner's Adam does not step them.
    partial_gradients = True
    # the delayed actor is a branch on a host counter; batch renormalization writes statistics
    update_graph_safe = False

    @staticmethod
    def add_args(parser):
        SACModel.add_args(parser)
        parser.add_argument("--crossq_critic_sizes", type=hidden_sizes, default=[1024, 1024],
                            help="widths of each critic's hidden layers (the actor's: "
                                 "--sac_hidden_sizes) (default: 1024,1024)")
        parser.add_argument("--policy_delay", type=positive_int, default=3,
                            help="critic updates per actor and temperature update "
                                 "(default: %(default)s)")
        parser.add_argument("--bn_momentum", type=positive_float, default=0.01,
                            help="batch renormalization: how far the running statistics move "
                                 "towards each training batch's (default: %(default)s)")
        parser.add_argument("--bn_eps", type=positive_float, default=1e-3,
                            help="batch renormalization: added to the variance "
                                 "(default: %(default)s)")
        parser.add_argument("--renorm_warmup_steps", type=non_negative_int, default=100_000,
                            help="training passes of each layer with plain batch normalization "
                                 "before the renormalization corrections start "
                                 "(default: %(default)s)")
        parser.add_argument("--adam_beta1", type=float, default=0.5,
                            help="Adam's beta1 for the actor and the critics (the temperature "
                                 "keeps 0.9) (default: %(default)s)")
        # CrossQ's learning rate (the paper's and sb3-contrib's); a preset or a flag still wins.
        parser.set_defaults(actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)

    #: (the SAC loop refuses --num_learners above 1 with this reason)
    single_learner_only = ("model crossq runs with one learner: its batch renormalization "
                           "statistics change in the process that computes the update, and "
                           "learner workers' statistics would not reach the weights (or use "
                           "--model_name sac for several learners).")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.eval()  # running statistics everywhere except the passes in step that learn

    def build_networks(self, args):
        def renorm(features):
            return BatchRenorm(features, momentum=args.bn_momentum, eps=args.bn_eps,
                               warmup_steps=args.renorm_warmup_steps)

        if self.layout.structured:
            raise ConfigError(
                f"model crossq takes vector (Box) observations: its batch-renormalized networks "
                f"have no per-key encoders, and this env's observation space is "
                f"{self.observation_space}. Use --model_name sac for structured observations.")
        if resolve_encoder(args, self.observation_space) != "mlp":
            raise ConfigError(
                f"model crossq has no image encoder: its batch-renormalized networks take "
                f"vector observations, and this env's are images {self.observation_space} "
                f"(--encoder {args.encoder} picks nature_cnn). Use "
                f"--model_name sac for images, or --encoder mlp to flatten them.")
        sizes = args.sac_hidden_sizes
        self.actor = Actor(self.obs_dim, sizes, self.action_dim,
                           trunk=renorm_mlp(self.obs_dim, sizes, None, renorm, last_renorm=True))
        self.critic = TwinQ(self.obs_dim, args.crossq_critic_sizes, self.action_dim,
                            mlp=functools.partial(renorm_mlp, renorm=renorm))
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha)))
        # Critic updates applied so far (after_update counts them): which updates also move
        # the actor. A buffer, so it travels with the weights and checkpoints.
        self.register_buffer("critic_updates", torch.zeros((), dtype=torch.long))

    def policy_update_due(self):
        """True when the update being computed also moves the actor and the temperature (the
        policy_delay-th, 2 x policy_delay-th, ... update, counting from 1, as sb3-contrib)."""
        return (int(self.critic_updates) + 1) % self.args.policy_delay == 0

    def joint_q_values(self, obs, actions, next_obs, next_actions, training):
        """Both critics on [obs; next_obs] x [actions; next_actions] in one pass: (current q1,
        current q2, next q1, next q2), each [B]."""
        batch = obs.shape[0]
        with renorm_training(self.critic) if training else contextlib.nullcontext():
            q1, q2 = self.critic(torch.cat([obs, next_obs]), torch.cat([actions, next_actions]))
        q1, q2 = q1.float(), q2.float()
        return q1[:batch], q2[:batch], q1[batch:], q2[batch:]

    def soft_targets(self, rewards, terminated, next_q1, next_q2, next_log_prob):
        """r + gamma * (1 - terminated) * (min(Q1, Q2)(s', a') - alpha * log pi(a'|s')), no
        gradient (the next values come from the joint pass of the online critics)."""
        with torch.no_grad():
            next_q = torch.min(next_q1, next_q2) - self.alpha * next_log_prob
            return rewards + (1.0 - terminated) * self.args.sac_gamma * next_q

    @torch.no_grad()
    def td_errors(self, batch):
        obs, actions, rewards, next_obs, terminated, _ = self.unpack(batch)
        next_actions, next_log_prob = self.sample(next_obs)
        q1, _, next_q1, next_q2 = self.joint_q_values(obs, actions, next_obs, next_actions,
                                                      training=False)
        target_q = self.soft_targets(rewards, terminated, next_q1, next_q2, next_log_prob)
        return (q1 - target_q).abs().cpu().numpy()

    def update_loss(self, obs, actions, rewards, next_obs, terminated, weights):
        alpha = self.alpha
        with torch.no_grad():  # a' ~ pi(.|s') with the actor's running statistics
            next_actions, next_log_prob = self.sample(next_obs)

        # Critics: one joint pass in training mode; importance-weighted squared TD errors.
        q1, q2, next_q1, next_q2 = self.joint_q_values(obs, actions, next_obs, next_actions,
                                                       training=True)
        target_q = self.soft_targets(rewards, terminated, next_q1.detach(), next_q2.detach(),
                                     next_log_prob)
        critic_loss = 0.5 * sum((weights * (q - target_q).pow(2)).mean() for q in (q1, q2))
        total = critic_loss
        scalars = {"critic_loss": critic_loss.detach(), "alpha": alpha.reshape(()),
                   "q_mean": q1.detach().mean()}

        if self.policy_update_due():
            # Actor: its pass on s learns its statistics (``policy_sample``); the critics judge
            # the new actions with their running statistics and detached weights (the gradient
            # reaches the actor only).
            actor_loss, alpha_loss, log_prob = self.actor_and_alpha_losses(obs, alpha)
            total = total + actor_loss + alpha_loss
            scalars.update(actor_loss=actor_loss.detach(), alpha_loss=alpha_loss.detach(),
                           entropy=-log_prob.detach().mean())

        with torch.no_grad():
            td_errors = (q1.detach() - target_q).abs()
        scalars["td_error_mean"] = td_errors.mean()
        return total, scalars, td_errors

    def policy_sample(self, obs):
        """SAC's, with the actor's batch renormalization learning from this pass."""
        with renorm_training(self.actor):
            return self.sample(obs)

    def configure_optimizer(self):
        groups = self.parameter_groups()
        for group in groups:  # the temperature keeps Adam's usual beta1 0.9, as sb3-contrib
            group["betas"] = (0.9 if group["name"] == "alpha" else self.args.adam_beta1, 0.999)
        return torch.optim.Adam(groups, fused=True)

    @torch.no_grad()
    def after_update(self):
        """No target critics to move; count the update (for the delayed actor updates)."""
        self.critic_updates += 1
