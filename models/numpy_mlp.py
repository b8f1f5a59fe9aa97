"""A plain MLP's forward pass in numpy, for acting.

A rollout worker acts on a few observations per env step. With slow envs (a simulator that
answers in milliseconds) every step starts with cold caches, and what a step costs is then
mostly the code it touches: measured on the project's 2-core machines, a 64x64 actor on one
observation took 48 us through torch warm but 473 us right after a 5 ms wait, against 38 and
250 us in numpy. At 16 workers x 200 steps/s that difference is most of a core. Learning (the
gradients) stays in torch; acting reads the very same memory through numpy views of the
parameters, so every in-place change (set_weights, an optimizer step, load_state_dict) is seen
at once. (Version counters would not do: the fused Adam step does not bump them.) Only a
parameter whose storage is replaced (``.to()``, assigning ``.data``) needs new views: its
address tells.
"""
import numpy as np
from torch import nn

ACTIVATIONS = {
    nn.Tanh: np.tanh,
    nn.ReLU: lambda x: np.maximum(x, 0.0),
    nn.ELU: lambda x: np.where(x > 0.0, x, np.expm1(x)),
}


def layer_norm_step(m):
    """An ``nn.LayerNorm`` over the last dimension as a numpy step, on views of its affine
    parameters: (x - mean) / sqrt(var + eps) * weight + bias, the variance biased as torch's."""
    weight = None if m.weight is None else m.weight.detach().numpy()
    bias = None if m.bias is None else m.bias.detach().numpy()
    eps = np.float32(m.eps)

    def step(x):
        centred = x - x.mean(-1, keepdims=True)
        y = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps)
        if weight is not None:
            y = y * weight
        return y if bias is None else y + bias
    return step


def is_last_dim_layer_norm(m):
    return isinstance(m, nn.LayerNorm) and len(m.normalized_shape) == 1


class NumpyMLP:
    """The forward pass of an ``nn.Sequential`` of Linear layers, LayerNorms over the features
    (models/pqn.py) and the activations above. A
    subclass for another layer kind (models/noisy.py NumpyNoisyMLP) gives ``layer``,
    ``layer_tensors`` and ``plan_step``, and applies its steps in ``__call__``."""

    #: the layer kind this forward pass computes
    layer = nn.Linear

    def __init__(self, module):
        self.module = module
        self.layers = list(module)
        # The tensor objects themselves (their storage may change, they do not): asking a
        # module for its attributes on every step costs more than the matrix products here.
        self.parameters = [t for m in self.layers if isinstance(m, self.layer)
                           for t in self.layer_tensors(m) if t is not None]
        self.parameters += [t for m in self.layers if is_last_dim_layer_norm(m)
                            for t in (m.weight, m.bias) if t is not None]
        self.seen = None
        self.plan = None

    @staticmethod
    def layer_tensors(m):
        return m.weight, m.bias

    @staticmethod
    def plan_step(m):
        """A layer's step: numpy views of its tensors (not copies)."""
        bias = (m.bias.detach().numpy() if m.bias is not None
                else np.zeros(m.out_features, dtype=np.float32))
        return m.weight.detach().numpy().T, bias

    @classmethod
    def of(cls, module):
        """A NumpyMLP for ``module``, or None when it is anything else than a plain MLP (a
        plugin's own network acts through torch)."""
        if not isinstance(module, nn.Sequential) or not len(module):
            return None
        if not all(isinstance(m, cls.layer) or type(m) in ACTIVATIONS
                   or is_last_dim_layer_norm(m) for m in module):
            return None
        return cls(module)

    def _addresses(self):
        return [p.data_ptr() for p in self.parameters]

    def refresh(self):
        """New views when a parameter's storage was replaced (CPU parameters only)."""
        addresses = self._addresses()
        if addresses == self.seen:
            return
        self.plan = [self.plan_step(m) if isinstance(m, self.layer)
                     else layer_norm_step(m) if is_last_dim_layer_norm(m)
                     else ACTIVATIONS[type(m)] for m in self.layers]
        self.seen = addresses

    def __call__(self, x):
        self.refresh()
        for step in self.plan:
            x = x @ step[0] + step[1] if isinstance(step, tuple) else step(x)
        return x


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
