"""qr_dqn: Quantile Regression DQN (Dabney et al. 2017, "Distributional Reinforcement Learning
with Quantile Regression", arXiv:1710.10044) for Discrete actions, with sb3-contrib's QRDQN as
the reference for the defaults and the exact form.

DQN (models/dqn.py: the encoders, n-step returns, prioritized replay, target updates, epsilon
schedules, masks, the Ape-X shape) whose network gives, for each action, N quantiles
theta_1..theta_N of the return's distribution at the fractions tau_i = (2i - 1) / 2N
(``--n_quantiles``) instead of one mean. Its Q value, the mean of the N, is what acting, the
exported policy and the greedy choice of the next action use.

- Target distribution: y_j = R + gamma^k (1 - terminated) theta_j^target(s', a*), j = 1..N,
  a* = argmax_a of the target network's Q (the paper's and sb3-contrib's; ``--double_q``: the
  online network's, as dqn's), among the actions the mask of s' allows.
- Loss: the quantile Huber loss over every pair (i, j), u = y_j - theta_i(s, a):
  |tau_i - 1{u < 0}| * Huber_kappa(u), kappa 1, summed over the current quantiles i and
  averaged over the target ones j (sb3-contrib's ``sum_over_quantiles=True``), per row, then
  the replay's importance-weighted mean over the batch.
- Adam's epsilon 0.01 / batch size (the paper's 0.01/32, sb3-contrib's default;
  ``--qr_adam_eps``); no gradient clipping (sb3-contrib's default; ``--max_grad_norm`` N
  clips as dqn's).
- |TD error| for priorities and the ``td_error_mean`` column: |Q(s, a) - mean_j y_j|.

``--dueling`` gives a value and an advantage stream per quantile, theta = V + A - mean_a A;
``--exploration noisy`` noisy layers (models/noisy.py), as dqn's.
"""
import torch
from torch import nn

from core.argtypes import positive_float, positive_int
from models import register_model
from models.dqn import DQNModel, numpy_trunk_and_heads, trunk_and_linear
from models.encoders import Flatten, make_encoder
from models.sac import frozen_copy


def quantile_fractions(n, device=None):
    """tau_i = (2i - 1) / 2N, i = 1..N: the midpoints of N equal slices of [0, 1]."""
    return (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n


def quantile_huber_loss(current, target, tau=None):
    """Per row [B]: sum_i mean_j |tau_i - 1{u_ij < 0}| Huber(u_ij), u_ij = target_j - current_i,
    ``current`` [B, N] (the online quantiles of the taken action) at the fractions ``tau``
    ([B, N] or [1, N]; default: QR-DQN's fixed (2i - 1) / 2N), ``target`` [B, N'] (no gradient
    reaches it), Huber with kappa 1. The gradient reaches ``current`` only
    (``QuantileHuber`` below)."""
    tau = (quantile_fractions(current.shape[-1], current.device).view(1, -1, 1) if tau is None
           else tau.unsqueeze(-1))
    return QuantileHuber.apply(current, target.detach(), tau)


class QuantileHuber(torch.autograd.Function):
    """The quantile Huber loss per row with its gradient taken in the forward pass: the pairs
    [B, N, N'] are the cost (TQC's 50 x 46 atoms, QR-DQN's 200 x 200), and autograd would keep
    several of them for a backward pass of as many elementwise passes again. Here one [B, N]
    tensor is kept: 2.7x faster than autograd at TQC's [256, 50, 46] and 4.9x at QR-DQN's
    [32, 200, 200], forward and backward, on one thread of an AVX-512 EPYC.

    With c = clamp(u, -1, 1): Huber(u) = c (u - c / 2), and its slope in u is c, so the loss of
    a pair is w c (u - c / 2) with w = |tau - 1{u < 0}|, and d row / d current_i =
    -mean_j w_ij c_ij."""

    @staticmethod
    def forward(ctx, current, target, tau):
        u = target.unsqueeze(-2) - current.unsqueeze(-1)          # [B, N, N']
        clamped = u.clamp(-1.0, 1.0)
        slope = torch.where(u < 0, 1.0 - tau, tau).mul_(clamped)  # w c: d pair / d u
        rows = (slope * u.sub_(clamped, alpha=0.5)).sum(-2).mean(-1)
        ctx.save_for_backward(slope.mean(-1))
        ctx.dtype = current.dtype  # (bf16 quantiles against fp32 targets: the pairs are fp32)
        return rows

    @staticmethod
    def backward(ctx, grad_rows):
        (mean_slope,) = ctx.saved_tensors
        return (-grad_rows.unsqueeze(-1) * mean_slope).to(ctx.dtype), None, None


class QuantileNetwork(nn.Module):
    """encoder -> ReLU MLP -> N quantiles per action; ``forward`` gives their mean (the Q
    values, [B, A]) so that every acting path of DQN takes it as it is, ``quantiles`` the
    distribution [B, A, N]."""

    def __init__(self, encoder, sizes, num_actions, n_quantiles, dueling, noisy_sigma0=None):
        super().__init__()
        self.encoder = encoder
        self.trunk, linear = trunk_and_linear(encoder.features_dim, sizes, noisy_sigma0)
        width = sizes[-1] if sizes else encoder.features_dim
        self.num_actions, self.n_quantiles, self.dueling = num_actions, n_quantiles, dueling
        if dueling:
            self.value = linear(width, n_quantiles)
            self.advantage = linear(width, num_actions * n_quantiles)
        else:
            self.q = linear(width, num_actions * n_quantiles)

    def quantiles(self, obs):
        latent = self.trunk(self.encoder(obs))
        shape = (-1, self.num_actions, self.n_quantiles)
        if not self.dueling:
            return self.q(latent).view(shape)
        advantage = self.advantage(latent).view(shape)
        return (self.value(latent).unsqueeze(1) + advantage
                - advantage.mean(1, keepdim=True))

    def forward(self, obs):
        return self.quantiles(obs).mean(-1)


class NumpyQuantileQ:
    """QuantileNetwork's Q values in numpy on vectors, for acting (models/numpy_mlp.py)."""

    def __init__(self, trunk, heads, shape):
        self.trunk, self.heads, self.shape = trunk, heads, shape

    @classmethod
    def of(cls, network):
        if type(network) is not QuantileNetwork or not isinstance(network.encoder, Flatten):
            return None
        parts = numpy_trunk_and_heads(network)
        return None if parts is None else cls(*parts, (network.num_actions, network.n_quantiles))

    def __call__(self, obs):
        latent = self.trunk(obs) if self.trunk is not None else obs
        if len(self.heads) == 1:
            return self.heads[0](latent).reshape(len(obs), *self.shape).mean(-1)
        value, advantage = (head(latent) for head in self.heads)
        advantage = advantage.reshape(len(obs), *self.shape)
        # the mean over quantiles of V + A - mean_a A: mean V + mean A - mean_a mean A
        a = advantage.mean(-1)
        return value.mean(-1, keepdims=True) + a - a.mean(-1, keepdims=True)


@register_model("qr_dqn")
class QRDQNModel(DQNModel):
    """DQN with N quantiles of the return per action and the quantile Huber loss."""
    update_graph_safe = True

    @staticmethod
    def add_args(parser):
        DQNModel.add_args(parser)
        # sb3-contrib's QRDQN clips no gradients (its max_grad_norm None); the paper neither
        parser.set_defaults(max_grad_norm=0.0)
        parser.add_argument("--n_quantiles", type=positive_int, default=200,
                            help="quantiles of the return's distribution per action, at the "
                                 "fractions (2i - 1) / 2N (default: %(default)s; the paper's "
                                 "and sb3-contrib's: 200)")
        parser.add_argument("--qr_adam_eps", type=positive_float, default=None,
                            help="Adam's epsilon (default: 0.01 / --batch_size, the paper's "
                                 "0.01/32 and sb3-contrib's)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.numpy_q = None if self.layout.structured else NumpyQuantileQ.of(self.q_net)

    def build_networks(self, args):
        encoder = make_encoder(args, self.observation_space)
        self.q_net = QuantileNetwork(encoder, args.dqn_hidden_sizes, self.num_actions,
                                     args.n_quantiles, args.dueling, self.noisy_sigma0(args))
        self.q_target = frozen_copy(self.q_net)

    @torch.no_grad()
    def target_quantiles(self, rewards, next_obs, terminated, discounts):
        """y_j = R + gamma^k (1 - terminated) theta_j^target(s', a*): [B, N] (module
        docstring), a* among the allowed actions."""
        next_quantiles = self.q_target.quantiles(next_obs).float()
        chooser = (self.q_net(next_obs).float() if self.args.double_q
                   else next_quantiles.mean(-1))
        best = self.masked(chooser, next_obs).argmax(1)
        chosen = next_quantiles[torch.arange(len(best), device=best.device), best]
        return rewards.unsqueeze(1) + (discounts * (1.0 - terminated)).unsqueeze(1) * chosen

    @torch.no_grad()
    def targets(self, rewards, next_obs, terminated, discounts):
        """The target distribution's mean, [B] (DQN's y, for |TD errors|)."""
        return self.target_quantiles(rewards, next_obs, terminated, discounts).mean(1)

    def quantiles_taken(self, obs, actions):
        """theta_i(s, a) of the online network for the actions taken: [B, N]."""
        quantiles = self.q_net.quantiles(obs).float()
        return quantiles[torch.arange(len(actions), device=actions.device), actions]

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights):
        """The importance-weighted quantile Huber loss, statistics, and |Q - mean y| per
        transition (models/base.py ``ReplayModelSteps``)."""
        y = self.target_quantiles(rewards, next_obs, terminated, discounts)
        current = self.quantiles_taken(obs, actions)
        loss = (weights * quantile_huber_loss(current, y)).mean()
        q = current.detach().mean(1)
        td_errors = (q - y.mean(1)).abs()
        return loss, {"q_loss": loss.detach(), "q_mean": q.mean(),
                      "td_error_mean": td_errors.mean()}, td_errors

    def configure_optimizer(self):
        eps = self.args.qr_adam_eps or 0.01 / self.args.batch_size
        return torch.optim.Adam(self.q_net.parameters(), lr=self.args.dqn_lr, eps=eps,
                                fused=True)
