"""--confirm_episodes: an evaluation that reaches --target_return is confirmed by more episodes
of the same weights on fresh starts before the run stops or claims the target
(core/sampling/eval_runner.py, Evaluator.confirm, ddrl/callbacks.py StopAtReturn,
core/run/context.py). By hand: the interval, the stop rule, the books; in a run: an env whose
regular evaluation starts are all lucky, so that only the confirmation can tell."""
import json
import math
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from core import seeding
from core.sampling.eval_runner import EvalRunner, confirmation_summary
from core.sampling.evaluator import Evaluator
from core.faults import Faults
from core.run.context import RunContext
from ddrl.callbacks import StopAtReturn
from options.options import parse_args, run_spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.unit
def test_the_confirmation_gives_its_mean_a_95_percent_interval_from_the_sample_spread():
    value = {"eval_return": 2.5, "eval_return_std": 1.118, "returns": [1.0, 2.0, 3.0, 4.0],
             "eval_episodes_lost": 0}
    found = confirmation_summary(value, target=2.0)
    # sample std of 1..4 is sqrt(5/3); 1.96 * 1.29099 / 2 = 1.26517
    assert found["interval"] == pytest.approx([2.5 - 1.265170, 2.5 + 1.265170], abs=1e-5)
    assert found["episodes"] == 4 and found["confirmed"] is True
    assert confirmation_summary(value, target=2.6)["confirmed"] is False
    lost = confirmation_summary({"eval_return": None, "returns": [], "eval_episodes_lost": 3},
                                target=0.0)
    assert lost["confirmed"] is False and lost["interval"] is None and lost["episodes"] == 0


@pytest.mark.unit
def test_the_stop_rule_waits_for_a_confirmation_that_agrees():
    rule = StopAtReturn(10)
    assert rule.on_evaluation(None, {"eval_return": 12.0}) == "target_return"  # none asked
    assert rule.on_evaluation(None, {"eval_return": 9.0}) is None
    unconfirmed = {"eval_return": 12.0, "confirmation": {"eval_return": 8.0}}
    assert rule.on_evaluation(None, unconfirmed) is None
    confirmed = {"eval_return": 12.0, "confirmation": {"eval_return": 10.0}}
    assert rule.on_evaluation(None, confirmed) == "target_return"
    assert rule.on_evaluation(None, {"eval_return": 12.0,
                                     "confirmation": {"eval_return": None}}) is None


@pytest.mark.unit
def test_time_to_target_is_the_first_reach_and_the_claim_waits_for_a_confirmation(tmp_path):
    args = parse_args(["--config", "none", "--run_dir", str(tmp_path), "--no-plots",
                       "--quiet"])
    context = RunContext(args, str(tmp_path), start_time=0.0, columns=[], target_return=10.0)
    failed = {"eval_return": 8.0, "confirmed": False, "episodes": 50, "interval": [7.0, 9.0]}
    context.record_eval({"eval_return": 11.0, "env_steps": 100, "reached_at_s": 5.0,
                         "confirmation": failed})
    summary = context.summary()
    assert summary["target_reached"] is False and summary["unconfirmed_evaluations"] == 1
    assert summary["time_to_target_s"] is None and summary["steps_to_target"] is None
    assert summary["target_confirmation"]["eval_return"] == 8.0
    agreed = {**failed, "eval_return": 10.5, "confirmed": True}
    context.record_eval({"eval_return": 12.0, "env_steps": 200, "reached_at_s": 9.0,
                         "confirmation": agreed})
    context.record_eval({"eval_return": 13.0, "env_steps": 300, "reached_at_s": 11.0,
                         "confirmation": {**failed, "eval_return": 9.0}})  # the claim stands
    summary = context.summary()
    assert summary["target_reached"] is True and summary["unconfirmed_evaluations"] == 1
    # counted from the first evaluation that reached the target, at the moment it did
    assert summary["time_to_target_s"] == 5.0 and summary["steps_to_target"] == 100
    found = summary["target_confirmation"]
    assert found["confirmed"] and found["env_steps"] == 200 and found["evaluation_return"] == 12.0


def evaluator(episodes, confirm=7, extra=()):
    spec = run_spec(parse_args(["--config", "none", "--num_workers", "0", "--seed", "4",
                                "--eval_episodes", str(episodes), "--confirm_episodes",
                                str(confirm), *extra]))
    return spec, Evaluator(spec, episodes)


@pytest.mark.contract
def test_confirming_episodes_are_fresh_starts_played_in_rounds_on_the_test_envs():
    spec, three = evaluator(3)
    weights = three.model.get_weights()
    found = three.confirm(weights, 0, env_steps=500, episodes=7)  # rounds of 3, 3 and 1
    assert found["eval_episodes"] == 7 and len(found["returns"]) == 7
    # The same starts on 7 envs at once: the rounds give each episode its own seed.
    _, seven = evaluator(7)
    again = seven.confirm(weights, 0, env_steps=500, episodes=7)
    assert again["returns"] == found["returns"]
    regular = {seeding.evaluation_episode(4, k, t) for k in range(50) for t in range(0, 10**6,
                                                                                       500)}
    fresh = [seeding.confirmation_episode(4, j, 500) for j in range(50)]
    assert len(set(fresh)) == 50 and not regular & set(fresh)
    assert fresh != [seeding.confirmation_episode(4, j, 1000) for j in range(50)]


@pytest.mark.contract
def test_the_runner_hands_on_a_target_evaluation_only_with_its_confirmation():
    spec, own = evaluator(2, confirm=5)
    run = SimpleNamespace(env_steps=0, target_return=0.0, elapsed=lambda: 42.0)
    faults = Faults(spec.run, printer=lambda line: None)
    runner = EvalRunner(spec, run, faults, remote_available=lambda: False)
    runner.begin()
    run.env_steps = spec.run.eval_interval  # due; in this process poll() runs it at once
    weights = own.model.get_weights()
    result = runner.poll(lambda: (weights, 0))
    assert len(result["returns"]) == 2 and result["reached_at_s"] == 42.0
    found = result["confirmation"]
    assert found["episodes"] == 5 and found["confirmed"] is True  # CartPole returns are >= 1
    run.target_return = math.inf  # nothing reaches it: no confirmation runs
    run.env_steps += spec.run.eval_interval
    assert "confirmation" not in runner.poll(lambda: (weights, 0))


LUCKY_ENV = textwrap.dedent('''
    """Return 1 for an episode whose reset seed is below 10**8 (every regular evaluation start of
    a small --seed), 0 for any other (the confirming evaluations' SeedSequence draws, all but a
    few in 40); training episodes (seed None after the first) are unlucky."""
    import gymnasium as gym
    import numpy as np

    from envs import register_env


    @register_env("lucky_starts")
    class LuckyStarts:
        def __init__(self, args, seed=None):
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.lucky = False

        def reset(self, seed=None, options=None):
            self.lucky = seed is not None and seed < 10**8
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            return (np.zeros(2, np.float32), float(self.lucky), self.t >= 3, False, {})
''')


@pytest.mark.e2e
def test_a_run_on_lucky_evaluations_neither_stops_nor_claims_the_target(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "lucky_starts.py").write_text(LUCKY_ENV)

    def run(name, *extra):
        run_dir = tmp_path / name
        proc = subprocess.run(
            [sys.executable, "main.py", "--config", "none", "--user_dir", str(plugins),
             "--env_name", "lucky_starts", "--num_workers", "0", "--seed", "1",
             "--total_steps", "1500", "--eval_interval", "500", "--eval_episodes", "4",
             "--target_return", "0.5", "--run_dir", str(run_dir), *extra],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return json.loads((run_dir / "summary.json").read_text()), proc.stdout, run_dir

    summary, out, run_dir = run("confirmed")
    assert summary["stopped_because"] == "total_steps" and summary["target_reached"] is False
    assert summary["time_to_target_s"] is None and summary["unconfirmed_evaluations"] >= 3
    found = summary["target_confirmation"]
    assert found["episodes"] == 50 and not found["confirmed"] and found["eval_return"] < 0.5
    assert found["evaluation_return"] == 3.0  # every regular start was lucky
    assert "not confirmed: 50 fresh episodes gave" in out
    card = (run_dir / "README.md").read_text()  # the model card
    assert "| confirmed by 50 fresh episodes | no: mean" in card

    unconfirmed, _, _ = run("unconfirmed", "--confirm_episodes", "0")
    assert unconfirmed["stopped_because"] == "target_return" and unconfirmed["target_reached"]
    assert unconfirmed["steps_to_target"] == 512 and unconfirmed["target_confirmation"] is None
    assert np.isfinite(unconfirmed["time_to_target_s"])


@pytest.mark.contract
def test_a_batched_env_confirms_in_rounds_of_its_batch():
    batched = ["--user_dir", os.path.join(REPO, "examples", "batched_sim"), "--env_name",
               "point_mass"]
    _, four = evaluator(4, extra=batched)
    weights = four.model.get_weights()
    found = four.confirm(weights, 0, env_steps=100, episodes=6)  # a round of 4, then of 2
    assert found["eval_episodes"] == 6 and len(found["returns"]) == 6
    # A batched sim draws its starts from the round's first seed (point_mass does): the same
    # rounds give the same episodes, and the rounds differ.
    assert four.confirm(weights, 0, env_steps=100, episodes=6)["returns"] == found["returns"]
    assert len(set(np.round(found["returns"], 6))) == 6
