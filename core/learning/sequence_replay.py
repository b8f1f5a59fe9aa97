"""Replay of sequences, for a Q network with memory (R2D2: Kapturowski et al. 2019,
https://openreview.net/forum?id=r1lyTjAqYX; models/r2d2.py, agents/r2d2_agent.py).

A row of this buffer is a sequence of S consecutive steps of one env slot (``Sequences``), with
the recurrent state the acting policy held before its first step: the learner starts its unroll
from that stored state (R2D2's "stored state"), replays the first steps without learning from
them (burn-in), and learns on the rest. A sequence may cross episode boundaries: ``starts`` marks
the steps whose observation began an episode, where the unroll zeroes the state as the acting
policy did.

Everything else is ``ReplayBuffer``'s: the ring, block writes, generations, checkpoints, and with
``PrioritizedSequenceReplayBuffer`` proportional priorities (one per sequence: R2D2 mixes the max
and the mean |TD| of its steps) and importance weights. --buffer_size and --batch_size count
sequences.
"""
from typing import NamedTuple

import numpy as np

from core import spaces
from core.learning.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer


class Sequences(NamedTuple):
    """A block of N sequences of S steps; every array's first dimension is N. The targets are
    the agent's (agents/r2d2_agent.py): step t's is rewards[t] + discounts[t] x the value at
    position bootstrap[t] of the sequence (0..S - 1 its steps, S the observation after the
    last), learned from where ``learn`` is 1."""
    observations: object            # [N, S, *obs_shape] (a tree: each leaf)
    actions: np.ndarray             # [N, S, *action_shape]
    rewards: np.ndarray             # [N, S] float32: the n-step return from each step
    discounts: np.ndarray           # [N, S] float32: gamma^m of its bootstrap, 0: terminal
    bootstrap: np.ndarray           # [N, S] int64: the position its bootstrap value is at
    learn: np.ndarray               # [N, S] float32: 1 = a step the loss learns from
    starts: np.ndarray              # [N, S] bool: the step's observation began an episode
    state: dict                     # {name: [N, ...]} the policy's state before step 0
    next_observation: object        # [N, *obs_shape] the observation after step S - 1
    burn_in: np.ndarray             # [N] int64: the first steps, replayed but not learned

    def rows(self, start, end) -> "Sequences":
        """Rows [start, end) of every column (views, no copies)."""
        cut = slice(start, end)
        return Sequences(*(spaces.take(column, cut) for column in self))


class SequenceReplayBuffer(ReplayBuffer):
    """A ring of ``capacity`` sequences of ``sequence_length`` steps. The state columns take
    their names, shapes and dtypes from the first block added (a model's ``initial_state``)."""

    def __init__(self, capacity, observation_shape, action_shape, sequence_length=None,
                 **kwargs):
        if sequence_length is None or int(sequence_length) < 1:
            raise ValueError(f"sequence_length must be positive, got {sequence_length}")
        if kwargs.pop("with_discounts", False):
            raise ValueError("a sequence buffer keeps no discounts (the loss discounts the "
                             "rewards of a sequence itself)")
        self.sequence_length = int(sequence_length)
        super().__init__(capacity, observation_shape, action_shape, **kwargs)

    def _make_columns(self, observation_column, action_shape, action_dtype, with_discounts):
        capacity, length = self._capacity, self.sequence_length

        def along(column):  # a step axis after the rows
            return np.zeros((capacity, length, *column.shape[1:]), column.dtype)
        return Sequences(
            observations=spaces.tree_map(along, observation_column()),
            actions=np.zeros((capacity, length, *action_shape), action_dtype),
            rewards=np.zeros((capacity, length), np.float32),
            discounts=np.zeros((capacity, length), np.float32),
            bootstrap=np.zeros((capacity, length), np.int64),
            learn=np.zeros((capacity, length), np.float32),
            starts=np.zeros((capacity, length), bool),
            state={},  # made by the first block (_state_columns)
            next_observation=observation_column(),
            burn_in=np.zeros(capacity, np.int64))

    def _state_columns(self, state):
        """The state columns, made once from a block's (or a checkpoint's) state."""
        if self._columns.state or not state:
            return
        self._columns = self._columns._replace(state={
            name: np.zeros((self._capacity, *np.shape(value)[1:]), np.asarray(value).dtype)
            for name, value in state.items()})

    def add(self, sequences: Sequences, priorities=None) -> int:
        self._state_columns(sequences.state)
        return super().add(sequences, priorities)

    def load_state_dict(self, state: dict):
        self._state_columns(state.get("state"))
        super().load_state_dict(state)

    def _stored(self, rows) -> tuple:
        return tuple(rows)

    def _check_block(self, sequences: Sequences) -> int:
        if not isinstance(sequences, Sequences):
            raise ValueError(f"a sequence buffer stores Sequences, got {type(sequences).__name__}"
                             f" (an agent that hands sequences: agents/r2d2_agent.py)")
        n = len(sequences.rewards)
        for name, column, data in zip(Sequences._fields, self._columns, sequences):
            if spaces.is_tree(column) and (not spaces.is_tree(data) or set(data) != set(column)):
                raise ValueError(f"{name} has other leaves than {sorted(column)}")
            if spaces.is_tree(column):
                data = {path: data[path] for path in column}
            for leaf, values in zip(spaces.leaves(column), spaces.leaves(data)):
                shape, expected = np.shape(values), (n, *leaf.shape[1:])
                if shape != expected:
                    raise ValueError(f"{name} has shape {shape}, expected {expected}")
        return n


class PrioritizedSequenceReplayBuffer(SequenceReplayBuffer, PrioritizedReplayBuffer):
    """Sequences drawn by priority (PrioritizedReplayBuffer's sampling and weights)."""
