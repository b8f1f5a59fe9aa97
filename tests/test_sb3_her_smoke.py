"""Smoke tests of benchmarks/sb3_her.py, the HER peer (SB3's SAC with its HerReplayBuffer): a
run of a few hundred steps on PointGoal and on FetchReach-v4 writes summary.json with ddrl's
keys and eval.csv, and ddrl's --her flags become SB3's HER settings. The peer library is
optional (benchmarks/requirements.txt; CI has none): the module skips without
stable_baselines3."""
import csv
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("stable_baselines3",
                    reason="stable_baselines3 is not installed (benchmarks/requirements.txt)")

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

# what compare.py reads from every system's summary.json (its docstring)
DDRL_KEYS = {"env_steps", "wall_time_s", "best_eval_return", "last_eval_return", "stopped_because",
             "target_reached", "time_to_target_s", "steps_to_target", "system"}


@pytest.mark.unit
def test_ddrl_her_flags_become_sb3_her_settings():
    import sb3_her
    kwargs, _ = sb3_her.ddrl_settings("ddrl/PointGoal-v0", "--her --her_strategy final --her_k 2 "
                                      "--config none --sac_hidden_sizes 64,64 --sac_gamma 0.95")
    assert kwargs["policy"] == "MultiInputPolicy"
    assert kwargs["replay_buffer_class"].__name__ == "HerReplayBuffer"
    assert kwargs["replay_buffer_kwargs"] == dict(goal_selection_strategy="final",
                                                  n_sampled_goal=2)
    assert kwargs["policy_kwargs"] == dict(net_arch=[64, 64]) and kwargs["gamma"] == 0.95
    without, _ = sb3_her.ddrl_settings("ddrl/PointGoal-v0", "--config none")
    assert "replay_buffer_class" not in without


@pytest.mark.parametrize("env, extra", [
    ("ddrl/PointGoal-v0", ["--hyperparams", "ddrl", "--ddrl_flags",
                           "--her --config none --learning_starts 100 --start_steps 100 "
                           "--batch_size 32 --sac_hidden_sizes 16,16"]),
    ("FetchReach-v4", []),
])
def test_sb3_her_runs(tmp_path, env, extra):
    if env.startswith("Fetch"):
        pytest.importorskip("gymnasium_robotics")
    # (a target out of reach: stop at --max_steps, after two evaluations)
    argv = [sys.executable, "benchmarks/sb3_her.py", "--env", env, "--seed", "0",
            "--max_steps", "300", "--eval_freq", "150", "--eval_episodes", "1",
            "--target_return", "1e9", "--out_dir", str(tmp_path), *extra]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert DDRL_KEYS <= set(summary), sorted(DDRL_KEYS - set(summary))
    assert summary["env_steps"] >= 300 and summary["stopped_because"] == "total_steps"
    assert summary["target_reached"] is False and summary["time_to_target_s"] is None
    assert summary["settings"]["policy"] == "MultiInputPolicy"
    assert summary["system"] == f"sb3-her-{'ddrl' if extra else 'zoo'}"
    with open(tmp_path / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [150, 300]
    assert summary["last_eval_return"] == pytest.approx(float(rows[-1]["eval_return"]))
