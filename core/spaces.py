"""Structured observations: how ddrl carries any nesting of Box, Discrete, MultiDiscrete,
MultiBinary, Dict and Tuple from the env to the model, in one representation.

A **Box** observation space stays a plain numpy array everywhere (the fast path, unchanged).
Any other space is carried as an **observation tree**: a flat ``dict`` {leaf path: array}, one
entry per leaf of the space, in the space's own order. Paths join Dict keys and Tuple
positions with "/" ("image", "goal/achieved", "0/1"); a space that is a single non-Box leaf
(FrozenLake's Discrete) has the one path "obs". A batch of trees has the same leading
dimensions on every leaf: [E] from a group of envs, [T, E] in a fragment, [N] in a replay
buffer or a minibatch. Each leaf keeps a fixed dtype from the env to the model:

    Box            the space's dtype (uint8 images stay uint8: 4x less memory and transfer
                   than float32 in fragments, replay and Ray's object store)
    Discrete       int64, shape ()           (the index, minus the space's start)
    MultiDiscrete  int64, the space's shape  (each index minus its start)
    MultiBinary    int8, the space's shape

A flat dict of arrays is what Ray's object store, the checkpoint payload (core/run/state.py),
the replay buffer's columns and torch all take as they are; every path in ddrl that moves
observations treats an array and a tree alike through the functions below (``tree_map``,
``stack``, ``allocate``, ``assign``, ...). ``ObservationLayout.decode`` rebuilds the nested
dict/tuple gymnasium gives, for a model that wants it.

**Action masks**: a top-level Dict key ``action_mask`` (``ACTION_MASK``) holds, per env, 1 for
each valid action (Discrete n: [n]; MultiDiscrete: the concatenated [sum(nvec)]). It travels
with the observation (fragments, replay, checkpoints) and is not a feature: encoders leave it
out and the action distributions mask with it. gym_env puts a mask found under another key or
in ``info`` there (its --action_mask_key).

Spaces a model cannot take as arrays (Text, Graph, Sequence, OneOf) are a ConfigError naming
the key and the way out (drop the key, or turn it into an array in a wrapper), raised when the
env is first made.
"""
from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np
from gymnasium import spaces

from core.errors import ConfigError

ACTION_MASK = "action_mask"
ROOT = "obs"   # the path of a space that is one non-Box leaf
SEPARATOR = "/"


@dataclass(frozen=True)
class Leaf:
    """One leaf of an observation space: its path, space, array shape and dtype (per env)."""
    path: str
    space: spaces.Space
    shape: Tuple[int, ...]
    dtype: np.dtype
    keys: Tuple  # the Dict keys / Tuple positions that reach it from the root

    @property
    def is_mask(self):
        return self.path == ACTION_MASK

    @property
    def is_float(self):
        """A float Box: what observation normalization applies to."""
        return isinstance(self.space, spaces.Box) and np.issubdtype(self.dtype, np.floating)


def _leaf(path, space, keys):
    if isinstance(space, spaces.Box):
        return Leaf(path, space, tuple(space.shape), np.dtype(space.dtype), keys)
    if isinstance(space, spaces.Discrete):
        return Leaf(path, space, (), np.dtype(np.int64), keys)
    if isinstance(space, spaces.MultiDiscrete):
        return Leaf(path, space, tuple(space.shape), np.dtype(np.int64), keys)
    if isinstance(space, spaces.MultiBinary):
        return Leaf(path, space, tuple(np.atleast_1d(space.shape)), np.dtype(np.int8), keys)
    where = "the observation" if path == ROOT else f"the observation key {path!r}"
    kind = type(space).__name__
    raise ConfigError(
        f"{where} is a {kind} space ({space}), which ddrl cannot batch into arrays for a "
        f"model: observations may nest Box, Discrete, MultiDiscrete, MultiBinary, Dict and "
        f"Tuple. Drop the key (gym_env: --drop_keys {path.split(SEPARATOR)[0]}), or turn it "
        f"into an array in an env wrapper (a {kind} of words into token ids in a "
        f"MultiDiscrete, say).")


def _walk(space, path, keys, out):
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            if not isinstance(key, str) or SEPARATOR in key:
                raise ConfigError(f"the observation's Dict key {key!r} cannot name a leaf: keys "
                                  f"must be strings without {SEPARATOR!r}.")
            _walk(sub, f"{path}{SEPARATOR}{key}" if path else key, keys + (key,), out)
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _walk(sub, f"{path}{SEPARATOR}{i}" if path else str(i), keys + (i,), out)
    else:
        out.append(_leaf(path or ROOT, space, keys))


class ObservationLayout:
    """The leaves of an observation space and the conversions between one env's observation
    (as gymnasium gives it) and ddrl's representation (an array for Box, else a tree)."""

    def __init__(self, space):
        self.space = space
        self.structured = not isinstance(space, spaces.Box)
        leaves = []
        if self.structured:
            _walk(space, "", (), leaves)
        self.leaves: Dict[str, Leaf] = {leaf.path: leaf for leaf in leaves}
        nested = [leaf.path for leaf in leaves
                  if leaf.keys and leaf.keys[-1] == ACTION_MASK and len(leaf.keys) > 1]
        if nested:
            raise ConfigError(f"the observation's {nested[0]!r} looks like an action mask, but "
                              f"ddrl reads masks from a top-level Dict key {ACTION_MASK!r} "
                              f"only; move it there in the env wrapper (or rename it if it is "
                              f"not a mask).")
        mask = self.leaves.get(ACTION_MASK)
        if mask is not None and (len(mask.keys) != 1 or len(mask.shape) != 1):
            raise ConfigError(f"the observation's {ACTION_MASK!r} must be a top-level Dict key "
                              f"holding a 1-D array (1 = valid action); got {mask.space}.")
        # (path, keys, dtype, offset) per leaf: offsets undo Discrete/MultiDiscrete starts
        self._plan = [(leaf.path, leaf.keys, leaf.dtype, _start(leaf.space))
                      for leaf in leaves]

    @property
    def has_mask(self):
        return ACTION_MASK in self.leaves

    def feature_leaves(self):
        """The leaves a model encodes: all but the action mask."""
        return [leaf for leaf in self.leaves.values() if not leaf.is_mask]

    def encode(self, obs):
        """One env's observation as ddrl carries it: an array (Box) or {path: array}."""
        if not self.structured:
            return obs
        tree = {}
        for path, keys, dtype, start in self._plan:
            value = obs
            for key in keys:
                value = value[key]
            value = np.asarray(value, dtype=dtype)
            tree[path] = value - start if start is not None else value
        return tree

    def decode(self, tree):
        """A tree (or a batch of trees) as the nested dict/tuple of the space, indices shifted
        back by their starts: what a model that takes the structured observation as is gets
        from ``decode(obs)``."""
        if not self.structured:
            return tree

        def build(space, prefix):
            if isinstance(space, spaces.Dict):
                return {k: build(s, f"{prefix}{SEPARATOR}{k}" if prefix else k)
                        for k, s in space.spaces.items()}
            if isinstance(space, spaces.Tuple):
                return tuple(build(s, f"{prefix}{SEPARATOR}{i}" if prefix else str(i))
                             for i, s in enumerate(space.spaces))
            path = prefix or ROOT
            start = _start(space)
            return tree[path] + start if start is not None else tree[path]

        return build(self.space, "")


def _start(space):
    """The offset a Discrete/MultiDiscrete leaf's values carry (its ``start``), or None."""
    start = getattr(space, "start", None)
    if start is None or not np.any(np.asarray(start)):
        return None
    return np.asarray(start, dtype=np.int64)


def layout_of(space):
    """The ObservationLayout of ``space`` (cached on the space object, which never changes)."""
    layout = getattr(space, "_ddrl_layout", None)
    if layout is None:
        layout = ObservationLayout(space)
        try:
            space._ddrl_layout = layout
        except AttributeError:  # pragma: no cover - a space with __slots__
            pass
    return layout


def carried(space, normalized=False):
    """(shapes, dtypes) of the arrays ddrl carries for one env's observation of ``space`` in
    fragments and replay: for a Box, its shape and uint8 (images, unless ``normalized``) or
    float32; for a structured space, {path: shape} and {path: dtype} with float leaves as
    float32 and indices, masks and uint8 images in their own dtypes."""
    layout = layout_of(space)
    if not layout.structured:
        pixels = np.dtype(space.dtype) == np.uint8 and not normalized
        return tuple(space.shape), np.dtype(np.uint8 if pixels else np.float32)
    return ({path: leaf.shape for path, leaf in layout.leaves.items()},
            {path: np.dtype(np.float32) if np.issubdtype(leaf.dtype, np.floating) else leaf.dtype
             for path, leaf in layout.leaves.items()})


# -- batches: an array or a tree, alike ------------------------------------------------------------
def is_tree(x):
    return isinstance(x, dict)


def tree_map(fn, x, *others):
    """``fn`` applied to the array, or to each leaf (with the same leaf of ``others``)."""
    if is_tree(x):
        return {k: fn(v, *(o[k] for o in others)) for k, v in x.items()}
    return fn(x, *others)


def leaves(x):
    """The arrays of ``x``: [x] for an array, the tree's values for a tree."""
    return list(x.values()) if is_tree(x) else [x]


def stack(items, axis=0):
    """Stack a list of arrays or of trees (one per env, say) along a new ``axis``."""
    first = items[0]
    if is_tree(first):
        return {k: np.stack([item[k] for item in items], axis) for k in first}
    return np.stack(items, axis)


def concatenate(items, axis=0):
    first = items[0]
    if is_tree(first):
        return {k: np.concatenate([item[k] for item in items], axis) for k in first}
    return np.concatenate(items, axis)


def allocate(example, leading, dtype=None):
    """Empty arrays of ``leading`` + each leaf's shape, in its dtype (or ``dtype``)."""
    leading = tuple(leading)
    return tree_map(lambda a: np.empty(leading + np.shape(a),
                                       dtype=dtype or np.asarray(a).dtype), example)


def assign(buffer, index, value):
    """``buffer[index] = value``, leaf by leaf."""
    if is_tree(buffer):
        for k, v in buffer.items():
            v[index] = value[k]
    else:
        buffer[index] = value


def take(x, index):
    """``x[index]`` (a row, a slice, an index array), leaf by leaf."""
    return tree_map(lambda a: a[index], x)


def reshape_leading(x, old_dims, new_leading):
    """Replace the first ``old_dims`` dimensions of every leaf by ``new_leading``."""
    new_leading = tuple(new_leading)
    return tree_map(lambda a: a.reshape(new_leading + a.shape[old_dims:]), x)


def copy(x):
    return tree_map(lambda a: np.array(a, copy=True), x)


def batch_size(x):
    return len(leaves(x)[0])


def nbytes(x):
    return sum(np.asarray(a).nbytes for a in leaves(x))


def action_mask(x):
    """The action mask of a batch (bool [..., n]), or None when it carries none."""
    if is_tree(x) and ACTION_MASK in x:
        return np.asarray(x[ACTION_MASK]).astype(bool, copy=False)
    return None


def mask_segments(action_space):
    """The sizes of the mask's segments, one per sub-action: [n] for Discrete(n), nvec for a
    MultiDiscrete (the mask is their concatenation); None for spaces that take no mask."""
    if isinstance(action_space, spaces.Discrete):
        return [int(action_space.n)]
    if isinstance(action_space, spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
    return None


def rows_without_valid_action(x, action_space):
    """Indices (over the first dimension) of the rows whose action mask leaves some
    sub-action no valid choice; empty when the batch carries no mask."""
    mask = action_mask(x)
    if mask is None:
        return np.zeros(0, dtype=np.int64)
    mask = mask.reshape(len(mask), -1)
    bounds = np.cumsum([0] + (mask_segments(action_space) or [mask.shape[1]]))
    stuck = np.zeros(len(mask), dtype=bool)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        stuck |= ~mask[:, lo:hi].any(-1)
    return np.flatnonzero(stuck)


def check_action_mask(layout, action_space):
    """A ConfigError unless the mask (if the observation has one) fits ``action_space``."""
    if not layout.has_mask:
        return
    segments = mask_segments(action_space)
    width = layout.leaves[ACTION_MASK].shape[0]
    if segments is None:
        raise ConfigError(f"the observation carries an {ACTION_MASK!r}, but the action space "
                          f"{action_space} takes no mask: masks are for Discrete and "
                          f"MultiDiscrete actions.")
    if width != sum(segments):
        raise ConfigError(f"the observation's {ACTION_MASK!r} has {width} entries; the action "
                          f"space {action_space} needs {sum(segments)} (one per action"
                          f"{', sub-actions concatenated' if len(segments) > 1 else ''}).")
