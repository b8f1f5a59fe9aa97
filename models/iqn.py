"""iqn: Implicit Quantile Networks (Dabney et al. 2018, "Implicit Quantile Networks for
Distributional Reinforcement Learning", arXiv:1806.06923) for Discrete actions, with Dopamine's
ImplicitQuantileAgent as the reference for the defaults and the form.

DQN (models/dqn.py: encoders, n-step returns, prioritized replay, target updates, epsilon
schedules or noisy networks, masks, the Ape-X shape) whose network maps a state and a fraction
tau in (0, 1) to the tau-quantile of the return of every action, Z_tau(s, a), instead of QR-DQN's
(models/qr_dqn.py) fixed set of N quantiles:

- Network: psi(s), the encoder and all of --dqn_hidden_sizes but the last; phi(tau) =
  ReLU(Linear(cos(pi i tau), i = 1..--quantile_embedding_dim)), as wide as psi; their product,
  then the last hidden layer and the head (one value per action; --dueling: a value and an
  advantage stream per tau). The paper's Atari net is this with psi the convolutions.
- Loss: tau_1..tau_N ~ U(0, 1) per row (--num_tau_samples), tau'_1..tau'_N' for the target
  (--num_tau_prime_samples), y_j = R + gamma^k (1 - terminated) Z^target_tau'_j(s', a*); the
  quantile Huber loss over every pair, u = y_j - Z_tau_i(s, a): |tau_i - 1{u < 0}| Huber_1(u),
  summed over i, averaged over j (the paper's eq. 3 with kappa 1; models/qr_dqn.py
  quantile_huber_loss at these fractions), then the replay's importance-weighted batch mean.
- Q(s, a), for acting, a* (the target network's; --double_q: the online one's, among the allowed
  actions), the workers' first priorities and the exported policy: the mean of Z at the K
  fractions (2k - 1) / 2K (--num_quantile_samples; the midpoint rule). The paper and Dopamine
  sample the K fractions; fixed ones estimate the same mean without that noise, so a policy acts
  the same on the same weights and exports as a plain function.
- The learner's new priorities (and ``td_error_mean``): |mean_i Z_tau_i(s, a) - mean_j y_j| at the
  update's drawn fractions, the loss's own terms (no third pass of the network).
- The learner's fractions are drawn outside the update (it stays graph-safe: the same kernels on
  tensors of the same shapes), from a generator keyed by a seed in the model's state_dict and
  the update's number (core/seeding.py noise_draw): a resumed learner draws what the straight
  run drew.
- Adam's epsilon 0.01 / batch size (the paper's 0.01/32; ``--iqn_adam_eps``), no gradient
  clipping (Dopamine's; ``--max_grad_norm`` N clips as dqn's).
"""
import math

import numpy as np
import torch
from torch import nn

from core.argtypes import positive_float, positive_int
from models import register_model
from models.dqn import DQNModel, numpy_mlp, trunk_and_linear
from models.encoders import Flatten, make_encoder
from models.noisy import keyed_generator
from models.qr_dqn import quantile_fractions, quantile_huber_loss
from models.sac import frozen_copy, relu_mlp


class ImplicitQuantileNetwork(nn.Module):
    """Z_tau(s, a) for fractions tau (module docstring); ``forward`` gives Q, the mean at the
    fixed acting fractions ([B, A]), so that every acting path of DQN takes it as it is."""

    def __init__(self, encoder, sizes, num_actions, embedding_dim, acting_fractions, dueling,
                 noisy_sigma0=None):
        super().__init__()
        self.encoder = encoder
        before, after = list(sizes[:-1]), list(sizes[-1:])
        self.trunk, linear = trunk_and_linear(encoder.features_dim, before, noisy_sigma0)
        width = before[-1] if before else encoder.features_dim
        # phi: as the paper's, a plain layer (noisy networks' noise is in the layers after it)
        self.tau_embedding = nn.Sequential(nn.Linear(embedding_dim, width), nn.ReLU())
        self.head_trunk = relu_mlp(width, after, linear=linear)
        head_width = after[-1] if after else width
        self.num_actions, self.dueling = num_actions, dueling
        if dueling:
            self.value = linear(head_width, 1)
            self.advantage = linear(head_width, num_actions)
        else:
            self.q = linear(head_width, num_actions)
        self.register_buffer("frequencies", math.pi * torch.arange(
            1, embedding_dim + 1, dtype=torch.float32), persistent=False)
        self.register_buffer("acting_fractions", quantile_fractions(acting_fractions),
                             persistent=False)

    def quantiles(self, obs, taus):
        """Z at ``taus`` ([B, N], or [N] for every row): [B, A, N]."""
        return self.quantiles_of_state(self.trunk(self.encoder(obs)), taus)

    def quantiles_and_q(self, obs, taus):
        """(Z at ``taus`` [B, A, N], Q [B, A]) from one pass of psi: the target's y takes both
        at s', and psi is most of the cost with a CNN encoder."""
        psi = self.trunk(self.encoder(obs))
        taus = taus if taus.dim() == 2 else taus.unsqueeze(0).expand(len(psi), -1)
        acting = self.acting_fractions.unsqueeze(0).expand(len(psi), -1)
        z = self.quantiles_of_state(psi, torch.cat([taus, acting], 1))
        return z[..., :taus.shape[1]], z[..., taus.shape[1]:].mean(-1)

    def quantiles_of_state(self, psi, taus):
        """Z at ``taus`` of the state embedding psi(s) [B, W]."""
        taus = taus if taus.dim() == 2 else taus.unsqueeze(0)
        phi = self.tau_embedding(torch.cos(taus.unsqueeze(-1) * self.frequencies))  # [B|1, N, W]
        latent = self.head_trunk(psi.unsqueeze(1) * phi)                    # [B, N, W']
        if self.dueling:
            advantage = self.advantage(latent)
            z = self.value(latent) + advantage - advantage.mean(-1, keepdim=True)
        else:
            z = self.q(latent)
        return z.transpose(1, 2)

    def forward(self, obs):
        return self.quantiles(obs, self.acting_fractions).mean(-1)


class NumpyImplicitQ:
    """ImplicitQuantileNetwork's Q values in numpy on vectors, for acting (models/numpy_mlp.py
    says why): the product of psi and phi at the acting fractions through the head, for all K
    fractions of all rows at once."""

    def __init__(self, network, trunk, embedding, head_trunk, heads):
        self.network, self.trunk, self.embedding = network, trunk, embedding
        self.head_trunk, self.heads = head_trunk, heads

    @classmethod
    def of(cls, network):
        if type(network) is not ImplicitQuantileNetwork or not isinstance(network.encoder,
                                                                          Flatten):
            return None
        trunk = numpy_mlp(network.trunk) if len(network.trunk) else None
        head_trunk = numpy_mlp(network.head_trunk) if len(network.head_trunk) else None
        embedding = numpy_mlp(network.tau_embedding)
        heads = [numpy_mlp(nn.Sequential(head)) for head in
                 ((network.value, network.advantage) if network.dueling else (network.q,))]
        if ((len(network.trunk) and trunk is None) or embedding is None or None in heads
                or (len(network.head_trunk) and head_trunk is None)):
            return None
        return cls(network, trunk, embedding, head_trunk, heads)

    def __call__(self, obs):
        net = self.network
        psi = self.trunk(obs) if self.trunk is not None else obs                  # [B, W]
        cosines = np.cos(net.acting_fractions.numpy()[:, None] * net.frequencies.numpy())
        phi = self.embedding(cosines)                                             # [K, W]
        rows, fractions = len(obs), len(phi)
        latent = (psi[:, None, :] * phi[None]).reshape(rows * fractions, -1)
        if self.head_trunk is not None:
            latent = self.head_trunk(latent)
        if len(self.heads) == 1:
            z = self.heads[0](latent)
        else:
            advantage = self.heads[1](latent)
            z = self.heads[0](latent) + advantage - advantage.mean(-1, keepdims=True)
        return z.reshape(rows, fractions, -1).mean(1)


@register_model("iqn")
class IQNModel(DQNModel):
    """DQN whose network gives the return's quantile at any fraction, learned at sampled ones
    with the quantile Huber loss."""
    update_graph_safe = True

    @staticmethod
    def add_args(parser):
        DQNModel.add_args(parser)
        parser.set_defaults(max_grad_norm=0.0)  # Dopamine's IQN clips no gradients
        parser.add_argument("--num_tau_samples", type=positive_int, default=64,
                            help="N: fractions drawn per row for the online network's quantiles "
                                 "in the loss (default: %(default)s; the paper's: 64)")
        parser.add_argument("--num_tau_prime_samples", type=positive_int, default=64,
                            help="N': fractions drawn per row for the target's quantiles "
                                 "(default: %(default)s; the paper's: 64)")
        parser.add_argument("--num_quantile_samples", type=positive_int, default=32,
                            help="K: Q is the mean of the quantiles at the fractions "
                                 "(2k - 1) / 2K, for acting, the next action of the target and "
                                 "the exported policy (default: %(default)s; the paper's K: 32)")
        parser.add_argument("--quantile_embedding_dim", type=positive_int, default=64,
                            help="cosines cos(pi i tau), i = 1..n, that phi(tau) embeds "
                                 "(default: %(default)s; the paper's: 64)")
        parser.add_argument("--iqn_adam_eps", type=positive_float, default=None,
                            help="Adam's epsilon (default: 0.01 / --batch_size, the paper's "
                                 "0.01/32)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.numpy_q = None if self.layout.structured else NumpyImplicitQ.of(self.q_net)
        # the learner's fractions are keyed by this seed (in state_dict: a resumed learner has
        # it) and the update's number
        self.register_buffer("tau_seed", torch.randint(0, 2**62, ()))

    def build_networks(self, args):
        encoder = make_encoder(args, self.observation_space)
        self.q_net = ImplicitQuantileNetwork(
            encoder, args.dqn_hidden_sizes, self.num_actions, args.quantile_embedding_dim,
            args.num_quantile_samples, args.dueling, self.noisy_sigma0(args))
        self.q_target = frozen_copy(self.q_net)

    def draw_fractions(self, rows, version):
        """(tau [rows, N], tau' [rows, N']) of the update after weights ``version``, on the
        model's device."""
        args = self.args
        n, n_prime = args.num_tau_samples, args.num_tau_prime_samples
        draws = torch.rand((rows, n + n_prime), generator=keyed_generator(int(self.tau_seed),
                                                                         version))
        draws = draws.to(self.device, non_blocking=True)
        return draws[:, :n], draws[:, n:]

    def update_inputs(self, batch):
        inputs = super().update_inputs(batch)
        return (*inputs, *self.draw_fractions(len(inputs[1]), self.weights_version))

    @torch.no_grad()
    def target_quantiles(self, rewards, next_obs, terminated, discounts, next_taus):
        """y_j = R + gamma^k (1 - terminated) Z^target_tau'_j(s', a*): [B, N'], a* by Q (the
        target network's, or with --double_q the online one's) among the allowed actions."""
        z, q = self.q_target.quantiles_and_q(next_obs, next_taus)
        q = self.q_net(next_obs) if self.args.double_q else q
        best = self.masked(q.float(), next_obs).argmax(1)
        z = z.float()
        chosen = z[torch.arange(len(best), device=best.device), best]
        return rewards.unsqueeze(1) + (discounts * (1.0 - terminated)).unsqueeze(1) * chosen

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights, taus,
                    next_taus):
        """The importance-weighted quantile Huber loss at the drawn fractions, statistics, and
        |mean Z - mean y| per transition (models/base.py ``ReplayModelSteps``)."""
        y = self.target_quantiles(rewards, next_obs, terminated, discounts, next_taus)
        z = self.q_net.quantiles(obs, taus).float()
        current = z[torch.arange(len(actions), device=actions.device), actions]   # [B, N]
        loss = (weights * quantile_huber_loss(current, y, taus)).mean()
        q = current.detach().mean(1)
        td_errors = (q - y.mean(1)).abs()
        return loss, {"q_loss": loss.detach(), "q_mean": q.mean(),
                      "td_error_mean": td_errors.mean()}, td_errors

    def configure_optimizer(self):
        eps = self.args.iqn_adam_eps or 0.01 / self.args.batch_size
        return torch.optim.Adam(self.q_net.parameters(), lr=self.args.dqn_lr, eps=eps,
                                fused=True)
