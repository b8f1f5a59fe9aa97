"""Transitions from fragments: one per step, [T, E] (``step_transitions``: what whole episodes
are assembled from, agents/episodes.py), and n-step ones, computed on the workers (Ape-X:
Horgan et al. 2018).

A transition starting at step t of an env sums the next k rewards, discounted,

    R = r_t + gamma r_{t+1} + ... + gamma^(k-1) r_{t+k-1},

and bootstraps from the observation after step t+k-1 with the factor gamma^k
(``Transitions.discounts``), where k is n unless the episode ended sooner:

- a termination at step t+j (j < n) ends the return there (k = j + 1) and nothing is
  bootstrapped (``terminated`` = 1);
- a truncation (a time limit) at step t+j ends it too (k = j + 1), but bootstraps from that
  step's final observation: a time limit is not a terminal state;
- an env failure's cut (``Trajectory.valid`` False at step t+j, j > 0; core/sampling/rollout.py)
  ends it before the cut step (k = j), bootstrapping from the observation the policy saw there
  (the real state where the episode was cut); a transition never starts at a cut step.

Windows run across fragment boundaries: the last n - 1 steps of each fragment are carried to
the next (``Carry``), and a transition whose window is still open at a fragment's end is emitted
with the next fragment, once its window closes. The carry is plain arrays (checkpoints keep it);
a worker whose envs start new episodes without finishing the old ones (a restore that could not
continue them) must drop it.
"""
from typing import NamedTuple, Optional

import numpy as np

from core import spaces
from core.learning.replay_buffer import Transitions


class Carry(NamedTuple):
    """The last m <= n - 1 steps of a fragment, [m, E, ...], and which of them already started
    an emitted transition (or never will: a cut step)."""
    observations: object        # array or tree
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    finals: object              # the final observation of each truncated step (else zeros)
    settled: np.ndarray         # bool: no transition of this start is left to emit

    def to_state(self):
        return {name: spaces.copy(value) for name, value in self._asdict().items()}

    @classmethod
    def from_state(cls, state):
        return None if state is None else cls(**{name: spaces.tree_map(np.asarray, state[name])
                                                 for name in cls._fields})


def replay_observations(observations):
    """A fragment's observations as a replay buffer stores them: float observations as
    float32, uint8 pixels as uint8; a structured observation's leaves as they are."""
    if spaces.is_tree(observations):
        return observations
    observations = np.asarray(observations)
    if observations.dtype != np.uint8:  # uint8 pixels stay uint8 into the replay buffer
        observations = observations.astype(np.float32, copy=False)
    return observations


def step_transitions(trajectory, terminal=False):
    """The one-step transition of every step, [T, E] arrays. The next observation of step
    (t, e) is the observation stored at (t + 1, e), or ``last_observations[e]`` for the
    fragment's last step; a truncated step's is its final observation
    (``truncated_observations``: a time limit is not a terminal state, it bootstraps), and with
    ``terminal`` a terminated step's too (``trajectory.terminal_observations``, for whole
    episodes whose achieved goals matter), else the next episode's first, which terminated = 1
    keeps out of the target. Actions keep the trajectory's dtype; float observations become
    float32, uint8 pixels stay uint8."""
    observations = replay_observations(trajectory.observations)
    finals = [(trajectory.truncated_index, trajectory.truncated_observations)]
    if terminal and trajectory.terminal_index is not None:
        finals.append((trajectory.terminal_index, trajectory.terminal_observations))
    finals = [(np.asarray(index).T, values) for index, values in finals if len(index)]

    def next_of(obs, last, *final):  # one array (a leaf of a structured observation)
        following = np.empty_like(obs)
        following[:-1] = obs[1:]
        following[-1] = last
        for ((t, e), _), values in zip(finals, final):
            following[t, e] = values
        return following

    next_observations = spaces.tree_map(next_of, observations, trajectory.last_observations,
                                        *[values for _, values in finals])
    return Transitions(
        observations=observations, actions=np.asarray(trajectory.actions),
        rewards=np.asarray(trajectory.rewards, dtype=np.float32),
        next_observations=next_observations,
        terminated=np.asarray(trajectory.terminated, dtype=np.float32))


def dense_finals(trajectory):
    """The final observation of every truncated step, [T, E, ...] (zeros elsewhere)."""
    finals = spaces.tree_map(np.zeros_like, trajectory.observations)
    if len(trajectory.truncated_index):
        t, e = np.asarray(trajectory.truncated_index).T
        spaces.tree_map(lambda a, v: a.__setitem__((t, e), v), finals,
                        trajectory.truncated_observations)
    return finals


def n_step_transitions(trajectory, n, gamma, carry: Optional[Carry] = None):
    """(Transitions of every window that closed, in (t, e) order of their first step; the
    Carry for the next fragment, None when n is 1)."""
    num_steps, num_envs = np.shape(trajectory.rewards)
    valid = (np.ones((num_steps, num_envs), bool) if trajectory.valid is None
             else np.asarray(trajectory.valid, bool))
    steps = Carry(observations=trajectory.observations,
                  actions=np.asarray(trajectory.actions),
                  rewards=np.asarray(trajectory.rewards, np.float64),
                  terminated=np.asarray(trajectory.terminated, bool),
                  truncated=np.asarray(trajectory.truncated, bool), valid=valid,
                  finals=dense_finals(trajectory),
                  settled=np.zeros((num_steps, num_envs), bool))
    if carry is not None and len(carry.rewards):
        steps = Carry(*(spaces.concatenate([old, new]) for old, new in zip(carry, steps)))
    length = len(steps.rewards)
    t = np.arange(length)[:, None]
    e = np.arange(num_envs)[None, :]
    returns = np.zeros((length, num_envs))
    window = np.zeros((length, num_envs), np.int64)   # k: the steps the return sums
    terminated = np.zeros((length, num_envs), bool)
    # where the bootstrap observation is: 0 observations[at], 1 finals[at], 2 the fragment's
    # last observations (after its last step)
    source = np.zeros((length, num_envs), np.int8)
    at = np.zeros((length, num_envs), np.int64)
    open_ = steps.valid & ~steps.settled             # windows still summing rewards
    started = open_.copy()
    for k in range(n):
        index = np.minimum(t + k, length - 1)
        inside = t + k < length
        if k > 0:  # a cut ends the window before it
            cut = open_ & inside & ~steps.valid[index, e]
            window[cut], source[cut], at[cut] = k, 0, np.broadcast_to(index, cut.shape)[cut]
            open_ &= ~cut
        summing = open_ & inside
        returns += np.where(summing, gamma ** k * steps.rewards[index, e], 0.0)
        ends = summing & (steps.terminated[index, e] | steps.truncated[index, e])
        window[ends], source[ends] = k + 1, 1
        at[ends] = np.broadcast_to(index, ends.shape)[ends]
        terminated |= ends & steps.terminated[index, e]
        open_ &= ~ends
    full = open_ & (t + n <= length)              # n steps, no end: bootstrap n steps on
    window[full] = n
    source[full] = np.where(np.broadcast_to(t + n, full.shape) == length, 2, 0)[full]
    at[full] = np.broadcast_to(np.minimum(t + n, length - 1), full.shape)[full]
    pending = open_ & ~full                        # still open at the end: next fragment
    rows, cols = np.nonzero(started & ~pending)    # closed this time, in (t, e) order

    def next_of(observations, finals, last):
        where, when = source[rows, cols], at[rows, cols]
        out = np.array(observations[when, cols])
        from_final = where == 1
        out[from_final] = finals[when[from_final], cols[from_final]]
        out[where == 2] = last[cols[where == 2]]
        return out

    transitions = Transitions(
        observations=spaces.take(steps.observations, (rows, cols)),
        actions=steps.actions[rows, cols],
        rewards=returns[rows, cols].astype(np.float32),
        next_observations=spaces.tree_map(next_of, steps.observations, steps.finals,
                                          trajectory.last_observations),
        terminated=terminated[rows, cols].astype(np.float32),
        discounts=(gamma ** window[rows, cols]).astype(np.float32))
    if n == 1:
        return transitions, None
    keep = slice(max(0, length - (n - 1)), length)  # every pending start is in there
    new_carry = Carry(*(spaces.take(field, keep) for field in steps[:-1]),
                      settled=~pending[keep])
    return transitions, new_carry
