"""Faults survived, end to end (main.py in a subprocess, tiny budgets): a rollout worker
SIGKILLed mid-run, an env that raises at random, a loss that turns NaN, the replay buffer killed;
and what a run directory holds after any ending."""
import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from ddrl import cluster
from core.run.checkpoint import load_checkpoint
from tests.test_e2e import REPO, read_run, run_mains

pytestmark = pytest.mark.e2e

PLUGINS = os.path.join(REPO, "tests", "plugins")


# -- finding an actor's process: main.py's descendants titled ray::<Class> ---------------------
def descendants(pid):
    return sorted(cluster.descendants({pid}))


def process_title(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def actor_pids(main_pid, class_name):
    return [p for p in descendants(main_pid) if process_title(p).startswith(f"ray::{class_name}")]


def metrics_rows(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def start_main(*flags, env=None):
    return subprocess.Popen([sys.executable, os.path.join(REPO, "main.py"), *flags], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def kill_when(proc, class_name, ready, deadline=120):
    """SIGKILL one ray::<class_name> process of ``proc`` once ``ready()``; returns its pid."""
    end = time.time() + deadline
    while proc.poll() is None and time.time() < end:
        if ready():
            victims = actor_pids(proc.pid, class_name)
            if victims:
                os.kill(victims[0], signal.SIGKILL)
                return victims[0]
        time.sleep(0.05)
    return None


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_until(proc, condition, deadline=180):
    """Poll ``condition()`` until it holds (True) or ``proc`` ends or the deadline passes."""
    end = time.time() + deadline
    while proc.poll() is None and time.time() < end:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def worker_counts(rows):
    """The workers column of metrics.csv rows (a row half written as it is read is left out)."""
    return [int(r["workers"]) for r in rows if (r.get("workers") or "").isdigit()]


def rejoined(rows, full):
    """True once a round of ``full`` workers follows a round with fewer: a replacement joined
    and delivered."""
    counts = worker_counts(rows)
    short = next((i for i, c in enumerate(counts) if c < full), None)
    return short is not None and full in counts[short:]


def stop(proc, timeout=300):
    """SIGTERM (the run's own stop: finish the round, checkpoint, exit 143), then wait."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return finish(proc, timeout)


# -- chaos: the test waits for the events it checks, then stops the run itself; a run that ended
# at a target instead raced the fault's recovery against the learning -----------------------
@pytest.mark.chaos
@pytest.mark.parametrize("memory", [(), ("--gym_id", "CartPole-v1", "--hide_obs", "1,3",
                                         "--recurrent", "lstm")], ids=["mlp", "lstm"])
def test_ppo_survives_a_sigkilled_rollout_worker(tmp_path, memory):
    """CartPole, 2 Ray workers, no target: one worker is SIGKILLed once the first round is
    logged; the rounds go on with the other; its replacement joins and delivers (a round of 2
    after rounds of 1); then the test stops the run with SIGTERM. Exit 143, one death and one
    restart, an update in every round, and a checkpoint holding both workers' states.

    The run used to end at CartPole's 475 and the test checked that the last round had 2
    workers: a replacement takes seconds to import torch and build its envs (4.2 s under a
    busy loop, while the lone worker ran 53 rounds), and the lone worker reached 475 first in
    2 of 5 runs under a busy loop (commit 6e3c962) and in CI. It now waits for the rejoin:
    10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    14.5-17.4 s.

    The same with a recurrent policy (issue 31) on CartPole without velocities: the
    replacement starts its episodes, and so its memory, afresh; the checkpoint holds each
    worker's recurrent state per env."""
    run_dir = str(tmp_path / "run")
    proc = start_main("--seed", "1", "--run_dir", run_dir, "--no-elastic_start", "--quiet",
                      "--no-tensorboard", "--total_steps", "100000000", "--target_return", "none",
                      *memory)
    try:
        victim = kill_when(proc, "RolloutWorker", lambda: len(metrics_rows(run_dir)) >= 1)
        back = victim is not None and wait_until(proc, lambda: rejoined(metrics_rows(run_dir), 2))
    finally:
        code, out, err = stop(proc)
    assert victim is not None, "no rollout worker to kill: " + err[-2000:]
    assert back, "the replacement never delivered: " + err[-3000:]
    assert code == 143, err[-3000:]
    assert "SIGTERM: stopping after this round" in err and "Traceback" not in err
    deaths = [line for line in err.splitlines() if "rollout worker" in line and "died" in line]
    assert len(deaths) == 1, err[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["stopped_because"] == "terminated", summary
    assert summary["worker_restarts"] == 1, summary
    assert rejoined(rows, 2) and worker_counts(rows)[-1] == 2
    updates = [int(r["updates"]) for r in rows]
    assert all(b > a for a, b in zip(updates, updates[1:])), updates  # no round went without
    payload, meta = load_checkpoint(os.path.join(run_dir, "checkpoints", "last.pt"))
    assert meta["env_steps"] == summary["env_steps"]
    assert list(payload["state"]["worker_slots"]) == [0, 1]  # the replacement's state too
    saved_memory = [w["memory"] for w in payload["state"]["workers"]]
    if memory:
        assert all(set(m["state"]) == {"pi/h", "pi/c", "vf/h", "vf/c"} for m in saved_memory)
    else:
        assert saved_memory == [None, None]


def learned_after_recovery(rows, target):
    """The first env-step count at which an evaluation logged after the in-place recovery
    reached ``target`` (the recovery drops an evaluation in flight), or None."""
    for row in rows:
        if ((row.get("recoveries") or "0") == "1" and row.get("eval_return")
                and float(row["eval_return"]) >= target):
            return int(row["env_steps"])
    return None


@pytest.mark.chaos
def test_sac_survives_killed_workers_and_a_dead_buffer_and_learns_on(tmp_path, record_property):
    """Pendulum, 2 Ray workers, 2 learner workers, no target: a rollout worker and a learner
    worker are SIGKILLed (both replaced), then, once metrics.csv counts both replacements and a
    checkpoint holds the buffer, the replay buffer actor: the run restores itself in place and
    learns on to an evaluation >= -400 after the recovery (random play scores about -1,200 to
    -1,700; small nets, lr 3e-3 and tau 0.05 get there in 1.0k-1.3k steps unharmed, seeds 0-4
    with --num_workers 0; 2k-2.5k steps with 2 Ray workers and learners). Then the test stops
    the run with SIGTERM (exit 143).

    The run used to stop itself at -400: under load the buffer's kill, which waits for both
    replacements and a checkpoint, raced the target. Waiting for the evaluation instead, the test
    fails only if the run does not learn within 400 s after its faults. 10 of 10 under a busy loop
    (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e): the evaluation >= -400 came
    1,024-6,656 env steps after the recovery (median 1,664), 49-122 s a test."""
    run_dir = str(tmp_path / "run")
    proc = start_main("--model_name", "sac", "--gym_id", "Pendulum-v1", "--seed", "0",
                      "--num_workers", "2", "--sac_precision", "fp32", "--learner_threads", "1",
                      "--num_learners", "2", "--sac_hidden_sizes", "64,64", "--batch_size",
                      "128", "--actor_lr", "3e-3", "--critic_lr", "3e-3", "--alpha_lr", "3e-3",
                      "--tau", "0.05", "--total_steps", "100000000", "--target_return", "none",
                      "--eval_interval", "256", "--eval_episodes", "2", "--log_steps", "256",
                      "--checkpoint_interval", "400", "--checkpoint_buffer", "--run_dir",
                      run_dir, "--quiet", "--no-tensorboard")
    checkpoints = os.path.join(run_dir, "checkpoints")

    def both_replaced_and_checkpointed():
        # The buffer dies only after both deaths were handled as such (a recovery in place
        # would otherwise swallow the learner's) and once a checkpoint holds the buffer.
        rows = metrics_rows(run_dir)
        restarts = (rows[-1].get("worker_restarts") or "") if rows else ""  # "": half written
        return (restarts.isdigit() and int(restarts) >= 2 and os.path.isdir(checkpoints)
                and any(f.startswith("step-") for f in os.listdir(checkpoints)))
    try:
        worker = kill_when(proc, "RolloutWorker", lambda: len(metrics_rows(run_dir)) >= 2)
        learner = kill_when(proc, "LearnerWorker", lambda: True)
        buffer = kill_when(proc, "ReplayBuffer", both_replaced_and_checkpointed)
        learned = buffer is not None and wait_until(
            proc, lambda: learned_after_recovery(metrics_rows(run_dir), -400) is not None,
            deadline=400)
    finally:
        code, out, err = stop(proc)
    assert worker is not None and learner is not None and buffer is not None, err[-2000:]
    assert learned, "no evaluation reached -400 after the recovery: " + err[-3000:]
    assert code == 143, err[-3000:]
    assert "Traceback" not in err
    summary, rows = read_run(run_dir)
    assert summary["stopped_because"] == "terminated", summary
    assert summary["worker_restarts"] == 2 and summary["recoveries"] == 1, summary
    assert "learner worker" in err
    assert "the replay buffer died" in err and "restores itself in place" in err
    recovered_at = min(int(r["env_steps"]) for r in rows if r["recoveries"] == "1")
    record_property("env_steps_to_learn_after_recovery",
                    learned_after_recovery(rows, -400) - recovered_at)
    record_property("best_eval_return", summary["best_eval_return"])


@pytest.mark.chaos
def test_dqn_survives_a_killed_worker_and_a_dead_buffer_and_learns_on(tmp_path, record_property):
    """CartPole, DQN in the Ape-X shape (2 Ray workers, the epsilon ladder, prioritized replay,
    3-step returns): a rollout worker is SIGKILLed (replaced), then, once metrics.csv counts
    the replacement and a checkpoint holds the buffer, the replay buffer actor: the run restores
    itself in place and learns on to an evaluation >= 150 after the recovery (random play
    scores about 20; the same flags in one process reach 213-276 within 6k steps, seeds 0-4).
    Then the test stops the run with SIGTERM (exit 143), as the SAC test above."""
    run_dir = str(tmp_path / "run")
    proc = start_main("--model_name", "dqn", "--gym_id", "CartPole-v1", "--seed", "0",
                      "--num_workers", "2", "--num_envs_per_worker", "1",
                      "--exploration", "ladder", "--prioritized_replay", "--n_step", "3",
                      "--dqn_hidden_sizes", "64,64", "--dqn_lr", "2.3e-3", "--batch_size", "64",
                      "--learning_starts", "1000", "--start_steps", "1000",
                      "--target_update_interval", "128", "--utd_ratio", "0.5",
                      "--learner_threads", "1", "--total_steps", "100000000",
                      "--target_return", "none", "--eval_interval", "512", "--eval_episodes",
                      "3", "--log_steps", "256", "--checkpoint_interval", "1000",
                      "--checkpoint_buffer", "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    checkpoints = os.path.join(run_dir, "checkpoints")

    def replaced_and_checkpointed():
        rows = metrics_rows(run_dir)
        restarts = (rows[-1].get("worker_restarts") or "") if rows else ""
        return (restarts.isdigit() and int(restarts) >= 1 and os.path.isdir(checkpoints)
                and any(f.startswith("step-") for f in os.listdir(checkpoints)))
    try:
        worker = kill_when(proc, "RolloutWorker", lambda: len(metrics_rows(run_dir)) >= 2)
        buffer = kill_when(proc, "PrioritizedReplayBuffer", replaced_and_checkpointed)
        learned = buffer is not None and wait_until(
            proc, lambda: learned_after_recovery(metrics_rows(run_dir), 150) is not None,
            deadline=400)
    finally:
        code, out, err = stop(proc)
    assert worker is not None and buffer is not None, err[-2000:]
    assert learned, "no evaluation reached 150 after the recovery: " + err[-3000:]
    assert code == 143, err[-3000:]
    assert "Traceback" not in err
    summary, rows = read_run(run_dir)
    assert summary["worker_restarts"] == 1 and summary["recoveries"] == 1, summary
    assert "the replay buffer died" in err and "restores itself in place" in err
    recovered_at = min(int(r["env_steps"]) for r in rows if r["recoveries"] == "1")
    record_property("env_steps_to_learn_after_recovery",
                    learned_after_recovery(rows, 150) - recovered_at)
    record_property("best_eval_return", summary["best_eval_return"])


# -- runs without Ray workers: side by side (each computes on one core), once; each test below
# checks its own -------------------------------------------------------------------------------
FLAKY = ("--user_dir", PLUGINS, "--env_name", "flaky_cartpole", "--num_workers", "0", "--quiet",
         "--no-tensorboard")
FLAKY_LEARNS = (*FLAKY, "--fail_prob", "0.0005", "--seed", "0", "--total_steps", "60000",
                "--target_return", "475")
FLAKY_STOPS = (*FLAKY, "--fail_always", "--max_env_errors", "3")
NAN = ("--user_dir", PLUGINS, "--model_name", "nan_ppo", "--num_workers", "0", "--seed", "0",
       "--target_return", "none", "--quiet", "--no-tensorboard")
NAN_SKIPPED = (*NAN, "--nan_steps", "20:25", "--total_steps", "2000")
NAN_STOPS = (*NAN, "--nan_steps", "20:40", "--max_bad_updates", "3", "--total_steps", "5000")
BUG = (*NAN, "--nan_steps", "0:0", "--raise_at_step", "15", "--total_steps", "5000")


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    """{flags: (finished process, its run directory)} for the runs above."""
    runs = [FLAKY_LEARNS, FLAKY_STOPS, NAN_SKIPPED, NAN_STOPS, BUG]
    dirs = [str(tmp_path_factory.mktemp("local") / "run") for _ in runs]
    procs = run_mains(*[[*flags, "--run_dir", run_dir] for flags, run_dir in zip(runs, dirs)])
    return {flags: (proc, run_dir) for flags, proc, run_dir in zip(runs, procs, dirs)}


def test_ppo_learns_cartpole_with_an_env_that_raises_at_random(local_runs, record_property):
    """An env whose step raises with probability 0.0005 (user plugin tests/plugins): each
    error cuts the episode and rebuilds the env; PPO still reaches 475.

    Deterministic (no Ray workers, the env's faults drawn from its seed): seed 0 reaches 475
    at 6,144 env steps with 8 env errors, in every run. The margin, for a CPU whose rounding
    takes another trajectory as another seed does: seeds 0-9 reach 475 at 6k-35k steps of the
    60k budget, but for seed 3, which hovers at 200-370 (it reaches 475 at 10k steps without
    the faults)."""
    proc, run_dir = local_runs[FLAKY_LEARNS]
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, rows = read_run(run_dir)
    record_property("steps_to_target", summary["steps_to_target"] or -1)
    assert summary["stopped_because"] == "target_return", summary
    assert summary["env_errors"] >= 1, summary
    assert "simulated simulator disconnect" in proc.stderr
    assert int(rows[-1]["env_errors"]) == summary["env_errors"]


def test_updates_with_a_nan_loss_are_skipped_and_the_run_goes_on(local_runs):
    proc, run_dir = local_runs[NAN_SKIPPED]
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["stopped_because"] == "total_steps"
    assert summary["skipped_updates"] == 5  # gradient calls 20..24 of the one worker
    payload = torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)
    assert all(torch.isfinite(t).all() for t in payload["model"].values())
    # 10 epochs x 1 minibatch per round: the updates counter lags the rounds by the 5 skipped.
    assert int(rows[-1]["updates"]) == 10 * len(rows) - 5


def test_too_many_bad_updates_in_a_row_stop_with_an_error_and_a_good_checkpoint(local_runs):
    proc, run_dir = local_runs[NAN_STOPS]
    assert proc.returncode == 1
    assert "ddrl: error:" in proc.stderr and "--max_bad_updates" in proc.stderr
    assert "Traceback" not in proc.stderr
    summary, _ = read_run(run_dir)
    assert summary["stopped_because"] == "error" and "max_bad_updates" in summary["error"]
    payload = torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)
    assert all(torch.isfinite(t).all() for t in payload["model"].values())


# -- the run directory after any ending ----------------------------------------------------------
def test_an_unexpected_error_still_writes_summary_and_a_checkpoint(local_runs):
    proc, run_dir = local_runs[BUG]
    assert proc.returncode == 1
    assert "RuntimeError: model bug" in proc.stderr  # a bug keeps its traceback
    summary, _ = read_run(run_dir)
    assert summary["stopped_because"] == "error"
    assert summary["error"] == "RuntimeError: model bug"
    assert os.path.isfile(os.path.join(run_dir, "checkpoints", "last.pt"))


def test_a_run_dir_holding_another_run_is_refused_without_restore(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").write_text("iteration,env_steps\n1,128\n")
    # A log written there first (a shell redirect, a scheduler) is no run: allowed.
    other = tmp_path / "other"
    other.mkdir()
    (other / "stdout.log").write_text("")
    refused, allowed = run_mains(
        ["--num_workers", "0", "--total_steps", "500", "--run_dir", str(run_dir)],
        ["--num_workers", "0", "--total_steps", "200", "--eval_interval", "200",
         "--eval_episodes", "1", "--run_dir", str(other), "--quiet"])
    assert refused.returncode == 2
    assert "already holds a run (metrics.csv)" in refused.stderr
    assert "--restore" in refused.stderr
    assert (run_dir / "metrics.csv").read_text() == "iteration,env_steps\n1,128\n"
    assert not (run_dir / "summary.json").exists()
    assert allowed.returncode == 0, allowed.stderr[-2000:]


def test_sigterm_sets_a_stop_flag_the_round_finishes_and_a_checkpoint_is_written(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = start_main("--num_workers", "0", "--total_steps", "1000000", "--target_return",
                      "none", "--checkpoint_interval", "1000000", "--run_dir", run_dir,
                      "--no-tensorboard")
    end = time.time() + 120
    while len(metrics_rows(run_dir)) < 3 and time.time() < end and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, err[-2000:]
    assert "SIGTERM: stopping after this round" in err and "Traceback" not in err
    summary, rows = read_run(run_dir)
    assert summary["stopped_because"] == "terminated"
    _, meta = load_checkpoint(os.path.join(run_dir, "checkpoints", "last.pt"))
    assert meta["env_steps"] == summary["env_steps"] == int(rows[-1]["env_steps"])


def test_an_env_failing_past_max_env_errors_stops_the_run_with_a_clear_error(local_runs):
    proc, run_dir = local_runs[FLAKY_STOPS]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "ddrl: error:" in proc.stderr and "--max_env_errors" in proc.stderr
    assert "Traceback" not in proc.stderr
    summary, _ = read_run(run_dir)
    assert summary["stopped_because"] == "error" and "EnvFailure" in summary["error"]
