"""An env that raises is survived: EnvGroup rebuilds it and cuts its episode, the rollout marks
the cut invalid, the agents drop it, the evaluator reruns the episode (and gives up one that
raised --max_env_errors times: left out of the mean, counted, logged); only --max_env_errors
errors in a row without a successful step between stop the run (EnvFailure)."""
import os
import re

import time
from types import SimpleNamespace

import numpy as np
import pytest
from gymnasium import spaces

from agents.default_agent import DefaultAgent, compute_gae
from agents.sac_agent import SACAgent
from core.faults import Faults
from core.sampling.envs import EnvGroup
from core.errors import EnvFailure
from core.sampling.eval_runner import EvalRunner
from core.seeding import rebuilt_env as fresh_seed
from core.sampling.evaluator import Evaluator
from core.plugins import load_plugins
from core.sampling.rollout import RolloutWorker
from core.seeding import worker_envs as worker_seeds
from core.types import Trajectory
from envs import register_env, OBSERVATION
from models.ppo import PPOModel
from options.options import parse_args, run_spec
from tests.test_e2e import read_run, run_main

pytestmark = pytest.mark.unit

PLUGINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins")


@register_env("fault_test_env")
class FaultyEnv:
    """Observation [start, k]: ``start`` from the reset seed (+100 per unseeded reset), k the
    step within the episode; reward 1; truncated after --fault_episode_steps. Raises where the
    class attribute ``fail(env, method)`` says so (tests set it)."""

    fail = staticmethod(lambda env, method: False)

    @staticmethod
    def add_args(parser):
        parser.add_argument("--fault_episode_steps", type=int, default=4)

    def __init__(self, args, seed=None):
        self.seed = seed
        self.episode_steps = args.fault_episode_steps
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.step_calls = 0    # this instance's step calls, raised or not
        self.reset_calls = 0
        self.closed = False
        self.start, self.k = 0.0, 0

    def obs(self):
        return np.array([self.start, self.k], dtype=np.float32)

    def reset(self, seed=None, options=None):
        self.reset_calls += 1
        if self.fail(self, "reset"):
            raise RuntimeError("reset lost")
        self.start = float(seed % 1000) if seed is not None else self.start + 100.0
        self.k = 0
        return self.obs(), {}

    def step(self, action):
        self.step_calls += 1
        if self.fail(self, "step"):
            raise RuntimeError("boom")
        self.k += 1
        return OBSERVATION(self.obs(), 1.0, False, self.k >= self.episode_steps, {})

    def close(self):
        self.closed = True


def fail_on(plan):
    """fail(env, method) raising on step call n (counted from 1) of the env first built with
    seed s, for (s, n) in ``plan``; rebuilt envs (fresh seeds) never raise."""
    return staticmethod(lambda env, method: method == "step" and (env.seed, env.step_calls) in plan)


def group(*flags, seeds=(11, 12), worker_index=None):
    args = parse_args(["--config", "none", "--env_name", "fault_test_env", *flags])
    plugins = load_plugins(run_spec(args))
    g = EnvGroup(plugins, args, seeds, worker_index=worker_index)
    return g, g.reset()


# -- EnvGroup -----------------------------------------------------------------------------------
def test_a_step_that_raises_is_recorded_the_env_rebuilt_and_the_others_unaffected(monkeypatch):
    monkeypatch.setattr(FaultyEnv, "fail", fail_on({(11, 2)}))
    envs, first = group()
    np.testing.assert_array_equal(first, [[11, 0], [12, 0]])
    envs.step([0, 0])
    old = envs.envs[0]
    result = envs.step([0, 0])
    assert result.failed.tolist() == [True, False]
    assert result.errors == [{"env": 0, "method": "step", "error": "RuntimeError: boom"}]
    # the cut: reward 0, truncated, no final observation (the env never returned one)
    assert (result.rewards[0], result.terminated[0], result.truncated[0]) == (0.0, False, True)
    assert result.final_observations == {}
    # env 0 rebuilt and reset with a fresh seed (from its seed and its error count)
    assert old.closed and envs.envs[0] is not old
    new_seed = fresh_seed(11, 1)
    assert envs.envs[0].seed == new_seed != 11
    np.testing.assert_array_equal(result.observations[0], [new_seed % 1000, 0])
    # env 1 stepped as if nothing happened
    np.testing.assert_array_equal(result.observations[1], [12, 2])
    assert (result.rewards[1], result.truncated[1], result.failed[1]) == (1.0, False, False)
    assert envs.errors_in_a_row == [1, 0]
    assert envs.step([0, 0]).failed.tolist() == [False, False]
    assert envs.errors_in_a_row == [0, 0]  # a successful step ends the row


def test_an_automatic_reset_that_raises_rebuilds_without_cutting_the_ended_episode(monkeypatch):
    # env 1's episode ends at step 4; the automatic reset (its second reset call) raises
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(
        lambda env, method: method == "reset" and env.seed == 12 and env.reset_calls == 2))
    envs, _ = group()
    for _ in range(3):
        envs.step([0, 0])
    result = envs.step([0, 0])
    assert result.failed.tolist() == [False, False]      # the step itself was real
    assert result.truncated.tolist() == [True, True]
    np.testing.assert_array_equal(result.final_observations[1], [12, 4])
    assert result.errors == [{"env": 1, "method": "reset", "error": "RuntimeError: reset lost"}]
    np.testing.assert_array_equal(result.observations[1], [fresh_seed(12, 1) % 1000, 0])
    np.testing.assert_array_equal(result.observations[0], [111, 0])  # unseeded reset: +100


def test_the_first_reset_is_guarded_and_its_errors_kept_for_the_caller(monkeypatch):
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(
        lambda env, method: method == "reset" and env.seed == 11))
    envs, first = group()
    np.testing.assert_array_equal(first[0], [fresh_seed(11, 1) % 1000, 0])
    np.testing.assert_array_equal(first[1], [12, 0])
    assert envs.take_reset_errors() == [
        {"env": 0, "method": "reset", "error": "RuntimeError: reset lost"}]
    assert envs.take_reset_errors() == []


def test_max_env_errors_in_a_row_raise_env_failure_naming_env_worker_and_flag(monkeypatch):
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(
        lambda env, method: method == "step" and env.seed != 11))  # env 1 and its rebuilds
    envs, _ = group("--max_env_errors", "3", worker_index=7)
    for _ in range(2):
        assert envs.step([0, 0]).failed.tolist() == [False, True]
    with pytest.raises(EnvFailure) as caught:
        envs.step([0, 0])
    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError)
    assert "env 1 of worker 7" in message and "3 times in a row" in message
    assert "RuntimeError: boom" in message and "--max_env_errors" in message
    assert "\n" not in message


def test_a_rebuild_that_raises_counts_as_another_error(monkeypatch):
    # env 0's first step raises and every rebuilt env 0 fails its reset: 1 + 2 errors = 3
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(
        lambda env, method: env.seed not in (11, 12) or (method == "step" and env.seed == 11)))
    envs, _ = group("--max_env_errors", "3")
    with pytest.raises(EnvFailure, match=r"env 0 raised 3 times.*RuntimeError: reset lost"):
        envs.step([0, 0])


def test_errors_separated_by_successful_steps_never_add_up(monkeypatch):
    # env 0 raises on every other step call; each rebuilt env starts its own count of calls
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(
        lambda env, method: method == "step" and env.step_calls % 2 == 0 and env.seed != 12))
    envs, _ = group("--max_env_errors", "2")
    failed = [bool(envs.step([0, 0]).failed[0]) for _ in range(12)]
    assert failed == [False, True] * 6


# -- RolloutWorker.collect ----------------------------------------------------------------------
def worker(plan, monkeypatch, num_envs=2):
    monkeypatch.setattr(FaultyEnv, "fail", fail_on(plan))
    args = parse_args(["--config", "none", "--env_name", "fault_test_env", "--num_workers", "0",
                       "--num_envs_per_worker", str(num_envs), "--seed", "0"])
    w = RolloutWorker(run_spec(args), worker_index=0)
    sent = []
    send = w.agent.send_trajectory
    w.agent.send_trajectory = lambda trajectory: sent.append(trajectory) or send(trajectory)
    return w, sent


def truncations(trajectory):
    return {tuple(int(x) for x in ix): obs.tolist() for ix, obs in
            zip(trajectory.truncated_index, trajectory.truncated_observations)}


@pytest.mark.contract
def test_collect_marks_the_failed_step_invalid_and_cuts_the_episode_before_it(monkeypatch):
    s0, s1 = worker_seeds(0, 0, 2)  # 10000, 10001: starts 0 and 1
    # episodes of 4 steps: env 1 raises at t=4 (right after its episode ended at t=3),
    # env 0 at t=5 (in the middle of its second episode)
    w, sent = worker({(s0, 6), (s1, 5)}, monkeypatch)
    stats = w.collect(None, 0, 8)
    traj = sent[0]
    expected_valid = np.ones((8, 2), dtype=bool)
    expected_valid[5, 0] = expected_valid[4, 1] = False
    np.testing.assert_array_equal(traj.valid, expected_valid)
    for t, e in ((5, 0), (4, 1)):
        assert (traj.rewards[t, e], traj.terminated[t, e], traj.truncated[t, e]) == (0, False, True)
    # env 0: the real step (4, 0) is cut and bootstraps from where the episode stood at t=5
    # (start 100 after the unseeded reset, k=1); the failed step's final observation is the
    # same one (what the policy saw). env 1: (3, 1) had ended by its time limit already and
    # keeps its real final observation.
    np.testing.assert_array_equal(traj.observations[5, 0], [100, 1])
    assert traj.truncated[4, 0]
    cuts = truncations(traj)
    assert cuts[(4, 0)] == cuts[(5, 0)] == [100, 1]
    assert cuts[(3, 1)] == [1, 4]
    assert cuts[(4, 1)] == traj.observations[4, 1].tolist() == [101, 0]
    assert sorted(cuts) == [(3, 0), (3, 1), (4, 0), (4, 1), (5, 0)]
    # after the cut the policy sees the rebuilt env's first observation
    np.testing.assert_array_equal(traj.observations[6, 0], [fresh_seed(s0, 1) % 1000, 0])
    np.testing.assert_array_equal(traj.observations[5, 1], [fresh_seed(s1, 1) % 1000, 0])
    # finished episodes: the two that ended at t=3 only; the cut ones (env 0 t=4..5, env 1
    # t=4) are not reported, and the rebuilt envs' episodes have not ended yet.
    assert stats.episode_returns == [4.0, 4.0] and stats.episode_lengths == [4, 4]
    assert stats.env_errors == [
        {"worker": 0, "env": 1, "method": "step", "error": "RuntimeError: boom", "step": 4},
        {"worker": 0, "env": 0, "method": "step", "error": "RuntimeError: boom", "step": 5}]
    assert stats.agent_stats["advantage_count"] == 14
    assert stats.env_steps == 16
    # the counters restarted at the cut: env 0's new episode (t=6, 7) ends at t=1 of the next
    # fragment with length 4, env 1's (t=5, 6, 7) at t=0
    stats = w.collect(None, 1, 2)
    assert sorted(stats.episode_lengths) == [4, 4] and stats.env_errors == []


@pytest.mark.contract
def test_collect_failure_at_the_first_step_of_a_fragment(monkeypatch):
    (s0,) = worker_seeds(0, 0, 1)
    w, sent = worker({(s0, 4)}, monkeypatch, num_envs=1)
    w.collect(None, 0, 3)
    stats = w.collect(None, 1, 3)
    first, second = sent
    assert not first.truncated.any()
    # The step before the cut is in the first fragment; it bootstraps from its last
    # observation, which is the state the episode was cut at.
    np.testing.assert_array_equal(first.last_observations[0], second.observations[0, 0])
    assert second.valid[:, 0].tolist() == [False, True, True]
    assert truncations(second) == {(0, 0): second.observations[0, 0].tolist()}
    assert stats.env_errors[0]["step"] == 0
    assert stats.agent_stats["advantage_count"] == 2


# -- the agents ---------------------------------------------------------------------------------
GAMMA, LAM = 0.5, 0.5


def fault_trajectory():
    """T=3, E=2. env 0: rewards 1, 2 and a step that raised at t=2 (cut: (1, 0) truncated at
    the observation [1.5] the policy saw at t=2, whose V = 1.5). env 1: rewards 0, 0, 1, V 0,
    last observation [8]. Observations are V (see agent())."""
    valid = np.array([[1, 1], [1, 1], [0, 1]], dtype=bool)
    return Trajectory(
        observations=np.array([[[0.5], [0.0]], [[1.0], [0.0]], [[1.5], [0.0]]], np.float32),
        actions=np.array([[0, 1], [1, 0], [1, 1]]),
        rewards=np.array([[1, 0], [2, 0], [0, 1]], np.float32),
        terminated=np.zeros((3, 2), bool),
        truncated=np.array([[0, 0], [1, 0], [1, 0]], bool),
        log_probs=np.zeros((3, 2), np.float32),
        values=np.array([[0.5, 0], [1.0, 0], [1.5, 0]], np.float32),
        last_observations=np.array([[7.0], [8.0]], np.float32),
        truncated_index=np.array([[1, 0], [2, 0]]),
        truncated_observations=np.array([[1.5], [1.5]], np.float32),
        valid=valid)


def agent():
    args = parse_args(["--config", "none", "--num_workers", "0", "--gamma", str(GAMMA),
                       "--gae_lambda", str(LAM)])
    model = PPOModel(args, spaces.Box(-10, 10, shape=(1,)), spaces.Discrete(2))
    model.predict_values = lambda obs: np.asarray(obs, dtype=np.float32).reshape(-1)
    return DefaultAgent(args, model)


def test_default_agent_drops_invalid_samples_after_gae():
    # env 0: delta_1 = 2 + .5*1.5 - 1 = 1.75 (cut)    A_1 = 1.75
    #        delta_0 = 1 + .5*1   - .5 = 1.0          A_0 = 1 + .25*1.75 = 1.4375
    # env 1: A = .3125, 1.25, 5 (test_gae's no-end case)
    # kept, in (t, e) order without (2, 0): 1.4375, .3125, 1.75, 1.25, 5
    a = agent()
    traj = fault_trajectory()
    stats = a.send_trajectory(traj)
    np.testing.assert_array_equal(a.data["advantages"].numpy(), [1.4375, .3125, 1.75, 1.25, 5])
    np.testing.assert_array_equal(a.data["returns"].numpy(), [1.9375, .3125, 2.75, 1.25, 5])
    np.testing.assert_array_equal(a.data["actions"].numpy(), [0, 1, 1, 0, 1])
    assert len(a.data["observations"]) == len(a.data["old_log_probs"]) == 5
    assert stats["advantage_count"] == 5
    assert stats["advantage_sum"] == pytest.approx(9.75, abs=1e-12)
    # 2.06640625 + .09765625 + 3.0625 + 1.5625 + 25
    assert stats["advantage_sq_sum"] == pytest.approx(31.7890625, abs=1e-12)
    # env 1 alone, by compute_gae, is unaffected by env 0's cut
    adv1, _ = compute_gae(traj.rewards[:, 1:], traj.values[:, 1:], np.array([[0], [0], [8]]),
                          traj.terminated[:, 1:], traj.truncated[:, 1:], GAMMA, LAM)
    np.testing.assert_array_equal(a.data["advantages"].numpy()[[1, 3, 4]], adv1[:, 0])


def test_default_agent_minibatches_cover_the_valid_samples_only():
    from core.types import GradientRequest
    a = agent()
    a.send_trajectory(fault_trajectory())
    sizes = [a.fetch_grads(None, GradientRequest(0, m, 2, 0.0, 1.0, 0.0, 0)).num_samples
             for m in range(2)]
    assert sum(sizes) == 5


def test_sac_agent_drops_invalid_transitions():
    traj = fault_trajectory()
    t = SACAgent.transitions(traj)
    assert len(t.rewards) == 5
    # rows (0,0) (0,1) (1,0) (1,1) (2,1); (1, 0) bootstraps from the cut observation [1.5]
    np.testing.assert_array_equal(t.observations[:, 0], [0.5, 0, 1.0, 0, 0])
    np.testing.assert_array_equal(t.next_observations[:, 0], [1.0, 0, 1.5, 0, 8])
    np.testing.assert_array_equal(t.rewards, [1, 0, 2, 0, 1])
    np.testing.assert_array_equal(t.actions[:, 0] if t.actions.ndim > 1 else t.actions,
                                  [0, 1, 1, 0, 1])
    traj.valid = None  # all valid: the six transitions, as before
    assert len(SACAgent.transitions(traj).rewards) == 6


# -- Evaluator ----------------------------------------------------------------------------------
def evaluator(*flags):
    args = parse_args(["--config", "none", "--user_dir", PLUGINS, "--env_name",
                       "flaky_cartpole", "--num_workers", "0", "--seed", "3", *flags])
    return Evaluator(run_spec(args), 3)


@pytest.mark.contract
def test_evaluator_reruns_an_episode_whose_env_raised():
    clean = evaluator("--fail_prob", "0")
    weights = clean.model.get_weights()
    expected = clean.evaluate(weights, env_steps=5)
    assert expected["env_errors"] == 0
    flaky = evaluator("--fail_prob", "0.05", "--fail_reset_prob", "0.2",
                      "--max_env_errors", "100")
    result = flaky.evaluate(weights, env_steps=5)
    assert result["env_errors"] > 0
    assert result["returns"] == expected["returns"]
    assert result["eval_return"] == expected["eval_return"]
    assert result["eval_length"] == expected["eval_length"]


@pytest.mark.contract
def test_evaluator_stops_when_every_step_raises():
    broken = evaluator("--fail_always", "--max_env_errors", "3")
    with pytest.raises(EnvFailure, match=r"test worker's env 0 raised 3 times in a row.*"
                                         r"RuntimeError: simulated simulator disconnect.*"
                                         r"--max_env_errors \(now 3\)"):
        broken.evaluate(None)


@pytest.mark.contract
def test_evaluator_stops_when_every_reset_raises():
    broken = evaluator("--fail_reset_prob", "1", "--max_env_errors", "3")
    with pytest.raises(EnvFailure, match=r"test worker's env 0 raised 3 times in a row.*"
                                         r"simulated simulator disconnect \(reset\).*"
                                         r"--max_env_errors \(now 3\)"):
        broken.evaluate(None)


# The test worker on fault_test_env (episodes of 6 steps, reward 1 a step): its env k starts
# every episode at start = 3 + k (the reset seed modulo 1000, --seed 3), whichever env object
# runs it, so a plan can pick one episode and the step within it (env.k: steps done).
def fault_evaluator(monkeypatch, fail, *flags, episodes=3):
    monkeypatch.setattr(FaultyEnv, "fail", staticmethod(fail))
    args = parse_args(["--config", "none", "--env_name", "fault_test_env", "--num_workers", "0",
                       "--seed", "3", "--fault_episode_steps", "6", "--max_env_errors", "3",
                       *flags])
    return Evaluator(run_spec(args), episodes)


def episode(env):
    return int(env.start) - 3


@pytest.mark.contract
def test_evaluator_counts_errors_in_a_row_only_without_a_step_between(monkeypatch):
    """Every episode raises twice at its second step (after one good step) in each of three
    evaluations: 18 errors, 6 per env, against --max_env_errors 3; none in a row without a
    step between, none an episode's third: every episode finishes, every time."""
    left = {}

    def fail(env, method):
        if method == "step" and env.k == 1 and left[episode(env)] > 0:
            left[episode(env)] -= 1
            return True
        return False
    ev = fault_evaluator(monkeypatch, fail)
    for t in range(3):
        left.update({0: 2, 1: 2, 2: 2})
        result = ev.evaluate(None, env_steps=100 * t)
        assert result["returns"] == [6.0, 6.0, 6.0] and result["eval_return"] == 6.0
        assert result["env_errors"] == 6 and result["eval_episodes_lost"] == 0
        assert result["lost_episodes"] == [] and ev.errors_in_a_row == [0, 0, 0]
    assert ev.error_count == 18


@pytest.mark.contract
def test_evaluator_errors_without_progress_add_up_across_reruns(monkeypatch):
    """env 1 raises at its first step every time: its reruns make no progress, so the third
    error stops the run even though each attempt was a fresh env (the same EnvFailure as an
    env whose reset raises)."""
    ev = fault_evaluator(monkeypatch, lambda env, method: (
        method == "step" and env.k == 0 and episode(env) == 1))
    with pytest.raises(EnvFailure, match=r"test worker's env 1 raised 3 times in a row.*"
                                         r"RuntimeError: boom"):
        ev.evaluate(None)


@pytest.mark.contract
def test_an_episode_that_cannot_finish_is_lost_counted_and_left_out_of_the_mean(monkeypatch):
    """env 1 raises at its third step in every attempt (two good steps first): its episode is
    given up at its third error, the others' mean stands (6, not 4 with a zero), and the run
    goes on; the env is rebuilt before the next evaluation, which loses that episode again."""
    ev = fault_evaluator(monkeypatch, lambda env, method: (
        method == "step" and env.k == 2 and episode(env) == 1))
    for t in range(2):
        result = ev.evaluate(None, env_steps=100 * t)
        assert result["returns"] == [6.0, 6.0]
        assert result["eval_return"] == 6.0 and result["eval_return_std"] == 0.0
        assert result["eval_length"] == 6.0
        assert result["eval_episodes"] == 3 and result["eval_episodes_lost"] == 1
        assert result["lost_episodes"] == [{"env": 1, "failures": 3,
                                            "error": "RuntimeError: boom"}]
        assert result["env_errors"] == 3
        assert ev.needs_rebuild == [False, True, False]


@pytest.mark.contract
def test_an_evaluation_whose_every_episode_is_lost_has_no_return(monkeypatch):
    ev = fault_evaluator(monkeypatch, lambda env, method: method == "step" and env.k == 2)
    result = ev.evaluate(None, env_steps=7)
    assert result["eval_return"] is None and result["eval_return_std"] is None
    assert result["eval_return_min"] is None and result["eval_length"] is None
    assert result["returns"] == [] and result["eval_episodes_lost"] == 3
    assert [r["env"] for r in result["lost_episodes"]] == [0, 1, 2]
    assert result["env_errors"] == 9


def eval_runner(monkeypatch, fail, lines):
    ev = fault_evaluator(monkeypatch, fail)  # registers the plan; the runner builds its own
    spec = run_spec(parse_args(["--config", "none", "--env_name", "fault_test_env",
                                "--num_workers", "0", "--seed", "3", "--fault_episode_steps",
                                "6", "--max_env_errors", "3", "--eval_episodes", "3",
                                "--eval_interval", "100"]))
    run = SimpleNamespace(env_steps=0, target_return=None)
    faults = Faults(spec.run, printer=lines.append)
    runner = EvalRunner(spec, run, faults, remote_available=lambda: False)
    runner.begin()           # the first evaluation is due at env step 100
    run.env_steps = 100      # in this process: poll() runs it at once
    return runner, faults, ev.model.get_weights()


@pytest.mark.contract
def test_eval_runner_logs_lost_episodes_and_hands_on_the_mean_of_the_others(monkeypatch):
    lines = []
    runner, faults, weights = eval_runner(monkeypatch, lambda env, method: (
        method == "step" and env.k == 2 and episode(env) == 1), lines)
    result = runner.poll(lambda: (weights, 0))
    assert result["eval_return"] == 6.0 and result["eval_episodes_lost"] == 1
    assert faults.counts["eval_episodes_lost"] == 1 and faults.counts["env_errors"] == 3
    lost = [line for line in lines if "could not finish" in line]
    assert len(lost) == 1, lines
    assert "the test worker's env 1 could not finish its episode of the evaluation at env " \
           "step 100: it raised 3 times" in lost[0]
    assert "the last error: RuntimeError: boom; left out of the mean" in lost[0]


@pytest.mark.contract
def test_eval_runner_hands_on_no_evaluation_when_every_episode_is_lost(monkeypatch):
    """No return: the loop gets None, as when no evaluation finished (no eval_return in the
    metrics row, no best checkpoint, no target check); the log says why."""
    lines = []
    runner, faults, weights = eval_runner(
        monkeypatch, lambda env, method: method == "step" and env.k == 2, lines)
    assert runner.poll(lambda: (weights, 0)) is None
    assert runner.pending is None and runner.finish() is None
    assert faults.counts["eval_episodes_lost"] == 3 and faults.counts["env_errors"] == 9
    assert sum("could not finish" in line for line in lines) == 3
    assert any("no episode of the evaluation at env step 100 finished (3 lost): it has no "
               "return" in line for line in lines), lines


@pytest.mark.e2e
def test_ppo_reaches_475_with_an_env_that_raises_every_500_steps_on_average(tmp_path,
                                                                           record_property):
    """Issue 30's acceptance run: CartPole whose step raises with p = 0.002, 2 Ray workers,
    seed 0. A 500-step evaluation episode then fails with p = 0.63, five times in a row with
    p = 0.1: the test worker used to take that for a broken env and stop the run ("the test
    worker's env 3 raised 5 times in a row" at 4,096 env steps; seeds 1 and 2 at 18,432 and
    10,240). Now the episode is lost and counted, and the run reaches 475 at 4,096 steps (one
    episode lost, 27 env errors; seeds 1, 2: 18,432 and 12,288 steps), 9-12 s wall on the
    2-core machine under a load of 4-8 (seeds 1, 2: 19-20 s, 14 s). Not deterministic (the
    rounds take whichever workers deliver), hence no exact figures."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--user_dir", PLUGINS, "--env_name", "flaky_cartpole", "--fail_prob",
                    "0.002", "--num_workers", "2", "--seed", "0", "--total_steps", "60000",
                    "--quiet", "--no-tensorboard", "--run_dir", run_dir, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    record_property("steps_to_target", summary["steps_to_target"] or -1)
    record_property("eval_episodes_lost", summary.get("eval_episodes_lost", -1))
    assert summary["stopped_because"] == "target_return", summary
    assert summary["env_errors"] >= 1 and summary["eval_episodes_lost"] >= 0, summary
    assert "simulated simulator disconnect" in proc.stderr
    assert "EnvFailure" not in proc.stderr and "in a row" not in proc.stderr


# -- actor placement ----------------------------------------------------------------------------
def wait_for_death(ray, actor, timeout=60):
    """ray.kill returns before the actor is gone: a call made meanwhile may still be answered."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{actor} still answers {timeout} s after ray.kill")


@pytest.mark.chaos
@pytest.mark.parametrize("per_actor", ["1", "2"])
def test_actor_placement_rebuilds_an_env_actor_that_raised_or_died(ray_session, per_actor):
    """One env actor per env, or one hosting both (--envs_per_actor 2): an env that raises is
    rebuilt in its host and the other's result stands; a host that died is replaced, every env
    it held rebuilt. 10 of 10 each under a busy loop (tests/tools/flakes.py --runs 10 -m chaos,
    commit 016bb2e), 2.4-6.1 s."""
    ray = ray_session
    args = parse_args(["--config", "none", "--user_dir", PLUGINS, "--env_name",
                       "flaky_cartpole", "--fail_prob", "0.3", "--max_env_errors", "50",
                       "--envs_per_actor", per_actor])
    plugins = load_plugins(run_spec(args))
    envs = EnvGroup(plugins, args, [21, 22], placement="actor", worker_index=0)
    try:
        envs.reset()
        errors, failed = [], 0
        for _ in range(10):
            result = envs.step(np.zeros(2, dtype=np.int64))
            assert result.observations.shape == (2, 4)
            errors += result.errors
            failed += int(result.failed.sum())
        assert failed == len([e for e in errors if e["method"] == "step"]) > 0
        assert {e["error"] for e in errors} == {"RuntimeError: simulated simulator disconnect"}
        assert len(envs.hosts) == 3 - int(per_actor)
        # a host that died is rebuilt as well; with one env per host the other's result stands
        dead = envs.hosts[0]
        ray.kill(dead, no_restart=True)
        wait_for_death(ray, dead)
        result = envs.step(np.zeros(2, dtype=np.int64))
        assert result.failed[0] and envs.hosts[0] is not dead
        assert result.errors[0]["env"] == 0 and "Actor" in result.errors[0]["error"]
        if per_actor == "2":  # both envs were in the dead host
            assert result.failed[1] and "Actor" in result.errors[1]["error"]
        assert result.observations.shape == (2, 4)
        result = envs.step(np.zeros(2, dtype=np.int64))   # the new host steps
        assert result.observations.shape == (2, 4)
    finally:
        envs.close()


OLD_API_ENV = '''
import gymnasium as gym
from envs import register_env


@register_env("old_api_env")
class OldApiEnv:
    """CartPole behind the old gym API: step returns (obs, reward, done, info), from its 10th
    step on (the start of a run tries 8 steps: this one gets past, the hot path names it)."""

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.steps = 0

    def reset(self, seed=None):
        return self.env.reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps < 10:
            return obs, reward, terminated, truncated, info
        return obs, reward, terminated or truncated, info
'''


@pytest.mark.e2e
def test_an_env_on_the_old_gym_api_is_one_paragraph_not_a_flaky_env(tmp_path):
    """An env whose step returns the old 4-tuple: the run stops at its first step, exit 2, one
    paragraph naming the plugin, what came back and gymnasium's 5-tuple; no traceback, no env
    error counted, no advice to raise --max_env_errors."""
    import json
    from test_e2e import run_main
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "old_api_env.py").write_text(OLD_API_ENV)
    run_dir = tmp_path / "run"
    proc = run_main("--user_dir", str(plugins), "--env_name", "old_api_env", "--num_workers",
                    "0", "--total_steps", "4096", "--run_dir", str(run_dir), "--quiet")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "max_env_errors" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "env plugin OldApiEnv" in message and "4-tuple" in message
    assert "(observation, reward, terminated, truncated, info)" in message
    with open(run_dir / "summary.json") as f:
        summary = json.load(f)
    assert summary["env_errors"] == 0 and summary["stopped_because"] == "error"


SHAPE_ENV = '''
import gymnasium as gym
import numpy as np
from envs import register_env


@register_env("shape_env")
class ShapeEnv:
    """CartPole whose observation grows an entry from its 10th step on (the start of a run
    tries 8 steps: this one gets past, the hot path names it)."""

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.steps = 0

    def reset(self, seed=None):
        return self.env.reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= 10:
            obs = np.append(obs, 0.0).astype(np.float32)
        return obs, reward, terminated, truncated, info
'''


@pytest.mark.e2e
def test_an_env_whose_observation_changes_shape_is_one_paragraph(tmp_path):
    """An observation of another shape than the first reset's: exit 2, one paragraph naming
    the plugin, the env, both shapes and the observation space; no traceback from the
    fragment's arrays, no env error counted."""
    import json
    from test_e2e import run_main
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "shape_env.py").write_text(SHAPE_ENV)
    run_dir = tmp_path / "run"
    proc = run_main("--user_dir", str(plugins), "--env_name", "shape_env", "--num_workers",
                    "0", "--num_envs_per_worker", "2", "--total_steps", "4096", "--run_dir",
                    str(run_dir), "--quiet")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "max_env_errors" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "env plugin ShapeEnv" in message and "from step() has shape (5,)" in message
    assert "the first reset's had (4,)" in message and "observation_space: Box(" in message
    with open(run_dir / "summary.json") as f:
        summary = json.load(f)
    assert summary["env_errors"] == 0 and summary["stopped_because"] == "error"


NAN_ENV = '''
import gymnasium as gym
import numpy as np
from envs import register_env


@register_env("nan_env")
class NanEnv:
    """CartPole whose fourth step of every episode but its first returns a NaN in the
    observation (the start of a run tries one episode: this one gets past, the hot path names
    it)."""

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.t = self.episodes = 0

    def reset(self, seed=None):
        self.t = 0
        self.episodes += 1
        return self.env.reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.t == 4 and self.episodes > 1:
            obs = obs.copy()
            obs[2] = np.nan
        return obs, reward, terminated, truncated, info
'''


@pytest.mark.e2e
@pytest.mark.parametrize("flags", [(), ("--normalize_obs",)], ids=["raw", "normalized"])
def test_an_env_that_returns_nan_observations_is_named_not_the_optimizer(tmp_path, flags):
    """NaN in an observation: the run stops at the first fragment, exit 2, one paragraph naming
    the env plugin, the worker, the env, the step and the entry; not "update skipped: a loss is
    NaN", nor advice about the learning rate."""
    from test_e2e import run_main
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "nan_env.py").write_text(NAN_ENV)
    proc = run_main("--user_dir", str(plugins), "--env_name", "nan_env", "--num_workers", "0",
                    "--total_steps", "4096", "--run_dir", str(tmp_path / "run"), "--quiet",
                    *flags)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "update skipped" not in proc.stderr
    assert "learning rate" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "env plugin NanEnv" in message and "holds nan" in message
    # the env whose second episode reaches its 4th step first, where in the fragment it does
    assert re.search(r"env \d of rollout worker 0, step \d+ of a \d+-step fragment",
                     message), message
    assert "entry [2]" in message


@pytest.mark.unit
def test_the_group_names_the_env_whose_observation_has_another_shape():
    """EnvGroup.stack on its own: the first stack sets the shapes; a later one with an env of
    another shape (Dict leaves too), or envs that cannot be stacked, is an EnvContractError
    naming that env and both shapes."""
    from types import SimpleNamespace
    from gymnasium import spaces as gym_spaces
    from core.errors import EnvContractError
    from core.sampling.envs import EnvGroup

    class Plugin:
        pass

    group = EnvGroup.__new__(EnvGroup)
    group.plugins = SimpleNamespace(env_cls=Plugin)
    group.worker_index, group.leaf_shapes = 1, None
    group.observation_space = gym_spaces.Dict({"a": gym_spaces.Box(0, 1, (2,)),
                                               "b": gym_spaces.Box(0, 1, (3,))})
    ok = {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)}
    assert group.stack([ok, ok], "reset()")["b"].shape == (2, 3)
    bad = {"a": np.zeros(2, np.float32), "b": np.zeros(4, np.float32)}
    # unstackable (env 1 differs), and stackable but changed (env 0 first)
    for observations, odd in (([ok, bad], 1), ([bad, bad], 0)):
        with pytest.raises(EnvContractError) as raised:
            group.stack(observations, "step()")
        text = str(raised.value)
        assert "env plugin Plugin" in text and f"env {odd} of rollout worker 1" in text
        assert "{'a': (2,), 'b': (4,)}" in text and "{'a': (2,), 'b': (3,)}" in text
