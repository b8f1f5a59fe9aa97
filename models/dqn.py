"""dqn: deep Q-learning for Discrete actions, as Ape-X runs it (Horgan et al. 2018,
arXiv:1803.00933): many actors exploring with epsilons of their own, n-step returns computed on
the workers (agents/dqn_agent.py), prioritized replay, and a learner training a double-Q,
optionally dueling network against a target network.

- Q network: the observation encoder (models/encoders.py: Nature CNN on pixels, one encoder per
  leaf of a Dict observation, vectors as they are), a ReLU MLP of --dqn_hidden_sizes, and a head
  of one Q value per action, or with --dueling a value and an advantage stream,
  Q = V + A - mean(A) (Wang et al. 2016).
- Target: y = R + gamma^k (1 - terminated) Q_target(s', a*), with R and gamma^k the
  transition's n-step return and discount (core.learning.replay_buffer.Transitions), and
  a* = argmax_a Q(s', a) of the online network (double Q, van Hasselt et al. 2016) or of the
  target network (--no-double_q, the original DQN). Both argmaxes obey the action mask of s'.
- Loss: the Huber loss of Q(s, a) - y, weighted by the replay's importance weights; gradients
  clipped to --max_grad_norm by the learner. The target network is a buffer copy
  (models/sac.py frozen_copy) that travels with the weights and checkpoints: every
  --target_update_interval updates it moves to tau * online + (1 - tau) * target (tau 1: a
  copy, as DQN; --target_update_interval 1 with a small tau: Polyak averaging).
- Exploration: epsilon-greedy, uniform over the allowed actions. --exploration linear decays
  epsilon from --eps_initial to --eps_final over the first --eps_fraction of --total_steps (as
  SB3's DQN); --exploration ladder gives env slot i of N its own constant epsilon,
  eps_base^(1 + eps_alpha i / (N - 1)) (Ape-X's actors; ddrl's rollout workers tell the model
  their slots: models/base.py assign_env_slots); --exploration noisy replaces epsilon by noisy
  networks (Fortunato et al. 2018; models/noisy.py): every linear layer after the encoder is a
  NoisyLinear with learned factorised Gaussian noise, acting is greedy on the noisy weights
  (new noise per fragment on the workers, per update in the learner, the target network's
  drawn apart), as in Rainbow. The test worker acts greedily (noisy networks: on the mean
  weights), or with --eval_eps.
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from core.argtypes import non_negative_float, positive_float, positive_int, unit_interval
from core.errors import ConfigError
from core.spaces import action_mask, layout_of
from models import register_model
from models.base import BaseModel, ReplayModelSteps, TimedPrecision
from models.encoders import Flatten, add_encoder_args, make_encoder
from models.exporting import ObservationInputs, refuse_changed_acting
from models.noisy import NoisyLinear, NumpyNoisyMLP, keyed_generator, noise_disabled, \
    resample_noise, without_noise
from models.numpy_mlp import NumpyMLP
from models.ppo import action_mask_of, hidden_sizes
from models.sac import (as_float_tensor, as_tensor, frozen_copy, polyak_update, relu_mlp,
                        structured_tensors)

# Finite, so that a row whose every action is masked still gives numbers, not NaN
MASKED_Q = -1e9


def trunk_and_linear(in_dim, sizes, noisy_sigma0=None):
    """The ReLU MLP after the encoder and the layer kind for the heads: plain, or NoisyLinear
    layers of initial noise ``noisy_sigma0`` (--exploration noisy)."""
    linear = nn.Linear if noisy_sigma0 is None else (
        lambda i, o: NoisyLinear(i, o, noisy_sigma0))
    return relu_mlp(in_dim, sizes, linear=linear), linear


class QNetwork(nn.Module):
    """encoder -> ReLU MLP -> one Q value per action (or a value and an advantage stream)."""

    def __init__(self, encoder, sizes, num_actions, dueling, noisy_sigma0=None):
        super().__init__()
        self.encoder = encoder
        self.trunk, linear = trunk_and_linear(encoder.features_dim, sizes, noisy_sigma0)
        width = sizes[-1] if sizes else encoder.features_dim
        self.dueling = dueling
        if dueling:
            self.value = linear(width, 1)
            self.advantage = linear(width, num_actions)
        else:
            self.q = linear(width, num_actions)

    def forward(self, obs):
        latent = self.trunk(self.encoder(obs))
        if not self.dueling:
            return self.q(latent)
        advantage = self.advantage(latent)
        return self.value(latent) + advantage - advantage.mean(-1, keepdim=True)


def numpy_mlp(module):
    """NumpyMLP, or NumpyNoisyMLP for noisy layers, of ``module``; None for anything else."""
    return NumpyMLP.of(module) or NumpyNoisyMLP.of(module)


def numpy_trunk_and_heads(network):
    """(trunk or None, heads) of a QNetwork-shaped network in numpy, or None."""
    trunk = numpy_mlp(network.trunk) if len(network.trunk) else None
    heads = [numpy_mlp(nn.Sequential(head)) for head in
             ((network.value, network.advantage) if network.dueling else (network.q,))]
    if (len(network.trunk) and trunk is None) or None in heads:
        return None
    return trunk, heads


class NumpyQ:
    """QNetwork's forward pass in numpy on vectors, for acting (models/numpy_mlp.py says why);
    noisy layers on views of their noise too (models/noisy.py NumpyNoisyMLP)."""

    def __init__(self, trunk, heads):
        self.trunk, self.heads = trunk, heads

    @classmethod
    def of(cls, network):
        # QNetwork's own forward only: a subclass's (build_networks may install one) is its own
        if (not isinstance(network, QNetwork) or type(network).forward is not QNetwork.forward
                or not isinstance(network.encoder, Flatten)):
            return None
        parts = numpy_trunk_and_heads(network)
        return None if parts is None else cls(*parts)

    def __call__(self, obs):
        latent = self.trunk(obs) if self.trunk is not None else obs
        if len(self.heads) == 1:
            return self.heads[0](latent)
        value, advantage = (head(latent) for head in self.heads)
        return value + advantage - advantage.mean(-1, keepdims=True)


def add_epsilon_args(parser, eps_fraction):
    """The epsilon-greedy flags of --exploration linear and ladder, and the test worker's
    epsilon (DQN's and models/pqn.py's; ``eps_fraction``: the decay's default share)."""
    parser.add_argument("--eps_initial", type=unit_interval, default=1.0,
                        help="linear: epsilon at the start (default: %(default)s)")
    parser.add_argument("--eps_final", type=unit_interval, default=0.05,
                        help="linear: epsilon after the decay (default: %(default)s)")
    parser.add_argument("--eps_fraction", type=unit_interval, default=eps_fraction,
                        help="linear: the share of --total_steps the decay takes "
                             "(default: %(default)s)")
    parser.add_argument("--eps_base", type=unit_interval, default=0.4,
                        help="ladder: epsilon of the first slot, eps_base^(1 + eps_alpha "
                             "i / (N - 1)) for slot i of N (default: %(default)s)")
    parser.add_argument("--eps_alpha", type=non_negative_float, default=7.0,
                        help="ladder: how fast the epsilons fall over the slots "
                             "(default: %(default)s)")
    parser.add_argument("--eval_eps", type=unit_interval, default=0.0,
                        help="epsilon of the test worker, --evaluate and videos (0: "
                             "greedy) (default: %(default)s)")


def ladder_epsilons(slots, total, base, alpha):
    """Ape-X's epsilons: slot i of N explores with base^(1 + alpha i / (N - 1)) (one slot:
    base)."""
    slots = np.asarray(slots, dtype=np.float64)
    if total <= 1:
        return np.full(len(slots), base)
    return base ** (1.0 + alpha * slots / (total - 1))


def linear_epsilon(progress, initial, final, fraction):
    """From ``initial`` to ``final`` over the first ``fraction`` of the run, then ``final``."""
    if fraction <= 0:
        return final
    return initial + (final - initial) * min(1.0, max(0.0, progress) / fraction)


@register_model("dqn")
class DQNModel(ReplayModelSteps, TimedPrecision, BaseModel):
    """Double DQN (optionally dueling) with n-step targets, for Discrete actions."""
    trainer = "replay"
    update_graph_safe = True
    precision_flag = "--dqn_precision"
    default_agent = "dqn_agent"
    #: the algorithm's name in its errors (models/pqn.py: PQN)
    algorithm = "DQN"
    update_metrics = ("q_loss", "q_mean", "td_error_mean", "epsilon")
    line_metrics = (("q_loss", "q loss", ".3f"), ("epsilon", "eps", ".3f"))

    @staticmethod
    def add_args(parser):
        parser.add_argument("--dqn_hidden_sizes", type=hidden_sizes, default=[64, 64],
                            help="widths of the Q network's hidden layers after the encoder "
                                 "(default: 64,64)")
        parser.add_argument("--dqn_lr", type=non_negative_float, default=1e-4,
                            help="Adam learning rate (default: %(default)s)")
        parser.add_argument("--dqn_lr_schedule", choices=["constant", "linear"],
                            default="constant",
                            help="learning rate over the run: constant, or linear decay to 0 at "
                                 "--total_steps env steps (default: %(default)s)")
        parser.add_argument("--dueling", action=argparse.BooleanOptionalAction, default=False,
                            help="a value and an advantage stream, Q = V + A - mean(A) "
                                 "(default: off)")
        parser.add_argument("--double_q", action=argparse.BooleanOptionalAction, default=True,
                            help="the online network picks the next action, the target network "
                                 "values it (double DQN); off: the target network's max "
                                 "(default: on)")
        parser.add_argument("--target_update_interval", type=positive_int, default=1000,
                            help="gradient updates between target-network updates (SB3 counts "
                                 "env steps: at --utd_ratio U, its N env steps are N x U "
                                 "updates) (default: %(default)s)")
        parser.add_argument("--tau", type=unit_interval, default=1.0,
                            help="each target update moves the target network to tau * online "
                                 "+ (1 - tau) * target: 1 copies it; with "
                                 "--target_update_interval 1, a small tau is Polyak averaging "
                                 "(default: %(default)s)")
        parser.add_argument("--max_grad_norm", type=non_negative_float, default=10.0,
                            help="global gradient-norm clip, 0: none (default: %(default)s)")
        parser.add_argument("--exploration", choices=["linear", "ladder", "noisy"],
                            default="linear",
                            help="epsilon-greedy exploration: 'linear' decays one epsilon over "
                                 "the start of the run (SB3's DQN), 'ladder' gives every env "
                                 "slot a constant epsilon of its own (Ape-X); 'noisy': no "
                                 "epsilon, noisy networks (NoisyLinear layers after the "
                                 "encoder, greedy on noisy weights; Rainbow's) "
                                 "(default: %(default)s)")
        parser.add_argument("--noisy_sigma0", type=positive_float, default=0.5,
                            help="noisy: the initial noise scale sigma_0 (each layer's sigma "
                                 "starts at sigma_0 / sqrt(inputs); the paper's factorised "
                                 "0.5) (default: %(default)s)")
        add_epsilon_args(parser, eps_fraction=0.1)
        parser.add_argument("--dqn_precision", choices=["auto", "fp32", "bf16"], default="fp32",
                            help="bf16: the update's forward pass (the Q network's convolutions "
                                 "and matrix products) in bfloat16 under torch.autocast, the "
                                 "loss's arithmetic in float32; auto: fp32 where bf16 is "
                                 "emulated, else the first update timed in both and the faster "
                                 "kept (as --sac_precision). Acting stays float32 "
                                 "(default: %(default)s)")
        add_encoder_args(parser)

    @classmethod
    def update_precision_of(cls, config):
        return config.dqn_precision

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        layout_of(observation_space)  # a ConfigError for a leaf it cannot carry
        if not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"model {cls.__name__} ({cls.algorithm}) takes Discrete actions: it values each action "
                f"and picks the best. This env's action space is {action_space}. For "
                f"continuous actions use --model_name sac (or ppo); for MultiDiscrete or "
                f"MultiBinary, --model_name ppo.")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.register_buffer("device_marker", torch.empty(0), persistent=False)
        self.layout = layout_of(observation_space)
        # (a team's MultiDiscrete has no one count: models/ma_dqn.py's build_networks sets it)
        self.num_actions = int(action_space.n) if isinstance(action_space, spaces.Discrete) \
            else None
        self.build_networks(args)
        self.numpy_q = None if self.layout.structured else NumpyQ.of(self.q_net)
        self.acting_rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))
        # Exploration: the env slots this model acts for (set by its rollout worker), the
        # epsilons of this fragment (begin_fragment), the run's progress (linear schedule)
        self.slots, self.total_slots = None, 1
        self.epsilons = None
        # Noisy networks: the learner's draws are keyed by this seed (in state_dict: a resumed
        # learner has it) and the update's number; None: the noise is not drawn for any yet
        if args.exploration == "noisy":
            self.register_buffer("noise_seed", torch.randint(0, 2**62, ()))
        self.noise_version = None

    def build_networks(self, args):
        """The online Q network and its target copy; a subclass may override."""
        encoder = make_encoder(args, self.observation_space)
        self.q_net = QNetwork(encoder, args.dqn_hidden_sizes, self.num_actions, args.dueling,
                              self.noisy_sigma0(args))
        self.q_target = frozen_copy(self.q_net)

    @staticmethod
    def noisy_sigma0(args):
        """sigma_0 of the noisy layers with --exploration noisy, else None (plain layers)."""
        return args.noisy_sigma0 if args.exploration == "noisy" else None

    @property
    def device(self):
        return self.device_marker.device

    # -- acting --------------------------------------------------------------------------------
    def assign_env_slots(self, slots, total_slots):
        self.slots, self.total_slots = np.asarray(slots), int(total_slots)

    def begin_fragment(self, num_envs, progress=None):
        """This fragment's epsilon per env: the ladder's (constant) or the linear schedule's at
        ``progress`` (the run's env steps over --total_steps)."""
        args = self.args
        if args.exploration == "noisy":  # the fragment acts on one fresh draw of the noise
            resample_noise(self.q_net, generator=keyed_generator(
                self.acting_rng.integers(0, 2**62)))
            self.noise_version = None  # (a learner in this process draws its own again)
            self.epsilons = np.zeros(num_envs)
        elif args.exploration == "ladder":
            slots = self.slots if self.slots is not None else np.arange(num_envs)
            self.epsilons = ladder_epsilons(slots, self.total_slots, args.eps_base,
                                            args.eps_alpha)
        else:
            self.epsilons = np.full(num_envs, linear_epsilon(
                progress or 0.0, args.eps_initial, args.eps_final, args.eps_fraction))

    def epsilon_for(self, rows, deterministic):
        if deterministic:
            return np.full(rows, self.args.eval_eps)
        if self.epsilons is None or len(self.epsilons) != rows:
            self.begin_fragment(rows, None)
        return self.epsilons

    def flat_obs(self, obs):
        """A batch as the network takes it (uint8 pixels and Dict leaves in their dtypes)."""
        if self.layout.structured:
            return structured_tensors(obs, self.device)
        if not isinstance(self.q_net.encoder, Flatten):
            return as_tensor(obs, self.device).reshape(-1, *self.observation_space.shape)
        return as_float_tensor(obs, self.device).reshape(len(obs), -1)

    @torch.no_grad()
    def q_values(self, obs):
        """Q of every action, numpy [B, A], with masked actions at MASKED_Q."""
        if self.numpy_q is not None and self.device.type == "cpu":
            x = np.asarray(obs, dtype=np.float32)
            q = self.numpy_q(x.reshape(len(x), -1))
        else:
            q = self.q_net(self.flat_obs(obs)).float().cpu().numpy()
        mask = action_mask(obs)
        if mask is not None:
            q = np.where(mask, q, MASKED_Q)
        return q

    def acting_q_values(self, obs, deterministic):
        """``q_values`` for acting: on the mean weights of noisy networks when deterministic
        (greedy evaluation), on this fragment's noise otherwise."""
        if deterministic and self.args.exploration == "noisy":
            with noise_disabled(self.q_net):
                return self.q_values(obs)
        return self.q_values(obs)

    def choose_actions(self, obs, deterministic=False):
        """Epsilon-greedy actions (module docstring), indices from 0 (the rollout adds the
        action space's start, core.sampling.envs.to_env_action); no extras."""
        return self.epsilon_greedy(self.acting_q_values(obs, deterministic), deterministic), {}

    def epsilon_greedy(self, q, deterministic):
        """Indices [B] from Q values [B, A] (masked actions at MASKED_Q): the greedy one, or
        with this row's epsilon one uniform over the allowed actions."""
        rows = len(q)
        actions = q.argmax(-1)
        explore = self.acting_rng.random(rows) < self.epsilon_for(rows, deterministic)
        if explore.any():
            # uniform over the allowed actions: the largest of uniform scores where allowed
            scores = self.acting_rng.random((int(explore.sum()), self.num_actions))
            actions[explore] = np.where(q[explore] > MASKED_Q, scores, -1.0).argmax(-1)
        return actions.astype(np.int64)

    #: the methods of the acting path DQNActing rebuilds (models/exporting.py)
    ACTING_METHODS = ("choose_actions", "q_values", "flat_obs", "acting_q_values")

    def export_module(self):
        """The greedy action from tensors only (models/base.py): DQNActing below, on this
        model's own Q network. --eval_eps is left out: an exported policy is greedy."""
        refuse_changed_acting(self, DQNModel, self.ACTING_METHODS)
        return DQNActing(self)

    # -- learning ------------------------------------------------------------------------------
    def masked(self, q, obs):
        mask = action_mask_of(obs)
        return q if mask is None else q.masked_fill(~mask, MASKED_Q)

    def unpack(self, batch):
        """(obs, action indices, n-step rewards, next obs, terminated, discounts, importance
        weights) on the model's device."""
        t = getattr(batch, "transitions", batch)
        if t.discounts is None:
            raise ValueError(f"model {type(self).__name__} learns from transitions with "
                             f"discounts (an agent with transition_discounts: dqn_agent); "
                             f"this batch has none")
        device = self.device
        rewards = as_float_tensor(t.rewards, device).reshape(-1)
        weights = getattr(batch, "weights", None)
        weights = (torch.ones_like(rewards) if weights is None
                   else as_float_tensor(weights, device).reshape(-1))
        # (a copy: arrays from Ray's object store are read-only)
        actions = as_tensor(t.actions, device).long().reshape(-1)
        return (self.flat_obs(t.observations), actions, rewards,
                self.flat_obs(t.next_observations),
                as_float_tensor(t.terminated, device).reshape(-1),
                as_float_tensor(t.discounts, device).reshape(-1), weights)

    @torch.no_grad()
    def targets(self, rewards, next_obs, terminated, discounts):
        """R + gamma^k (1 - terminated) Q_target(s', a*), a* by the online network (double Q)
        or by the target network itself, among the allowed actions."""
        next_target = self.masked(self.q_target(next_obs).float(), next_obs)
        chooser = (self.masked(self.q_net(next_obs).float(), next_obs) if self.args.double_q
                   else next_target)
        best = next_target.gather(1, chooser.argmax(1, keepdim=True)).squeeze(1)
        return rewards + discounts * (1.0 - terminated) * best

    def q_taken(self, obs, actions):
        """Q(s, a) of the online network for the actions taken: [B]."""
        return self.q_net(obs).float().gather(1, actions.unsqueeze(1)).squeeze(1)

    @torch.no_grad()
    def td_errors(self, batch):
        """|Q(s, a) - y| per transition, numpy [B] (an actor's initial priorities)."""
        obs, actions, rewards, next_obs, terminated, discounts, _ = self.unpack(batch)
        y = self.targets(rewards, next_obs, terminated, discounts)
        return (self.q_taken(obs, actions) - y).abs().cpu().numpy()

    def update_inputs(self, batch):
        if self.args.exploration == "noisy" and self.noise_version != self.weights_version:
            self.draw_update_noise(self.weights_version)
        return self.unpack(batch)

    def draw_update_noise(self, version):
        """The noise of the update that follows weights ``version``, both networks' (the
        target's its own draw), keyed by the run's noise seed and the version: a resumed
        learner draws what the straight run drew."""
        resample_noise(self.q_net, self.q_target,
                       generator=keyed_generator(int(self.noise_seed), version))
        self.noise_version = version

    def update_on_inputs(self, *inputs):
        """The loss's backward pass into .grad (ReplayModelSteps), in --dqn_precision
        (models/base.py ``TimedPrecision``)."""
        with self.autocast(inputs):
            return self.losses_and_gradients(*inputs)

    def requested_precision(self):
        return self.args.dqn_precision

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights):
        """The weighted Huber loss, statistics, and |Q - y| per transition for the priority
        update (models/base.py ``ReplayModelSteps``: the backward pass, and ``step``'s
        gradients by parameter name)."""
        y = self.targets(rewards, next_obs, terminated, discounts)
        q = self.q_taken(obs, actions)
        loss = (weights * F.smooth_l1_loss(q, y, reduction="none")).mean()
        td_errors = (q.detach() - y).abs()
        return loss, {"q_loss": loss.detach(), "q_mean": q.detach().mean(),
                      "td_error_mean": td_errors.mean()}, td_errors

    def update_extras(self, progress):
        return {"epsilon": self.exploration_now(progress)}

    def exploration_now(self, progress):
        """The metrics column "epsilon": the linear schedule's value at ``progress``, or the
        ladder's mean over the run's env slots (rollout workers' slots, as they act)."""
        args = self.args
        if args.exploration == "noisy":
            return 0.0
        if args.exploration == "linear":
            return float(linear_epsilon(progress, args.eps_initial, args.eps_final,
                                        args.eps_fraction))
        total = max(1, args.num_workers) * args.num_envs_per_worker
        return float(ladder_epsilons(np.arange(total), total, args.eps_base,
                                     args.eps_alpha).mean())

    def configure_optimizer(self):
        # fused: the same update, several times faster on the CPU (see models/ppo.py)
        return torch.optim.Adam(self.q_net.parameters(), lr=self.args.dqn_lr, fused=True)

    def learning_rate(self, progress):
        if self.args.dqn_lr_schedule != "linear":
            return None
        return self.args.dqn_lr * (1.0 - min(1.0, max(0.0, progress)))

    def max_grad_norm(self):
        return self.args.max_grad_norm

    @torch.no_grad()
    def after_update(self):
        """Every --target_update_interval updates: target <- tau * online + (1 - tau) *
        target. Counted by the learner's version (kept in checkpoints), before it moves on
        to this update's. Noisy networks: new noise for the next update, in both networks
        (here, outside the update itself, which only reads it)."""
        if not (self.weights_version + 1) % self.args.target_update_interval:
            polyak_update(self.q_target, self.q_net, self.args.tau)
        if self.args.exploration == "noisy":
            self.draw_update_noise(self.weights_version + 1)


class DQNActing(nn.Module):
    """DQN's greedy acting path as a module of tensors only (models/base.py ``export_module``):
    the argmax of the Q network's values, masked actions at MASKED_Q, as indices from 0 like
    ``choose_actions`` (the exporter adds the action space's start, as to_env_action does)."""

    def __init__(self, model):
        super().__init__()
        vectors = isinstance(model.q_net.encoder, Flatten) and not model.layout.structured
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=vectors)
        self.q_net = without_noise(model.q_net)  # greedy on the mean weights

    def forward(self, *inputs):
        batch = self.inputs(inputs)
        q = self.q_net(batch).float()
        mask = action_mask_of(batch)
        if mask is not None:
            q = q.masked_fill(~mask, MASKED_Q)
        return q.argmax(-1)
