"""--restore: a run continues from a checkpoint (weights, optimizer state, counters); a file that
is missing, truncated or from another model is a one-paragraph error naming it."""
import os
import shutil

import pytest
import torch

from core.run.checkpoint import load_checkpoint
from tests.test_e2e import read_run, run_main, run_mains

pytestmark = pytest.mark.e2e

# One learner thread: 32-unit layers gain nothing from a second one, which only spins against
# whatever else runs on the machine's two cores (--learner_threads auto gives a run without Ray
# workers two).
SAC_FLAGS = ("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "sac",
             "--num_workers", "0", "--learning_starts", "200", "--start_steps", "200",
             "--eval_interval", "400", "--eval_episodes", "1", "--sac_hidden_sizes", "32,32",
             "--learner_threads", "1", "--log_steps", "200", "--target_return", "none",
             "--quiet")
PPO_FLAGS = ("--num_workers", "0", "--eval_interval", "1000", "--eval_episodes", "1",
             "--target_return", "none", "--quiet")


# -- runs to restore from, made once for the module; tests that change one work on a copy ------
@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("sac") / "run")
    proc = run_main(*SAC_FLAGS, "--total_steps", "600", "--run_dir", run)
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """Periodic checkpoints at 512 and 1,024 env steps, the final one at 1,152."""
    run = str(tmp_path_factory.mktemp("ppo") / "run")
    proc = run_main(*PPO_FLAGS, "--total_steps", "1100", "--checkpoint_interval", "500",
                    "--run_dir", run)
    assert proc.returncode == 0, proc.stderr
    return run


def step_files(run):
    checkpoints = os.path.join(run, "checkpoints")
    return sorted(f for f in os.listdir(checkpoints) if f.startswith("step-") and
                  f.endswith(".pt"))


def copy_run(run, to):
    """A copy of a run directory, laid out as the run wrote it: last.pt a hard link to the
    newest step-<N>.pt (a plain copy would make it a file of its own)."""
    newest = step_files(run)[-1]
    assert os.path.samefile(os.path.join(run, "checkpoints", "last.pt"),
                            os.path.join(run, "checkpoints", newest))
    shutil.copytree(run, to)
    last = os.path.join(to, "checkpoints", "last.pt")
    os.remove(last)
    os.link(os.path.join(to, "checkpoints", newest), last)
    return to


@pytest.mark.parametrize("name, flags, total", [("sac", SAC_FLAGS, 1200),
                                                ("ppo", PPO_FLAGS, 1800)], ids=["sac", "ppo"])
def test_restore_continues_counters_and_weights(tmp_path, request, name, flags, total):
    first, second = request.getfixturevalue(f"{name}_run"), str(tmp_path / "second")
    _, first_meta = load_checkpoint(os.path.join(first, "checkpoints", "last.pt"))
    assert first_meta["env_steps"] >= 600 and first_meta["updates"] > 0

    proc = run_main(*flags, "--total_steps", str(total), "--run_dir", second, "--restore",
                    first)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(second)
    assert summary["env_steps"] >= total
    # Counters continue: the first row is past the restored step count, updates grow from there.
    assert int(rows[0]["env_steps"]) > first_meta["env_steps"]
    payload, meta = load_checkpoint(os.path.join(second, "checkpoints", "last.pt"))
    assert meta["updates"] > first_meta["updates"]
    # Fewer new env steps than a run from scratch to the total would take.
    assert summary["env_steps"] - first_meta["env_steps"] < total


def test_restored_weights_are_the_checkpoint_weights(tmp_path, sac_run):
    """A restore with no training left (total_steps already reached after one fragment) saves
    weights that moved on from the checkpoint, not from a fresh initialisation: the optimizer
    state came along (its step counts continue)."""
    first, second = sac_run, str(tmp_path / "second")
    proc = run_main(*SAC_FLAGS, "--total_steps", "601", "--run_dir", second, "--restore",
                    os.path.join(first, "checkpoints", "last.pt"))
    assert proc.returncode == 0, proc.stderr
    before, meta_before = load_checkpoint(os.path.join(first, "checkpoints", "last.pt"))
    after, meta_after = load_checkpoint(os.path.join(second, "checkpoints", "last.pt"))
    steps_before = before["optimizer"]["state"][0]["step"].item()
    steps_after = after["optimizer"]["state"][0]["step"].item()
    assert steps_after == steps_before + (meta_after["updates"] - meta_before["updates"])


def test_restore_errors_name_the_file(tmp_path, ppo_run):
    run = copy_run(ppo_run, str(tmp_path / "run"))  # its newest checkpoint gets cut below
    checkpoints = os.path.join(run, "checkpoints")
    steps = step_files(run)
    assert len(steps) >= 2
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()

    # Independent of each other: side by side.
    missing, other_model, wrong_shape, empty = run_mains(
        [*PPO_FLAGS, "--restore", str(tmp_path / "nope.pt")],
        [*SAC_FLAGS, "--total_steps", "10", "--restore", run],
        ["--hidden_sizes", "8", "--restore", run, "--run_dir", str(tmp_path / "other")],
        [*PPO_FLAGS, "--restore", str(empty_dir)])
    assert missing.returncode == 2 and "nope.pt" in missing.stderr
    assert "Traceback" not in missing.stderr

    assert other_model.returncode == 2
    assert "--model_name ppo" in other_model.stderr and "--model_name sac" in other_model.stderr

    assert wrong_shape.returncode == 2, wrong_shape.stderr
    assert "does not fit this model" in wrong_shape.stderr

    assert empty.returncode == 2 and "checkpoints/last.pt" in empty.stderr

    # The newest checkpoint cut short (a full disk, a crash of the machine): a clear error
    # naming it, and the one before still restores.
    newest = os.path.join(checkpoints, steps[-1])
    with open(newest, "rb") as f:
        data = f.read()
    with open(newest, "wb") as f:  # last.pt is a hard link to it: cut as well
        f.write(data[: len(data) // 2])
    cut, previous = run_mains(
        ["--restore", run],
        ["--restore", os.path.join(checkpoints, steps[-2]), "--total_steps", "1500",
         "--run_dir", str(tmp_path / "from_previous"), "--quiet"])
    assert cut.returncode == 2, cut.stderr
    assert "last.pt" in cut.stderr and "not a readable ddrl checkpoint" in cut.stderr
    assert "Traceback" not in cut.stderr
    assert previous.returncode == 0, previous.stderr


def read_csv(path):
    import csv
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("flags", [(), ("--grad_workers", "0"),
                                   ("--vectorize", "native", "--num_envs_per_worker", "8"),
                                   ("--normalize_reward",), ("--model_name", "pqn")],
                         ids=["workers", "learner", "batched", "reward-normalized", "pqn"])
def test_pause_then_restore_ends_at_the_weights_of_the_straight_run(tmp_path, flags):
    """--num_workers 0, fixed seed: 2N steps straight == N steps, stop, --restore to 2N (same
    weights bit for bit: episodes, RNGs, optimizer and schedules all continue), with the
    metrics.csv of the resumed run appended, not restarted. Whether the worker or the
    learner (--grad_workers 0, its own minibatch RNG) computes the gradients, with a
    batched env (gym_env --vectorize native: its arrays and NextStep's pending resets), and
    with --normalize_reward (its statistics and each env's discounted return), and for PQN
    (its preset: epsilon-greedy draws on the worker, RAdam's state)."""
    common = (*flags, "--num_workers", "0", "--seed", "3", "--total_steps", "2560",
              "--eval_interval", "1024", "--eval_episodes", "2", "--target_return", "none",
              "--checkpoint_interval", "1000", "--keep_checkpoints", "2", "--quiet")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "1500"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    rows_before = read_csv(os.path.join(resumed, "metrics.csv"))
    proc = run_main("--restore", resumed, "--quiet")  # its own config and run directory
    assert proc.returncode == 0, proc.stderr

    a, _ = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta["env_steps"] >= 2560
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name

    rows_straight = read_csv(os.path.join(straight, "metrics.csv"))
    rows_resumed = read_csv(os.path.join(resumed, "metrics.csv"))
    assert rows_resumed[:len(rows_before)] == rows_before      # appended, not rewritten
    assert ([r["env_steps"] for r in rows_resumed] == [r["env_steps"] for r in rows_straight])
    assert ([r["eval_return"] for r in rows_resumed] == [r["eval_return"] for r in rows_straight])
    walls = [float(r["wall_time_s"]) for r in rows_resumed]
    assert walls == sorted(walls)                                 # the clock goes on
    files = sorted(os.listdir(os.path.join(resumed, "checkpoints")))
    # (PQN's preset rounds are 512 env steps: its pause checkpoint is at 1,536, the next one
    # --checkpoint_interval later, at 2,560)
    kept = "step-000001536.pt" if "pqn" in flags else "step-000002048.pt"
    assert [f for f in files if f.endswith(".pt")] == [
        "best.pt", "last.pt", kept, "step-000002560.pt"]


@pytest.mark.parametrize("signal_name, code, reason", [("SIGTERM", 143, "terminated"),
                                                        ("SIGINT", 130, "interrupted")])
def test_a_signal_leaves_a_checkpoint_that_restores(tmp_path, signal_name, code, reason):
    import signal
    import subprocess
    import sys
    import time
    from tests.test_e2e import REPO
    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "main.py"), *PPO_FLAGS,
                             "--total_steps", "10000000", "--run_dir", run_dir],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(run_dir, "metrics.csv")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(metrics)
                                          and len(read_csv(metrics)) >= 5):
        time.sleep(0.2)
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    summary, rows = read_run(run_dir)
    assert summary["stopped_because"] == reason
    _, meta = load_checkpoint(os.path.join(run_dir, "checkpoints", "last.pt"))
    assert meta["env_steps"] == summary["env_steps"] > 0

    again = run_main("--restore", run_dir, "--total_steps", str(meta["env_steps"] + 1000))
    assert again.returncode == 0, again.stderr
    rows_after = read_csv(metrics)
    assert int(rows_after[len(rows)]["env_steps"]) > meta["env_steps"]  # counters continue
    assert len(rows_after) > len(rows)


def test_sac_checkpoint_buffer_restores_the_replay_and_learning_goes_on(tmp_path):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    proc = run_main(*SAC_FLAGS, "--total_steps", "600", "--checkpoint_buffer", "--run_dir", first)
    assert proc.returncode == 0, proc.stderr
    payload, meta = load_checkpoint(os.path.join(first, "checkpoints", "last.pt"))
    buffer = payload["state"]["buffer"]
    assert buffer["total_added"] == meta["env_steps"]
    assert buffer["observations"].shape == (meta["env_steps"], 3)
    proc = run_main("--restore", first, "--run_dir", second, "--total_steps", "700",
                    "--log_steps", "64")
    assert proc.returncode == 0, proc.stderr
    _, rows = read_run(second)
    # With the replay restored there is no new warm-up: updates go on from the first fragment.
    assert int(rows[0]["updates"]) > meta["updates"]
    assert int(rows[0]["replay_size"]) > meta["env_steps"]


def test_restore_with_ray_workers_continues_counters(tmp_path):
    run = str(tmp_path / "run")
    flags = ("--num_workers", "2", "--eval_interval", "1000", "--eval_episodes", "1",
             "--target_return", "none", "--quiet", "--run_dir", run)
    assert run_main(*flags, "--total_steps", "1024").returncode == 0
    _, meta = load_checkpoint(os.path.join(run, "checkpoints", "last.pt"))
    rows_before = len(read_csv(os.path.join(run, "metrics.csv")))
    proc = run_main("--restore", run, "--total_steps", "2048")
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(os.path.join(run, "metrics.csv"))
    assert int(rows[rows_before]["env_steps"]) > meta["env_steps"]
    assert int(rows[-1]["updates"]) > meta["updates"]
    _, meta_after = load_checkpoint(os.path.join(run, "checkpoints", "last.pt"))
    assert meta_after["env_steps"] >= 2048
