"""Batched envs (core/batched_env.py, core/sampling/batched.py): one call steps a worker's envs.

Both autoreset modes are checked against a hand-written rollout of the same envs stepped one by
one: SameStep gives exactly the per-env path's fragment; NextStep the same transitions, with
each episode's reset step kept as a cut (invalid, truncated at the final observation) that
nothing learns from. Then truncation bootstraps, masks, recurrent state, a raising batch,
exact resume, the single-env view, and gym_env --vectorize end to end."""
import re

import numpy as np
import pytest
from gymnasium import spaces

from core.batched_env import NEXT_STEP, SAME_STEP, Unbatched, autoreset_mode, masked_rows
from core.errors import ConfigError, EnvFailure
from core.plugins import load_plugins, make_env, make_env_batch
from core.sampling.batched import BatchedEnvGroup
from core.sampling.rollout import RolloutWorker
from core.seeding import rebuilt_env as fresh_seed
from core.seeding import worker_envs as worker_seeds
from envs import OBSERVATION, register_env
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit


def episode_length(e):
    return 3 + e  # env e's episodes: 3, 4, 5, ... steps


@register_env("batch_counter")
class BatchCounter:
    """``num_envs`` counters in one numpy batch. Env e: observation [start, k] (start: its reset
    seed % 1000, +100 at each automatic reset; k: the step within the episode), reward k + 1
    at step k, episodes of 3 + e steps ending terminated for even e, truncated (a time limit)
    for odd e. ``--counter_mode next|same``: gymnasium's NextStep or SameStep autoreset.
    ``raise_at``: the step calls that raise, counted over every instance (tests set it)."""

    raise_at = ()
    calls = 0

    @staticmethod
    def add_args(parser):
        parser.add_argument("--counter_mode", choices=("next", "same"), default="same")

    def __init__(self, args, seed=None, num_envs=1):
        self.num_envs = num_envs
        self.metadata = {"autoreset_mode": NEXT_STEP if args.counter_mode == "next"
                         else SAME_STEP}
        self.single_observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.lengths = np.array([episode_length(e) for e in range(num_envs)])
        self.start = np.zeros(num_envs)
        self.k = np.zeros(num_envs, dtype=np.int64)
        self.done = np.zeros(num_envs, dtype=bool)  # NextStep: reset at the next step

    def obs(self):
        return np.stack([self.start, self.k], axis=1).astype(np.float32)

    def reset(self, seed=None, options=None):
        self.start = np.array([s % 1000 for s in seed], dtype=np.float64)
        self.k[:] = 0
        self.done[:] = False
        return self.obs(), {}

    def step(self, actions):
        assert np.asarray(actions).shape == (self.num_envs,)
        BatchCounter.calls += 1
        if BatchCounter.calls in self.raise_at:
            raise RuntimeError("simulator lost")
        rewards = (self.k + 1).astype(np.float32)
        if self.metadata["autoreset_mode"] == NEXT_STEP:
            resetting = self.done.copy()
            self.start[resetting] += 100
            self.k[resetting] = 0
            self.k[~resetting] += 1
            rewards[resetting] = 0
            ended = ~resetting & (self.k >= self.lengths)
            self.done = ended
            obs, infos = self.obs(), {}
        else:
            self.k += 1
            ended = self.k >= self.lengths
            final = self.obs()
            self.start[ended] += 100
            self.k[ended] = 0
            obs = self.obs()
            infos = {"final_obs": np.array([final[e] if ended[e] else None
                                            for e in range(self.num_envs)], dtype=object),
                     "_final_obs": ended}
        even = np.arange(self.num_envs) % 2 == 0
        return obs, rewards, ended & even, ended & ~even, infos


@register_env("single_counter")
class SingleCounter:
    """One env of BatchCounter's, stepped on its own (the per-env path's reference). It is
    built with ``seed``; env e of a worker is told by its seed's rank among the worker's."""

    seeds = ()

    @staticmethod
    def add_args(parser):
        pass

    def __init__(self, args, seed=None):
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.e = list(self.seeds).index(seed)
        self.length = episode_length(self.e)
        self.start, self.k = 0.0, 0

    def obs(self):
        return np.array([self.start, self.k], dtype=np.float32)

    def reset(self, seed=None, options=None):
        self.start = float(seed % 1000) if seed is not None else self.start + 100.0
        self.k = 0
        return self.obs(), {}

    def step(self, action):
        self.k += 1
        ended = self.k >= self.length
        return OBSERVATION(self.obs(), float(self.k), ended and self.e % 2 == 0,
                           ended and self.e % 2 == 1, {})


def worker(env_name, *flags, num_envs=3):
    args = parse_args(["--config", "none", "--env_name", env_name, "--num_workers", "0",
                       "--num_envs_per_worker", str(num_envs), "--seed", "0", *flags])
    SingleCounter.seeds = worker_seeds(0, 0, num_envs)
    w = RolloutWorker(run_spec(args), worker_index=0)
    sent = []
    send = w.agent.send_trajectory
    w.agent.send_trajectory = lambda trajectory: sent.append(trajectory) or send(trajectory)
    return w, sent


def cuts(trajectory):
    return {tuple(int(x) for x in ix): obs.tolist() for ix, obs in
            zip(trajectory.truncated_index, trajectory.truncated_observations)}


def ends(trajectory):
    return {tuple(int(x) for x in ix): obs.tolist() for ix, obs in
            zip(trajectory.terminal_index, trajectory.terminal_observations)}


@pytest.mark.contract
def test_same_step_gives_the_per_env_paths_fragment_exactly():
    batched, sent_b = worker("batch_counter", "--counter_mode", "same")
    single, sent_s = worker("single_counter")
    assert isinstance(batched.envs, BatchedEnvGroup)
    stats_b = batched.collect(None, 0, 11)
    stats_s = single.collect(None, 0, 11)
    b, s = sent_b[0], sent_s[0]
    for name in ("observations", "rewards", "terminated", "truncated", "valid",
                 "truncated_index", "truncated_observations", "terminal_index",
                 "terminal_observations", "last_observations"):
        np.testing.assert_array_equal(getattr(b, name), getattr(s, name), err_msg=name)
    assert b.valid.all()
    assert stats_b.episode_returns == stats_s.episode_returns
    assert stats_b.episode_lengths == stats_s.episode_lengths
    # by hand: env 1 (4 steps, a time limit) bootstraps from its real final observation
    s1 = worker_seeds(0, 0, 3)[1] % 1000
    assert cuts(b)[(3, 1)] == [s1, 4] and cuts(b)[(7, 1)] == [s1 + 100, 4]
    assert ends(b)[(2, 0)] == [worker_seeds(0, 0, 3)[0] % 1000, 3]
    np.testing.assert_array_equal(b.observations[4, 1], [s1 + 100, 0])


@pytest.mark.contract
def test_next_step_keeps_each_reset_step_as_a_cut():
    w, sent = worker("batch_counter", "--counter_mode", "next")
    stats = w.collect(None, 0, 11)
    traj = sent[0]
    s0, s1, s2 = (s % 1000 for s in worker_seeds(0, 0, 3))
    # env 0: steps t=0..2 are its first episode (terminated at t=2, final obs [s0, 3]); t=3
    # is the reset step (the policy saw the final observation; nothing is learned from it);
    # t=4..6 the second episode, t=7 its reset, t=8..10 the third
    valid = np.ones((11, 3), dtype=bool)
    valid[[3, 7], 0] = False
    valid[4, 1] = valid[9, 1] = False
    valid[5, 2] = False
    np.testing.assert_array_equal(traj.valid, valid)
    np.testing.assert_array_equal(traj.observations[3, 0], [s0, 3])
    np.testing.assert_array_equal(traj.observations[4, 0], [s0 + 100, 0])
    assert traj.terminated[2, 0] and not traj.truncated[2, 0]
    assert ends(traj)[(2, 0)] == [s0, 3]
    assert (traj.rewards[3, 0], traj.terminated[3, 0], traj.truncated[3, 0]) == (0, False, True)
    # env 1's time limit at t=3 bootstraps from its real final observation; its reset step
    # t=4 is cut at what the policy saw there (the same observation)
    assert cuts(traj)[(3, 1)] == [s1, 4] and cuts(traj)[(4, 1)] == [s1, 4]
    assert traj.truncated[3, 1] and not traj.terminated[3, 1]
    # the real transitions are the SameStep run's, one reset step later per episode
    np.testing.assert_array_equal(traj.rewards[:, 0], [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3])
    # every finished episode is reported once, with its real length and return
    assert sorted(zip(stats.episode_lengths, stats.episode_returns)) == [
        (3, 6.0)] * 3 + [(4, 10.0)] * 2 + [(5, 15.0)] * 2
    assert stats.env_errors == []
    # the valid steps are what the agent learns from: 33 steps less the 5 reset steps
    assert stats.agent_stats["advantage_count"] == 28


@pytest.mark.contract
@pytest.mark.parametrize("mode", ["next", "same"])
def test_gae_of_a_batched_env_never_crosses_an_episode(mode):
    """With a critic that values everything 0, the advantage at each valid step is the
    discounted sum of the rewards left in its own episode (time limits bootstrap from 0)."""
    from agents.default_agent import compute_gae
    w, sent = worker("batch_counter", "--counter_mode", mode, "--gamma", "0.5",
                     "--gae_lambda", "1.0")
    w.collect(None, 0, 12)
    traj = sent[0]
    zeros = np.zeros(traj.rewards.shape, np.float32)
    advantages, _ = compute_gae(traj.rewards, zeros, zeros, traj.terminated, traj.truncated,
                                0.5, 1.0)
    for e in range(3):
        length = episode_length(e)
        t, k = 0, 0
        while t < 12:
            if not traj.valid[t, e]:
                t += 1
                continue
            left = [float(j + 1) for j in range(k, length)]
            expected = sum(r * 0.5 ** i for i, r in enumerate(left))
            steps_left_here = 12 - t
            if len(left) <= steps_left_here:  # the episode ends inside the fragment
                assert advantages[t, e] == pytest.approx(expected), (mode, t, e)
            k = (k + 1) % length
            t += 1


@pytest.mark.contract
def test_a_raising_batch_is_rebuilt_whole_and_all_its_episodes_cut(monkeypatch):
    monkeypatch.setattr(BatchCounter, "raise_at", (3,))
    monkeypatch.setattr(BatchCounter, "calls", 0)
    w, sent = worker("batch_counter", "--counter_mode", "same")
    stats = w.collect(None, 0, 6)
    traj = sent[0]
    assert not traj.valid[2].any() and traj.valid[[0, 1, 3, 4, 5]].all()
    assert traj.truncated[2].all() and (traj.rewards[2] == 0).all()
    # the steps before the cut bootstrap from where each episode stood
    assert traj.truncated[1, 1:].all()
    # the rebuilt batch was reset with fresh seeds
    fresh = fresh_seed(worker_seeds(0, 0, 3)[0], 1)
    np.testing.assert_array_equal(traj.observations[3, :, 0],
                                  [(fresh + e) % 1000 for e in range(3)])
    assert [error["env"] for error in stats.env_errors] == [0, 1, 2]
    assert {error["step"] for error in stats.env_errors} == {2}
    assert stats.env_errors[0]["error"] == "RuntimeError: simulator lost"
    # the cut episodes (t=0..2, all three envs) are not reported as finished; the rebuilt
    # batch's env 0 finishes its first episode (t=3..5) at t=5
    assert stats.episode_lengths == [3]


def test_a_batch_that_keeps_raising_ends_the_run(monkeypatch):
    monkeypatch.setattr(BatchCounter, "raise_at", tuple(range(1, 100)))
    monkeypatch.setattr(BatchCounter, "calls", 0)
    w, _ = worker("batch_counter", "--counter_mode", "same")
    with pytest.raises(EnvFailure, match="batched env of 3 envs of worker 0 raised 5 times"):
        w.collect(None, 0, 10)


@pytest.mark.contract
@pytest.mark.parametrize("mode", ["next", "same"])
def test_resume_continues_a_batched_env_exactly(mode):
    """gym_env --vectorize native (NextStep) and sync (SameStep): a worker restored from another's
    state between fragments samples what the other samples next."""
    vectorize = "native" if mode == "next" else "sync"
    a, sent_a = worker("gym_env", "--vectorize", vectorize, num_envs=4)
    a.collect(None, 0, 40)
    state = a.get_state()
    assert state["envs"] is not None
    a.collect(None, 0, 40)
    b, sent_b = worker("gym_env", "--vectorize", vectorize, "--seed", "0", num_envs=4)
    assert b.set_state(state) is True
    b.collect(None, 0, 40)
    for name in ("observations", "actions", "rewards", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(sent_a[1], name), getattr(sent_b[0], name))


@pytest.mark.contract
def test_masks_and_recurrent_state_through_a_batched_env():
    # masks: every action the policy takes is one its env's mask allows
    w, sent = worker("gym_env", "--gym_id", "ddrl/MaskedChoice-v0", "--vectorize", "sync",
                     num_envs=4)
    w.collect(None, 0, 64)
    traj = sent[0]
    masks = traj.observations["action_mask"]
    taken = np.take_along_axis(masks, traj.actions[..., None].astype(np.int64), -1)[..., 0]
    assert taken.all()
    # recurrent state: an episode that ends (or a NextStep reset step) starts the next step
    # from the initial state
    w, sent = worker("gym_env", "--vectorize", "native", "--recurrent", "lstm", num_envs=4)
    w.collect(None, 0, 64)
    traj = sent[0]
    starts = traj.memory.episode_starts
    ended = traj.terminated | traj.truncated
    np.testing.assert_array_equal(starts[1:], ended[:-1])
    assert (~traj.valid).sum() >= 1  # CartPole's episodes ended in 64 steps: reset steps


def test_infos_rows_and_unbatched_view():
    infos = {"x": np.array([1.0, 2.0, 3.0]), "_x": np.array([True, False, True]),
             "episode_metrics": {"win": np.array([1, 0, 0]), "_win": np.array([1, 0, 1], bool)}}
    assert masked_rows(infos, "x") == {0: 1.0, 2: 3.0}
    assert masked_rows(infos, "episode_metrics") == {0: {"win": 1}, 2: {"win": 0}}
    assert masked_rows(infos, "missing") == {}
    # a plugin batched by nature is one env for evaluation and ddrl.load
    args = parse_args(["--config", "none", "--env_name", "batch_counter", "--counter_mode",
                       "next"])
    spec = run_spec(args)
    env = make_env(load_plugins(spec), spec.env, seed=7)
    assert isinstance(env, Unbatched) and env.observation_space.shape == (2,)
    obs, _ = env.reset(seed=7)
    assert obs.tolist() == [7, 0]
    results = [env.step(0) for _ in range(3)]
    assert [r[1] for r in results] == [1.0, 2.0, 3.0]
    assert results[-1][0].tolist() == [7, 3] and results[-1][2] is True
    with pytest.raises(ConfigError, match="asked for 5 envs in one batch and built 4"):
        class Liar(BatchCounter):
            def __init__(self, args, seed=None, num_envs=1):
                super().__init__(args, seed, 4)
        plugins = load_plugins(spec)
        plugins.env_cls = Liar
        make_env_batch(plugins, spec.env, 5)


def test_bad_autoreset_and_placement_are_clear_errors():
    class Disabled:
        metadata = {"autoreset_mode": "Disabled"}
    with pytest.raises(ConfigError, match="autoreset_mode 'Disabled'"):
        autoreset_mode(Disabled())
    args = parse_args(["--config", "none", "--env_name", "gym_env", "--vectorize", "native",
                       "--num_workers", "0", "--env_placement", "actor"])
    with pytest.raises(ConfigError, match="--env_placement actor: this env plugin is batched"):
        RolloutWorker(run_spec(args), worker_index=0)
    args = parse_args(["--config", "none", "--env_name", "gym_env", "--gym_id", "Pendulum-v1",
                       "--vectorize", "native", "--num_workers", "0"])
    with pytest.raises(ConfigError, match="Pendulum-v1 has no native vector implementation"):
        RolloutWorker(run_spec(args), worker_index=0)


# -- evaluation on a batch -----------------------------------------------------------------------
def evaluator(*flags, episodes=4):
    from core.sampling.evaluator import Evaluator
    args = parse_args(["--config", "none", "--env_name", "batch_counter", "--num_workers", "0",
                       "--eval_episodes", str(episodes), *flags])
    return Evaluator(run_spec(args), episodes)


@pytest.mark.contract
@pytest.mark.parametrize("mode", ["next", "same"])
def test_evaluation_runs_one_episode_per_env_of_a_batch(mode):
    ev = evaluator("--counter_mode", mode)
    assert ev.batch is not None and ev.batch.num_envs == 4
    result = ev.evaluate(None)
    # env e's first episode: 3 + e steps with rewards 1, 2, ...
    assert result["returns"] == [6.0, 10.0, 15.0, 21.0]
    assert result["eval_length"] == np.mean([3, 4, 5, 6])
    assert result["eval_episodes_lost"] == 0 and result["env_errors"] == 0


def test_a_raising_batch_reruns_the_evaluation_and_a_broken_one_stops_it(monkeypatch):
    monkeypatch.setattr(BatchCounter, "calls", 0)
    monkeypatch.setattr(BatchCounter, "raise_at", (2,))
    ev = evaluator()
    result = ev.evaluate(None)
    assert result["returns"] == [6.0, 10.0, 15.0, 21.0] and result["env_errors"] == 1
    monkeypatch.setattr(BatchCounter, "raise_at", tuple(range(1, 100)))
    with pytest.raises(EnvFailure, match="test worker's batched env of 4 envs raised 5 times"):
        ev.evaluate(None)


# -- a user's batched simulator, end to end -----------------------------------------------------
@pytest.mark.e2e
def test_the_point_mass_example_trains_evaluates_and_loads(tmp_path):
    """examples/batched_sim/point_mass.py (torch tensors, SameStep): two rounds of 1,024 envs,
    an evaluation on a batch, and the saved policy playing the single-env view."""
    import os
    import ddrl
    from tests.test_e2e import REPO, read_run, run_main
    run_dir = str(tmp_path / "run")
    proc = run_main("--user_dir", os.path.join(REPO, "examples", "batched_sim"), "--env_name",
                    "point_mass", "--config", "none", "--num_workers", "0",
                    "--num_envs_per_worker", "1024", "--rollout_steps", "16", "--batch_size",
                    "4096", "--num_epochs", "1", "--total_steps", "30000", "--eval_interval",
                    "16000", "--eval_episodes", "4", "--run_dir", run_dir, "--quiet",
                    "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] == 32768 and summary["target_return"] == -12.0
    assert summary["last_eval_return"] is not None and summary["env_errors"] == 0
    policy = ddrl.load(run_dir)
    env = policy.make_env(seed=3)
    assert isinstance(env, Unbatched)
    returns = policy.play(2, seed=3)
    # 50 steps of -|g - p|: below 0; above -50 x 17 (a mass moves at most 0.2 a step on
    # each axis, from within [-1, 1]^2, so it is never 17 from its goal)
    assert len(returns) == 2 and all(-850 < r < 0 for r in returns)


def test_actions_for_single_envs_are_converted_in_one_operation():
    """EnvGroup converts a batch of actions at once: the same as row by row (Box clipped to its
    bounds, flat rows shaped as the space, a Discrete's start added)."""
    from core.sampling.envs import to_env_action, to_env_actions
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    actions = np.array([[2.0, -3.0], [0.5, 0.25]], np.float32)
    np.testing.assert_array_equal(to_env_actions(box, actions),
                                  [to_env_action(box, a) for a in actions])
    shaped = spaces.Box(-1.0, 1.0, (2, 1), np.float32)
    np.testing.assert_array_equal(to_env_actions(shaped, actions), [[[1.0], [-1.0]],
                                                                    [[0.5], [0.25]]])
    discrete = spaces.Discrete(3, start=-1)
    np.testing.assert_array_equal(to_env_actions(discrete, np.array([0, 2])), [-1, 1])


UNDECLARED_BATCH = '''
import gymnasium as gym
from envs import register_env


@register_env("vec_plugin")
class VecPlugin(gym.vector.SyncVectorEnv):
    """A gymnasium vector env as a plugin, without saying it is batched."""

    def __init__(self, args, seed=None):
        super().__init__([lambda: gym.make("CartPole-v1") for _ in range(4)])
'''


@pytest.mark.e2e
def test_a_vector_env_plugin_that_does_not_say_it_is_batched_is_one_paragraph(tmp_path):
    """A gymnasium VectorEnv subclass registered as a plain env plugin: refused when the run
    builds its first env (before any run directory), exit 2, one paragraph naming the plugin,
    the batch's size and the two ways to declare it; not a TypeError deep in the sampler."""
    from test_e2e import run_main
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "vec_plugin.py").write_text(UNDECLARED_BATCH)
    proc = run_main("--user_dir", str(plugins), "--env_name", "vec_plugin", "--num_workers",
                    "0", "--run_dir", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "env plugin VecPlugin" in message and "a batch of 4 envs" in message
    assert "num_envs in __init__" in message and "make_batch" in message
    assert not (tmp_path / "run").exists()


@pytest.mark.contract
@pytest.mark.parametrize("device, says", [
    ("cuda", "--pm_device cuda: torch here sees no CUDA device"),
    ("gpu0", "--pm_device 'gpu0' is not a torch device"),
])
def test_the_point_mass_example_refuses_a_device_it_cannot_use_in_one_paragraph(device, says):
    """Where the simulator is built (a Ray worker's constructor too: such a ConfigError stops
    the run, exit 2), not torch's traceback from its generator."""
    import os
    import torch
    from tests.test_e2e import REPO
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    spec = run_spec(parse_args(["--user_dir", os.path.join(REPO, "examples", "batched_sim"),
                                "--env_name", "point_mass", "--config", "none",
                                "--pm_device", device, "--num_workers", "0"]))
    with pytest.raises(ConfigError, match="^" + re.escape(says)):
        make_env_batch(load_plugins(spec), spec.env, 4, seed=0)
