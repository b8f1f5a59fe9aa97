"""Fragments cut into sequences, for learning with a recurrent policy (models/recurrent.py).

A fragment is time-major, [T, E, ...]: T steps of E envs. A recurrent loss runs on sequences
that keep their steps in order: each env's column of the fragment, cut into chunks of
``length`` steps (the whole column by default; a shorter length is truncated backpropagation
through time), batch-first [E * K, length, ...] with K = ceil(T / length); chunk k of env e is
row e * K + k. A last chunk shorter than ``length`` is padded at its end with zeros (which a
mask of the real steps leaves out of the loss; padding after the real steps never changes
their outputs). Each chunk starts from the state the acting policy had at its first step
(``chunk_starts``), as R2D2's stored state (Kapturowski et al. 2019).
"""
import numpy as np

from core import spaces


def chunks_per_env(num_steps, length):
    return -(-num_steps // length)


def to_sequences(x, length):
    """[T, E, ...] (an array or a tree of them) -> [E * K, length, ...]."""
    def cut(a):
        a = np.asarray(a)
        num_steps, num_envs = a.shape[:2]
        k = chunks_per_env(num_steps, length)
        if k * length != num_steps:
            pad = np.zeros((k * length - num_steps, *a.shape[1:]), a.dtype)
            a = np.concatenate([a, pad])
        a = np.swapaxes(a, 0, 1)  # [E, K * length, ...]
        return a.reshape(num_envs * k, length, *a.shape[2:])
    return spaces.tree_map(cut, x)


def chunk_starts(states, length):
    """The state at each chunk's first step: [T, E, ...] -> [E * K, ...]."""
    def first(a):
        a = np.swapaxes(np.asarray(a), 0, 1)[:, ::length]  # [E, K, ...]
        return a.reshape(-1, *a.shape[2:])
    return spaces.tree_map(first, states)


def time_major(x):
    """Rows of sequences [N, L, ...] (tensors) -> [L * N, ...], row t * N + n = step t of n."""
    return x.transpose(0, 1).reshape(-1, *x.shape[2:])
