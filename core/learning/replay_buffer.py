"""Replay buffers for off-policy agents: uniform and proportional prioritized, pure numpy.

Blocks of transitions go in and batches come out in one vectorized call each: the distributed
code wraps a buffer in a Ray actor, and a remote call per transition would cost ~1.1 ms each
(an empty actor call on a 2-core machine, benchmarks/probe.py overheads). As in cpprb's Ape-X setup
(Horgan et al. 2018, arXiv:1803.00933), explorers send whole blocks with the initial |TD|
priorities they computed, and the learner samples and sends back new priorities.

Every slot counts how many times it has been written (its generation). A batch carries the
generations of its slots, so a priority update that arrives after a slot was overwritten by new
data is recognised as stale and dropped instead of being pinned on the newcomer.
"""
import operator
from typing import NamedTuple, Optional

import numpy as np

from core import spaces


class Transitions(NamedTuple):
    """A block of N transitions; every array's first dimension is N.

    ``discounts`` (optional): the factor of the value bootstrapped from ``next_observations``,
    gamma^k for a return over k steps (an n-step transition, k <= n, fewer where an episode
    ended sooner: the agent summed ``rewards`` over those k steps); a loss still multiplies it
    by 1 - terminated. None: one-step transitions whose model applies its own gamma (SAC). A
    buffer keeps the column only when built ``with_discounts`` (an agent's
    ``transition_discounts``: agents/base.py).

    ``episode_ends`` (optional): True on the last step of an episode, in a block of whole
    episodes, each one's steps consecutive and in order (an agent asked for ``whole_episodes``:
    agents/episodes.py); a buffer that needs episodes (core/learning/her.py) reads it, the
    others ignore it. None: a block with no episode structure."""
    observations: np.ndarray        # [N, *obs_shape]
    actions: np.ndarray             # [N, *action_shape]
    rewards: np.ndarray             # [N] float32
    next_observations: np.ndarray   # [N, *obs_shape] (the final observation for a truncated step)
    terminated: np.ndarray          # [N] float32: 1.0 = terminal, no bootstrap; truncation is 0.0
    discounts: Optional[np.ndarray] = None  # [N] float32, or None (see above)
    episode_ends: Optional[np.ndarray] = None  # [N] bool, or None (see above); never stored

    def rows(self, start, end) -> "Transitions":
        """Rows [start, end) of every column (views, no copies; absent columns stay None)."""
        cut = slice(start, end)
        return Transitions(*(None if column is None else spaces.take(column, cut)
                             for column in self))


class ReplayBatch(NamedTuple):
    transitions: Transitions
    indices: np.ndarray             # [B] int64 slots
    generations: np.ndarray         # [B] int64 times each slot had been written when sampled
    weights: np.ndarray             # [B] float32 importance weights (ones when uniform)

    def rows(self, start, end) -> "ReplayBatch":
        """Rows [start, end) of this batch (views, no copies)."""
        cut = slice(start, end)
        return ReplayBatch(self.transitions.rows(start, end), self.indices[cut],
                           self.generations[cut], self.weights[cut])


class ReplayBuffer:
    """A ring of `capacity` transitions stored column by column in their own dtypes;
    ``with_discounts``: a column for Transitions.discounts too (n-step transitions);
    ``reward_scale``: every reward added is stored multiplied by it (--reward_scale)."""

    def __init__(self, capacity, observation_shape, action_shape,
                 observation_dtype=np.float32, action_dtype=np.float32, seed=0,
                 with_discounts=False, reward_scale=1.0):
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._capacity = int(capacity)
        action_shape = tuple(action_shape)
        # A structured observation space (core/spaces.py) gives {path: shape} and
        # {path: dtype}: a column per leaf, each in its own dtype (uint8 images stay uint8).
        if spaces.is_tree(observation_shape):
            dtypes = (observation_dtype if spaces.is_tree(observation_dtype)
                      else dict.fromkeys(observation_shape, observation_dtype))

            def observation_column():
                return {path: np.zeros((capacity, *shape), dtypes[path])
                        for path, shape in observation_shape.items()}
        else:
            def observation_column():
                return np.zeros((capacity, *tuple(observation_shape)), observation_dtype)
        # np.zeros maps untouched pages lazily: memory is committed as the ring fills.
        self._columns = self._make_columns(observation_column, action_shape, action_dtype,
                                           with_discounts)
        self._total_added = 0
        self.rng = np.random.default_rng(seed)
        self.reward_scale = float(reward_scale)

    def _make_columns(self, observation_column, action_shape, action_dtype, with_discounts):
        """The ring's columns, a row type of arrays with ``capacity`` rows (Transitions here;
        core/learning/sequence_replay.py stores sequences)."""
        capacity = self._capacity
        return Transitions(
            observations=observation_column(),
            actions=np.zeros((capacity, *action_shape), action_dtype),
            rewards=np.zeros(capacity, np.float32),
            next_observations=observation_column(),
            terminated=np.zeros(capacity, np.float32),
            discounts=np.zeros(capacity, np.float32) if with_discounts else None)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def total_added(self) -> int:
        """Transitions added since creation, including those overwritten since."""
        return self._total_added

    def __len__(self) -> int:
        return min(self._total_added, self._capacity)

    def nbytes(self) -> int:
        return sum(spaces.nbytes(column) for column in self._stored(self._columns))

    def add(self, transitions: Transitions, priorities=None) -> int:
        """Store a block (ring order, oldest overwritten first); returns how many were stored.

        A block longer than the capacity keeps only its newest `capacity` transitions, in the
        slots they would have reached had the block been added one transition at a time.
        `priorities` is accepted for a common interface and ignored.
        """
        n = self._check_block(transitions)
        if self.reward_scale != 1.0:
            transitions = transitions._replace(
                rewards=np.asarray(transitions.rewards, np.float32) * self.reward_scale)
        kept = min(n, self._capacity)
        start = (self._total_added + n - kept) % self._capacity
        for column, data in zip(self._stored(self._columns), self._stored(transitions)):
            if spaces.is_tree(column):
                for path, leaf in column.items():
                    self._write(leaf, np.asarray(data[path])[n - kept:], start)
            else:
                self._write(column, np.asarray(data)[n - kept:], start)
        self._total_added += n
        return kept

    def sample(self, batch_size) -> ReplayBatch:
        """Uniform over the stored slots, with replacement."""
        self._check_not_empty()
        indices = self.rng.integers(0, len(self), size=batch_size, dtype=np.int64)
        return self._batch(indices, np.ones(batch_size, np.float32))

    def sample_batches(self, batch_size, count):
        """``count`` independent batches in one call (one actor call for several updates)."""
        return [self.sample(batch_size) for _ in range(count)]

    def update_priorities(self, indices, generations, priorities) -> int:
        """Nothing to update in a uniform buffer; returns 0 updates applied."""
        return 0

    def generations(self, indices) -> np.ndarray:
        """How many times each slot has been written so far.

        Transition number i (counting from 0 since creation) goes to slot i % capacity, so after
        T additions slot s has been written T // capacity times, plus one if s < T % capacity.
        """
        indices = np.asarray(indices, np.int64)
        laps, position = divmod(self._total_added, self._capacity)
        return laps + (indices < position).astype(np.int64)

    def state_dict(self) -> dict:
        """The stored rows (slot order), counters and the sampling generator's state, for
        checkpoints (a restored buffer draws the batches this one would have)."""
        size = len(self)
        state = {name: spaces.tree_map(lambda c: self._host_rows(c, size), column)
                 for name, column in zip(self._columns._fields, self._columns)
                 if column is not None}
        state.update(capacity=self._capacity, total_added=self._total_added,
                     rng=self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state: dict):
        if int(state["capacity"]) != self._capacity:
            raise ValueError(f"checkpoint capacity {state['capacity']} != {self._capacity}")
        size = min(int(state["total_added"]), self._capacity)
        for name, column in zip(self._columns._fields, self._columns):
            if column is None:
                continue
            if name not in state:
                raise ValueError(f"checkpoint has no {name} column (a buffer of another kind)")
            if spaces.is_tree(column) != spaces.is_tree(state[name]) or (
                    spaces.is_tree(column) and set(column) != set(state[name])):
                raise ValueError(f"checkpoint {name} holds other observation leaves than this "
                                 f"env's")
            for leaf, saved in zip(spaces.leaves(column), spaces.leaves(
                    spaces.tree_map(lambda _, saved: saved, column, state[name]))):
                data = np.asarray(saved)
                if data.shape != (size, *leaf.shape[1:]):
                    raise ValueError(f"checkpoint {name} has shape {data.shape}, "
                                     f"expected {(size, *leaf.shape[1:])}")
                self._write(leaf, data, 0)
        self._total_added = int(state["total_added"])
        if state.get("rng") is not None:  # (not in checkpoints written before it was kept)
            self.rng.bit_generator.state = state["rng"]

    def sampling_state(self) -> dict:
        """The sampling generator's state and the count of rows added, without the rows: what a
        buffer filled again with the same data (a dataset, read from its file) needs to draw the
        batches this one would have drawn next."""
        return {"total_added": self._total_added, "rng": self.rng.bit_generator.state}

    def load_sampling_state(self, state: dict):
        if int(state["total_added"]) != self._total_added:
            raise ValueError(f"the saved sampler drew from {int(state['total_added']):,} rows; "
                             f"this buffer holds {self._total_added:,} (another dataset?)")
        self.rng.bit_generator.state = state["rng"]

    # -- helpers ---------------------------------------------------------------------------

    def _stored(self, transitions: Transitions) -> tuple:
        """The fields of ``transitions`` this buffer keeps: the first five, and discounts when it
        has their column (episode_ends is a block's structure, never a column)."""
        kept = tuple(transitions[:5])
        return kept + (transitions.discounts,) if self._columns.discounts is not None else kept

    def _check_block(self, transitions: Transitions) -> int:
        n = len(transitions.rewards)
        if (self._columns.discounts is None) != (transitions.discounts is None):
            raise ValueError("discounts: this buffer " + (
                "keeps none (built without with_discounts); the block has them" if
                self._columns.discounts is None else "keeps them; the block has none"))
        for name, column, data in zip(self._columns._fields, self._stored(self._columns),
                                      self._stored(transitions)):
            if spaces.is_tree(column) and (not spaces.is_tree(data) or set(data) != set(column)):
                raise ValueError(f"{name} has other leaves than {sorted(column)}")
            if spaces.is_tree(column):
                data = {path: data[path] for path in column}  # the buffer's leaf order
            for leaf, values in zip(spaces.leaves(column), spaces.leaves(data)):
                shape, expected = np.shape(values), (n, *leaf.shape[1:])
                if shape != expected:
                    raise ValueError(f"{name} has shape {shape}, expected {expected}")
        return n

    @staticmethod
    def _host_rows(column, size):
        """A copy of a column's first ``size`` rows as a host array (checkpoints)."""
        return column[:size].copy()

    def _write(self, column: np.ndarray, data: np.ndarray, start: int):
        """Copy `data` (at most capacity rows) into the ring at `start`: two slices, no gather."""
        first = min(len(data), self._capacity - start)
        column[start:start + first] = data[:first]
        column[:len(data) - first] = data[first:]

    def _check_not_empty(self):
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")

    def _batch(self, indices: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        return ReplayBatch(transitions=type(self._columns)(*(
            None if column is None else spaces.take(column, indices)
            for column in self._columns)),
                           indices=indices, generations=self.generations(indices),
                           weights=weights)


def _tree_capacity(capacity: int) -> int:
    return 1 << max(0, int(capacity - 1).bit_length())


class SegmentTree:
    """An array-backed complete binary tree over `capacity` leaves (rounded up to a power of 2).

    Node 1 is the root, node k has children 2k and 2k+1, the leaves are nodes
    [capacity, 2 * capacity). Every operation works on many leaves at once with numpy: a loop
    runs over the tree's depth, never over the items.
    """
    operation = None                 # a numpy ufunc combining two children
    scalar_operation = None          # the same on two Python floats
    neutral = 0.0                    # its identity element, the value of an empty leaf

    def __init__(self, capacity: int):
        self.capacity = _tree_capacity(capacity)
        self.depth = self.capacity.bit_length() - 1
        self.tree = np.full(2 * self.capacity, self.neutral, np.float64)

    def update(self, indices, values):
        """Set leaves `indices` to `values`; for a repeated index the last write wins."""
        indices = np.asarray(indices, np.int64).ravel()
        values = np.broadcast_to(np.asarray(values, np.float64), indices.shape)
        if indices.size == 0:
            return
        if not (indices[1:] > indices[:-1]).all():
            # np.unique on the reversed indices finds each index's last occurrence (numpy does
            # not promise an order for repeated indices in a fancy assignment).
            indices, last = np.unique(indices[::-1], return_index=True)
            values = values[::-1][last]
        if indices[-1] - indices[0] == indices.size - 1:
            return self.update_range(int(indices[0]), values)
        nodes = indices + self.capacity
        self.tree[nodes] = values
        children = self.tree.reshape(-1, 2)          # row k: nodes 2k and 2k+1
        for _ in range(self.depth):
            # Parents repeat where siblings were both updated: each copy computes the same
            # value from children already complete, so the repeats need no removal.
            nodes >>= 1
            pairs = children[nodes]
            self.tree[nodes] = self.operation(pairs[:, 0], pairs[:, 1])

    def update_range(self, first_leaf: int, values: np.ndarray):
        """Set the consecutive leaves from ``first_leaf`` on (a block added to the ring) to
        ``values``: strided slices, no gathers, written in place. The levels near the root
        touch a node or two each; there Python arithmetic on floats is cheaper than a numpy
        call (a 256-leaf block on a 2^20-leaf tree: 8 numpy levels, 12 scalar ones)."""
        tree, operation = self.tree, self.operation
        first = int(first_leaf) + self.capacity
        last = first + len(values) - 1
        tree[first:last + 1] = values
        level = 0
        while level < self.depth and last - first >= 3:
            first, last = first >> 1, last >> 1
            operation(tree[2 * first:2 * last + 2:2], tree[2 * first + 1:2 * last + 2:2],
                      out=tree[first:last + 1])
            level += 1
        combine = self.scalar_operation
        for _ in range(level, self.depth):
            first, last = first >> 1, last >> 1
            for node in range(first, last + 1):
                tree[node] = combine(tree.item(2 * node), tree.item(2 * node + 1))

    def __getitem__(self, indices) -> np.ndarray:
        return self.tree[np.asarray(indices, np.int64) + self.capacity]

    def reduce(self) -> float:
        return float(self.tree[1])


class SumTree(SegmentTree):
    """Sums of priorities: sampling proportional to priority in O(log n) per draw."""
    operation = np.add
    scalar_operation = operator.add
    neutral = 0.0

    def total(self) -> float:
        return self.reduce()

    def find(self, prefix_sums) -> np.ndarray:
        """For each prefix sum u, the leaf i with sum(leaves[:i]) <= u < sum(leaves[:i + 1]).

        A u at or beyond the total (float rounding) is clamped to just below it, so the descent
        never ends on an empty leaf past the last nonzero one.
        """
        u = np.asarray(prefix_sums, np.float64).copy()
        np.clip(u, 0.0, np.nextafter(self.total(), 0.0), out=u)
        nodes = np.ones(u.shape, np.int64)
        for _ in range(self.depth):
            nodes <<= 1                              # the left child
            left_sum = self.tree[nodes]
            go_right = u >= left_sum
            np.subtract(u, left_sum, out=u, where=go_right)
            nodes += go_right
        return nodes - self.capacity


class MinTree(SegmentTree):
    """Minimum priority: the largest importance weight, used to normalize the others."""
    operation = np.minimum
    scalar_operation = min
    neutral = np.inf

    def min(self) -> float:
        return self.reduce()


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritization (Schaul et al. 2016, arXiv:1511.05952).

    Slot i is drawn with P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |TD error_i| + epsilon, and
    weighted by w_i = (N * P(i))^-beta / max_j w_j, the max over all N stored slots (as in
    OpenAI baselines and cpprb: a batch's weights then do not depend on what else it drew).
    beta is annealed linearly from beta0 to 1 over beta_steps calls to sample().
    """

    def __init__(self, capacity, observation_shape, action_shape, alpha=0.6, beta0=0.4,
                 beta_steps=100_000, epsilon=1e-6, **kwargs):
        super().__init__(capacity, observation_shape, action_shape, **kwargs)
        self.alpha, self.beta0, self.beta_steps, self.epsilon = alpha, beta0, beta_steps, epsilon
        self.sum_tree = SumTree(capacity)
        self.min_tree = MinTree(capacity)
        self.max_priority = 1.0          # for new data without priorities (p, before alpha)
        self.sample_calls = 0

    @property
    def beta(self) -> float:
        progress = min(1.0, self.sample_calls / self.beta_steps) if self.beta_steps > 0 else 1.0
        return self.beta0 + (1.0 - self.beta0) * progress

    def nbytes(self) -> int:
        return super().nbytes() + self.sum_tree.tree.nbytes + self.min_tree.tree.nbytes

    def add(self, transitions: Transitions, priorities=None) -> int:
        """Store a block with the initial priorities (|TD|) the explorer computed, or the
        largest priority seen so far when None, so new data is drawn at least once soon."""
        n = self._check_block(transitions)
        if self.reward_scale != 1.0:
            transitions = transitions._replace(
                rewards=np.asarray(transitions.rewards, np.float32) * self.reward_scale)
        kept = min(n, self._capacity)
        if priorities is None:
            leaves = np.full(kept, self.max_priority ** self.alpha)
        else:   # checked (broadcast to [N]) before anything is written
            p = np.abs(np.broadcast_to(np.asarray(priorities, np.float64), (n,))[n - kept:])
            p += self.epsilon
            self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
            leaves = np.power(p, self.alpha, out=p)
        start = (self._total_added + n - kept) % self._capacity
        super().add(transitions)
        # The block's slots are consecutive in the ring: at most two ranges of leaves.
        first = min(kept, self._capacity - start)
        for tree in (self.sum_tree, self.min_tree):
            tree.update_range(start, leaves[:first])
            if first < kept:
                tree.update_range(0, leaves[first:])
        return kept

    def sample(self, batch_size) -> ReplayBatch:
        """Stratified: the total priority is cut into batch_size equal segments and one
        prefix sum is drawn uniformly in each (Schaul et al., appendix B.2.1)."""
        self._check_not_empty()
        total = self.sum_tree.total()
        segment = total / batch_size
        prefix_sums = (np.arange(batch_size) + self.rng.random(batch_size)) * segment
        indices = self.sum_tree.find(prefix_sums)
        probabilities = self.sum_tree[indices] / total
        beta = self.beta
        # w_i / max_j w_j = (N P(i))^-beta / (N P_min)^-beta = (P(i) / P_min)^-beta
        min_probability = self.min_tree.min() / total
        weights = (probabilities / min_probability) ** -beta
        self.sample_calls += 1
        return self._batch(indices, weights.astype(np.float32))

    def update_priorities(self, indices, generations, priorities) -> int:
        """Set p = |priorities| + epsilon for the slots not overwritten since they were
        sampled; returns how many updates were applied (stale ones are dropped)."""
        indices = np.asarray(indices, np.int64).ravel()
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise ValueError(f"slots must be in [0, {len(self)}), got {indices.min()}.."
                             f"{indices.max()}")
        fresh = self.generations(indices) == np.asarray(generations, np.int64).ravel()
        p = np.abs(np.asarray(priorities, np.float64).ravel()[fresh]) + self.epsilon
        if p.size:
            self.max_priority = max(self.max_priority, float(p.max()))
            self._set_priorities(indices[fresh], p)
        return int(fresh.sum())

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.update(priorities=self.sum_tree[np.arange(len(self))].copy(),
                     max_priority=self.max_priority, sample_calls=self.sample_calls)
        return state

    def load_state_dict(self, state: dict):
        super().load_state_dict(state)
        self.sum_tree = SumTree(self._capacity)
        self.min_tree = MinTree(self._capacity)
        slots = np.arange(len(self))
        leaves = np.asarray(state["priorities"], np.float64)   # already raised to alpha
        self.sum_tree.update(slots, leaves)
        self.min_tree.update(slots, leaves)
        self.max_priority = float(state["max_priority"])
        self.sample_calls = int(state["sample_calls"])

    def _set_priorities(self, slots, priorities):
        leaves = priorities ** self.alpha
        self.sum_tree.update(slots, leaves)
        self.min_tree.update(slots, leaves)
