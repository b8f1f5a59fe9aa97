"""Between ddrl's carried form (core/spaces.py) and gymnasium's native form, for whole batches.

A dataset on disk holds what the env gave and took (Minari's episodes are gymnasium-native:
nested dicts and tuples, Discrete values with their ``start``, each space's own dtype), so a
dataset written by ddrl reads the same in any Minari tool, and one written elsewhere reads the
same in ddrl. ddrl carries a Box observation as one array and any other space as a flat tree
{leaf path: array}, indices without their starts, in ``carried(space)``'s dtypes; actions as
int64 indices (Discrete, MultiDiscrete, MultiBinary) or float32 (Box). Every function here
takes and returns a batch: a leading dimension [N] on every leaf.
"""
import numpy as np
from gymnasium import spaces as gym_spaces

from core import spaces
from core.errors import ConfigError

ACTION_SPACES = (gym_spaces.Box, gym_spaces.Discrete, gym_spaces.MultiDiscrete,
                 gym_spaces.MultiBinary)


def check_action_space(space, where="the action space"):
    """A ConfigError unless ddrl carries ``space``'s actions as one array."""
    if not isinstance(space, ACTION_SPACES):
        raise ConfigError(f"{where} is {space}: ddrl's datasets take Box, Discrete, "
                          f"MultiDiscrete and MultiBinary actions (one array per step); a "
                          f"{type(space).__name__} action space has no array form here.")


def carried_action_dtype(space):
    """int64 for indices (Discrete, MultiDiscrete, MultiBinary), float32 for a Box: what the
    agents hand and the replay buffer stores."""
    return np.dtype(np.float32 if isinstance(space, gym_spaces.Box) else np.int64)


def _start(space):
    start = getattr(space, "start", None)
    return None if start is None or not np.any(start) else np.asarray(start, np.int64)


def actions_to_carried(space, actions):
    """Native actions [N, ...] as ddrl carries them (indices from 0, carried dtype)."""
    actions = np.asarray(actions)
    if isinstance(space, gym_spaces.Box):
        return actions.astype(np.float32, copy=False).reshape(len(actions), *space.shape)
    start = _start(space)
    out = actions.astype(np.int64, copy=False).reshape(len(actions), *_action_shape(space))
    return out - start if start is not None else out


def actions_to_native(space, actions):
    """Carried actions [N, ...] as the env takes them (starts added back, the space's dtype)."""
    actions = np.asarray(actions)
    if not isinstance(space, gym_spaces.Box):
        start = _start(space)
        actions = actions.astype(np.int64, copy=False)
        if start is not None:
            actions = actions + start
    return actions.astype(space.dtype, copy=False)


def _action_shape(space):
    return () if isinstance(space, gym_spaces.Discrete) else tuple(space.shape)


def observations_to_carried(space, observations):
    """Native observations [N, ...] (an array, or the space's nested dicts and tuples of
    arrays) as ddrl carries them: ``layout.encode`` (it takes batches) in carried dtypes."""
    layout = spaces.layout_of(space)
    _, dtypes = spaces.carried(space)
    if not layout.structured:
        return np.asarray(observations).astype(dtypes, copy=False)
    tree = layout.encode(observations)
    return {path: np.asarray(tree[path]).astype(dtypes[path], copy=False)
            for path in layout.leaves}


def observations_to_native(space, observations):
    """Carried observations [N, ...] as gymnasium gives them: the nested dict/tuple of the
    space (``layout.decode``), each leaf in its space's dtype with its start added back."""
    layout = spaces.layout_of(space)
    if not layout.structured:
        return np.asarray(observations).astype(space.dtype, copy=False)

    def build(sub, prefix):
        if isinstance(sub, gym_spaces.Dict):
            return {key: build(s, f"{prefix}{spaces.SEPARATOR}{key}" if prefix else key)
                    for key, s in sub.spaces.items()}
        if isinstance(sub, gym_spaces.Tuple):
            return tuple(build(s, f"{prefix}{spaces.SEPARATOR}{i}" if prefix else str(i))
                         for i, s in enumerate(sub.spaces))
        leaf = np.asarray(observations[prefix or spaces.ROOT])
        start = _start(sub)
        if start is not None:
            leaf = leaf.astype(np.int64, copy=False) + start
        return leaf.astype(sub.dtype, copy=False)

    return build(space, "")
