"""Action heads for Discrete, MultiDiscrete and MultiBinary actions: the distribution a policy's
output layer parameterizes, with action masks (Box actions keep models/ppo.py's Gaussian).

    head = action_head(action_space)           # head.param_dim: width of the actor's output
    actions, log_prob = head.sample(params, mask)          # params: the actor's [B, param_dim]
    log_prob, entropy = head.log_prob(params, actions, mask), head.entropy(params, mask)

Everything is plain tensor arithmetic, no torch.distributions object: building one costs more
than a small actor's forward pass (models/ppo.py act_torch measures it), and a categorical is
only a log_softmax. Sampling is Gumbel-max, argmax(log p + G) with G = -log(Exponential(1)),
from torch's global generator, so a seed fixes it as it fixes the rest of torch.

**Masks** (core/spaces.py ACTION_MASK): a bool tensor [B, sum of the category counts] (a
MultiDiscrete's per-component masks concatenated in nvec's C order), True for a valid action.
A masked action gets a large *finite* negative logit (half the dtype's lowest value), not -inf:
log_softmax, the entropy and their gradients stay finite (-inf gives NaN through 0 * -inf and
through a row's max), and the masked logits get zero gradient from torch.where. Its probability
is then exactly 0 in float32, so the distribution is the one renormalized over valid actions;
the entropy leaves masked entries out explicitly (p * log p with p = 0 set to 0, not left to the
product). Sampling and argmax never choose a masked action while a row has a valid one (a row
with none is the env's bug: core/spaces.py rows_without_valid_action finds them).

Actions are category indices from 0 (a space's ``start`` is the env side's business, as the
observations' are in core/spaces.py); MultiDiscrete and MultiBinary actions have the space's
shape, flattened in C order for the output layer.
"""
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from core.errors import ConfigError


def masked_value(dtype):
    """The logit a masked action gets: finite, and far below any logit a network outputs."""
    return torch.finfo(dtype).min / 2


def _on(tensor, device):
    return tensor if tensor.device == device else tensor.to(device)


class ActionHead(nn.Module):
    """What a policy's output layer parameterizes. An nn.Module without parameters, so that its
    index tensors follow the model's ``.to(device)``; its state dict is empty."""

    param_dim: int              # width of the actor's output layer
    action_shape: tuple         # one env's action
    action_dtype: np.dtype      # the actions' numpy dtype
    takes_mask = True

    def sample(self, params, mask=None, deterministic=False):
        """(actions [B, *action_shape], their log-probabilities [B])."""
        raise NotImplementedError

    def log_prob(self, params, actions, mask=None):
        raise NotImplementedError

    def entropy(self, params, mask=None):
        raise NotImplementedError


class CategoricalHead(ActionHead):
    """Independent categoricals, one per component of ``nvec`` (Discrete: a single one); the
    log-probability and the entropy of an action are sums over its components.

    The K components are laid out as one [B, K, W] block (W = the largest count), so a
    MultiDiscrete costs one log_softmax, not one per component: when counts differ, the columns
    a component lacks are padding, masked like an invalid action."""

    def __init__(self, nvec, action_shape):
        super().__init__()
        nvec = [int(n) for n in np.asarray(nvec).reshape(-1)]
        self.nvec = tuple(nvec)
        self.param_dim = sum(nvec)
        self.action_shape = tuple(action_shape)
        self.action_dtype = np.dtype(np.int64)
        self.width = max(nvec)
        if len(set(nvec)) == 1:  # a reshape of the output is the block
            self.index = self.padding = None
        else:
            columns = np.arange(self.width)
            offsets = np.cumsum([0] + nvec[:-1])
            index = [offset + np.minimum(columns, n - 1) for offset, n in zip(offsets, nvec)]
            self.register_buffer("index", torch.as_tensor(np.stack(index)), persistent=False)
            self.register_buffer("padding", torch.as_tensor(np.stack(
                [columns < n for n in nvec])), persistent=False)  # True where a column is real

    def _block(self, flat):
        """[B, sum(nvec)] -> [B, K, W] (pad columns repeat a real one; ``valid`` hides them)."""
        if self.index is None:
            return flat.reshape(flat.shape[0], len(self.nvec), self.width)
        return flat[:, _on(self.index, flat.device)]

    def log_probs(self, params, mask=None):
        """(log-probabilities [B, K, W], the valid entries [B, K, W] or [K, W] or None)."""
        valid = None if self.padding is None else _on(self.padding, params.device)
        if mask is not None:
            mask = self._block(mask.bool())
            valid = mask if valid is None else mask & valid
        logits = self._block(params)
        if valid is not None:
            logits = torch.where(valid, logits, masked_value(logits.dtype))
        return torch.log_softmax(logits, -1), valid

    def _actions(self, indices):
        return indices.reshape(indices.shape[0], *self.action_shape)

    def sample(self, params, mask=None, deterministic=False):
        log_probs, valid = self.log_probs(params, mask)
        scores = log_probs if deterministic else \
            log_probs - torch.empty_like(log_probs).exponential_().log()
        if valid is not None:  # -inf: a Gumbel draw of +inf (an exponential of 0) cannot win
            scores = scores.masked_fill(~valid, float("-inf"))
        indices = scores.argmax(-1)
        log_prob = log_probs.gather(-1, indices.unsqueeze(-1)).squeeze(-1).sum(-1)
        return self._actions(indices), log_prob

    def log_prob(self, params, actions, mask=None):
        log_probs, _ = self.log_probs(params, mask)
        indices = actions.reshape(actions.shape[0], len(self.nvec), 1).long()
        return log_probs.gather(-1, indices).squeeze(-1).sum(-1)

    def entropy(self, params, mask=None):
        log_probs, valid = self.log_probs(params, mask)
        terms = log_probs.exp() * log_probs
        if valid is not None:
            terms = torch.where(valid, terms, 0.0)
        return -terms.sum((-2, -1))


class BernoulliHead(ActionHead):
    """One independent Bernoulli per bit, parameterized by its logit l: p(1) = sigmoid(l),
    log p(a) = a * l - softplus(l), entropy softplus(l) - l * sigmoid(l); sums over the bits.
    No masks: core/spaces.py gives MultiBinary actions none."""

    takes_mask = False

    def __init__(self, action_shape):
        super().__init__()
        self.action_shape = tuple(int(s) for s in np.atleast_1d(action_shape))
        self.param_dim = int(np.prod(self.action_shape))
        self.action_dtype = np.dtype(np.int8)

    @staticmethod
    def _refuse(mask):
        if mask is not None:
            raise ValueError("MultiBinary actions take no action mask (core/spaces.py "
                             "mask_segments): pass mask=None.")

    def sample(self, params, mask=None, deterministic=False):
        self._refuse(mask)
        if deterministic:
            bits = params > 0
        else:
            bits = torch.rand_like(params) < torch.sigmoid(params)
        actions = bits.to(torch.int8)
        log_prob = self.log_prob(params, actions)
        return actions.reshape(params.shape[0], *self.action_shape), log_prob

    def log_prob(self, params, actions, mask=None):
        self._refuse(mask)
        bits = actions.reshape(params.shape).to(params.dtype)
        return (bits * params - F.softplus(params)).sum(-1)

    def entropy(self, params, mask=None):
        self._refuse(mask)
        return (F.softplus(params) - params * torch.sigmoid(params)).sum(-1)


def action_head(action_space):
    """The ActionHead of ``action_space``: Discrete, MultiDiscrete or MultiBinary."""
    if isinstance(action_space, spaces.Discrete):
        return CategoricalHead([action_space.n], ())
    if isinstance(action_space, spaces.MultiDiscrete):
        return CategoricalHead(action_space.nvec, action_space.shape)
    if isinstance(action_space, spaces.MultiBinary):
        return BernoulliHead(action_space.shape)
    raise ConfigError(
        f"the action space {action_space} (a {type(action_space).__name__}) has no categorical "
        f"action head: models/distributions.py takes Discrete, MultiDiscrete and MultiBinary "
        f"actions, and Box actions take the Gaussian of models/ppo.py. Turn the actions into "
        f"one of these in an env wrapper, or write a model for this space.")
