"""ppo: actor-critic MLP with the PPO clipped objective (Schulman et al. 2017, arXiv:1707.06347).

Categorical head for Discrete actions, state-independent-std Gaussian for Box actions, or with
``--use_sde`` generalized state-dependent exploration (gSDE; Raffin, Kober, Stulp 2021,
arXiv:2005.05719, as SB3's ``use_sde``): the action is mu(s) + phi(s) @ E, where phi(s) is the
actor's last hidden layer (detached) and E a [latent x action] matrix of N(0, sigma^2) entries,
sigma = exp(log_std) learned per entry. E is drawn per env at the start of every fragment and,
with ``--sde_sample_freq n``, again every n steps, so exploration is smooth in time and in
state (white noise per step shakes a pendulum in place). The log-likelihood used by PPO is that
of the per-state Gaussian N(mu(s), sqrt(phi(s)^2 @ sigma^2)), which does not depend on E.

The loss of one minibatch is in ``step``; the agent hands it advantages already normalized with
the statistics of the whole rollout (so that averaging workers' gradients equals one big batch).

Memory (``--recurrent lstm|gru``): a recurrent core of ``--rnn_hidden_size`` units between the
encoder and the heads (models/recurrent.py), the critic with a core of its own or, with
``--shared_rnn``, the actor's. The model is then ``recurrent`` (models/base.py): it acts from a
state per env and learns on whole sequences (a PPOBatch with ``sequence_shape``), replaying the
states the acting policy went through from each sequence's stored first state, with the state
zeroed at every episode start, so the loss's log-probabilities are the acting ones.
"""
import argparse
import math
from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from core.argtypes import (non_negative_float, positive_float, positive_float_or_none,
                           positive_int)
from core.errors import ConfigError
from models import register_model
from core.spaces import ACTION_MASK, is_tree, layout_of
from core.spaces import batch_size as num_rows
from models.base import BaseModel, TimedPrecision
from models.distributions import action_head
from models.encoders import Flatten, MultiInputEncoder, add_encoder_args, make_encoder
from models.exporting import ObservationInputs, refuse_changed_acting
from models.numpy_mlp import NumpyMLP, log_softmax
from models.recurrent import (RECURRENT_KINDS, NumpyCore, RecurrentCore, prefixed,
                              unprefixed)

#: numpy acts faster than torch on small batches (cold caches, fewer layers of code) and
#: slower on large ones (measured with a 64x64 actor, one thread: 44 against 123 us at 8 rows,
#: 373 against 351 at 1,024, 2.0 against 1.5 ms at 4,096): a batched env's thousands of rows
#: act through torch.
NUMPY_ACTING_MAX_ROWS = 1024

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
HEAD_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def action_mask_of(observations):
    """The bool action mask of a batch of observations (tensors), or None (core/spaces.py)."""
    if is_tree(observations) and ACTION_MASK in observations:
        return observations[ACTION_MASK].bool()
    return None

# validate_args=False on every distribution built here: torch's argument checks cost more than
# a 64x64 forward pass, and the inputs come from our own networks. Per distribution, not
# Distribution.set_default_validate_args: importing a model must not change other code's torch.


class PPOBatch(NamedTuple):
    """What the agent hands the model for one minibatch (all torch tensors, first dim = batch).

    For a recurrent model the minibatch is N sequences of L steps, flattened time-major (row
    t * N + n is step t of sequence n) with ``sequence_shape`` (L, N), ``states`` the state
    before each sequence's first step ({name: [N, ...]}), ``episode_starts`` [L, N] bool and
    ``weights`` [L * N]: 1 for the steps that count in the loss, 0 for those kept only to
    hold the sequences' shape (an env failure's cut). The loss is a mean over the counted
    steps."""
    observations: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor   # recorded at rollout time, by the policy that acted
    advantages: torch.Tensor      # already normalized
    returns: torch.Tensor
    old_values: torch.Tensor
    weights: Optional[torch.Tensor] = None
    states: Optional[dict] = None
    episode_starts: Optional[torch.Tensor] = None
    sequence_shape: Optional[Tuple[int, int]] = None


def hidden_sizes(text):
    """'64,64' -> [64, 64]; 'none' -> [] (no hidden layer)."""
    if str(text).strip().lower() == "none":
        return []
    try:
        sizes = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        sizes = None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of layer widths; write e.g. 64,64 (or none)")
    return sizes


def mlp(in_dim, sizes, out_dim, activation, out_gain):
    layers, last = [], in_dim
    for size in sizes:
        linear = nn.Linear(last, size)
        nn.init.orthogonal_(linear.weight, np.sqrt(2))  # as in SB3 / the PPO implementation details
        nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[activation]()]
        last = size
    head = nn.Linear(last, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, head)


def sde_sample_freq(text):
    """-1 (once per fragment) or a number of steps >= 1."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not -1 or a whole number of steps >= 1")
    return value


@torch.no_grad()
def step_statistic_tensors(mean, ratio, log_ratio, clip_range, policy_loss, value_loss,
                           entropy):
    """What a PPO-style step reports (metrics.csv's columns), as 0-d tensors on the device: its
    three losses, the approximate KL (http://joschu.net/blog/kl-approx.html: unbiased, low
    variance), the share of clipped ratios and their mean; ``mean`` averages over the samples
    that count."""
    with torch.no_grad():
        return {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(),
                "entropy": entropy.detach(), "approx_kl": mean((ratio - 1.0) - log_ratio),
                "clip_fraction": mean(((ratio - 1.0).abs() > clip_range).float()),
                "ratio_mean": mean(ratio)}


def on_host(tensors):
    """{name: 0-d tensor} as {name: float}, in one copy to the host (on a GPU each .item()
    waits on its own)."""
    return dict(zip(tensors, torch.stack([t.float() for t in tensors.values()]).tolist()))


def step_statistics(*args):
    """``step_statistic_tensors`` on the host."""
    return on_host(step_statistic_tensors(*args))


def schedule(start, kind, progress):
    return start * (1.0 - progress) if kind == "linear" else start


@register_model("ppo")
class PPOModel(TimedPrecision, BaseModel):
    """Actor-critic MLP trained with PPO's clipped objective, value loss and entropy bonus."""
    trainer = "ppo"
    precision_flag = "--ppo_precision"

    @staticmethod
    def add_args(parser):
        parser.add_argument("--hidden_sizes", type=hidden_sizes, default=None,
                            help="widths of the actor's and the critic's hidden layers, or none "
                                 "(default: 64,64 on vectors; none on images: the heads sit "
                                 "right on the CNN's features, as in the Nature DQN and SB3)")
        add_encoder_args(parser)
        parser.add_argument("--activation", choices=sorted(ACTIVATIONS), default="tanh",
                            help="hidden activation (default: %(default)s)")
        parser.add_argument("--lr", type=non_negative_float, default=1e-3,
                            help="Adam learning rate (default: %(default)s)")
        parser.add_argument("--lr_schedule", choices=["constant", "linear"], default="linear",
                            help="learning rate schedule over --total_steps "
                                 "(default: %(default)s)")
        parser.add_argument("--clip_range", type=positive_float, default=0.2,
                            help="epsilon of the clipped ratio (default: %(default)s)")
        parser.add_argument("--clip_schedule", choices=["constant", "linear"], default="linear",
                            help="clip range schedule over --total_steps (default: %(default)s)")
        parser.add_argument("--clip_range_vf", type=positive_float_or_none, default=None,
                            help="clip the value change per update to this (default: off)")
        parser.add_argument("--ent_coef", type=non_negative_float, default=0.0,
                            help="entropy bonus coefficient (default: %(default)s)")
        parser.add_argument("--value_norm", action="store_true",
                            help="the critic learns returns standardized by their running "
                                 "mean and std over the run (MAPPO's value normalization); "
                                 "its values are scaled back for the advantages")
        parser.add_argument("--vf_coef", type=non_negative_float, default=0.5,
                            help="value loss coefficient (default: %(default)s)")
        parser.add_argument("--max_grad_norm", type=non_negative_float, default=0.5,
                            help="clip the global norm of the averaged gradient "
                                 "(default: %(default)s; 0 = off)")
        parser.add_argument("--log_std_init", type=float, default=0.0,
                            help="initial log standard deviation of the Gaussian policy "
                                 "(Box actions; with --use_sde: of every entry of the "
                                 "exploration matrix) (default: %(default)s)")
        parser.add_argument("--use_sde", action=argparse.BooleanOptionalAction, default=False,
                            help="generalized state-dependent exploration (gSDE) for Box "
                                 "actions: noise phi(s) @ E with an exploration matrix E per env, "
                                 "redrawn at each fragment's start (models/ppo.py); --no-use_sde "
                                 "turns off a preset's (default: %(default)s)")
        parser.add_argument("--sde_sample_freq", type=sde_sample_freq, default=-1,
                            help="with --use_sde, also redraw the exploration matrices every "
                                 "this many steps of a fragment; -1: once per fragment "
                                 "(default: %(default)s)")
        parser.add_argument("--recurrent", choices=("none", *RECURRENT_KINDS), default="none",
                            help="memory: an LSTM or GRU core between the encoder and the "
                                 "heads; the policy then acts from a state per env, carried "
                                 "across steps and fragments, and learns on whole sequences "
                                 "(default: %(default)s)")
        parser.add_argument("--rnn_hidden_size", type=positive_int, default=64,
                            help="units of the recurrent core (default: %(default)s)")
        parser.add_argument("--shared_rnn", action=argparse.BooleanOptionalAction,
                            default=False,
                            help="the critic shares the actor's recurrent core (its value loss "
                                 "then trains it too, as in CleanRL's ppo_atari_lstm); by "
                                 "default it has one of its own, as sb3-contrib's RecurrentPPO "
                                 "(default: %(default)s)")
        parser.add_argument("--ppo_precision", choices=["auto", "fp32", "bf16"],
                            default="fp32",
                            help="bf16: the update's forward pass (the encoder's convolutions "
                                 "and the layers' matrix products) in bfloat16 under "
                                 "torch.autocast, backward likewise; weights, Adam and the "
                                 "loss's arithmetic stay float32. auto: fp32 where bf16 is "
                                 "emulated; where the device that computes the gradients has "
                                 "bf16 units, the first minibatch is timed in both and the "
                                 "faster kept (both figures on stderr). Acting stays float32 "
                                 "(default: %(default)s)")

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        layout_of(observation_space)  # a ConfigError for a leaf it cannot carry
        if not isinstance(action_space, (spaces.Box, *HEAD_SPACES)):
            raise ConfigError(f"model {cls.__name__} takes Discrete, MultiDiscrete, MultiBinary "
                              f"or Box actions; this env's action space is {action_space}.")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        # An empty buffer that .to() moves with the weights: where the model computes, read in
        # 0.7 us (next(self.parameters()): 5.8 us, asked twice a step on the torch path).
        self.register_buffer("device_marker", torch.empty(0), persistent=False)
        self.layout = layout_of(observation_space)
        # a structured observation (core/spaces.py) always goes through an encoder
        self.obs_dim = (None if self.layout.structured
                        else int(np.prod(observation_space.shape)))
        self.discrete = isinstance(action_space, spaces.Discrete)
        # Discrete, MultiDiscrete, MultiBinary: an action head (models/distributions.py); a
        # Box of any shape: a Gaussian over its flattened entries
        self.head = None if isinstance(action_space, spaces.Box) else action_head(action_space)
        self.action_shape = tuple(action_space.shape)
        self.action_dim = (self.head.param_dim if self.head is not None
                           else int(np.prod(action_space.shape)))
        self.use_sde = args.use_sde
        if self.use_sde and self.head is not None:
            raise ConfigError(
                f"--use_sde (state-dependent exploration) is for Box actions; this env's action "
                f"space is {action_space}. Drop --use_sde for discrete actions.")
        if self.use_sde and args.recurrent != "none":
            raise ConfigError(
                f"--recurrent {args.recurrent} with --use_sde (state-dependent exploration, set "
                f"by the flag or by a preset such as configs/ppo-Pendulum-v1.yaml): gSDE draws "
                f"its noise from the MLP actor's last layer and has no recurrent form here. Add "
                f"--no-use_sde, or drop --recurrent.")
        self.encoder = None  # vectors go straight into the MLPs (build_networks may set one)
        self.rnn = self.critic_rnn = None  # memory (build_networks sets them with --recurrent)
        self.build_networks(args)
        self.recurrent = self.rnn is not None
        self.value_norm = args.value_norm
        if self.value_norm:
            if self.recurrent:
                raise ConfigError(f"--value_norm with --recurrent {args.recurrent}: the recurrent "
                                  f"critic has no normalized form yet. Drop one of them.")
            # the returns' moments over the run (observe_returns), travelling with the weights
            self.register_buffer("return_count", torch.tensor(0.0, dtype=torch.float64))
            self.register_buffer("return_mean", torch.tensor(0.0, dtype=torch.float64))
            self.register_buffer("return_var", torch.tensor(1.0, dtype=torch.float64))
        if self.use_sde and not (isinstance(self.actor, nn.Sequential)
                                 and isinstance(self.actor[-1], nn.Linear)
                                 and self.log_std.dim() == 2):
            raise ConfigError(
                f"--use_sde needs the built-in MLP actor (an nn.Sequential ending in a Linear "
                f"head, whose input is the latent phi(s), and a [latent x action] log_std); "
                f"model {type(self).__name__} builds its own networks. Drop --use_sde, or build "
                f"them as PPOModel.build_networks does.")
        # Acting on the CPU goes through numpy when the actor is a plain MLP (models/numpy_mlp.py
        # says why), with a generator of its own seeded from torch's (so a seed still fixes a
        # run; rollout workers keep its state in checkpoints). gSDE acts through torch.
        numpy_acting = self.head is None or self.discrete
        # A structured observation whose leaves are all flattened (a Dict of vectors) is one
        # concatenation away from a vector: it acts through numpy too (BENCHMARKS.md, "Spaces
        # and masks": a rollout worker on a Dict CartPole steps 0.87x CartPole's rate this way,
        # 0.59x through torch per step).
        self.concat_paths = (list(self.encoder.paths)
                             if isinstance(self.encoder, MultiInputEncoder)
                             and all(kind == "flatten" for kind in self.encoder.kinds) else None)
        vector_input = self.encoder is None or self.concat_paths is not None
        self.numpy_actor = (None if self.use_sde or not vector_input or not numpy_acting
                            or self.layout.has_mask or self.recurrent
                            else NumpyMLP.of(self.actor))
        # Memory on vectors acts through numpy too: the cores' step (models/recurrent.py
        # NumpyCore) and the heads (probe.py memory-cost: an LSTM-64 policy's step on 8
        # observations 127 us against 373 us through torch's LSTM; BENCHMARKS.md, "Memory").
        self.numpy_memory = None
        if (self.recurrent and vector_input and numpy_acting and not self.use_sde
                and not self.layout.has_mask):
            heads = NumpyMLP.of(self.actor), NumpyMLP.of(self.critic)
            if all(heads):
                self.numpy_memory = (NumpyCore(self.rnn), self.critic_rnn and NumpyCore(
                    self.critic_rnn), *heads)
        # With a shared encoder (a CNN) the values come from the features the action was drawn
        # from, nearly free; without one a second network per step costs more than a pass over
        # the fragment afterwards (core/sampling/rollout.py, values_later).
        self.values_with_actions = not vector_input or self.recurrent
        self.acting_rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))
        # gSDE: one exploration matrix per env [num_envs, latent, action], and the steps taken
        # with them since the fragment began (for --sde_sample_freq).
        self.exploration_matrices, self.sde_steps = None, 0

    def build_networks(self, args):
        """The actor and the critic (and on images the CNN they share, ``self.encoder``); a
        subclass overrides this to change the network."""
        encoder = make_encoder(args, self.observation_space)
        image = not isinstance(encoder, (Flatten, MultiInputEncoder))
        sizes = args.hidden_sizes if args.hidden_sizes is not None else ([] if image else [64, 64])
        self.encoder = None if isinstance(encoder, Flatten) else encoder
        head_input = encoder.features_dim
        if args.recurrent != "none":
            self.rnn = RecurrentCore(args.recurrent, head_input, args.rnn_hidden_size)
            if not args.shared_rnn:
                self.critic_rnn = RecurrentCore(args.recurrent, head_input,
                                                args.rnn_hidden_size)
            head_input = args.rnn_hidden_size
        self.actor = mlp(head_input, sizes, self.action_dim, args.activation, 0.01)
        self.critic = mlp(head_input, sizes, 1, args.activation, 1.0)
        if self.use_sde:  # one log std per entry of the exploration matrix (SB3's full_std)
            latent_dim = self.actor[-1].in_features
            self.log_std = nn.Parameter(torch.full((latent_dim, self.action_dim),
                                                   args.log_std_init))
        elif self.head is None:
            self.log_std = nn.Parameter(torch.full((self.action_dim,), args.log_std_init))

    # -- policy -------------------------------------------------------------------------------
    def features(self, obs):
        """What the heads take: the shared encoder's features of ``obs`` (images), or ``obs``
        itself (vectors, already float32 [B, obs_dim])."""
        # (.float(): uint8 pixels flattened into the MLP with --encoder mlp; free on float32)
        return obs.float() if self.encoder is None else self.encoder(obs)

    # -- memory (--recurrent) -------------------------------------------------------------------
    def initial_state(self, batch_size):
        """Zeros for every core: {"h", "c"} (LSTM) or {"h"} (GRU) with one shared core, else
        the actor's under "pi/" and the critic's under "vf/"."""
        if not self.recurrent:
            return None
        if self.critic_rnn is None:
            return self.rnn.initial_state(batch_size)
        return {**prefixed("pi", self.rnn.initial_state(batch_size)),
                **prefixed("vf", self.critic_rnn.initial_state(batch_size))}

    def memory_step(self, features, state, starts, actor=True):
        """One step of the cores: (actor input or None, critic input, next state)."""
        if self.critic_rnn is None:
            out, next_state = self.rnn.step(features, state, starts)
            return out, out, next_state
        pi, pi_next = (self.rnn.step(features, unprefixed("pi", state), starts) if actor
                       else (None, unprefixed("pi", state)))
        vf, vf_next = self.critic_rnn.step(features, unprefixed("vf", state), starts)
        return pi, vf, {**prefixed("pi", pi_next), **prefixed("vf", vf_next)}

    def memory_unroll(self, features, state, starts, sequence_shape):
        """The cores over sequences: ``features`` [L * N, F] time-major, ``starts`` [L, N];
        returns the actor's and the critic's inputs, [L * N, H] each."""
        length, count = sequence_shape
        features = features.reshape(length, count, -1)
        if self.critic_rnn is None:
            out = self.rnn.unroll(features, state, starts).reshape(length * count, -1)
            return out, out
        pi = self.rnn.unroll(features, unprefixed("pi", state), starts)
        vf = self.critic_rnn.unroll(features, unprefixed("vf", state), starts)
        return pi.reshape(length * count, -1), vf.reshape(length * count, -1)

    def latent_and_mean(self, features):
        """gSDE: the actor's last hidden layer phi(s) (detached: the noise scale does not train
        the features, as SB3's default learn_features=False) and the mean action mu(s)."""
        latent = self.actor[:-1](features)
        return latent.detach(), self.actor[-1](latent)

    def sde_std(self, latent):
        """gSDE: the per-state standard deviation sqrt(phi(s)^2 @ sigma^2 + 1e-6), [B, A]."""
        return (latent.pow(2) @ self.log_std.exp().pow(2) + 1e-6).sqrt()

    def distribution(self, features):
        """The policy at these features (``self.features(obs)``)."""
        if self.use_sde:
            latent, mean = self.latent_and_mean(features)
            return Normal(mean, self.sde_std(latent), validate_args=False)
        logits_or_mean = self.actor(features)
        if self.discrete:
            return Categorical(logits=logits_or_mean, validate_args=False)
        return Normal(logits_or_mean, self.log_std.exp().expand_as(logits_or_mean),
                      validate_args=False)

    def begin_fragment(self, num_envs, progress=None):
        """Called by the rollout worker before a fragment's first step: gSDE draws each env's
        exploration matrix anew (with the current log std). Nothing to do without gSDE."""
        if self.use_sde:
            self.resample_exploration(num_envs)

    @torch.no_grad()
    def resample_exploration(self, num_envs):
        """E[i] ~ N(0, sigma^2) entrywise for env i, from the acting generator."""
        sigma = self.log_std.detach().exp().cpu().numpy()
        draws = self.acting_rng.standard_normal((num_envs, *sigma.shape), np.float32)
        self.exploration_matrices = torch.as_tensor(draws * sigma, device=self.device)
        self.sde_steps = 0

    def log_prob(self, dist, actions):
        return dist.log_prob(actions) if self.discrete else dist.log_prob(actions).sum(-1)

    def entropy(self, dist):
        return dist.entropy() if self.discrete else dist.entropy().sum(-1)

    def policy_terms(self, features, actions, mask=None):
        """(log-probabilities of ``actions``, entropies) under the policy at ``features``; the
        action mask, if any, applies to both (invalid actions have probability 0)."""
        # An unmasked Discrete keeps torch's Categorical: the same numbers as before the heads
        # existed, so runs (and the figures measured on them) repeat bit for bit.
        if self.head is not None and (mask is not None or not self.discrete):
            params = self.actor(features)
            return (self.head.log_prob(params, actions, mask),
                    self.head.entropy(params, mask))
        dist = self.distribution(features)
        if not self.discrete:  # a Box of any shape: its entries
            actions = actions.reshape(actions.shape[0], -1)
        return self.log_prob(dist, actions), self.entropy(dist)

    def values(self, features):
        """V(s): the critic's output, scaled back from standardized returns with
        --value_norm."""
        values = self.critic(features).squeeze(-1)
        if self.value_norm:
            values = values * self.return_std() + self.return_mean.float()
        return values

    def return_std(self):
        return self.return_var.float().clamp(min=1e-4).sqrt()

    @torch.no_grad()
    def observe_returns(self, count, mean, var):
        """--value_norm, on the learner after each round: merge the round's returns' moments
        into the run's (Chan et al.'s parallel update); the next round's workers get them with
        the weights, so a round's targets and values are scaled alike everywhere."""
        if not self.value_norm or count <= 0:
            return
        total = self.return_count + count
        delta = mean - self.return_mean
        self.return_var.copy_((self.return_var * self.return_count + var * count
                               + delta ** 2 * self.return_count * count / total) / total)
        self.return_mean.add_(delta * count / total)
        self.return_count.copy_(total)

    @property
    def device(self):
        """Where this model computes: the CPU, or a rollout worker's GPU (core/distributed/devices.py)."""
        return self.device_marker.device

    def flat_obs(self, obs):
        """A batch as the model takes it: float32 [B, obs_dim] for vectors; for an encoder,
        [B, *obs_shape] in the observations' own dtype (uint8 pixels are scaled inside); for a
        structured observation, {path: tensor} in the leaves' dtypes."""
        if self.layout.structured:
            return {path: torch.tensor(np.asarray(leaf), device=self.device)
                    for path, leaf in obs.items()}
        if self.encoder is None:
            return torch.as_tensor(np.asarray(obs), dtype=torch.float32,
                                   device=self.device).reshape(-1, self.obs_dim)
        # a copy: arrays from Ray's object store are read-only
        return torch.tensor(np.asarray(obs), device=self.device).reshape(
            -1, *self.observation_space.shape)

    def vector_obs(self, obs):
        """float32 [B, features] for the numpy actor: the observations, or the concatenation
        of a structured observation's flattened leaves (what MultiInputEncoder computes)."""
        if self.concat_paths is None:
            return np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        rows = len(obs[self.concat_paths[0]])
        return np.concatenate([np.asarray(obs[path], dtype=np.float32).reshape(rows, -1)
                               for path in self.concat_paths], axis=1)

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False, values=True, state=None,
                       episode_starts=None):
        """Actions for a batch of observations, with their log-probabilities and (``values``
        True) the critic's values; a rollout worker asks for the values of a whole fragment
        at once instead (``predict_values``). A recurrent model acts from ``state`` (reset
        where ``episode_starts``; None: fresh episodes) and returns the next one in the
        extras' "state"."""
        if self.recurrent:
            return self.act_with_memory(obs, deterministic, values, state, episode_starts)
        if (self.numpy_actor is not None and self.device.type == "cpu"
                and num_rows(obs) <= NUMPY_ACTING_MAX_ROWS):
            actions, log_prob = self.act_numpy(self.vector_obs(obs), deterministic)
            features = None
        else:
            batch = self.flat_obs(obs)
            features = self.features(batch)
            actions, log_prob = self.act_torch(features, deterministic, action_mask_of(batch))
        if self.head is None and len(self.action_shape) != 1:
            actions = actions.reshape(len(actions), *self.action_shape)
        extras = {"log_probs": log_prob}
        if values:
            extras["values"] = (self.predict_values(obs) if features is None
                                else self.values(features).cpu().numpy())
        return actions, extras

    def act_with_memory(self, obs, deterministic, values, state, episode_starts):
        if self.numpy_memory is not None and self.device.type == "cpu":
            return self.act_with_memory_numpy(obs, deterministic, values, state,
                                              episode_starts)
        batch = self.flat_obs(obs)
        features = self.features(batch)
        state, starts = self.state_tensors(state, episode_starts, len(features))
        actor_input, critic_input, next_state = self.memory_step(features, state, starts)
        actions, log_prob = self.act_torch(actor_input, deterministic, action_mask_of(batch))
        if self.head is None and len(self.action_shape) != 1:
            actions = actions.reshape(len(actions), *self.action_shape)
        extras = {"log_probs": log_prob,
                  "state": {name: value.cpu().numpy() for name, value in next_state.items()}}
        if values:
            extras["values"] = self.values(critic_input).cpu().numpy()
        return actions, extras

    def act_with_memory_numpy(self, obs, deterministic, values, state, episode_starts):
        x = self.vector_obs(obs)
        if state is None:
            state, episode_starts = self.initial_state(len(x)), np.ones(len(x), dtype=bool)
        actor_core, critic_core, actor, critic = self.numpy_memory
        if critic_core is None:
            actor_input, next_state = actor_core.step(x, state, episode_starts)
            critic_input = actor_input
        else:
            actor_input, actor_state = actor_core.step(x, unprefixed("pi", state),
                                                       episode_starts)
            critic_input, critic_state = critic_core.step(x, unprefixed("vf", state),
                                                          episode_starts)
            next_state = {**prefixed("pi", actor_state), **prefixed("vf", critic_state)}
        actions, log_prob = self.sample_numpy(actor(actor_input), deterministic)
        if self.head is None and len(self.action_shape) != 1:
            actions = actions.reshape(len(actions), *self.action_shape)
        extras = {"log_probs": log_prob, "state": next_state}
        if values:
            extras["values"] = critic(critic_input)[:, 0].astype(np.float32)
        return actions, extras

    def act_numpy(self, obs, deterministic):
        return self.sample_numpy(self.numpy_actor(obs), deterministic)

    def sample_numpy(self, out, deterministic):
        """Actions and log-probs from the actor's output ``out`` (numpy)."""
        # tests/test_ppo.py checks these log-probs against torch.distributions.
        if self.discrete:
            log_probs = log_softmax(out)
            if deterministic:
                actions = out.argmax(-1)
            else:  # Gumbel-max: argmax(logits + Gumbel noise) is a draw from the categorical
                # (an exponential draw of exactly 0 in float32 gives +inf: that action, the
                # limit of the formula, without a warning)
                with np.errstate(divide="ignore"):
                    gumbel = -np.log(self.acting_rng.standard_exponential(out.shape,
                                                                          np.float32))
                actions = (log_probs + gumbel).argmax(-1)
            return actions, np.take_along_axis(log_probs, actions[:, None], -1)[:, 0]
        log_std = self.log_std.detach().cpu().numpy()
        noise = (np.zeros_like(out) if deterministic
                 else self.acting_rng.standard_normal(out.shape, np.float32))
        actions = out + np.exp(log_std) * noise
        log_prob = (-0.5 * noise ** 2 - log_std - np.float32(0.5 * math.log(2 * math.pi)))
        return actions.astype(np.float32), log_prob.sum(-1).astype(np.float32)

    def act_torch(self, features, deterministic, mask=None):
        # Sampling by hand: building a torch.distributions object costs more than the forward
        # pass on small batches (measured: 100 us against 55 us per call, batch of 4).
        if self.use_sde:
            return self.act_sde(features, deterministic)
        out = self.actor(features)
        if self.head is not None and (mask is not None or not self.discrete):
            actions, log_prob = self.head.sample(out, mask, deterministic)
            return actions.cpu().numpy(), log_prob.cpu().numpy()
        if self.discrete:
            log_probs = torch.log_softmax(out, -1)
            if deterministic:
                actions = out.argmax(-1)
            else:
                actions = (log_probs - torch.empty_like(out).exponential_().log()).argmax(-1)
            log_prob = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        else:
            std = self.log_std.exp()
            noise = torch.zeros_like(out) if deterministic else torch.randn_like(out)
            actions = out + std * noise
            log_prob = (-0.5 * noise.pow(2) - self.log_std
                        - 0.5 * math.log(2 * math.pi)).sum(-1)
        return actions.cpu().numpy(), log_prob.cpu().numpy()

    def act_sde(self, features, deterministic):
        """gSDE acting: mu(s) + phi(s) @ E[env], and its log-probability under N(mu, std(s))."""
        latent, mean = self.latent_and_mean(features)
        if deterministic:
            actions = mean
        else:
            rows = latent.shape[0]
            due = self.args.sde_sample_freq > 0 and self.sde_steps > 0 \
                and self.sde_steps % self.args.sde_sample_freq == 0
            if self.exploration_matrices is None or len(self.exploration_matrices) != rows or due:
                self.resample_exploration(rows)
            self.sde_steps += 1
            actions = mean + torch.bmm(latent.unsqueeze(1), self.exploration_matrices).squeeze(1)
        policy = Normal(mean, self.sde_std(latent), validate_args=False)
        log_prob = policy.log_prob(actions).sum(-1)
        return actions.cpu().numpy(), log_prob.cpu().numpy()

    @torch.no_grad()
    def predict_values(self, obs, state=None, episode_starts=None):
        """V of a batch of observations; a recurrent model's from ``state`` (reset where
        ``episode_starts``; None: fresh episodes)."""
        features = self.features(self.flat_obs(obs))
        if self.recurrent:
            state, starts = self.state_tensors(state, episode_starts, len(features))
            features = self.memory_step(features, state, starts, actor=False)[1]
        return self.values(features).cpu().numpy()

    #: the methods of the acting path PPOActing rebuilds (a subclass that overrides one needs
    #: an export_module of its own: models/exporting.py)
    ACTING_METHODS = ("choose_actions", "act_with_memory", "act_with_memory_numpy", "act_numpy",
                      "sample_numpy", "act_torch", "act_sde", "features", "flat_obs",
                      "vector_obs", "memory_step", "latent_and_mean", "state_tensors")

    def export_module(self):
        """The deterministic action (and, with memory, the next state) from tensors only
        (models/base.py): PPOActing below, on this model's own networks."""
        refuse_changed_acting(self, PPOModel, self.ACTING_METHODS)
        return PPOActing(self)

    # -- learning -----------------------------------------------------------------------------
    def step(self, batch: PPOBatch, progress: float = 0.0):
        """The gradients of PPO's loss on a minibatch, by parameter name, and its statistics;
        in --ppo_precision (models/base.py ``TimedPrecision``)."""
        with self.autocast((batch, progress)):
            return self.losses_and_gradients(batch, progress)

    def requested_precision(self):
        return self.args.ppo_precision

    def losses_and_gradients(self, batch: PPOBatch, progress: float = 0.0):
        """The body of ``step``, inside its autocast: ``ppo_loss`` and its backward pass, the
        statistics copied to the host after it."""
        loss, stats = self.ppo_loss(batch, progress)
        self.zero_grad(set_to_none=True)
        loss.backward()
        return self.collect_gradients(), on_host(stats)

    def ppo_loss(self, batch: PPOBatch, progress: float = 0.0):
        """(PPO's loss on a minibatch, its statistics as 0-d tensors): the clipped surrogate,
        the value loss and the entropy bonus, before any backward pass (a subclass adds terms
        of its own)."""
        clip_range = schedule(self.args.clip_range, self.args.clip_schedule, progress)
        features = self.features(batch.observations)  # one encoder pass for both heads
        actor_input = critic_input = features
        if batch.sequence_shape is not None:  # memory: replay the sequences' states
            actor_input, critic_input = self.memory_unroll(
                features, batch.states, batch.episode_starts, batch.sequence_shape)
        log_prob, entropy = self.policy_terms(actor_input, batch.actions,
                                              action_mask_of(batch.observations))
        # float32 out of a bf16 autocast (no-ops in fp32): the loss's arithmetic in full precision
        log_prob, entropy = log_prob.float(), entropy.float()
        values = self.values(critic_input).float()
        if batch.weights is None:
            mean = torch.mean
        else:  # the steps that count (a sequence keeps an env failure's cut for its shape)
            total = batch.weights.sum().clamp(min=1.0)

            def mean(x):
                return (x * batch.weights).sum() / total

        log_ratio = log_prob - batch.old_log_probs
        ratio = log_ratio.exp()
        surrogate = batch.advantages * ratio
        clipped = batch.advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
        policy_loss = -mean(torch.min(surrogate, clipped))

        # --value_norm: the error in standardized units (the critic's own), so the value
        # loss keeps one scale whatever the returns'; clipped in those units too
        scale = self.return_std().detach() if self.value_norm else 1.0
        if self.args.clip_range_vf is not None:
            values = batch.old_values + (values - batch.old_values).clamp(
                -self.args.clip_range_vf * scale, self.args.clip_range_vf * scale)
        value_loss = mean(((batch.returns - values) / scale) ** 2)
        entropy = mean(entropy)

        loss = policy_loss + self.args.vf_coef * value_loss - self.args.ent_coef * entropy
        return loss, step_statistic_tensors(mean, ratio, log_ratio, clip_range, policy_loss,
                                            value_loss, entropy)

    def configure_optimizer(self):
        # The fused Adam kernel is the same update; on the CPU it takes 0.14 ms per step against
        # 0.59 ms for the default one on this 64x64 actor-critic, and the learner is on the
        # critical path of every minibatch step.
        return torch.optim.Adam(self.parameters(), lr=self.args.lr, eps=1e-5, fused=True)

    def learning_rate(self, progress):
        return schedule(self.args.lr, self.args.lr_schedule, progress)

    def max_grad_norm(self):
        return self.args.max_grad_norm or None


class PPOActing(nn.Module):
    """PPO's deterministic acting path as a module of tensors only (models/base.py
    ``export_module``): the model's encoder, recurrent cores, actor and action head, shared
    with it, in ``choose_actions``'s order. The action is the policy's mode: the argmax of the
    (masked) categoricals, the bits whose logit is positive, or the Gaussian's mean (gSDE's
    too: mu(s), the actor's output)."""

    # The model's own code: each reads only the attributes set below (encoder; rnn and
    # critic_rnn), so the export runs exactly what acting runs.
    features = PPOModel.features
    memory_step = PPOModel.memory_step

    def __init__(self, model):
        super().__init__()
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=model.encoder is None)
        self.encoder = model.encoder
        self.rnn, self.critic_rnn = model.rnn, model.critic_rnn
        self.actor, self.head = model.actor, model.head
        self.discrete, self.action_shape = model.discrete, model.action_shape
        self.state_names = list(model.initial_state(1) or ())

    def forward(self, *inputs):
        batch = self.inputs(inputs)
        features = self.features(batch)
        mask = action_mask_of(batch)
        if self.rnn is None:
            return self.action(features, mask)
        count = self.inputs.count
        state = dict(zip(self.state_names, inputs[count:-1]))
        actor_input, _, next_state = self.memory_step(features, state, inputs[-1])
        return (self.action(actor_input, mask),
                *(next_state[name] for name in self.state_names))

    def action(self, features, mask):
        """``act_torch``'s (and the numpy path's) deterministic action at ``features``."""
        out = self.actor(features)
        if self.head is not None and (mask is not None or not self.discrete):
            actions = self.head.sample(out, mask, deterministic=True)[0]
        elif self.discrete:
            actions = out.argmax(-1)
        else:
            actions = out  # the mean: deterministic acting adds zero noise
        if self.head is None and len(self.action_shape) != 1:
            actions = actions.reshape(actions.shape[0], *self.action_shape)
        return actions
