"""D4RL-style datasets: one file of flat arrays, a .hdf5/.h5 as D4RL ships them or a .npz.

The arrays: ``observations`` [N, ...], ``actions`` [N, ...], ``rewards`` [N], ``terminals``
[N], and optionally ``timeouts`` [N] (True where a time limit cut the episode) and
``next_observations`` [N, ...]. Rows are steps in order, episodes one after another; an
episode ends at a row whose terminal or timeout is True.

Without next_observations, a row's next observation is the following row's, as D4RL's
``qlearning_dataset`` builds it; so the last row of an episode cut by a timeout has none in
the file and is dropped, as is the file's last row (unless terminal), as qlearning_dataset
drops them. A terminal row is kept, its next observation its own (a placeholder: terminated
1 means no bootstrap; qlearning_dataset takes the next episode's first observation there).
Without timeouts, a time-limit cut cannot be seen: that row pairs with the next episode's
first observation (D4RL's older files share the flaw); include timeouts where known.

Observations are one Box (arrays have no Dict or Tuple; a structured space needs a Minari
dataset). The spaces are the env's when given (checked against the arrays' shapes; discrete
actions against their range), else inferred: a Box with infinite bounds (uint8 arrays as
0-255 pixels), and for integer actions a Discrete (1-D) or MultiDiscrete (2-D) over the
values seen. The env's spaces are the ones to learn with: inferred action bounds are infinite.
"""
import contextlib

import numpy as np
from gymnasium import spaces as gym_spaces

from core.data.native import actions_to_carried, observations_to_carried
from core.data.offline import (DatasetError, OfflineData, check_fits, check_shard,
                               episode_statistics)
from core.learning.replay_buffer import Transitions

REQUIRED = ("observations", "actions", "rewards", "terminals")
OPTIONAL = ("timeouts", "next_observations")
SUFFIXES = (".hdf5", ".h5", ".npz")
#: an HDF5 file's arrays read only in the rows a shard keeps (the rest are read whole)
LAZY = ("observations", "next_observations")
#: rows of an HDF5 file's observations read at a time when a shard picks its rows
ROWS_PER_READ = 65536


def read_arrays(path, source, observation_space=None, action_space=None, shard=None):
    """The arrays in ``path`` (.npz, .hdf5 or .h5) as OfflineData (the module's docstring).
    ``shard``: (index, count), only the kept rows at index modulo count (load_dataset's); an
    HDF5 file's observations are then read ROWS_PER_READ rows at a time, so the process holds
    its rows and one block, never the whole (a .npz is read whole: numpy reads no part of one)."""
    with _opened(path, source) as (arrays, metadata):
        rows, rewards, terminals, timeouts = _step_columns(arrays, source)
        if observation_space is not None and not isinstance(observation_space, gym_spaces.Box):
            raise DatasetError(f"{source} holds observations as one array, but this run's env "
                               f"has {observation_space}: arrays carry Box observations only. "
                               f"Record the dataset as a Minari dataset (core/data/ "
                               f"DatasetWriter) to keep Dict or Tuple observations.")
        actions = _discrete_actions(arrays["actions"], action_space)
        env_id = _env_id(metadata)
        inferred = (_infer_observation_space(arrays["observations"]),
                    _infer_action_space(actions, action_space))
        check_fits(source, inferred, (observation_space, action_space), env_id, counts=False)
        if observation_space is None:
            observation_space = inferred[0]
        if action_space is None:
            action_space = inferred[1]
        _check_action_range(source, actions, action_space)

        ends = terminals | timeouts
        if "next_observations" in arrays:
            keep = np.ones(rows, bool)
        else:
            keep = ~timeouts | terminals
            keep[-1] &= terminals[-1]
        if not keep.any():
            raise DatasetError(f"{source} has no row with a next observation (one row, not "
                               f"terminal, and no next_observations array): nothing to learn "
                               f"from.")
        index, count = check_shard(shard)
        mine = np.flatnonzero(keep)[index::count]
        if "next_observations" in arrays:
            next_source, next_rows = arrays["next_observations"], mine
        else:  # the following row's, a terminal row's own (the module's docstring)
            following = np.minimum(np.arange(rows) + 1, rows - 1)
            following[terminals] = np.flatnonzero(terminals)
            next_source, next_rows = arrays["observations"], following[mine]
        observations = _rows_of(arrays["observations"], mine)
        next_observations = _rows_of(next_source, next_rows)
    episode_ends = None
    if count == 1:
        episode = np.concatenate([[0], np.cumsum(ends[:-1])])[keep]
        episode_ends = np.concatenate([episode[1:] != episode[:-1], [True]])
    returns, lengths = episode_statistics(rewards, ends)
    transitions = Transitions(
        observations=observations_to_carried(observation_space, observations),
        actions=actions_to_carried(action_space, actions[mine]),
        rewards=rewards[mine],
        next_observations=observations_to_carried(observation_space, next_observations),
        terminated=terminals[mine].astype(np.float32),
        episode_ends=episode_ends)
    return OfflineData(transitions=transitions, truncated=timeouts[mine],
                       episode_returns=returns, episode_lengths=lengths,
                       observation_space=observation_space, action_space=action_space,
                       env_id=env_id, metadata=metadata, source=str(source))


def array_spaces(path, source):
    """The (observation space, action space) inferred from the file's arrays (read_arrays'
    without an env), its observations not read."""
    with _opened(path, source) as (arrays, _):
        _step_columns(arrays, source)
        return (_infer_observation_space(arrays["observations"]),
                _infer_action_space(arrays["actions"]))


def _step_columns(arrays, source):
    """(rows, rewards [N] float32, terminals [N] bool, timeouts [N] bool), the arrays' lengths
    checked."""
    rewards = np.asarray(arrays["rewards"])
    rewards = rewards.reshape(len(rewards), -1)
    rows = len(rewards)
    if rewards.shape[1] != 1:
        raise DatasetError(f"{source}: rewards has shape {arrays['rewards'].shape}; one "
                           f"reward per row ([N] or [N, 1]) is what ddrl reads.")
    lengths = {name: len(array) for name, array in arrays.items()}
    if set(lengths.values()) != {rows}:
        raise DatasetError(f"{source}: its arrays have different numbers of rows ({lengths}); "
                           f"every array holds one row per step.")
    if rows == 0:
        raise DatasetError(f"{source} holds no rows: nothing to learn from.")
    terminals = np.asarray(arrays["terminals"], bool).reshape(rows)
    timeouts = np.asarray(arrays.get("timeouts", np.zeros(rows, bool)), bool).reshape(rows)
    return rows, rewards[:, 0].astype(np.float32), terminals, timeouts


def _rows_of(array, rows):
    """``array[rows]`` for ascending ``rows``: an h5py dataset's read a block of ROWS_PER_READ
    rows at a time (one fancy-indexed read would select row by row)."""
    if isinstance(array, np.ndarray):
        whole = len(rows) == len(array) and np.array_equal(rows, np.arange(len(array)))
        return array if whole else array[rows]
    out = np.empty((len(rows), *array.shape[1:]), array.dtype)
    done = 0
    while done < len(rows):
        start = int(rows[done])
        stop = min(start + ROWS_PER_READ, len(array))
        end = int(np.searchsorted(rows, stop, side="left"))
        out[done:end] = array[start:stop][rows[done:end] - start]
        done = end
    return out


def _missing(source, found):
    missing = [name for name in REQUIRED if name not in found]
    if missing:
        raise DatasetError(f"{source} has no {', '.join(missing)} array: a D4RL-style file "
                           f"holds {', '.join(REQUIRED)} (and optionally "
                           f"{', '.join(OPTIONAL)}); it has {sorted(found) or 'none'}.")


@contextlib.contextmanager
def _opened(path, source):
    """(arrays, metadata) of the file, open while the block runs: a .npz's arrays read whole;
    an .hdf5's observations and next_observations as h5py datasets (read by _rows_of), its
    other arrays read."""
    if str(path).endswith(".npz"):
        yield _load_npz(path, source)
        return
    import h5py
    try:  # opening, or reading the rows in the block (h5py raises OSError for both)
        with h5py.File(path, "r") as file:
            yield _load_hdf5(file, source)
    except OSError as error:
        raise DatasetError(f"{source} is not an HDF5 file h5py can read ({error}).") from None


def _load_npz(path, source):
    try:
        with np.load(path, allow_pickle=False) as file:
            _missing(source, file.files)
            arrays = {name: file[name] for name in REQUIRED + OPTIONAL if name in file.files}
            metadata = {name: _plain(file[name]) for name in file.files
                        if name not in arrays and file[name].ndim == 0}
    except (OSError, ValueError) as error:
        raise DatasetError(f"{source} is not a .npz file numpy can read without pickles "
                           f"({error}).") from None
    return arrays, metadata


def _load_hdf5(file, source):
    import h5py
    found = [name for name, item in file.items() if isinstance(item, h5py.Dataset)]
    _missing(source, found)
    arrays = {name: file[name] if name in LAZY else file[name][()]
              for name in REQUIRED + OPTIONAL if name in found}
    metadata = {key: _plain(value) for key, value in file.attrs.items()}
    group = file.get("metadata")   # D4RL's: metadata/algorithm and such

    def scalar(name, item):
        if isinstance(item, h5py.Dataset) and item.size == 1:
            metadata.setdefault(name, _plain(item[()]))
        # (None: h5py's visititems goes on)
    if isinstance(group, h5py.Group):
        group.visititems(scalar)
    if "algorithm_name" not in metadata and isinstance(metadata.get("algorithm"), str):
        metadata["algorithm_name"] = metadata["algorithm"]
    return arrays, metadata


def _plain(value):
    """A numpy scalar, 0-d or one-element array, or bytes as a plain Python value."""
    value = np.asarray(value)
    value = value.reshape(()).item() if value.size == 1 else value.tolist()
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _env_id(metadata):
    for key in ("env_id", "env_name", "env"):
        if isinstance(metadata.get(key), str):
            return metadata[key]
    return None


def _infer_observation_space(observations):
    shape = observations.shape[1:]
    if observations.dtype == np.uint8:
        return gym_spaces.Box(0, 255, shape, np.uint8)
    return gym_spaces.Box(-np.inf, np.inf, shape, np.float32)


def _infer_action_space(actions, env_space=None):
    integers = np.issubdtype(actions.dtype, np.integer) or actions.dtype == bool
    if integers and isinstance(env_space, gym_spaces.MultiBinary) and actions.ndim > 1:
        return gym_spaces.MultiBinary(list(actions.shape[1:]))
    if integers and actions.ndim in (1, 2):
        low, high = actions.min(axis=0), actions.max(axis=0)
        start = np.minimum(low, 0)
        if actions.ndim == 1:
            return gym_spaces.Discrete(int(high - start + 1), start=int(start))
        return gym_spaces.MultiDiscrete(high - start + 1, start=start)
    return gym_spaces.Box(-np.inf, np.inf, actions.shape[1:], np.float32)


def _discrete_actions(actions, action_space):
    """Actions as the env's discrete space reads them: whole-number floats as int64, a
    Discrete's [N, 1] as [N]."""
    if not isinstance(action_space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete,
                                     gym_spaces.MultiBinary)):
        return actions
    if isinstance(action_space, gym_spaces.Discrete) and actions.ndim == 2 \
            and actions.shape[1] == 1:
        actions = actions[:, 0]
    if np.issubdtype(actions.dtype, np.floating) and np.array_equal(actions, np.round(actions)):
        actions = actions.astype(np.int64)
    return actions


def _check_action_range(source, actions, space):
    if isinstance(space, gym_spaces.Box):
        return
    if isinstance(space, gym_spaces.MultiBinary):
        low, high = np.zeros(space.shape, np.int64), np.ones(space.shape, np.int64)
    else:
        low = np.asarray(space.start, np.int64)
        high = low + np.asarray(space.n if isinstance(space, gym_spaces.Discrete)
                                else space.nvec, np.int64) - 1
    if actions.size and ((actions < low).any() or (actions > high).any()):
        raise DatasetError(f"{source}'s actions take values {actions.min()}..{actions.max()}; "
                           f"the env's {space} takes {low.min()}..{high.max()} (as stored: "
                           f"the env's own values, a Discrete's start included).")
