"""Observation normalization (--normalize_obs): running mean and variance merged across workers;
reward scaling (--normalize_reward, ``RewardNormalizer`` below) the same way.

Each rollout worker normalizes with the statistics it was handed for the fragment (frozen for
the fragment, so the policy, the stored trajectory and the learner all see the same inputs:
obs -> clip((obs - mean) / sqrt(var + eps), -clip, clip)) and returns the moments of the raw
observations it saw. The driver merges those moments into the global statistics (the parallel
algorithm of Chan, Golub and LeVeque 1979) and hands them out with the next fragment and to the
test worker, which only applies them. They are saved in checkpoints.
"""
from dataclasses import dataclass

import numpy as np

from core import spaces


@dataclass
class Moments:
    """Count, mean and sum of squared deviations (M2) of a set of observations."""
    count: float
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, batch):
        batch = np.asarray(batch, dtype=np.float64)  # [N, *obs_shape]
        mean = batch.mean(axis=0)
        return cls(float(len(batch)), mean, ((batch - mean) ** 2).sum(axis=0))

    def merge(self, other):
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / count
        m2 = self.m2 + other.m2 + delta ** 2 * self.count * other.count / count
        return Moments(count, mean, m2)


class ObsNormalizer:
    """The running statistics of an observation space: one Moments for a Box, one per float Box
    leaf for a structured space (core/spaces.py); images, indices and masks are never
    normalized."""

    def __init__(self, space_or_shape, clip=10.0, epsilon=1e-8):
        layout = (None if isinstance(space_or_shape, (tuple, list))
                  else spaces.layout_of(space_or_shape))
        if layout is None or not layout.structured:
            shape = space_or_shape if layout is None else space_or_shape.shape
            self.paths = None
            self.moments = Moments(0.0, np.zeros(shape), np.zeros(shape))
        else:
            self.paths = [leaf.path for leaf in layout.feature_leaves() if leaf.is_float]
            self.moments = {path: Moments(0.0, np.zeros(layout.leaves[path].shape),
                                          np.zeros(layout.leaves[path].shape))
                            for path in self.paths}
        self.clip = clip
        self.epsilon = epsilon
        #: statistics taken once from a dataset (--dataset) and kept: rollouts no longer merge in
        self.frozen = False

    @staticmethod
    def _var(moments):
        return (moments.m2 / max(moments.count, 1.0) if moments.count
                else np.ones_like(moments.mean))

    @property
    def mean(self):
        return spaces.tree_map(lambda m: m.mean, self.moments)

    @property
    def var(self):
        return spaces.tree_map(self._var, self.moments)

    def update(self, moments):
        if self.paths is None:
            self.moments = self.moments.merge(moments)
        else:
            self.moments = {path: self.moments[path].merge(moments[path]) for path in self.paths}

    def statistics(self):
        """(mean, var) as float32 arrays, or {path: (mean, var)} for a structured space: what
        workers and the test worker are handed."""
        return spaces.tree_map(lambda m: (m.mean.astype(np.float32),
                                          self._var(m).astype(np.float32)), self.moments)

    def state_dict(self):
        def plain(m):
            return {"count": m.count, "mean": m.mean.copy(), "m2": m.m2.copy()}
        if self.paths is None:
            return {**plain(self.moments), "clip": self.clip}
        return {"leaves": {path: plain(m) for path, m in self.moments.items()}, "clip": self.clip}

    def load_state_dict(self, state):
        def moments(s):
            return Moments(float(s["count"]), np.asarray(s["mean"], np.float64),
                           np.asarray(s["m2"], np.float64))
        if self.paths is None:
            self.moments = moments(state)
        else:
            self.moments = {path: moments(state["leaves"][path]) for path in self.paths}


def moments_of(batch):
    """The Moments of a batch [N, ...] of observations: of the array, or {path: Moments} of
    each float leaf of a tree."""
    if not spaces.is_tree(batch):
        return Moments.of(batch)
    return {path: Moments.of(leaf) for path, leaf in batch.items()
            if np.issubdtype(leaf.dtype, np.floating)}


def normalize(obs, statistics, clip=10.0, epsilon=1e-8):
    """obs normalized with (mean, var), clipped to [-clip, clip]; obs itself if statistics is
    None (normalization off). A tree's float leaves are normalized with their own statistics
    ({path: (mean, var)}); its other leaves pass as they are."""
    if statistics is None:
        return obs
    if spaces.is_tree(obs):
        return {path: (_normalize(leaf, statistics[path], clip, epsilon)
                       if path in statistics else leaf) for path, leaf in obs.items()}
    return _normalize(obs, statistics, clip, epsilon)


def _normalize(obs, statistics, clip, epsilon):
    mean, var = statistics
    out = (np.asarray(obs, dtype=np.float32) - mean) / np.sqrt(var + epsilon)
    return np.clip(out, -clip, clip).astype(np.float32)


class RewardNormalizer:
    """--normalize_reward's statistics on the driver: the running variance of every env's
    discounted return r_t + gamma * r_(t-1) + ... (reset at each episode's end), merged across
    workers as the observations' are. A worker divides each reward of a fragment by the
    standard deviation of these statistics merged with the fragment's own returns (so the first
    fragment, before any statistics, is scaled too), clipped to [-clip, clip]: SB3's
    VecNormalize with norm_reward, CleanRL's NormalizeReward; the scale of the value targets
    stays near 1 whatever the env's reward scale. No mean is taken out: a reward's sign is
    kept."""

    def __init__(self, gamma, clip=10.0):
        self.gamma, self.clip = float(gamma), float(clip)
        self.moments = Moments(0.0, np.zeros(()), np.zeros(()))

    @property
    def var(self):
        return return_variance(self.moments)

    def update(self, moments):
        if moments is not None:
            self.moments = self.moments.merge(moments)

    def scaling(self):
        """What a worker is handed with a fragment: (the Moments so far, gamma, clip)."""
        return (self.moments, self.gamma, self.clip)

    def state_dict(self):
        return {"count": self.moments.count, "mean": float(self.moments.mean),
                "m2": float(self.moments.m2)}

    def load_state_dict(self, state):
        self.moments = Moments(float(state["count"]), np.asarray(state["mean"], np.float64),
                               np.asarray(state["m2"], np.float64))


def return_variance(moments):
    return float(moments.m2 / moments.count) if moments.count else 1.0


def discount_step(returns, rewards, ended, gamma):
    """One step of each env's running discounted return (``returns``, updated in place, reset
    where ``ended``): the returns this step saw."""
    returns *= gamma
    returns += rewards
    seen = returns.copy()
    returns[ended] = 0.0
    return seen


def scale_fragment(rewards, returns_seen, scaling, epsilon=1e-8):
    """A fragment's rewards [T, E] divided by the standard deviation of its discounted returns
    ``returns_seen`` [T, E] merged with the run's statistics, clipped: (scaled float32
    rewards, the fragment's own Moments, for the driver). ``scaling``: RewardNormalizer's."""
    moments, _, clip = scaling
    own = Moments.of(np.asarray(returns_seen, np.float64).reshape(-1))
    std = np.sqrt(return_variance(moments.merge(own)) + epsilon)
    return np.clip(rewards / std, -clip, clip).astype(np.float32), own
