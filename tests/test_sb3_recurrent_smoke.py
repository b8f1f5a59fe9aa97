"""Smoke tests of benchmarks/sb3_recurrent.py, the recurrent peer (sb3-contrib's RecurrentPPO):
a run of a few hundred steps on each env writes summary.json with ddrl's keys and eval.csv, and
the velocity-hiding wrapper and the linear schedules do what the script's docstring says. The
peer libraries are optional (benchmarks/requirements.txt; CI has neither): the module skips
without sb3_contrib."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("sb3_contrib", reason="sb3_contrib is not installed (benchmarks/requirements.txt)")

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

# what compare.py reads from every system's summary.json (its docstring)
DDRL_KEYS = {"env_steps", "wall_time_s", "best_eval_return", "last_eval_return", "stopped_because",
             "target_reached", "time_to_target_s", "steps_to_target", "system"}


@pytest.mark.unit
def test_hide_obs_and_linear_schedule():
    """zero: RL-Zoo's MaskVelocityWrapper (the entries times 0, the space kept); drop: the
    entries gone from the observation and the space, as ddrl's --hide_obs. The linear schedule
    is RL-Zoo's lin_X over its horizon and 0 after it."""
    import gymnasium as gym
    import sb3_recurrent
    full = gym.make("CartPole-v1")
    obs, _ = full.reset(seed=3)
    zero = sb3_recurrent.HideObs(gym.make("CartPole-v1"), (1, 3), "zero")
    drop = sb3_recurrent.HideObs(gym.make("CartPole-v1"), (1, 3), "drop")
    assert np.array_equal(zero.reset(seed=3)[0], obs * np.array([1, 0, 1, 0], np.float32))
    assert zero.observation_space == full.observation_space
    assert np.array_equal(drop.reset(seed=3)[0], obs[[0, 2]])
    assert drop.observation_space.shape == (2,)
    assert drop.observation_space.contains(drop.reset(seed=3)[0])
    rl_zoo = sb3_recurrent.linear(1e-3, 100, 100)
    assert [rl_zoo(p) for p in (1.0, 0.5, 0.0)] == [1e-3, 5e-4, 0.0]
    over_more = sb3_recurrent.linear(0.2, 100, 200)  # a run of 200 steps, decay over 100
    assert [over_more(p) for p in (1.0, 0.75, 0.5, 0.0)] == [0.2, 0.1, 0.0, 0.0]


@pytest.mark.parametrize("env, hyperparams, extra", [
    ("cartpole-novel", "zoo", []),
    ("pendulum-novel", "ddrl", ["--n_envs", "2", "--n_steps", "64", "--batch_size", "64",
                                "--use_sde", "--sde_sample_freq", "4", "--normalize", "obs"]),
])
def test_sb3_recurrent_runs(tmp_path, env, hyperparams, extra):
    # (a target out of reach: stop at --max_steps, after two evaluations)
    argv = [sys.executable, "benchmarks/sb3_recurrent.py", "--env", env, "--hyperparams", hyperparams,
            "--seed", "0", "--max_steps", "512", "--eval_freq", "256", "--eval_episodes", "1",
            "--target_return", "1e9", "--out_dir", str(tmp_path), *extra]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert DDRL_KEYS <= set(summary), sorted(DDRL_KEYS - set(summary))
    assert summary["env_steps"] >= 512
    assert summary["stopped_because"] == "total_steps" and summary["target_reached"] is False
    assert summary["time_to_target_s"] is None and summary["steps_to_target"] is None
    assert summary["wall_time_s"] > 0 and summary["system"] == f"sb3-recurrent-{hyperparams}"
    assert summary["hyperparams"] == hyperparams and summary["settings"]["policy"] == "MlpLstmPolicy"
    with open(tmp_path / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [256, 512]
    assert summary["last_eval_return"] == pytest.approx(float(rows[-1]["eval_return"]))
    assert os.path.exists(tmp_path / "progress.csv")
