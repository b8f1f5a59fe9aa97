"""Noisy networks for exploration (Fortunato et al. 2018, "Noisy Networks for Exploration",
arXiv:1706.10295), the factorised Gaussian form that Rainbow uses.

A NoisyLinear layer's weight is mu_w + sigma_w * (f(eps_out) f(eps_in)^T) and its bias
mu_b + sigma_b * f(eps_out), with eps_in, eps_out standard normal vectors (one per input and
output unit: the factorised form, p + q draws rather than p x q) and f(x) = sign(x) sqrt|x|.
mu and sigma are learned; mu starts uniform in +-1/sqrt(p), sigma at sigma_0 / sqrt(p) (the
paper's factorised initialisation, sigma_0 = 0.5), p the layer's inputs. The network explores
by its own learned noise: DQN with ``--exploration noisy`` acts greedily on noisy weights.

The noise vectors are buffers outside state_dict (each process draws its own: weights handed to
a rollout worker do not carry the learner's noise) written only by ``resample_noise``, outside
the forward pass: the forward pass reads them, so an update stays the same kernels on the same
tensors every call. ``resample_noise`` draws from a generator it is given (DQN keys the
learner's by the update's number, so a resumed run draws what the straight run drew).
``noise_disabled`` gives the mean weights (mu), for greedy evaluation and the export.
"""
import contextlib
import copy
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from core.seeding import noise_draw
from models.numpy_mlp import NumpyMLP


SMALL_BATCH = 16


def _scaled(x):
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise on its weight and bias (module docstring)."""

    def __init__(self, in_features, out_features, sigma0=0.5):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.noise_enabled = True
        self.resample()

    @torch.no_grad()
    def resample(self, generator=None):
        """New factorised noise, in place (f of standard normals, drawn on the CPU from
        ``generator``, torch's own when None)."""
        self.eps_in.copy_(_scaled(torch.randn(self.in_features, generator=generator)))
        self.eps_out.copy_(_scaled(torch.randn(self.out_features, generator=generator)))

    def forward(self, x):
        if not self.noise_enabled:
            return F.linear(x, self.weight_mu, self.bias_mu)
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        if x.shape[0] <= SMALL_BATCH and not torch.is_grad_enabled():
            # acting on a few rows: two products beat building the noisy weight (measured on
            # a 256x256 layer, one row: 24 against 60 us); a learning batch the other way
            return (F.linear(x, self.weight_mu) + F.linear(x * self.eps_in, self.weight_sigma)
                    * self.eps_out + bias)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return F.linear(x, weight, bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"


def noisy_layers(module):
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def resample_noise(*modules, generator=None):
    for module in modules:
        for layer in noisy_layers(module):
            layer.resample(generator)


def keyed_generator(*key):
    """A CPU generator seeded by a tuple of integers (the same key, the same draws;
    core/seeding.py noise_draw)."""
    return torch.Generator().manual_seed(noise_draw(*key))


@contextlib.contextmanager
def noise_disabled(module):
    """The mean weights inside the block (greedy evaluation), the noise again after it."""
    layers = noisy_layers(module)
    before = [layer.noise_enabled for layer in layers]
    for layer in layers:
        layer.noise_enabled = False
    try:
        yield module
    finally:
        for layer, state in zip(layers, before):
            layer.noise_enabled = state


def without_noise(module):
    """``module`` itself when it has no noisy layer, else a copy that acts on the mean weights
    for good (what an exported policy carries)."""
    if not noisy_layers(module):
        return module
    copied = copy.deepcopy(module)
    for layer in noisy_layers(copied):
        layer.noise_enabled = False
    return copied


class NumpyNoisyMLP(NumpyMLP):
    """NumpyMLP (models/numpy_mlp.py) for NoisyLinear layers, on views of the parameters and
    of the noise (resample_noise writes in place): y = x mu_w^T + ((x eps_in) sigma_w^T)
    eps_out + mu_b + sigma_b eps_out, or x mu_w^T + mu_b while the layer's noise is off."""

    layer = NoisyLinear

    @staticmethod
    def layer_tensors(m):
        return m.weight_mu, m.weight_sigma, m.bias_mu, m.bias_sigma, m.eps_in, m.eps_out

    @staticmethod
    def plan_step(m):
        mu_w, sigma_w, *rest = (t.detach().numpy() for t in NumpyNoisyMLP.layer_tensors(m))
        return (m, mu_w.T, sigma_w.T, *rest)

    def __call__(self, x):
        self.refresh()
        for step in self.plan:
            if not isinstance(step, tuple):
                x = step(x)
                continue
            layer, mu_t, sigma_t, mu_b, sigma_b, eps_in, eps_out = step
            if layer.noise_enabled:
                x = x @ mu_t + ((x * eps_in) @ sigma_t) * eps_out + (mu_b + sigma_b * eps_out)
            else:
                x = x @ mu_t + mu_b
        return np.asarray(x, dtype=np.float32)
