"""What a dataset becomes in ddrl (``OfflineData``), and the checks every reader shares.

Whatever the source (a Minari dataset, D4RL-style arrays), ``load_dataset`` hands back the
same thing: one block of ``Transitions`` in ddrl's carried form (core/spaces.py), which a
``ReplayBuffer`` built from ``carried(observation_space)`` takes with ``add``, and the episode
statistics a run reports about the behaviour policy that recorded it.
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from gymnasium import spaces as gym_spaces

from core import spaces
from core.errors import ConfigError
from core.learning.replay_buffer import Transitions

MOMENTS_CHUNK = 65536  # rows per float64 pass in obs_moments (bounded memory on big datasets)


class DatasetError(ConfigError):
    """A dataset that cannot be read or written as asked (missing, malformed, another env's,
    or a target that already holds one): one paragraph naming it and the way out."""


@dataclass
class OfflineData:
    """A dataset as ddrl learns from it.

    ``transitions``: every step as one block (discounts None; ``episode_ends`` True on the
    last kept row of each episode). ``truncated``: bool [N], the steps that ended their
    episode by truncation (their next observation is the final one the env returned;
    ``terminated`` is 0 there unless the env reported both). ``episode_returns``/``episode_lengths``: of the complete episodes
    (ended by termination or truncation), in the order stored. ``observation_space`` and
    ``action_space``: the env's when the caller gave them (checked to fit), else the
    dataset's. ``env_id``: the gymnasium id the dataset names, or None. ``metadata``: what the
    dataset says about itself (Minari's metadata.json, the spaces left out: they are above)."""
    transitions: Transitions
    truncated: np.ndarray
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    observation_space: gym_spaces.Space
    action_space: gym_spaces.Space
    env_id: Optional[str]
    metadata: dict = field(default_factory=dict)
    source: str = ""

    def __len__(self):
        return len(self.transitions.rewards)

    def obs_moments(self):
        """(mean, var, count) of the observations, as the offline papers normalize them
        (computed once on the dataset, then frozen): float64 arrays for a float Box, {path:
        array} over the float leaves of a structured space; an image Box has no float
        leaves (None, None, count). Chunked: no float64 copy of the whole dataset."""
        from core.learning.normalizer import Moments
        observations, count = self.transitions.observations, len(self)
        if not spaces.is_tree(observations):
            if not np.issubdtype(observations.dtype, np.floating):
                return None, None, count
            observations = {None: observations}
        moments = {}
        for path, leaf in observations.items():
            if not np.issubdtype(leaf.dtype, np.floating):
                continue
            total = Moments(0.0, np.zeros(leaf.shape[1:]), np.zeros(leaf.shape[1:]))
            for start in range(0, count, MOMENTS_CHUNK):
                total = total.merge(Moments.of(leaf[start:start + MOMENTS_CHUNK]))
            moments[path] = total
        mean = {path: m.mean for path, m in moments.items()}
        var = {path: m.m2 / max(m.count, 1.0) for path, m in moments.items()}
        if None in moments:
            return mean[None], var[None], count
        return mean, var, count

    def reward_range(self):
        """(min, max) of the rewards, as floats ((nan, nan) when empty)."""
        rewards = self.transitions.rewards
        if not len(rewards):
            return float("nan"), float("nan")
        return float(rewards.min()), float(rewards.max())

    def summary(self):
        """One line: the source, its size, the behaviour policy's returns."""
        return self.overview().summary()

    def overview(self, rows=None):
        """What a run reports of the dataset (``rows``: the whole dataset's, for a shard)."""
        return DatasetOverview(self.source, len(self) if rows is None else int(rows),
                               self.episode_returns,
                               self.metadata.get("algorithm_name") or "behaviour policy unnamed")


@dataclass
class DatasetOverview:
    """A dataset as a run reports it, without its rows: the source, its size and the complete
    episodes' returns (the behaviour policy's), the policy's name. Where learners hold the
    rows in shards (--shard_dataset) the driver has this alone."""
    source: str
    rows: int
    episode_returns: np.ndarray
    policy: str

    def __len__(self):
        return self.rows

    def summary(self):
        """One line: the source, its size, the behaviour policy's returns."""
        returns = self.episode_returns
        score = (f"return {returns.mean():.4g} ± {returns.std():.4g}" if len(returns)
                 else "no complete episode")
        return (f"{self.source}: {self.rows:,} transitions, {len(returns):,} episodes, "
                f"{score}, {self.policy}")


def check_shard(shard):
    """(index, count) of a shard, or (0, 1) for the whole dataset."""
    index, count = (0, 1) if shard is None else (int(shard[0]), int(shard[1]))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index} of {count}: the index must lie in [0, count)")
    return index, count


def episode_statistics(rewards, ends):
    """(returns float64, lengths int64) of the complete episodes in rows ``rewards`` whose
    episodes end where ``ends`` is True; rows after the last end belong to no complete
    episode."""
    rewards, ends = np.asarray(rewards, np.float64), np.asarray(ends, bool)
    if not ends.any():
        return np.zeros(0, np.float64), np.zeros(0, np.int64)
    last = int(np.flatnonzero(ends)[-1]) + 1
    episode = np.concatenate([[0], np.cumsum(ends[:last - 1])])
    return (np.bincount(episode, weights=rewards[:last]),
            np.bincount(episode).astype(np.int64))


# -- does a dataset fit the run's env? -------------------------------------------------------
def space_differences(dataset_space, env_space, kind="observation", where="", counts=True):
    """What differs between the dataset's space and the env's, as phrases (empty: they fit).
    Types and shapes must agree, Dict keys and Tuple lengths, and a Box must not hold floats
    where the env's carries uint8 pixels; a Box's bounds may differ, and so may a Discrete's
    start (ddrl carries indices). ``counts`` False: Discrete n and MultiDiscrete nvec are not
    compared (spaces inferred from arrays, whose counts are only the values seen)."""
    name = f"the {kind}'s {where!r}" if where else f"the {kind} space"
    if type(dataset_space) is not type(env_space):
        return [f"{name} is {dataset_space} in the dataset, {env_space} in the env"]
    if isinstance(dataset_space, gym_spaces.Dict):
        found = []
        ours, theirs = set(dataset_space.spaces), set(env_space.spaces)
        if ours != theirs:
            found.append(f"{name} has keys {sorted(ours)} in the dataset, {sorted(theirs)} "
                         f"in the env")
        for key in dataset_space.spaces:
            if key in theirs:
                found += space_differences(dataset_space[key], env_space[key], kind,
                                           _join(where, key), counts)
        return found
    if isinstance(dataset_space, gym_spaces.Tuple):
        if len(dataset_space.spaces) != len(env_space.spaces):
            return [f"{name} is a Tuple of {len(dataset_space.spaces)} in the dataset, "
                    f"of {len(env_space.spaces)} in the env"]
        found = []
        for i, (ours, theirs) in enumerate(zip(dataset_space.spaces, env_space.spaces)):
            found += space_differences(ours, theirs, kind, _join(where, i), counts)
        return found
    if tuple(dataset_space.shape) != tuple(env_space.shape):
        return [f"{name} has shape {tuple(dataset_space.shape)} in the dataset, "
                f"{tuple(env_space.shape)} in the env"]
    if isinstance(dataset_space, gym_spaces.Box):
        if env_space.dtype == np.uint8 and dataset_space.dtype != np.uint8:
            return [f"{name} holds {dataset_space.dtype} in the dataset where the env's "
                    f"carries uint8 pixels"]
    elif counts and isinstance(dataset_space, gym_spaces.Discrete):
        if int(dataset_space.n) != int(env_space.n):
            return [f"{name} is Discrete({dataset_space.n}) in the dataset, "
                    f"Discrete({env_space.n}) in the env"]
    elif counts and isinstance(dataset_space, gym_spaces.MultiDiscrete):
        if not np.array_equal(dataset_space.nvec, env_space.nvec):
            return [f"{name} has nvec {dataset_space.nvec.tolist()} in the dataset, "
                    f"{env_space.nvec.tolist()} in the env"]
    return []


def _join(where, key):
    return f"{where}{spaces.SEPARATOR}{key}" if where else str(key)


def check_fits(source, dataset_spaces, env_spaces, dataset_env_id=None, counts=True):
    """A DatasetError naming every difference between the dataset's (observation, action)
    spaces and the env's; nothing when the env's are None."""
    found = []
    for kind, ours, theirs in zip(("observation", "action"), dataset_spaces, env_spaces):
        if theirs is not None:
            found += space_differences(ours, theirs, kind, counts=counts)
    if found:
        recorded = (f"the env it was recorded on ({dataset_env_id})" if dataset_env_id
                    else "the env it was recorded on (the dataset names none)")
        raise DatasetError(
            f"the dataset {source} does not fit this run's env: {'; '.join(found)}. A Box's "
            f"bounds may differ, nothing else of the spaces: learn from a dataset recorded on "
            f"this env, or run {recorded}.")
