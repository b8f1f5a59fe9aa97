"""Hindsight experience replay (Andrychowicz et al. 2017, arXiv:1707.01495) for the replay loop
(--her): a replay buffer that relabels goals when it is sampled.

A goal-conditioned env (gymnasium-robotics' Fetch envs, envs/goal_envs.py) observes a Dict with
``observation``, ``achieved_goal`` and ``desired_goal`` and rewards with its own
``compute_reward(achieved_goal, desired_goal, info)``, vectorized over rows. With sparse rewards
almost every stored transition says "missed"; HER also replays each as if the goal had been one
the episode did reach, which says how to reach that one.

``HERReplayBuffer`` stores whole episodes (the agent hands only finished ones, their last steps
marked in ``Transitions.episode_ends``: agents/episodes.py) and remembers, per slot, where its
episode starts and ends, counted in transitions added since creation (ring order: transition
number i sits in slot i % capacity). A sampled batch is uniform over the stored slots, as the
plain buffer's, and its first ``batch * k // (k + 1)`` rows are relabelled (SB3's HerReplayBuffer
the same way): the new desired goal, of the observation and of the next observation alike, is
the achieved goal of the next observation of another step u of the same episode, chosen by
--her_strategy for the sampled step t of an episode of steps [s, e):

    future    u uniform in [t, e)   (t itself included, as in SB3 and OpenAI baselines)
    final     u = e - 1
    episode   u uniform in [s, e)

and the reward is the env's ``compute_reward(next achieved goal, new goal, {})`` over those rows
at once; ``terminated`` too, from the env's ``compute_terminated`` (gymnasium-robotics' GoalEnv
API: the termination a pair of goals makes) when it gives one value per row, else, as SB3 does,
the stored flag stays (Fetch's envs never terminate). The other rows are
left as stored. The ring overwrites the oldest transitions first, so of an episode partly
overwritten only its first steps are gone: ``future`` and ``final`` goals lie at or after a
stored step and are always there; ``episode`` draws from the steps still stored. Infos are not
kept (an env whose reward needs them gets ``{}``).

Prioritized replay does not compose with it here (a priority is the |TD error| of the stored
transition, not of a relabelled one): ``check_her`` refuses the pair, as it refuses envs without
goals, agents without whole episodes or whose transitions cannot be relabelled (an agent's
``her_problem``: DQN's n-step returns), and normalized observations.
"""
import numpy as np

from core import spaces
from core.learning.replay_buffer import ReplayBuffer
from core.errors import ConfigError

STRATEGIES = ("future", "final", "episode")
ACHIEVED, DESIRED = "achieved_goal", "desired_goal"


def goal_functions(env):
    """``(compute_reward, compute_terminated or None)`` of a built env: the wrapper's own, else
    its gymnasium env's ``.unwrapped``'s (gym_env keeps the gymnasium env as ``env.env``)."""
    holders = [env]
    inner = getattr(env, "env", None)
    if inner is not None:
        holders.append(getattr(inner, "unwrapped", inner))
    found = {}
    for name in ("compute_reward", "compute_terminated"):
        found[name] = next((getattr(h, name) for h in holders
                            if callable(getattr(h, name, None))), None)
    return found["compute_reward"], found["compute_terminated"]


def _two_rows(observation_space):
    """Two achieved and two desired goals drawn from the space: a probe of vectorization."""
    layout = spaces.layout_of(observation_space)
    draw = [layout.encode(observation_space.sample()) for _ in range(2)]
    dtypes = spaces.carried(observation_space)[1]
    return tuple(np.stack([d[key] for d in draw]).astype(dtypes[key]) for key in (ACHIEVED,
                                                                                 DESIRED))


def _vectorized(fn, achieved, desired):
    try:
        return np.shape(np.asarray(fn(achieved, desired, {}))) == (len(achieved),)
    except Exception:  # noqa: BLE001 - a function that cannot take rows is not vectorized
        return False


def goal_leaves_problem(observation_space):
    """Why ``observation_space`` is not goal-conditioned (None when it is)."""
    layout = spaces.layout_of(observation_space)
    leaves = layout.leaves
    if ACHIEVED not in leaves or DESIRED not in leaves:
        return (f"its observation space is {observation_space}; HER needs a Dict with top-level "
                f"keys {ACHIEVED!r} and {DESIRED!r} (arrays of one shape), as gymnasium-robotics' "
                f"Fetch envs and ddrl/PointGoal-v0 give")
    if leaves[ACHIEVED].shape != leaves[DESIRED].shape:
        return (f"its {ACHIEVED!r} has shape {leaves[ACHIEVED].shape} and its {DESIRED!r} "
                f"{leaves[DESIRED].shape}; an achieved goal becomes a desired one, so they must "
                f"have one shape")
    return None


def check_her(spec, plugins, env_name):
    """Refuse (ConfigError) what --her cannot work with, before anything starts: the flags it
    does not compose with, an agent that cannot hand whole episodes, an env without goals or
    without a vectorized compute_reward. ``env_name`` names the env in the messages."""
    from core.plugins import make_env
    loop, agent_cls = spec.loop, plugins.agent_cls
    if loop.prioritized_replay:
        raise ConfigError(
            "--her with --prioritized_replay: a priority is the |TD error| of a transition as "
            "stored, but hindsight relabelling replays it with another goal and reward each time "
            "it is drawn, so the two do not compose here. Use one of them: --her for sparse "
            "goal-conditioned rewards, --prioritized_replay otherwise.")
    problem = agent_cls.her_problem(spec.agent)
    if problem:
        raise ConfigError(f"--her with --agent_name {spec.agent_name}: {problem}.")
    if not agent_cls.hands_whole_episodes:
        raise ConfigError(
            f"--her needs an agent that hands the replay buffer whole episodes "
            f"(agents/base.py OffPolicyAgent.hands_whole_episodes, agents/episodes.py); "
            f"--agent_name {spec.agent_name} does not. Use sac_agent or dqn_agent, or give "
            f"yours an Episodes.")
    if loop.normalize_obs:
        raise ConfigError(
            "--her with --normalize_obs: replay holds observations normalized, and the env's "
            "compute_reward needs goals in its own units. Leave --normalize_obs out with --her.")
    env = make_env(plugins, spec.env)
    try:
        problem = goal_leaves_problem(env.observation_space)
        if problem:
            raise ConfigError(f"--her with the env {env_name}: {problem}.")
        compute_reward, _ = goal_functions(env)
        if compute_reward is None:
            raise ConfigError(
                f"--her with the env {env_name}: it has no compute_reward(achieved_goal, "
                f"desired_goal, info), neither on its wrapper nor on its gymnasium env's "
                f".unwrapped; HER recomputes rewards for relabelled goals with it.")
        if not _vectorized(compute_reward, *_two_rows(env.observation_space)):
            raise ConfigError(
                f"--her with the env {env_name}: its compute_reward does not return one reward "
                f"per row for goals of shape [N, ...]; the buffer relabels a batch at once and "
                f"needs it vectorized (as gymnasium-robotics' are).")
    finally:
        getattr(env, "close", lambda: None)()


class HERReplayBuffer(ReplayBuffer):
    """A uniform ring of whole episodes whose samples are relabelled with hindsight goals (the
    module docstring). ``spec`` (core.plugins.PluginSpec): the env to take compute_reward from
    is built from it, here; or give ``compute_reward`` (and ``compute_terminated``) directly."""

    def __init__(self, capacity, observation_shape, action_shape, spec=None, strategy="future",
                 k=4, compute_reward=None, compute_terminated=None, **kwargs):
        super().__init__(capacity, observation_shape, action_shape, **kwargs)
        if not spaces.is_tree(observation_shape) or not {ACHIEVED, DESIRED} <= set(
                observation_shape):
            raise ValueError(f"a HER buffer needs observations with {ACHIEVED!r} and "
                             f"{DESIRED!r} leaves, got {observation_shape}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
        self.strategy, self.k = strategy, int(k)
        self.env = None
        if compute_reward is None and spec is None:
            raise ValueError("a HER buffer needs the run's spec (to build its env) or "
                             "compute_reward")
        if compute_reward is None:
            from core.plugins import load_plugins, make_env
            self.env = make_env(load_plugins(spec), spec.env)
            compute_reward, compute_terminated = goal_functions(self.env)
            if compute_terminated is not None and not _vectorized(
                    compute_terminated, *_two_rows(self.env.observation_space)):
                compute_terminated = None
        self.compute_reward, self.compute_terminated = compute_reward, compute_terminated
        # per slot: its episode's first transition and one past its last, counted since creation
        self.episode_start = np.zeros(self._capacity, np.int64)
        self.episode_end = np.zeros(self._capacity, np.int64)

    def add(self, transitions, priorities=None) -> int:
        """Store a block of whole episodes (``transitions.episode_ends`` marks their last
        steps; None or an empty block stores nothing)."""
        if transitions is None or len(transitions.rewards) == 0:
            return 0
        if transitions.episode_ends is None:
            raise ValueError("a HER buffer takes blocks of whole episodes, their last steps "
                             "marked in episode_ends (an agent asked for whole_episodes)")
        ends = np.asarray(transitions.episode_ends, dtype=bool)
        n, first = len(ends), self._total_added
        if ends.shape != (n,) or n != len(transitions.rewards) or not ends[-1]:
            raise ValueError("episode_ends must be [N] bool, one per transition, with the block's "
                             "last transition an episode's last")
        last = np.flatnonzero(ends)
        lengths = np.diff(last, prepend=-1)
        starts = np.repeat(first + last - lengths + 1, lengths)
        stops = np.repeat(first + last + 1, lengths)
        kept = super().add(transitions)
        slot = (first + n - kept) % self._capacity
        self._write(self.episode_start, starts[n - kept:], slot)
        self._write(self.episode_end, stops[n - kept:], slot)
        return kept

    def sample(self, batch_size):
        return self.relabel(super().sample(batch_size))

    def relabel(self, batch):
        """The batch with its first ``B * k // (k + 1)`` rows given hindsight goals (the module
        docstring); the arrays are the batch's own copies, the ring is left as it is."""
        count = len(batch.indices) * self.k // (self.k + 1)
        if count == 0:
            return batch
        rows = slice(0, count)
        goals = self._columns.next_observations[ACHIEVED][self.goal_slots(batch.indices[rows])]
        t = batch.transitions
        t.observations[DESIRED][rows] = goals
        t.next_observations[DESIRED][rows] = goals
        achieved = t.next_observations[ACHIEVED][rows]
        t.rewards[rows] = np.asarray(self.compute_reward(achieved, goals, {}),
                                     dtype=np.float32).reshape(count)
        if self.compute_terminated is not None:
            t.terminated[rows] = np.asarray(self.compute_terminated(achieved, goals, {}),
                                            dtype=np.float32).reshape(count)
        return batch

    def goal_slots(self, slots):
        """For each sampled slot, the slot whose next achieved goal becomes its desired goal."""
        slots = np.asarray(slots, np.int64)
        added, capacity = self._total_added, self._capacity
        step = slots + capacity * ((added - 1 - slots) // capacity)  # its transition number
        end = self.episode_end[slots]
        if self.strategy == "final":
            chosen = end - 1
        elif self.strategy == "future":
            chosen = self.rng.integers(step, end)
        else:  # episode: the steps still stored
            chosen = self.rng.integers(np.maximum(self.episode_start[slots],
                                                  added - capacity), end)
        return chosen % capacity

    def state_dict(self) -> dict:
        state = super().state_dict()
        size = len(self)
        state.update(episode_start=self.episode_start[:size].copy(),
                     episode_end=self.episode_end[:size].copy())
        return state

    def load_state_dict(self, state: dict):
        if "episode_start" not in state:
            raise ValueError("checkpoint buffer has no episodes (saved without --her): a HER "
                             "buffer cannot relabel its transitions")
        super().load_state_dict(state)
        size = len(self)
        for name in ("episode_start", "episode_end"):
            saved = np.asarray(state[name], np.int64)
            if saved.shape != (size,):
                raise ValueError(f"checkpoint {name} has shape {saved.shape}, expected {(size,)}")
            getattr(self, name)[:size] = saved
