"""Observation normalization (--normalize_obs): running mean and variance merged across workers.

Each rollout worker normalizes with the statistics it was handed for the fragment (frozen for
the fragment, so the policy, the stored trajectory and the learner all see the same inputs:
obs -> clip((obs - mean) / sqrt(var + eps), -clip, clip)) and returns the moments of the raw
observations it saw. The driver merges those moments into the global statistics (the parallel
algorithm of Chan, Golub and LeVeque 1979) and hands them out with the next fragment and to the
test worker, which only applies them. They are saved in checkpoints.
"""
from dataclasses import dataclass

import numpy as np


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
    def __init__(self, shape, clip=10.0, epsilon=1e-8):
        self.moments = Moments(0.0, np.zeros(shape), np.zeros(shape))
        self.clip = clip
        self.epsilon = epsilon

    @property
    def mean(self):
        return self.moments.mean

    @property
    def var(self):
        return self.moments.m2 / max(self.moments.count, 1.0) if self.moments.count else \
            np.ones_like(self.moments.mean)

    def update(self, moments):
        self.moments = self.moments.merge(moments)

    def statistics(self):
        """(mean, var) as float32 arrays: what workers and the test worker are handed."""
        return self.mean.astype(np.float32), self.var.astype(np.float32)

    def state_dict(self):
        return {"count": self.moments.count, "mean": self.moments.mean.copy(),
                "m2": self.moments.m2.copy(), "clip": self.clip}

    def load_state_dict(self, state):
        self.moments = Moments(float(state["count"]), np.asarray(state["mean"], np.float64),
                               np.asarray(state["m2"], np.float64))


def normalize(obs, statistics, clip=10.0, epsilon=1e-8):
    """obs normalized with (mean, var), clipped to [-clip, clip]; obs itself if statistics is
    None (normalization off)."""
    if statistics is None:
        return obs
    mean, var = statistics
    out = (np.asarray(obs, dtype=np.float32) - mean) / np.sqrt(var + epsilon)
    return np.clip(out, -clip, clip).astype(np.float32)
