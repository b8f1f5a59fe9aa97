"""--learner_sync allreduce: the parameter server and its replicas compute their rows of each
batch and average the gradients among themselves (core/learning/allreduce.py)."""
import glob
import multiprocessing
import os
import signal
import tempfile
import time

import numpy as np
import pytest

from core.learning.allreduce import rank_rows, remove_rendezvous_file
from core.learning.parameter_server import ParameterServer
from test_e2e import read_run, run_main
from test_faults import actor_pids, metrics_rows, start_main, stop, wait_until
from test_sac_loop import SAC, filled_buffer, pendulum_spec

pytestmark = pytest.mark.contract


@pytest.mark.unit
def test_rank_rows_cover_the_batch_once_in_order():
    assert [rank_rows([128, 128], r, 256) for r in range(2)] == [(0, 128), (128, 256)]
    assert [rank_rows([4, 3, 3], r, 10) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]
    # a batch of another size than --batch_size is cut in the same proportions
    assert [rank_rows([128, 128], r, 64) for r in range(2)] == [(0, 32), (32, 64)]


def _rank(rank, path, batch, out):
    """One learner process of a 2-rank group: one update of the whole batch (its rows of it),
    without sampling noise, as in test_sac_loop's split-batch test."""
    import torch
    torch.set_num_threads(1)
    torch.randn_like = torch.zeros_like  # a' and the actor's actions: functions of the batch
    spec, spaces = pendulum_spec()
    server = ParameterServer(spec, *spaces)
    server.join_group(path, rank, [32, 32])
    before = server.get_weights()
    stats = server.update([batch])[0]
    out.put((rank, before, stats, server.get_weights()))
    server.group.close()


def test_allreduce_learners_make_the_whole_batch_update_and_stay_identical(tmp_path, monkeypatch):
    """Two processes, each on half of a batch of 64, averaged by one allreduce: both hold the
    weights one learner gets from the whole batch, bit for bit the same on both ranks."""
    import torch
    batch = filled_buffer(pendulum_spec()[1]).sample(64)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    path = str(tmp_path / "group.store")
    procs = [context.Process(target=_rank, args=(rank, path, batch, out)) for rank in range(2)]
    for proc in procs:
        proc.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    remove_rendezvous_file(path)  # as the trainer does at its close
    assert not os.path.exists(path)
    remove_rendezvous_file(path)  # and again: gone already is fine

    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    spec, spaces = pendulum_spec()
    reference = ParameterServer(spec, *spaces)  # same seed: the same initial weights
    initial = reference.get_weights()
    reference_stats = reference.update([batch])[0]
    (_, before0, stats0, after0), (_, before1, stats1, after1) = results
    for name, value in reference.get_weights().items():
        np.testing.assert_array_equal(before0[name], initial[name])
        np.testing.assert_array_equal(before1[name], initial[name])  # rank 0's, broadcast
        np.testing.assert_array_equal(after0[name], after1[name])    # the replicas agree
        np.testing.assert_allclose(after0[name], value, rtol=1e-5, atol=1e-6)
    for key in ("critic_loss", "actor_loss", "grad_norm"):
        assert stats0[key] == stats1[key] == pytest.approx(reference_stats[key], rel=1e-4)
    # not a no-op: the update moved the weights
    assert any(not np.allclose(initial[k], v) for k, v in after0.items())


@pytest.mark.e2e
def test_allreduce_needs_learner_processes(tmp_path):
    proc = run_main(*SAC, "--num_workers", "0", "--num_learners", "2", "--learner_sync",
                    "allreduce", "--total_steps", "500", "--run_dir", str(tmp_path / "run"),
                    timeout=120)
    assert proc.returncode != 0
    assert "--learner_sync allreduce" in proc.stderr and "--num_workers 0" in proc.stderr


def rebuilt_updates(rows):
    """The updates column of the rows logged after the in-place rebuild (counters restart at
    the checkpoint the rebuild restored)."""
    return [int(r["updates"]) for r in rows
            if r.get("recoveries") == "1" and (r.get("updates") or "").isdigit()]


@pytest.mark.chaos
def test_allreduce_run_survives_a_killed_group_member(tmp_path):
    """Pendulum, 2 Ray workers, a group of 2 allreduce learners: one of the group's two
    ray::ParameterServer processes (the server or its replica: from outside they look alike) is
    SIGKILLed once a checkpoint exists (the first, at 512 steps, past the 300-step warm-up).
    The other one's allreduce fails instead of hanging, the run rebuilds the group from that
    checkpoint in place and goes on, updating again after a new warm-up; once two rows after
    the rebuild show its updates growing, the test stops the run with SIGTERM. (It used to
    run a 1,500-step budget: a late kill under load would leave too few rows after it.) 10 of
    10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e), 18.8-21.4 s."""
    run_dir = str(tmp_path / "run")
    group_files = os.path.join(tempfile.gettempdir(), "ddrl-learners-*.store")
    files_before = set(glob.glob(group_files))
    proc = start_main(*SAC, "--seed", "0", "--num_workers", "2", "--num_learners", "2",
                      "--learner_sync", "allreduce", "--sac_hidden_sizes", "32,32",
                      "--batch_size", "64", "--learning_starts", "300", "--start_steps", "300",
                      "--total_steps", "100000000", "--eval_interval", "1000",
                      "--eval_episodes", "1", "--log_steps", "256", "--checkpoint_interval",
                      "300", "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    checkpoints = os.path.join(run_dir, "checkpoints")
    victim = None

    def group_updates_again():
        updates = rebuilt_updates(metrics_rows(run_dir))
        return len(updates) >= 2 and updates[-1] > updates[0]
    try:
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline and victim is None:
            servers = sorted(actor_pids(proc.pid, "ParameterServer"))
            if len(servers) == 2 and os.path.isdir(checkpoints) and any(
                    f.startswith("step-") for f in os.listdir(checkpoints)):
                victim = servers[-1]
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.05)
        updated = victim is not None and wait_until(proc, group_updates_again, deadline=300)
    finally:
        code, out, err = stop(proc)
    assert victim is not None, err[-2000:]
    assert updated, "the rebuilt group never updated: " + err[-3000:]
    assert code == 143, err[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["recoveries"] == 1, summary
    assert ("the parameter server died" in err or "learner replica 1 died" in err), err[-3000:]
    assert "restores itself in place" in err and "Traceback" not in err
    # both groups' rendezvous files are gone (the killed one's, the rebuilt one's at the end;
    # the chaos tier runs one test at a time, so no other run makes them meanwhile)
    assert set(glob.glob(group_files)) <= files_before
