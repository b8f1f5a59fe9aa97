"""c51: categorical distributional DQN (Bellemare, Dabney and Munos 2017, "A Distributional
Perspective on Reinforcement Learning", arXiv:1707.06887) for Discrete actions, with CleanRL's
c51.py as the reference for the defaults and Dopamine's Rainbow for the priorities.

DQN (models/dqn.py: the encoders, n-step returns, prioritized replay, target updates, epsilon
schedules, noisy layers, masks, the Ape-X shape) whose network gives, for each action, a
categorical distribution of the return over N fixed atoms z_i = V_min + i dz,
dz = (V_max - V_min) / (N - 1) (``--n_atoms``, ``--v_min``, ``--v_max``): N logits per action,
p_i(s, a) their softmax. Its Q value, sum_i z_i p_i(s, a), is what acting, the exported policy
and the greedy choice of the next action use.

- Target distribution (the paper's Algorithm 1): a* = argmax_a Q_target(s', a) (the paper's and
  CleanRL's; ``--double_q``: the online network's, Rainbow's), among the actions the mask of s'
  allows; each atom moves to Tz_j = R + gamma^k (1 - terminated) z_j, clipped to [V_min, V_max],
  and its probability p_j(s', a*) of the target network is split between the two atoms beside
  Tz_j in proportion to how near each is (all of it to z_l when Tz_j falls on an atom).
- Loss: the cross-entropy -sum_i m_i log p_i(s, a) of the projected target m, per row, then
  the replay's importance-weighted mean over the batch.
- Priorities (--prioritized_replay): each row's cross-entropy, as Dopamine's Rainbow (Hessel et
  al. 2018 prioritize by the KL loss; the two differ by the target's entropy, which no
  parameter changes), both the learner's and a rollout worker's initial ones. The
  ``td_error_mean`` column stays |Q(s, a) - sum_i z_i m_i|, as dqn's and qr_dqn's.
- Adam's epsilon 0.01 / batch size (the paper's 0.01/32, CleanRL's; ``--c51_adam_eps``); no
  gradient clipping (CleanRL's; ``--max_grad_norm`` N clips as dqn's).

``--dueling`` gives a value and an advantage stream of logits per atom, V + A - mean_a A, the
softmax after (Rainbow's); ``--exploration noisy`` noisy layers (models/noisy.py), as dqn's.
With all of them (``--dueling --double_q --exploration noisy --prioritized_replay --n_step 3``)
this is Rainbow's agent.
"""
import argparse
import math

import numpy as np
import torch
from torch import nn

from core.argtypes import positive_float, positive_int
from core.errors import ConfigError
from models import register_model
from models.dqn import DQNModel, numpy_trunk_and_heads, trunk_and_linear
from models.encoders import Flatten, make_encoder
from models.sac import frozen_copy


def atoms_count(text):
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 2 (the atoms include both ends)")
    return value


def categorical_projection(rewards, discounts, probabilities, support):
    """The paper's projection of the distribution ``probabilities`` [B, N] on the atoms
    ``support`` [N], moved to R + discount z and clipped to the support's ends, back onto the
    atoms: [B, N], each row summing to its input's sum. ``rewards`` and ``discounts`` [B]
    (discount 0 at a terminal state: all the mass on the atoms beside R)."""
    v_min, v_max, n = support[0], support[-1], support.shape[0]
    delta = (v_max - v_min) / (n - 1)
    moved = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support).clamp(v_min, v_max)
    # (clamped again: rounding may put an atom at the end a hair past N - 1)
    b = ((moved - v_min) / delta).clamp(0, n - 1)
    lower, upper = b.floor(), b.ceil()
    # where Tz_j falls on an atom, lower == upper and the two shares below would both be 0:
    # all the mass goes to that atom then
    to_lower = probabilities * (upper - b + (lower == upper).to(b.dtype))
    to_upper = probabilities * (b - lower)
    projected = torch.zeros_like(probabilities)
    projected.scatter_add_(1, lower.long(), to_lower)
    projected.scatter_add_(1, upper.long(), to_upper)
    return projected


def check_support(args):
    if not (math.isfinite(args.v_min) and math.isfinite(args.v_max) and args.v_min < args.v_max):
        raise ConfigError(
            f"--v_min {args.v_min} and --v_max {args.v_max}: c51's atoms span [v_min, v_max], "
            f"so both must be finite and --v_min below --v_max. Choose them to hold the returns the env can give "
            f"(CartPole-v1 at gamma 0.99: 0 to 100; the paper's Atari: -10 to 10 on clipped "
            f"rewards); a return outside is counted at the nearer end.")


class CategoricalNetwork(nn.Module):
    """encoder -> ReLU MLP -> N logits per action; ``forward`` gives the Q values (the
    distributions' means, [B, A]) so that every acting path of DQN takes it as it is,
    ``log_probabilities`` the distributions [B, A, N] as log p."""

    def __init__(self, encoder, sizes, num_actions, support, dueling, noisy_sigma0=None):
        super().__init__()
        self.encoder = encoder
        self.trunk, linear = trunk_and_linear(encoder.features_dim, sizes, noisy_sigma0)
        width = sizes[-1] if sizes else encoder.features_dim
        n_atoms = len(support)
        self.num_actions, self.n_atoms, self.dueling = num_actions, n_atoms, dueling
        # from the flags, so not in state_dict: weights and checkpoints carry parameters only
        self.register_buffer("support", torch.as_tensor(support, dtype=torch.float32),
                             persistent=False)
        if dueling:
            self.value = linear(width, n_atoms)
            self.advantage = linear(width, num_actions * n_atoms)
        else:
            self.q = linear(width, num_actions * n_atoms)

    def logits(self, obs):
        latent = self.trunk(self.encoder(obs))
        shape = (-1, self.num_actions, self.n_atoms)
        if not self.dueling:
            return self.q(latent).view(shape)
        advantage = self.advantage(latent).view(shape)
        return (self.value(latent).unsqueeze(1) + advantage
                - advantage.mean(1, keepdim=True))

    def log_probabilities(self, obs):
        """log p_i(s, a), [B, A, N], in float32 (under bf16 autocast too)."""
        return self.logits(obs).float().log_softmax(-1)

    def forward(self, obs):
        return (self.log_probabilities(obs).exp() * self.support).sum(-1)


class NumpyCategoricalQ:
    """CategoricalNetwork's Q values in numpy on vectors, for acting (models/numpy_mlp.py)."""

    def __init__(self, trunk, heads, shape, support):
        self.trunk, self.heads, self.shape, self.support = trunk, heads, shape, support

    @classmethod
    def of(cls, network):
        if type(network) is not CategoricalNetwork or not isinstance(network.encoder, Flatten):
            return None
        parts = numpy_trunk_and_heads(network)
        return None if parts is None else cls(
            *parts, (network.num_actions, network.n_atoms), network.support.numpy().copy())

    def __call__(self, obs):
        latent = self.trunk(obs) if self.trunk is not None else obs
        if len(self.heads) == 1:
            logits = self.heads[0](latent).reshape(len(obs), *self.shape)
        else:
            value, advantage = (head(latent) for head in self.heads)
            advantage = advantage.reshape(len(obs), *self.shape)
            logits = value[:, None] + advantage - advantage.mean(1, keepdims=True)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        return (weights @ self.support) / weights.sum(-1)


@register_model("c51")
class C51Model(DQNModel):
    """DQN with a categorical distribution of the return per action on fixed atoms and the
    cross-entropy to its projected target."""
    update_graph_safe = True

    @staticmethod
    def add_args(parser):
        DQNModel.add_args(parser)
        # CleanRL's c51.py clips no gradients; the paper neither
        parser.set_defaults(max_grad_norm=0.0)
        parser.add_argument("--n_atoms", type=atoms_count, default=51,
                            help="atoms of each action's return distribution, evenly spaced "
                                 "from --v_min to --v_max (default: %(default)s, the paper's)")
        parser.add_argument("--v_min", type=float, default=-10.0,
                            help="the lowest atom (default: %(default)s, the paper's for "
                                 "Atari's clipped rewards)")
        parser.add_argument("--v_max", type=float, default=10.0,
                            help="the highest atom (default: %(default)s)")
        parser.add_argument("--c51_adam_eps", type=positive_float, default=None,
                            help="Adam's epsilon (default: 0.01 / --batch_size, the paper's "
                                 "0.01/32 and CleanRL's)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.numpy_q = None if self.layout.structured else NumpyCategoricalQ.of(self.q_net)

    def build_networks(self, args):
        check_support(args)
        encoder = make_encoder(args, self.observation_space)
        support = np.linspace(args.v_min, args.v_max, args.n_atoms)
        self.q_net = CategoricalNetwork(encoder, args.dqn_hidden_sizes, self.num_actions,
                                        support, args.dueling, self.noisy_sigma0(args))
        self.q_target = frozen_copy(self.q_net)

    @torch.no_grad()
    def target_distribution(self, rewards, next_obs, terminated, discounts):
        """m, the target network's distribution at (s', a*) moved by R + gamma^k (1 -
        terminated) z and projected on the atoms: [B, N] (module docstring)."""
        next_probabilities = self.q_target.log_probabilities(next_obs).exp()
        support = self.q_target.support
        chooser = (self.q_net(next_obs).float() if self.args.double_q
                   else (next_probabilities * support).sum(-1))
        best = self.masked(chooser, next_obs).argmax(1)
        chosen = next_probabilities[torch.arange(len(best), device=best.device), best]
        return categorical_projection(rewards, discounts * (1.0 - terminated), chosen, support)

    @torch.no_grad()
    def targets(self, rewards, next_obs, terminated, discounts):
        """The target distribution's mean, [B] (DQN's y)."""
        m = self.target_distribution(rewards, next_obs, terminated, discounts)
        return (m * self.q_target.support).sum(-1)

    def log_probabilities_taken(self, obs, actions):
        """log p_i(s, a) of the online network for the actions taken: [B, N]."""
        log_p = self.q_net.log_probabilities(obs)
        return log_p[torch.arange(len(actions), device=actions.device), actions]

    def cross_entropies(self, obs, actions, rewards, next_obs, terminated, discounts):
        """(-sum_i m_i log p_i(s, a) per row [B], log p(s, a) [B, N], m [B, N])."""
        m = self.target_distribution(rewards, next_obs, terminated, discounts)
        log_p = self.log_probabilities_taken(obs, actions)
        return -(m * log_p).sum(-1), log_p, m

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights):
        """The importance-weighted cross-entropy, statistics, and each row's cross-entropy for
        its priority (models/base.py ``ReplayModelSteps``)."""
        rows, log_p, m = self.cross_entropies(obs, actions, rewards, next_obs, terminated,
                                              discounts)
        loss = (weights * rows).mean()
        support = self.q_net.support
        q = (log_p.detach().exp() * support).sum(-1)
        td_errors = (q - (m * support).sum(-1)).abs()
        return loss, {"q_loss": loss.detach(), "q_mean": q.mean(),
                      "td_error_mean": td_errors.mean()}, rows.detach()

    @torch.no_grad()
    def td_errors(self, batch):
        """Each transition's cross-entropy, numpy [B]: a rollout worker's initial priorities,
        the learner's measure (module docstring)."""
        obs, actions, rewards, next_obs, terminated, discounts, _ = self.unpack(batch)
        rows, _, _ = self.cross_entropies(obs, actions, rewards, next_obs, terminated,
                                          discounts)
        return rows.cpu().numpy()

    def configure_optimizer(self):
        eps = self.args.c51_adam_eps or 0.01 / self.args.batch_size
        return torch.optim.Adam(self.q_net.parameters(), lr=self.args.dqn_lr, eps=eps,
                                fused=True)
