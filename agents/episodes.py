"""Whole episodes out of fragments, for an off-policy agent whose replay buffer needs them
(hindsight relabelling, core/learning/her.py; agents/base.py OffPolicyAgent.whole_episodes).

A fragment cuts episodes anywhere; ``Episodes`` keeps each env slot's unfinished episode across
fragments and hands on only finished ones, each one's steps consecutive and in time order, its
last step marked in ``Transitions.episode_ends``. An episode ends at a step that terminated or
was truncated (a time limit, or the step before an env failure's cut, which the rollout worker
marks truncated), and at a cut step itself (``Trajectory.valid`` False), which is dropped: so a
cut at a fragment's first step ends the episode carried from the last fragment. Steps of one
env slot never join another slot's episode, and each worker's agent has its own ``Episodes``.

The unfinished episodes are plain arrays (``get_state``: checkpoints keep them, so a run
resumed with --num_workers 0 hands the buffer the same episodes); a worker whose envs start
new episodes without finishing the old ones (a restore that could not continue them) drops
them (``reset``).

    episodes = Episodes()
    ready = episodes.add(steps, ends, valid)   # steps: Transitions [T, E]; ends, valid: [T, E]
    block = episodes.take()                    # Transitions [N] with episode_ends, or None
"""
import numpy as np

from core import spaces
from core.learning.replay_buffer import Transitions

#: the fields an episode carries (episode_ends is made when episodes are handed on)
FIELDS = tuple(name for name in Transitions._fields if name != "episode_ends")


def _map(fn, transitions):
    """``fn`` on every array (each leaf of a tree) of the fields that are not None."""
    return Transitions(*(None if value is None else spaces.tree_map(fn, value)
                         for value in transitions))


def _join(blocks):
    """One Transitions of the blocks' rows, in order (episode_ends left None)."""
    first = blocks[0]
    return Transitions(*(None if value is None else
                         spaces.concatenate([getattr(b, name) for b in blocks])
                         for name, value in zip(Transitions._fields, first)))


def _rows(transitions):
    return len(transitions.rewards)


def _to_state(transitions):
    return None if transitions is None else {
        name: spaces.copy(value) for name, value in zip(FIELDS, transitions) if value is not None}


def _from_state(state):
    if state is None:
        return None
    return Transitions(**{name: spaces.tree_map(np.asarray, value)
                          for name, value in state.items()})


class Episodes:
    """Each env slot's unfinished episode, and the finished ones not handed on yet."""

    def __init__(self):
        self.open = None    # per env slot: the pieces (Transitions [n]) of its episode so far
        self.done = []      # finished episodes (Transitions [L]), oldest first
        self.empty = None   # a block of no rows (what ``take`` hands when nothing finished)

    def add(self, steps, ends, valid=None):
        """Take a fragment's steps: ``steps`` a Transitions of [T, E] arrays (step t of env e
        at [t, e]), ``ends`` [T, E] bool (the step ended its episode), ``valid`` [T, E] bool or
        None (all valid). Returns the rows of the finished episodes not taken yet."""
        ends = np.asarray(ends, dtype=bool)
        num_steps, num_envs = ends.shape
        cut = (np.zeros_like(ends) if valid is None else ~np.asarray(valid, dtype=bool))
        if self.open is None or len(self.open) != num_envs:
            self.open = [[] for _ in range(num_envs)]
        if self.empty is None:
            self.empty = _map(lambda a: a[:0, 0].copy(), steps)
        for e in range(num_envs):
            start = 0
            for t in np.flatnonzero(ends[:, e] | cut[:, e]):
                # a cut step is dropped and ends the episode before it; an end closes its own
                stop = t if cut[t, e] else t + 1
                self._extend(e, steps, start, stop)
                self._close(e)
                start = t + 1
            self._extend(e, steps, start, num_steps)
        return self.ready()

    def ready(self):
        """Rows of the finished episodes not taken yet."""
        return sum(_rows(episode) for episode in self.done)

    def take(self):
        """The finished episodes as one block, their ends marked (``Transitions.episode_ends``),
        cleared; a block of no rows when none finished, None before the first fragment."""
        if not self.done:
            return None if self.empty is None else self.empty._replace(
                episode_ends=np.zeros(0, dtype=bool))
        episodes, self.done = self.done, []
        lengths = [_rows(episode) for episode in episodes]
        ends = np.zeros(sum(lengths), dtype=bool)
        ends[np.cumsum(lengths) - 1] = True
        return _join(episodes)._replace(episode_ends=ends)

    def reset(self):
        """Drop the unfinished episodes (every env starts a new one elsewhere than where its
        last fragment left it)."""
        self.open = None if self.open is None else [[] for _ in self.open]

    def _extend(self, e, steps, start, stop):
        if stop > start:  # copies: a piece must not hold the whole fragment's arrays alive
            self.open[e].append(_map(lambda a: a[start:stop, e].copy(), steps))

    def _close(self, e):
        if self.open[e]:
            self.done.append(_join(self.open[e]))
            self.open[e] = []

    # -- checkpoints: plain arrays ---------------------------------------------------------------
    def get_state(self):
        if self.open is None:
            return None
        pieces = [_join(p) if p else None for p in self.open]
        opened = [p for p in pieces if p is not None]
        return {"open_lengths": np.array([0 if p is None else _rows(p) for p in pieces],
                                         dtype=np.int64),
                "open": _to_state(_join(opened)) if opened else None,
                "done_lengths": np.array([_rows(d) for d in self.done], dtype=np.int64),
                "done": _to_state(_join(self.done)) if self.done else None,
                "empty": _to_state(self.empty)}

    def set_state(self, state):
        self.__init__()
        if state is None:
            return
        self.empty = _from_state(state["empty"])
        self.open = self._split(_from_state(state["open"]), state["open_lengths"], keep_empty=True)
        self.done = self._split(_from_state(state["done"]), state["done_lengths"])

    @staticmethod
    def _split(block, lengths, keep_empty=False):
        """``block``'s rows cut into pieces of ``lengths``: a list per piece (``keep_empty``:
        [] for a piece of length 0, [piece] otherwise) or the pieces themselves."""
        out, start = [], 0
        for length in np.asarray(lengths, dtype=np.int64).tolist():
            piece = (None if length == 0 else
                     _map(lambda a, s=start, n=length: a[s:s + n].copy(), block))
            out.append(([] if piece is None else [piece]) if keep_empty else piece)
            start += length
        return out
