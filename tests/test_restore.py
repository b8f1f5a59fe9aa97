"""--restore: a run continues from a checkpoint (weights, optimizer state, counters); a file that
is missing, truncated or from another model is a one-paragraph error naming it."""
import os
import shutil

import pytest
import torch

from core.checkpoint import load_checkpoint
from tests.test_e2e import read_run, run_main

SAC_FLAGS = ("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "sac",
             "--num_workers", "0", "--learning_starts", "200", "--start_steps", "200",
             "--eval_interval", "400", "--eval_episodes", "1", "--sac_hidden_sizes", "32,32",
             "--log_steps", "200", "--target_return", "none", "--quiet")
PPO_FLAGS = ("--num_workers", "0", "--eval_interval", "1000", "--eval_episodes", "1",
             "--target_return", "none", "--quiet")


@pytest.mark.parametrize("flags", [SAC_FLAGS, PPO_FLAGS], ids=["sac", "ppo"])
def test_restore_continues_counters_and_weights(tmp_path, flags):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    proc = run_main(*flags, "--total_steps", "600", "--run_dir", first)
    assert proc.returncode == 0, proc.stderr
    _, first_meta = load_checkpoint(os.path.join(first, "checkpoints", "last.pt"))
    assert first_meta["env_steps"] >= 600 and first_meta["updates"] > 0

    proc = run_main(*flags, "--total_steps", "1200", "--run_dir", second, "--restore", first)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(second)
    assert summary["env_steps"] >= 1200
    # Counters continue: the first row is past the restored step count, updates grow from there.
    assert int(rows[0]["env_steps"]) > first_meta["env_steps"]
    payload, meta = load_checkpoint(os.path.join(second, "checkpoints", "last.pt"))
    assert meta["updates"] > first_meta["updates"]
    # Fewer new env steps than a run from scratch to 1200 would take.
    assert summary["env_steps"] - first_meta["env_steps"] < 1200


def test_restored_weights_are_the_checkpoint_weights(tmp_path):
    """A restore with no training left (total_steps already reached after one fragment) saves
    weights that moved on from the checkpoint, not from a fresh initialisation: the optimizer
    state came along (its step counts continue)."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    assert run_main(*SAC_FLAGS, "--total_steps", "600", "--run_dir", first).returncode == 0
    proc = run_main(*SAC_FLAGS, "--total_steps", "601", "--run_dir", second, "--restore",
                    os.path.join(first, "checkpoints", "last.pt"))
    assert proc.returncode == 0, proc.stderr
    before, meta_before = load_checkpoint(os.path.join(first, "checkpoints", "last.pt"))
    after, meta_after = load_checkpoint(os.path.join(second, "checkpoints", "last.pt"))
    steps_before = before["optimizer"]["state"][0]["step"].item()
    steps_after = after["optimizer"]["state"][0]["step"].item()
    assert steps_after == steps_before + (meta_after["updates"] - meta_before["updates"])


def test_restore_errors_name_the_file(tmp_path):
    run = str(tmp_path / "run")
    assert run_main(*PPO_FLAGS, "--total_steps", "300", "--run_dir", run).returncode == 0
    last = os.path.join(run, "checkpoints", "last.pt")

    missing = run_main(*PPO_FLAGS, "--restore", str(tmp_path / "nope.pt"))
    assert missing.returncode == 2 and "nope.pt" in missing.stderr
    assert "Traceback" not in missing.stderr

    truncated = str(tmp_path / "truncated.pt")
    with open(last, "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[: len(data) // 2])
    proc = run_main(*PPO_FLAGS, "--restore", truncated)
    assert proc.returncode == 2, proc.stderr
    assert "truncated.pt" in proc.stderr and "not a readable ddrl checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr
    load_checkpoint(last)  # the good one still loads

    other_model = run_main(*SAC_FLAGS, "--total_steps", "10", "--restore", run)
    assert other_model.returncode == 2
    assert "--model_name ppo" in other_model.stderr and "--model_name sac" in other_model.stderr

    wrong_shape = run_main(*PPO_FLAGS, "--hidden_sizes", "8", "--restore", run)
    assert wrong_shape.returncode == 2, wrong_shape.stderr
    assert "does not fit this model" in wrong_shape.stderr

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    proc = run_main(*PPO_FLAGS, "--restore", str(empty_dir))
    assert proc.returncode == 2 and "checkpoints/last.pt" in proc.stderr
