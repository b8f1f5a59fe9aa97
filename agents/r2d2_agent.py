"""r2d2_agent: replay sequences with stored recurrent state, for a Q network with memory (R2D2:
Kapturowski et al. 2019; models/r2d2.py). On a rollout worker (an Ape-X actor) each env slot's
stream of steps is cut into sequences of --burn_in + --sequence_length steps, a new one every
--sequence_length steps (consecutive sequences overlap by the burn-in, so every step after a
stream's first burn-in is learned from exactly once, as the paper's 80-step sequences overlapping
by 40). Each carries the state the acting policy held before its first step and the steps where
episodes began; it may cross episode boundaries (the unroll zeroes the state there).

The n-step targets are computed here, on the workers (as dqn_agent's), step by step inside each
sequence: step t of a sequence sums

    R_t = r_t + gamma r_{t+1} + ... + gamma^(m-1) r_{t+m-1}

and bootstraps from the value of the sequence's position t + m (its next observation for t + m
= S) with the factor gamma^m, m = n unless

- the episode terminated at step t + j (j < n): m = j + 1, nothing bootstrapped (factor 0);
- the sequence ends first: m = S - t, bootstrapped from the observation after the last step;
- an env failure's cut at t + j (j > 0): m = j, bootstrapped from the observation the policy saw
  there (the real state where the episode was cut); a cut step itself is not learned from;
- a truncation (a time limit) at t + j: its final observation's value would need the state
  after that step, which no position of the sequence holds, so such a step is not learned from
  (one target in roughly every episode length / n is dropped, not biased).

Steps of the burn-in are never learned from (``learn`` 0): the learner only unrolls them to
refresh the stored state. Windows run across fragment ends: the last steps of each fragment wait
(``carry``) for the next. --buffer_size and --batch_size count sequences.
"""
import numpy as np

from agents import register_agent
from agents.n_step import replay_observations
from agents.replay_agent import ReplayAgent
from core import spaces
from core.argtypes import non_negative_int, positive_int, unit_interval
from core.errors import ConfigError
from core.learning.sequence_replay import Sequences
from core.types import Trajectory

#: the columns of a stream of steps (time-major [M, E, ...]) kept between fragments
STREAM_FIELDS = ("observations", "actions", "rewards", "terminated", "truncated", "valid",
                 "starts", "states")


@register_agent("r2d2_agent")
class R2D2Agent(ReplayAgent):
    """Sequences with stored state and n-step targets on the workers; Q gradients on replay
    batches of sequences."""
    learns_from_sequences = True
    hands_whole_episodes = False

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gamma", type=unit_interval, default=0.99,
                            help="discount factor of the n-step returns and of the value "
                                 "they bootstrap from (default: %(default)s)")
        parser.add_argument("--n_step", type=positive_int, default=5,
                            help="n: rewards summed over up to n steps per target inside a "
                                 "sequence (R2D2's 5) (default: %(default)s)")
        parser.add_argument("--sequence_length", type=positive_int, default=40,
                            help="steps of a replayed sequence that are learned from (R2D2's "
                                 "40); a new sequence starts every this many steps of each env "
                                 "slot (default: %(default)s)")
        parser.add_argument("--burn_in", type=non_negative_int, default=20,
                            help="steps before those, replayed from the stored state only to "
                                 "refresh it, not learned from (R2D2's 40 of 80) "
                                 "(default: %(default)s)")

    @classmethod
    def her_problem(cls, config):
        return ("its replay rows are sequences of a recurrent policy, and relabelling a "
                "sequence's goals would change the state its policy carried")

    @classmethod
    def replay_layout(cls, config):
        """The replay buffer's rows: sequences of burn-in + learned steps."""
        return {"sequence_length": config.burn_in + config.sequence_length}

    @classmethod
    def env_steps_per_row(cls, config):
        return config.sequence_length

    def __init__(self, args, model, seed=0):
        if not getattr(model, "recurrent", False):
            raise ConfigError(
                f"agent r2d2_agent replays sequences from the recurrent state a policy carried, "
                f"but model {type(model).__name__} has no memory. Use --model_name r2d2 (a Q "
                f"network with an LSTM or GRU), or dqn_agent for a Q network without memory.")
        super().__init__(args, model, seed)
        self.carry = None  # {field: [M, E, ...]}: the stream's steps no sequence starts from yet

    # -- fragments -> sequences ----------------------------------------------------------------
    def fragment_transitions(self, trajectory: Trajectory):
        if trajectory.memory is None:
            raise ValueError("r2d2_agent: a fragment without the policy's states (a rollout "
                             "worker records them for a recurrent model)")
        stream = self.stream_of(trajectory)
        if self.carry is not None:
            stream = {name: spaces.concatenate([self.carry[name], value])
                      for name, value in stream.items()}
        sequences, self.carry = sequences_of(stream, trajectory.last_observations, self.args)
        return sequences

    @staticmethod
    def stream_of(trajectory):
        observations = replay_observations(trajectory.observations)
        shape = np.shape(trajectory.rewards)
        valid = (np.ones(shape, bool) if trajectory.valid is None
                 else np.asarray(trajectory.valid, bool))
        return {"observations": observations, "actions": np.asarray(trajectory.actions),
                "rewards": np.asarray(trajectory.rewards, np.float32),
                "terminated": np.asarray(trajectory.terminated, bool),
                "truncated": np.asarray(trajectory.truncated, bool), "valid": valid,
                "starts": np.asarray(trajectory.memory.episode_starts, bool),
                "states": {name: np.asarray(value)
                           for name, value in trajectory.memory.states.items()}}

    def send_trajectory(self, trajectory: Trajectory):
        """Keep the fragment's sequences; what it reports as stored is the env steps they
        cover past their burn-in (what --learning_starts counts), not their rows."""
        self.pending = self.fragment_transitions(trajectory)
        rows = 0 if self.pending is None else len(self.pending.rewards)
        return {"transitions": rows * self.env_steps_per_row(self.args)}

    # -- checkpoints: the stream's unfinished steps are part of where the worker stands -------
    def get_state(self):
        return {**super().get_state(),
                "carry": None if self.carry is None else {
                    name: spaces.copy(value) for name, value in self.carry.items()}}

    def set_state(self, state):
        super().set_state(state)
        carry = state.get("carry")
        self.carry = None if carry is None else {
            name: spaces.tree_map(np.asarray, value) for name, value in carry.items()}

    def episodes_restarted(self):
        """Every env begins a new episode: the stream does not continue into the next
        fragment."""
        super().episodes_restarted()
        self.carry = None


def sequences_of(stream, last_observations, args):
    """(Sequences of every window of ``stream`` [M, E, ...] that fits, in (start, env) order;
    the steps kept for the next fragment). A sequence starts at 0, L, 2L, ... of the stream
    (L = --sequence_length) and spans S = burn_in + L steps."""
    length, stride = args.burn_in + args.sequence_length, args.sequence_length
    total, num_envs = np.shape(stream["rewards"])
    begins = np.arange(0, max(0, total - length) + 1, stride) if total >= length \
        else np.arange(0)
    kept = int(begins[-1]) + stride if len(begins) else 0
    carry = {name: spaces.take(value, slice(kept, None)) for name, value in stream.items()}
    if not len(begins):
        return None, carry
    steps = (begins[:, None] + np.arange(length)[None, :])           # [K, S]

    def rows(array):  # [M, E, ...] -> [K * E, S, ...], sequence k of env e at row k * E + e
        picked = array[steps]                                         # [K, S, E, ...]
        picked = np.moveaxis(picked, 2, 1)                            # [K, E, S, ...]
        return picked.reshape(len(begins) * num_envs, length, *array.shape[2:])

    def after(array, last):  # the observation after each sequence's last step: [K * E, ...]
        ends = begins + length
        following = np.concatenate([array, np.asarray(last)[None]])  # position M: the last
        return following[ends].reshape(len(begins) * num_envs, *array.shape[2:])

    returns, discounts, bootstrap, learn = n_step_targets(
        rows(stream["rewards"]), rows(stream["terminated"]), rows(stream["truncated"]),
        rows(stream["valid"]), args.n_step, args.gamma)
    learn[:, :args.burn_in] = 0.0
    states = {name: value[begins].reshape(len(begins) * num_envs, *value.shape[2:])
              for name, value in stream["states"].items()}
    sequences = Sequences(
        observations=spaces.tree_map(rows, stream["observations"]),
        actions=rows(stream["actions"]), rewards=returns, discounts=discounts,
        bootstrap=bootstrap, learn=learn, starts=rows(stream["starts"]), state=states,
        next_observation=spaces.tree_map(after, stream["observations"], last_observations),
        burn_in=np.full(len(begins) * num_envs, args.burn_in, np.int64))
    return sequences, carry


def _at(array, index, axis):
    return np.take_along_axis(array, index, axis)


def n_step_targets(rewards, terminated, truncated, valid, n, gamma):
    """For sequences [N, S]: (n-step returns R, bootstrap factors gamma^m or 0, bootstrap
    positions t + m in 1..S, learn 1/0), by the module docstring's rules."""
    count, length = rewards.shape
    t = np.arange(length)[None, :]
    returns = np.zeros((count, length), np.float64)
    discounts = np.zeros((count, length), np.float64)
    bootstrap = np.zeros((count, length), np.int64)
    learn = valid.copy()                                    # a cut step is not learned from
    open_ = valid.copy()                                    # windows still summing rewards
    for k in range(n):
        index = np.minimum(t + k, length - 1)
        inside = t + k < length
        at = np.broadcast_to(t + k, (count, length))
        if k > 0:  # a cut ends the window before it: bootstrap from what the policy saw there
            cut = open_ & inside & ~_at(valid, index, 1)
            discounts[cut], bootstrap[cut] = gamma ** k, at[cut]
            open_ &= ~cut
        ends_sequence = open_ & ~inside                     # the sequence ended first
        discounts[ends_sequence], bootstrap[ends_sequence] = gamma ** k, length
        open_ &= inside
        returns += np.where(open_, gamma ** k * _at(rewards, index, 1), 0.0)
        stop = open_ & _at(terminated, index, 1)        # no bootstrap
        bootstrap[stop] = at[stop] + 1
        timed_out = open_ & _at(truncated, index, 1) & ~_at(terminated, index, 1)
        learn &= ~timed_out                                 # its final value is not stored
        open_ &= ~(stop | timed_out)
    discounts[open_] = gamma ** n                           # n rewards summed
    bootstrap[open_] = np.broadcast_to(t + n, (count, length))[open_]
    return (returns.astype(np.float32), discounts.astype(np.float32), bootstrap,
            learn.astype(np.float32))
