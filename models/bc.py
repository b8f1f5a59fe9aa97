"""bc: behaviour cloning, a policy fitted to a dataset's actions by supervised learning (the
offline baseline; d3rlpy 2.8.1's BC and DiscreteBC are the reference, with their defaults).

- Discrete actions: a categorical policy (encoder -> ReLU MLP -> one logit per action),
  loss = cross-entropy of the dataset action + --bc_beta * mean(log pi(.|s)^2), the penalty of
  d3rlpy DiscreteBC (beta 0.5) as d3rlpy computes it: its policy is a
  ``Categorical(logits=...)`` whose ``.logits`` are the normalized log-probabilities, so the
  square is of log pi, not of the network's raw outputs (discrete BCQ's original penalty,
  Fujimoto et al. 2019, squares the raw outputs; softmax ignores a shift of them, the log-probs
  do not). An action mask in the observation is obeyed: masked actions are left out of the
  softmax and of the penalty's mean, and never chosen.
- Box actions, --bc_policy deterministic (the default, as d3rlpy's BC): a = tanh(f(s)) in
  [-1, 1], loss = the mean squared error to the dataset action rescaled from the env's bounds
  to [-1, 1]. --bc_policy gaussian: a tanh-squashed Gaussian with a state-dependent log std
  (clamped to [-5, 2]), loss = the negative log-likelihood of the dataset action (clipped into
  [-1 + 1e-5, 1 - 1e-5], where atanh is finite), tanh's Jacobian included.

Acting: the argmax of the allowed logits, or tanh of the mean scaled into the env's bounds;
stochastic acting samples the categorical, or the Gaussian (the deterministic policy has no
noise: it acts as it does deterministically, as d3rlpy's ``sample_action``). The learner calls
``step`` on replay batches (the replay loop fed from a dataset); importance weights, when the
replay gives any, weight each row's loss.

``OfflinePolicy`` below is what bc and iql (models/iql.py) share: the spaces, batches as
tensors, a policy network, acting and its export.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from core.argtypes import non_negative_float
from core.errors import ConfigError
from core.spaces import action_mask, layout_of
from models import register_model
from models.base import BaseModel, ReplayModelSteps
from models.dqn import MASKED_Q
from models.encoders import Flatten, add_encoder_args, make_encoder
from models.exporting import ObservationInputs, refuse_changed_acting
from models.numpy_mlp import NumpyMLP
from models.ppo import action_mask_of, hidden_sizes
from models.sac import (as_float_tensor, as_tensor, relu_mlp, structured_tensors,
                        tanh_log_prob_correction)

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: dataset actions are clipped into [-1 + ACTION_EPS, 1 - ACTION_EPS] before a log-likelihood
#: (the official IQL's D4RL loader clips them so, eps 1e-5)
ACTION_EPS = 1e-5


def check_action_space(cls, label, observation_space, action_space, discrete=True):
    """A ConfigError unless ``action_space`` is a Box with finite bounds or (with ``discrete``)
    a Discrete; the observation must be one core/spaces.py carries."""
    layout_of(observation_space)  # a ConfigError for a leaf it cannot carry
    if isinstance(action_space, spaces.Discrete) and discrete:
        return
    if not isinstance(action_space, spaces.Box):
        kinds = "Box or Discrete" if discrete else "continuous (Box)"
        raise ConfigError(
            f"model {cls.__name__} ({label}) takes {kinds} actions; this env's action space is "
            f"{action_space}. For MultiDiscrete or MultiBinary actions use --model_name ppo.")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise ConfigError(
            f"model {cls.__name__} ({label}) squashes actions into the Box bounds, which must "
            f"be finite; got {action_space}. Give the env finite action bounds.")


def log_prob_penalty(log_probs, mask):
    """mean(log pi(a | s)^2) over each row's allowed actions [B] (every action without a
    mask): d3rlpy DiscreteBC's penalty (the module docstring)."""
    squares = log_probs.pow(2)
    if mask is None:
        return squares.mean(-1)
    squares = torch.where(mask, squares, torch.zeros_like(squares))
    return squares.sum(-1) / mask.sum(-1).clamp(min=1)


def masked_logits(logits, obs):
    """Logits with the actions the observation's mask forbids at MASKED_Q (finite: a row
    whose every action is masked still gives numbers)."""
    mask = action_mask_of(obs)
    return logits if mask is None else logits.masked_fill(~mask, MASKED_Q)


class PolicyNet(nn.Module):
    """encoder -> ReLU MLP of ``sizes`` -> a linear head of ``out_dim``: logits, or the
    pre-tanh mean of a Gaussian. ``log_std``: None, "state" (a second linear head) or
    "parameter" (one learned log std per action dimension, the same in every state)."""

    def __init__(self, encoder, sizes, out_dim, log_std=None):
        super().__init__()
        self.encoder = encoder
        self.trunk = relu_mlp(encoder.features_dim, sizes)
        width = sizes[-1] if sizes else encoder.features_dim
        self.head = nn.Linear(width, out_dim)
        self.log_std_kind = log_std
        if log_std == "state":
            self.log_std_head = nn.Linear(width, out_dim)
        elif log_std == "parameter":
            self.log_std = nn.Parameter(torch.zeros(out_dim))

    def forward(self, obs):
        return self.head(self.trunk(self.encoder(obs)))

    def mean_and_log_std(self, obs):
        """(head output [B, out], log std [B, out] or [out]) before any clamping."""
        latent = self.trunk(self.encoder(obs))
        if self.log_std_kind == "state":
            return self.head(latent), self.log_std_head(latent)
        return self.head(latent), self.log_std


class OfflinePolicy:
    """The spaces, batches and acting of a model with a policy network ``self.actor`` (a
    PolicyNet: logits for Discrete actions, the pre-tanh mean for a Box), for BaseModel
    subclasses. ``setup_spaces()`` first; the subclass builds ``self.actor``, sets
    ``self.log_std_range`` ((low, high), or None for a policy without noise) and gives
    ``draw`` where it has noise, then calls ``finish_policy()``; ``gamma`` is the discount
    used when a batch carries none."""
    log_std_range = None
    gamma = 0.99
    #: numpy acting's stochastic actions from tanh(mean) [B, A] (a method, where the noise
    #: needs no network: a state-independent std), or None: stochastic acting uses torch
    numpy_noise = None

    def setup_spaces(self):
        space = self.action_space
        self.layout = layout_of(self.observation_space)
        self.discrete = isinstance(space, spaces.Discrete)
        self.register_buffer("device_marker", torch.empty(0), persistent=False)
        if self.discrete:
            self.num_actions = int(space.n)
            self.action_shape, self.action_dim = (), None
            return
        self.action_shape = tuple(space.shape)
        self.action_dim = int(np.prod(self.action_shape))
        low = np.asarray(space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(space.high, dtype=np.float32).reshape(-1)
        # Not persistent: the bounds come from the env, not from weights or checkpoints.
        self.register_buffer("action_scale", torch.as_tensor((high - low) / 2.0),
                             persistent=False)
        self.register_buffer("action_bias", torch.as_tensor((high + low) / 2.0),
                             persistent=False)

    def vector_input(self, encoder):
        """Whether observations reach the networks as float vectors [B, features] (a Box
        flattened: no CNN, not structured)."""
        return isinstance(encoder, Flatten) and not self.layout.structured

    def finish_policy(self):
        """After ``self.actor`` is built: the numpy acting path where it applies (a plain MLP
        on vectors; models/numpy_mlp.py says why) and the acting generator."""
        self.numpy_policy = None
        if self.vector_input(self.actor.encoder):
            self.numpy_policy = NumpyMLP.of(nn.Sequential(*self.actor.trunk, self.actor.head))
        self.acting_rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))

    @property
    def device(self):
        return self.device_marker.device

    # -- batches -------------------------------------------------------------------------------
    def flat_obs(self, obs):
        """A batch as the networks take it: {path: tensor} for a structured observation, the
        observation's own dtype and shape for a CNN, else float32 [B, features]."""
        if self.layout.structured:
            return structured_tensors(obs, self.device)
        if not self.vector_input(self.actor.encoder):
            return as_tensor(obs, self.device).reshape(-1, *self.observation_space.shape)
        return as_float_tensor(obs, self.device).reshape(len(obs), -1)

    def from_env_actions(self, actions):
        return (actions - self.action_bias) / self.action_scale

    def to_env_actions(self, squashed):
        return squashed * self.action_scale + self.action_bias

    def batch_actions(self, actions):
        """Dataset actions as the losses take them: int64 indices [B] (float ones from a
        Box-minded agent too), or float [B, A] rescaled to [-1, 1]."""
        if self.discrete:
            return as_tensor(actions, self.device).reshape(-1).long()
        return self.from_env_actions(
            as_float_tensor(actions, self.device).reshape(-1, self.action_dim))

    def unpack(self, batch):
        """(obs, actions, rewards, next obs, terminated, discounts, importance weights) as
        tensors on the model's device; the discounts are the transitions' own (gamma^k of an
        n-step transition) or ``self.gamma`` for every row when they carry none."""
        t = getattr(batch, "transitions", batch)
        device = self.device
        rewards = as_float_tensor(t.rewards, device).reshape(-1)
        weights = getattr(batch, "weights", None)
        weights = (torch.ones_like(rewards) if weights is None
                   else as_float_tensor(weights, device).reshape(-1))
        discounts = (torch.full_like(rewards, self.gamma) if t.discounts is None
                     else as_float_tensor(t.discounts, device).reshape(-1))
        return (self.flat_obs(t.observations), self.batch_actions(t.actions), rewards,
                self.flat_obs(t.next_observations),
                as_float_tensor(t.terminated, device).reshape(-1), discounts, weights)

    # -- the policy ------------------------------------------------------------------------------
    def draw(self, obs):
        """Stochastic Box actions in [-1, 1] [B, A] for a batch of network inputs (a policy
        with noise, ``log_std_range`` set, says how it draws them)."""
        raise NotImplementedError

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False):
        """Discrete: indices from 0 (the rollout adds the space's start), the argmax of the
        allowed logits or a sample of them. Box: float32 actions in the env's bounds."""
        if self.discrete:
            return self.discrete_actions(obs, deterministic), {}
        noisy = not deterministic and self.log_std_range is not None
        if (self.numpy_policy is not None and (not noisy or self.numpy_noise is not None)
                and self.device.type == "cpu" and not torch.is_autocast_enabled("cpu")):
            x = np.asarray(obs, dtype=np.float32)
            squashed = np.tanh(self.numpy_policy(x.reshape(len(x), -1)))
            if noisy:
                squashed = self.numpy_noise(squashed)
            actions = (squashed * self.action_scale.numpy()
                       + self.action_bias.numpy()).astype(np.float32)
            return actions.reshape(len(actions), *self.action_shape), {}
        x = self.flat_obs(obs)
        if noisy:
            squashed = self.draw(x)
        else:
            squashed = torch.tanh(self.actor(x).float())
        actions = self.to_env_actions(squashed).cpu().numpy()
        return actions.reshape(len(actions), *self.action_shape), {}

    def discrete_actions(self, obs, deterministic):
        if self.numpy_policy is not None and self.device.type == "cpu":
            x = np.asarray(obs, dtype=np.float32)
            logits = self.numpy_policy(x.reshape(len(x), -1))
        else:
            logits = self.actor(self.flat_obs(obs)).float().cpu().numpy()
        mask = action_mask(obs)
        if mask is not None:
            logits = np.where(mask, logits, MASKED_Q)
        if deterministic:
            return logits.argmax(-1).astype(np.int64)
        # a categorical sample: the argmax of logits plus Gumbel noise (masked ones stay out)
        gumbel = -np.log(-np.log(self.acting_rng.uniform(1e-12, 1.0, logits.shape)))
        return np.where(logits > MASKED_Q, logits + gumbel, -np.inf).argmax(-1).astype(np.int64)

    #: the methods of the acting path PolicyActing rebuilds (models/exporting.py)
    ACTING_METHODS = ("choose_actions", "discrete_actions", "flat_obs", "to_env_actions")

    def export_module(self):
        """The deterministic action from tensors only (models/base.py): PolicyActing below, on
        this model's own policy network."""
        refuse_changed_acting(self, OfflinePolicy, self.ACTING_METHODS)
        return PolicyActing(self)


class PolicyActing(nn.Module):
    """An OfflinePolicy's deterministic acting path as a module of tensors only
    (models/base.py ``export_module``): the argmax of the allowed logits, or tanh of the
    policy's mean scaled into the action bounds, as ``choose_actions(deterministic=True)``."""

    def __init__(self, model):
        super().__init__()
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=model.vector_input(model.actor.encoder))
        self.actor = model.actor  # shared with the model
        self.discrete = model.discrete
        if not self.discrete:
            self.register_buffer("action_scale", model.action_scale.detach().clone())
            self.register_buffer("action_bias", model.action_bias.detach().clone())
            self.action_shape = model.action_shape

    def forward(self, *inputs):
        batch = self.inputs(inputs)
        out = self.actor(batch).float()
        if self.discrete:
            return masked_logits(out, batch).argmax(-1)
        actions = torch.tanh(out) * self.action_scale + self.action_bias
        return actions.reshape(actions.shape[0], *self.action_shape)


def tanh_gaussian_log_prob(actions, mu, log_std):
    """log-density [B] of ``actions`` in (-1, 1) (clipped into [-1 + ACTION_EPS, 1 -
    ACTION_EPS]) under tanh(Normal(mu, exp(log_std))): the Gaussian's at atanh(a) minus
    log(1 - a^2), summed over the action dimensions."""
    u = torch.atanh(actions.clamp(-1.0 + ACTION_EPS, 1.0 - ACTION_EPS))
    gaussian = -0.5 * ((u - mu) * torch.exp(-log_std)).pow(2) - log_std - HALF_LOG_2PI
    # log(1 - a^2) in models/sac.py's stable form in u (1 - a^2 cancels near the ends)
    return gaussian.sum(-1) - tanh_log_prob_correction(u)


@register_model("bc")
class BCModel(OfflinePolicy, ReplayModelSteps, BaseModel):
    """Behaviour cloning: cross-entropy on logits (Discrete), MSE of tanh(f(s)) or a
    tanh-Gaussian's log-likelihood (Box), to the dataset's actions."""
    trainer = "replay"
    update_graph_safe = True
    default_agent = "sac_agent"
    update_metrics = ("bc_loss", "bc_error")
    line_metrics = (("bc_loss", "bc loss", ".4f"),)

    @staticmethod
    def add_args(parser):
        parser.add_argument("--bc_hidden_sizes", type=hidden_sizes, default=[256, 256],
                            help="widths of the policy's hidden layers after the encoder "
                                 "(default: 256,256, d3rlpy's)")
        parser.add_argument("--bc_lr", type=non_negative_float, default=1e-3,
                            help="Adam learning rate (default: %(default)s, d3rlpy's BC and "
                                 "DiscreteBC)")
        parser.add_argument("--bc_policy", choices=["deterministic", "gaussian"],
                            default="deterministic",
                            help="Box actions: deterministic, tanh(f(s)) fitted by the mean "
                                 "squared error to the dataset action rescaled to [-1, 1] "
                                 "(d3rlpy's BC default); gaussian, a tanh-squashed Gaussian "
                                 "with a state-dependent std fitted by maximum likelihood "
                                 "(default: %(default)s)")
        parser.add_argument("--bc_beta", type=non_negative_float, default=0.5,
                            help="Discrete actions: weight of the penalty mean(log pi(a|s)^2) "
                                 "over the allowed actions, added to the cross-entropy "
                                 "(d3rlpy DiscreteBC's beta and penalty) "
                                 "(default: %(default)s)")
        add_encoder_args(parser)

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        check_action_space(cls, "behaviour cloning", observation_space, action_space)

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.setup_spaces()
        gaussian = not self.discrete and args.bc_policy == "gaussian"
        self.log_std_range = (-5.0, 2.0) if gaussian else None
        out = self.num_actions if self.discrete else self.action_dim
        self.actor = PolicyNet(make_encoder(args, observation_space), args.bc_hidden_sizes,
                               out, log_std="state" if gaussian else None)
        self.finish_policy()

    def draw(self, obs):
        """--bc_policy gaussian: tanh(mu + std * noise)."""
        mu, log_std = self.actor.mean_and_log_std(obs)
        std = log_std.float().clamp(*self.log_std_range).exp()
        return torch.tanh(mu.float() + std * torch.randn_like(mu.float()))

    # -- learning ------------------------------------------------------------------------------
    def update_inputs(self, batch):
        obs, actions, *_, weights = self.unpack(batch)
        return obs, actions, weights

    def update_loss(self, obs, actions, weights):
        """(loss, {"bc_loss", "bc_error"}, None). bc_error: the share of rows whose argmax is
        not the dataset action (Discrete), or the mean squared error of the deterministic
        action in [-1, 1] (Box)."""
        if self.discrete:
            logits = self.actor(obs).float()
            log_probs = F.log_softmax(masked_logits(logits, obs), dim=-1)
            nll = -log_probs.gather(1, actions.unsqueeze(1)).squeeze(1)
            per_row = nll + self.args.bc_beta * log_prob_penalty(log_probs, action_mask_of(obs))
            with torch.no_grad():
                error = (log_probs.argmax(-1) != actions).float().mean()
        elif self.log_std_range is None:
            squashed = torch.tanh(self.actor(obs).float())
            per_row = (squashed - actions).pow(2).mean(-1)
            error = per_row.detach().mean()
        else:
            mu, log_std = self.actor.mean_and_log_std(obs)
            mu, log_std = mu.float(), log_std.float().clamp(*self.log_std_range)
            per_row = -tanh_gaussian_log_prob(actions, mu, log_std)
            with torch.no_grad():
                error = (torch.tanh(mu) - actions).pow(2).mean()
        loss = (weights * per_row).mean()
        return loss, {"bc_loss": loss.detach(), "bc_error": error}, None

    def configure_optimizer(self):
        # fused: the same update, several times faster on the CPU (see models/ppo.py)
        return torch.optim.Adam(self.parameters(), lr=self.args.bc_lr, fused=True)

    def learning_rate(self, progress):
        return None
