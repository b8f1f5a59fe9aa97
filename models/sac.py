"""sac: Soft Actor-Critic with automatic entropy tuning (Haarnoja et al. 2018, arXiv:1801.01290;
the learned temperature of arXiv:1812.05905), for 1-D Box actions.

A tanh-squashed Gaussian actor, twin Q critics and their polyak-averaged targets, and a learned
temperature alpha. ``step`` returns the gradients of all three losses, computed from the same
weights (the learner applies them together, with one Adam of three parameter groups); the
targets are not parameters but buffers, so they get no gradients, yet travel with
``get_weights`` / ``set_weights`` and checkpoints, and the learner moves them in
``after_update``.

Actions: ``choose_actions`` returns them in the env's bounds. Replay batches hold actions as the
env got them (env bounds, also for uniform warm-up actions); the critics see them rescaled to
[-1, 1], the range of the actor's tanh.
"""
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from core.argtypes import non_negative_float, positive_float, unit_interval
from core.errors import ConfigError
from models import register_model
from models.base import BaseModel, ReplayModelSteps, TimedPrecision
from core.spaces import layout_of
from models.encoders import Flatten, add_encoder_args, make_encoder
from models.exporting import ObservationInputs, refuse_changed_acting
from models.numpy_mlp import NumpyMLP
from models.ppo import hidden_sizes

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
LOG_2 = math.log(2.0)
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def target_entropy_type(text):
    if str(text).lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'auto'") from None


def relu_mlp(in_dim, sizes, out_dim=None, linear=nn.Linear):
    """Linear+ReLU layers (PyTorch's default init, as SB3's SAC); a linear head if out_dim.
    ``linear(in, out)``: the layer (dqn's noisy layers: models/noisy.py NoisyLinear)."""
    layers, last = [], in_dim
    for size in sizes:
        layers += [linear(last, size), nn.ReLU()]
        last = size
    if out_dim is not None:
        layers.append(linear(last, out_dim))
    return nn.Sequential(*layers)


def frozen_copy(module):
    """A deep copy of ``module`` whose parameters are turned into buffers of the same names:
    it runs like the original, is in state_dict() (so in get_weights, set_weights and
    checkpoints) and is not in named_parameters() (so no gradient and no optimizer state)."""
    target = copy.deepcopy(module)
    for sub in target.modules():
        for name, param in list(sub.named_parameters(recurse=False)):
            delattr(sub, name)
            sub.register_buffer(name, param.detach().clone())
    return target


def tanh_log_prob_correction(u):
    """log(1 - tanh(u)^2) summed over the last dim, in the stable form 2(log 2 - u - softplus(-2u))
    (the same as torch's TanhTransform.log_abs_det_jacobian)."""
    return (2.0 * (LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)


class Actor(nn.Module):
    """Gaussian over pre-squash actions u, with a state-dependent log std clamped to [-20, 2].
    ``trunk``: the hidden layers (default: a ReLU MLP of ``sizes``; CrossQ passes its own)."""

    def __init__(self, obs_dim, sizes, action_dim, trunk=None):
        super().__init__()
        self.trunk = relu_mlp(obs_dim, sizes) if trunk is None else trunk
        last = sizes[-1] if sizes else obs_dim
        self.mu = nn.Linear(last, action_dim)
        self.log_std = nn.Linear(last, action_dim)

    def forward(self, obs):
        latent = self.trunk(obs)
        return self.mu(latent), self.log_std(latent).clamp(LOG_STD_MIN, LOG_STD_MAX)


class NumpyActor:
    """The built-in Actor's forward pass in numpy, for acting (models/numpy_mlp.py)."""

    def __init__(self, actor):
        self.trunk = NumpyMLP(actor.trunk) if len(actor.trunk) else None
        self.mu = NumpyMLP(nn.Sequential(actor.mu))
        self.log_std = NumpyMLP(nn.Sequential(actor.log_std))

    @classmethod
    def of(cls, actor):
        if type(actor) is not Actor or (len(actor.trunk) and NumpyMLP.of(actor.trunk) is None):
            return None
        return cls(actor)

    def __call__(self, obs):
        latent = self.trunk(obs) if self.trunk is not None else obs
        # np.minimum/np.maximum: np.clip costs several times more on a few numbers
        return self.mu(latent), np.minimum(np.maximum(self.log_std(latent), LOG_STD_MIN),
                                           LOG_STD_MAX)


class TwinQ(nn.Module):
    """Two independent Q(s, a) networks; ``forward`` returns both, each [B]. ``mlp(in_dim,
    sizes, out_dim)`` builds each (default: a ReLU MLP; CrossQ's adds batch renormalization).
    ``encoder``: a module the two share that turns observations into ``obs_dim`` features
    first (the CNN on images, as SB3's critic; models/encoders.py)."""

    def __init__(self, obs_dim, sizes, action_dim, mlp=relu_mlp, encoder=None):
        super().__init__()
        self.encoder = encoder
        self.q1 = mlp(obs_dim + action_dim, sizes, 1)
        self.q2 = mlp(obs_dim + action_dim, sizes, 1)

    def forward(self, obs, actions, first_only=False):
        """(Q1, Q2), each [B]; with ``first_only`` Q1 alone, Q2 not computed (TD3's actor
        loss, which values the policy by Q1)."""
        if self.encoder is not None:
            obs = self.encoder(obs)
        x = torch.cat([obs, actions], dim=-1)
        if first_only:
            return self.q1(x).squeeze(-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


def as_float_tensor(x, device=None):
    """float32 tensor on ``device`` (None: the CPU). Already there, a tensor is not copied."""
    if isinstance(x, torch.Tensor):
        return x.float().to(device)
    # A copy: batches from Ray's object store are read-only arrays (a few KB here).
    return torch.tensor(np.asarray(x), dtype=torch.float32, device=device)


def as_tensor(x, device=None):
    """A tensor on ``device`` in the batch's own dtype (uint8 pixels stay uint8). Already there,
    a tensor is not copied; an array is (batches from Ray's object store are read-only)."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    return torch.tensor(np.asarray(x), device=device)


def structured_tensors(obs, device=None):
    """A structured batch {path: leaf} as {path: tensor}, each leaf in its own dtype."""
    return {path: as_tensor(leaf, device) for path, leaf in obs.items()}


@torch.no_grad()
def polyak_update(target, online, tau):
    """target <- tau * online + (1 - tau) * target, for every parameter of ``online`` (its
    ``frozen_copy``'s tensors are buffers of the same names), in one fused call."""
    targets = dict(target.named_buffers())
    params = dict(online.named_parameters())
    torch._foreach_lerp_([targets[name] for name in params], list(params.values()), tau)


class BoxReplayModel(ReplayModelSteps, TimedPrecision, BaseModel):
    """What the replay loop's models for Box actions share (SAC and its kin, TD3): the
    observation layout, actions rescaled between the env's bounds and the actor's [-1, 1],
    replay batches as tensors on the model's device, one fused Adam of named parameter groups.
    A subclass builds its networks (``build_networks``) and says how it acts and learns."""
    trainer = "replay"
    default_agent = "sac_agent"
    #: why the model needs Box actions, for check_spaces' error
    box_reason = "its critics take the action as an input"

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        layout_of(observation_space)  # a ConfigError for a leaf it cannot carry
        if not isinstance(action_space, spaces.Box):
            raise ConfigError(
                f"model {cls.__name__} needs continuous (Box) actions: {cls.box_reason}. This "
                f"env's action space is {action_space}. For discrete actions use --model_name "
                f"ppo or dqn, or pick a continuous env (e.g. --gym_id Pendulum-v1).")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ConfigError(
                f"model {cls.__name__} squashes actions into the Box bounds, which must be "
                f"finite; got {action_space}. Give the env finite action bounds.")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.layout = layout_of(observation_space)
        # a structured observation (core/spaces.py) always goes through an encoder
        self.obs_dim = (None if self.layout.structured
                        else int(np.prod(observation_space.shape)))
        # a Box of any shape: the networks act on its flattened entries
        self.action_shape = tuple(action_space.shape)
        self.action_dim = int(np.prod(self.action_shape))
        low = np.asarray(action_space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(action_space.high, dtype=np.float32).reshape(-1)
        # Not persistent: the bounds come from the env, not from weights or checkpoints.
        self.register_buffer("action_scale", torch.as_tensor((high - low) / 2.0),
                             persistent=False)
        self.register_buffer("action_bias", torch.as_tensor((high + low) / 2.0),
                             persistent=False)
        self.action_scale_np, self.action_bias_np = (high - low) / 2.0, (high + low) / 2.0
        self.image_input = False  # build_networks sets it when it builds an encoder
        self.build_networks(args)
        # Acting on the CPU goes through numpy when the actor is a built-in one with a plain
        # MLP trunk (models/numpy_mlp.py says why), with a generator of its own seeded from
        # torch's (rollout workers keep its state in checkpoints).
        self.numpy_actor = self.numpy_actor_of(self.actor)
        self.acting_rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))

    def build_networks(self, args):
        """The networks, ``self.actor`` among them (sets ``image_input`` for a CNN)."""
        raise NotImplementedError

    def numpy_actor_of(self, actor):
        """The actor's forward pass in numpy, or None: acting then goes through torch."""
        return None

    @property
    def device(self):
        """Where this model computes: the CPU, or the GPU of a learning process
        (core/distributed/devices.py). Batches move here; results leave as CPU numpy arrays."""
        return self.action_scale.device

    def numpy_acting(self):
        """Whether ``choose_actions`` may act through ``numpy_actor``."""
        return (self.numpy_actor is not None and self.device.type == "cpu"
                and bool(self.obs_dim) and not torch.is_autocast_enabled("cpu"))

    def flat_obs(self, obs):
        """A batch as the networks take it: float32 [B, obs_dim], or with a CNN encoder
        [B, *obs_shape] in the observations' dtype (uint8 pixels are scaled in the encoder),
        or for a structured observation {path: tensor} in the leaves' dtypes."""
        if self.layout.structured:
            return structured_tensors(obs, self.device)
        if self.image_input:
            return as_tensor(obs, self.device).reshape(-1, *self.observation_space.shape)
        return as_float_tensor(obs, self.device).reshape(-1, self.obs_dim)

    def to_env_actions(self, squashed):
        return squashed * self.action_scale + self.action_bias

    def from_env_actions(self, actions):
        return (actions - self.action_bias) / self.action_scale

    def unpack(self, batch):
        """(obs, actions in [-1, 1], rewards, next_obs, terminated, weights) as float tensors.
        ``batch`` is a core.learning.replay_buffer.ReplayBatch or, with unit weights, a Transitions."""
        t = getattr(batch, "transitions", batch)
        weights = getattr(batch, "weights", None)
        device = self.device
        rewards = as_float_tensor(t.rewards, device).reshape(-1)
        weights = (torch.ones_like(rewards) if weights is None
                   else as_float_tensor(weights, device).reshape(-1))
        actions = self.from_env_actions(
            as_float_tensor(t.actions, device).reshape(-1, self.action_dim))
        return (self.flat_obs(t.observations), actions, rewards,
                self.flat_obs(t.next_observations),
                as_float_tensor(t.terminated, device).reshape(-1), weights)

    def update_inputs(self, batch):
        return self.unpack(batch)

    def update_on_inputs(self, *inputs):
        """The losses' gradients into .grad, all from the current weights (models/base.py
        ``ReplayModelSteps.step`` returns them by parameter name, with "td_errors": |Q1 -
        target| per transition for the priority updates), in the model's precision flag
        (models/base.py ``TimedPrecision``)."""
        with self.autocast(inputs):
            return self.losses_and_gradients(*inputs)

    def parameter_groups(self):
        """The optimizer's groups, named (the learner sets their rates by name)."""
        raise NotImplementedError

    def configure_optimizer(self):
        # fused: the same update; several times faster on the CPU (see models/ppo.py)
        return torch.optim.Adam(self.parameter_groups(), fused=True)

    def max_grad_norm(self):
        return None


@register_model("sac")
class SACModel(BoxReplayModel):
    """Soft Actor-Critic: tanh-Gaussian actor, twin Q critics with polyak targets, learned alpha."""
    update_graph_safe = True
    precision_flag = "--sac_precision"
    box_reason = "its actor is a squashed Gaussian and its critics take the action as an input"
    update_metrics = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean", "entropy",
                      "td_error_mean")
    line_metrics = (("critic_loss", "q loss", ".3f"), ("entropy", "ent", ".3f"))

    @staticmethod
    def add_args(parser):
        parser.add_argument("--sac_hidden_sizes", type=hidden_sizes, default=[256, 256],
                            help="widths of the actor's and each critic's hidden layers "
                                 "(default: 256,256)")
        parser.add_argument("--actor_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the actor (default: %(default)s)")
        parser.add_argument("--critic_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the twin critics (default: %(default)s)")
        parser.add_argument("--alpha_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of log(alpha), the entropy temperature "
                                 "(default: %(default)s)")
        parser.add_argument("--sac_lr_schedule", choices=["constant", "linear"],
                            default="constant",
                            help="the three learning rates over the run: constant, or linear "
                                 "decay to 0 at --total_steps env steps (RL-Zoo's lin_) "
                                 "(default: %(default)s)")
        parser.add_argument("--tau", type=unit_interval, default=0.005,
                            help="polyak coefficient of the target critics after every update: "
                                 "target = tau * online + (1 - tau) * target "
                                 "(default: %(default)s)")
        parser.add_argument("--init_alpha", type=positive_float, default=1.0,
                            help="initial entropy temperature alpha (default: %(default)s)")
        parser.add_argument("--target_entropy", type=target_entropy_type, default="auto",
                            help="entropy the temperature tuning aims at; 'auto' (default): "
                                 "-dim(action space)")
        parser.add_argument("--sac_precision", choices=["auto", "fp32", "bf16"], default="fp32",
                            help="bf16: the update's matrix products in bfloat16 under "
                                 "torch.autocast; weights, Adam state, losses and targets' "
                                 "arithmetic stay float32. Faster on CPUs with AVX-512 BF16 or "
                                 "AMX, much slower where bf16 is emulated (AVX2-only CPUs; "
                                 "BENCHMARKS.md, 'Cost of one SAC update'). "
                                 "auto: fp32 where bf16 is emulated; where the hardware that "
                                 "computes the update has bf16 units, the first update is "
                                 "timed in both and the faster kept (both figures on stderr; "
                                 "the presets' choice). Check the effect on "
                                 "learning for your task. Acting and priorities are always "
                                 "float32 (default: %(default)s)")
        parser.add_argument("--sac_gamma", type=unit_interval, default=0.99,
                            help="discount factor of the soft Bellman target "
                                 "(default: %(default)s)")
        add_encoder_args(parser)

    @classmethod
    def update_precision_of(cls, config):
        return config.sac_precision

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.target_entropy = (-float(self.action_dim) if args.target_entropy == "auto"
                               else float(args.target_entropy))

    def numpy_actor_of(self, actor):
        return NumpyActor.of(actor)

    def build_networks(self, args):
        """Actor, twin critics, their target copy and log(alpha); a subclass may override.
        On images the actor and the critics each get a CNN of their own (models/encoders.py;
        the critics' two Q heads share theirs), as SB3's SAC: the actor's CNN learns from the
        actor's loss, the critics' from theirs."""
        sizes = args.sac_hidden_sizes
        encoder = make_encoder(args, self.observation_space)
        if isinstance(encoder, Flatten):
            self.actor = Actor(self.obs_dim, sizes, self.action_dim)
            self.critic = self.make_critic(self.obs_dim, sizes)
        else:
            self.image_input = True
            features = encoder.features_dim
            self.actor = Actor(features, sizes, self.action_dim,
                               trunk=nn.Sequential(encoder, *relu_mlp(features, sizes)))
            self.critic = self.make_critic(features, sizes,
                                           encoder=make_encoder(args, self.observation_space))
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha)))

    def make_critic(self, in_dim, sizes, encoder=None):
        """The critics ``build_networks`` makes on ``in_dim`` features (after ``encoder``, a
        module of their own, when given): SAC's twin Q networks; TQC's quantile critics."""
        return TwinQ(in_dim, sizes, self.action_dim, encoder=encoder)

    def policy_value(self, critic_out):
        """The value of the actor's actions the actor's loss maximizes, from the critics'
        output at (s, a ~ pi): the minimum of the twin Qs, [B]."""
        return torch.min(*critic_out)

    # -- policy -----------------------------------------------------------------------------
    def sample(self, obs, deterministic=False):
        """Squashed actions in [-1, 1] and their log-probabilities (tanh-corrected), [B, A], [B].
        Draws its noise with one torch.randn_like of shape [B, A]."""
        mu, log_std = (t.float() for t in self.actor(obs))  # float32 out of autocast
        noise = torch.zeros_like(mu) if deterministic else torch.randn_like(mu)
        u = mu + log_std.exp() * noise
        gaussian_log_prob = (-0.5 * noise.pow(2) - log_std - HALF_LOG_2PI).sum(-1)
        return torch.tanh(u), gaussian_log_prob - tanh_log_prob_correction(u)

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False):
        if self.numpy_acting():
            obs = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
            mu, log_std = self.numpy_actor(obs)
            u = mu if deterministic else mu + np.exp(log_std) * self.acting_rng.standard_normal(
                mu.shape, np.float32)
            actions = (np.tanh(u) * self.action_scale_np + self.action_bias_np).astype(np.float32)
            return actions.reshape(len(actions), *self.action_shape), {}
        actions, _ = self.sample(self.flat_obs(obs), deterministic)
        actions = self.to_env_actions(actions).cpu().numpy()
        return actions.reshape(len(actions), *self.action_shape), {}

    #: the methods of the acting path SACActing rebuilds (models/exporting.py)
    ACTING_METHODS = ("choose_actions", "sample", "to_env_actions", "flat_obs")

    def export_module(self):
        """The deterministic action from tensors only (models/base.py): SACActing below, on
        this model's own actor (CrossQ's too: its batch renormalization acts with the running
        statistics, the model being in eval mode)."""
        refuse_changed_acting(self, SACModel, self.ACTING_METHODS)
        return SACActing(self)

    # -- learning -----------------------------------------------------------------------------
    @property
    def alpha(self):
        return self.log_alpha.detach().exp()

    @torch.no_grad()
    def critic_targets(self, rewards, next_obs, terminated):
        """r + gamma * (1 - terminated) * (min of the target critics at (s', a') - alpha *
        log pi(a'|s')), with a' ~ pi(.|s') drawn from the current actor."""
        next_actions, next_log_prob = self.sample(next_obs)
        next_q = torch.min(*self.critic_target(next_obs, next_actions)).float()
        next_q = next_q - self.alpha * next_log_prob
        return rewards + (1.0 - terminated) * self.args.sac_gamma * next_q

    @torch.no_grad()
    def td_errors(self, batch):
        """|Q1(s, a) - target| per transition, numpy [B], without gradients (e.g. the initial
        priorities of an Ape-X explorer's block). Draws next actions, so it is stochastic."""
        obs, actions, rewards, next_obs, terminated, _ = self.unpack(batch)
        target_q = self.critic_targets(rewards, next_obs, terminated)
        return (self.critic(obs, actions)[0] - target_q).abs().cpu().numpy()

    def requested_precision(self):
        return self.args.sac_precision

    def update_loss(self, obs, actions, rewards, next_obs, terminated, weights):
        """The critic, actor and temperature losses' sum, statistics and |TD errors| (inside
        autocast for --sac_precision bf16; ``losses_and_gradients`` runs the backward pass)."""
        alpha = self.alpha

        # Critics: importance-weighted squared TD error of both (0.5 * sum, as SB3).
        target_q = self.critic_targets(rewards, next_obs, terminated)
        current_q_values = [q.float() for q in self.critic(obs, actions)]
        critic_loss = 0.5 * sum((weights * (q - target_q).pow(2)).mean()
                                for q in current_q_values)

        actor_loss, alpha_loss, log_prob = self.actor_and_alpha_losses(obs, alpha)

        with torch.no_grad():
            td_errors = (current_q_values[0] - target_q).abs()
        scalars = {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                   "alpha_loss": alpha_loss.detach(), "alpha": alpha.reshape(()),
                   "q_mean": current_q_values[0].detach().mean(),
                   "entropy": -log_prob.detach().mean(), "td_error_mean": td_errors.mean()}
        # The three losses share no parameters with a gradient path, so one backward pass of
        # their sum gives each parameter the gradient of its own loss.
        return critic_loss + actor_loss + alpha_loss, scalars, td_errors

    def policy_sample(self, obs):
        """(actions, log-probabilities) the actor's loss is taken at: ``sample``'s."""
        return self.sample(obs)

    def actor_and_alpha_losses(self, obs, alpha):
        """(actor loss, temperature loss, log pi(a|s)) at actions sampled at ``obs``.

        The critics are evaluated with detached copies of their parameters, so the actor loss
        reaches the critics' weights only as constants and its gradient flows into the actor
        alone (through the reparameterized actions); the temperature's reaches log_alpha only."""
        new_actions, log_prob = self.policy_sample(obs)
        detached = {name: p.detach() for name, p in self.critic.named_parameters()}
        q_new = self.policy_value(torch.func.functional_call(self.critic, detached,
                                                             (obs, new_actions))).float()
        actor_loss = (alpha * log_prob - q_new).mean()
        alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy).detach()).mean()
        return actor_loss, alpha_loss, log_prob

    def parameter_groups(self):
        """The optimizer's three groups, named (the learner sets their rates by name)."""
        return [
            {"params": list(self.critic.parameters()), "lr": self.args.critic_lr,
             "name": "critic"},
            {"params": list(self.actor.parameters()), "lr": self.args.actor_lr, "name": "actor"},
            {"params": [self.log_alpha], "lr": self.args.alpha_lr, "name": "alpha"},
        ]

    def learning_rate(self, progress):
        """Each group's learning rate at ``progress`` (env steps / total steps); None when
        constant (the groups keep the rates they were configured with)."""
        if self.args.sac_lr_schedule != "linear":
            return None
        scale = 1.0 - min(1.0, max(0.0, progress))
        return {"critic": self.args.critic_lr * scale, "actor": self.args.actor_lr * scale,
                "alpha": self.args.alpha_lr * scale}

    @torch.no_grad()
    def after_update(self):
        """Polyak averaging of the target critics: target = tau * online + (1 - tau) * target."""
        polyak_update(self.critic_target, self.critic, self.args.tau)


class SACActing(nn.Module):
    """SAC's deterministic acting path as a module of tensors only (models/base.py
    ``export_module``): tanh of the actor's mean, scaled into the action bounds, as
    ``choose_actions(deterministic=True)`` computes it (the numpy path computes the same)."""

    def __init__(self, model):
        super().__init__()
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=not (model.layout.structured
                                                       or model.image_input))
        self.actor = model.actor  # shared with the model, as its encoder is
        self.register_buffer("action_scale", model.action_scale.detach().clone())
        self.register_buffer("action_bias", model.action_bias.detach().clone())
        self.action_shape = model.action_shape

    def forward(self, *inputs):
        mu = self.actor(self.inputs(inputs))[0].float()
        actions = torch.tanh(mu) * self.action_scale + self.action_bias
        return actions.reshape(actions.shape[0], *self.action_shape)
