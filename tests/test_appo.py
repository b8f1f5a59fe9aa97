"""The asynchronous loop (core/algos/appo_trainer.py, models/appo.py, agents/vtrace_agent.py).

Contract: fragments a worker sampled reach the learner whole, and the learner's replay of them
with the weights that acted gives back the acting log-probabilities (importance ratio exactly 1,
V-trace then on-policy), for an MLP, an LSTM (states replayed from each column's first), an
action mask and a Dict observation; columns of several fragments keep their own truncations.
End to end: the deterministic mode resumes exactly; Ray workers with a lag bound of 0 drop
fragments and count them; a run learns CartPole."""
import os

import numpy as np
import pytest
import torch

from core.sampling.rollout import RolloutWorker
from options.options import parse_args, run_spec


def make_worker(*flags, num_envs=4, index=0):
    args = parse_args(["--config", "none", "--model_name", "appo", "--num_workers", "0",
                       "--num_envs_per_worker", str(num_envs), "--seed", "0", *flags])
    return RolloutWorker(run_spec(args), worker_index=index)


def fragment(worker, steps):
    stats = worker.collect(None, None, steps, export=True)
    return stats, worker.agent.export_data()


CASES = {
    "mlp": ("--gym_id", "CartPole-v1", "--max_episode_steps", "7"),
    "lstm": ("--gym_id", "CartPole-v1", "--max_episode_steps", "7", "--recurrent", "lstm"),
    "mask": ("--gym_id", "ddrl/MaskedChoice-v0"),
    "mask-gru": ("--gym_id", "ddrl/MaskedChoice-v0", "--recurrent", "gru"),
    "dict": ("--gym_id", "ddrl/DictCartPole-v0"),
}


@pytest.mark.contract
@pytest.mark.parametrize("case", list(CASES))
def test_the_learner_replays_the_acting_policy_exactly(case):
    """Two workers' fragments, adopted side by side by the learner's agent: with the weights
    that acted, every step's ratio is 1 (approx_kl 0) and the values the learner computes
    are the acting ones, so the first update is on-policy V-trace."""
    flags = ("--env_name", "gym_env", *CASES[case])
    workers = [make_worker(*flags, index=i) for i in range(2)]
    weights = workers[0].model.get_weights()
    workers[1].model.set_weights(weights)
    parts = [fragment(w, 12)[1] for w in workers]
    learner = make_worker(*flags, index=2)
    learner.model.set_weights(weights)
    agent = learner.agent
    samples = agent.adopt_data(parts)
    assert samples == sum(int(p["valid"].sum()) for p in parts)
    assert agent.data["rewards"].shape == (12, 8)
    if case in ("mlp", "lstm"):  # 7-step episodes: truncations inside, re-based per part
        assert len(agent.data["truncated_index"]) > len(parts[0]["truncated_index"]) > 0
        assert agent.data["truncated_index"][:, 1].max() >= 4
    batch = agent.batch(np.arange(8))
    model = learner.model
    captured = {}
    original = model.policy_terms

    def spy(features, actions, mask=None):
        log_prob, entropy = original(features, actions, mask)
        captured["log_prob"] = log_prob.detach()
        return log_prob, entropy

    model.policy_terms = spy
    _, stats = model.step(batch)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(captured["log_prob"].numpy(),
                               batch.behaviour_log_probs.numpy(), atol=1e-5)


@pytest.mark.contract
@pytest.mark.parametrize("case", ["mlp", "lstm"])
def test_a_target_network_takes_the_ratios_as_rllib_appo_does(case, monkeypatch):
    """--target_update_interval: with three different policies (mu acted the fragment, the
    learner holds pi, its target network pi_target), V-trace gets log pi_target - log mu and
    the clipped surrogate the ratio min(2, mu / pi_target) * pi / mu; the log-probabilities
    are each taken from a model of their own holding those weights (the LSTM's replayed from
    the columns' first states)."""
    import models.appo
    flags = ("--env_name", "gym_env", *CASES[case], "--target_update_interval", "5")
    acting = make_worker(*flags)
    part = fragment(acting, 10)[1]
    learner = make_worker(*flags, index=1)
    other = make_worker(*flags, index=2)   # its initial weights: the target's
    target_weights = other.model.get_weights()
    pi_weights = learner.model.get_weights()
    for name in learner.model.target.names:  # the learner's target := the other's weights
        i = learner.model.target.names.index(name)
        getattr(learner.model.target, f"p{i}").copy_(torch.as_tensor(target_weights[name]))
    agent = learner.agent
    agent.adopt_data([part])
    batch = agent.batch(np.arange(4))
    with torch.no_grad():
        log_pi = learner.model(batch)
        log_target = other.model(batch)
    log_mu = batch.behaviour_log_probs
    assert not torch.allclose(log_pi, log_target) and not torch.allclose(log_pi, log_mu)
    seen = {}
    original = models.appo.vtrace

    def spy(log_rhos, *args, **kwargs):
        seen["log_rhos"] = log_rhos.clone()
        return original(log_rhos, *args, **kwargs)

    monkeypatch.setattr(models.appo, "vtrace", spy)
    _, stats = learner.model.step(batch)
    np.testing.assert_allclose(seen["log_rhos"].reshape(-1).numpy(),
                               (log_target - log_mu).numpy(), atol=1e-5)
    assert "ratio_mean" in stats
    log_pi, log_target, log_mu = log_pi.numpy(), log_target.numpy(), log_mu.numpy()
    ratio = np.minimum(2.0, np.exp(log_mu - log_target)) * np.exp(log_pi - log_mu)
    valid = batch.weights.reshape(-1).numpy()
    assert stats["ratio_mean"] == pytest.approx(float((ratio * valid).sum() / valid.sum()),
                                                rel=1e-4)
    # the learner's own weights were never touched by the target's call
    for name, value in learner.model.get_weights().items():
        if not name.startswith("target."):
            np.testing.assert_array_equal(value, pi_weights[name])


@pytest.mark.unit
@pytest.mark.parametrize("tau", [1.0, 0.25])
def test_the_target_network_moves_every_interval_updates(tau):
    """--target_update_interval 2: after update 1 the target is still the initial weights;
    after update 2 it is tau * weights + (1 - tau) * initial (a copy at tau 1)."""
    from core.learning.learner import Learner
    worker = make_worker("--target_update_interval", "2", "--target_tau", str(tau))
    model = worker.model
    learner = Learner(model)
    initial = {n: t.clone() for n, t in model.target.tensors().items()}
    gradients = {name: np.ones(p.shape, np.float32) for name, p in model.named_parameters()}
    learner.apply(gradients)
    for name, tensor in model.target.tensors().items():
        assert torch.equal(tensor, initial[name]), name
    learner.apply(gradients)
    params = dict(model.named_parameters())
    for name, tensor in model.target.tensors().items():
        expected = tau * params[name].detach() + (1 - tau) * initial[name]
        torch.testing.assert_close(tensor, expected)
    assert "target.p0" in model.get_weights()  # in checkpoints and in the weights workers get


@pytest.mark.contract
@pytest.mark.parametrize("case", ["mlp", "lstm", "dict"])
def test_learner_workers_average_to_the_gradient_of_the_whole_batch(case):
    """--num_learners 3: the batch's 8 env columns cut in shares of 3, 3 and 2 whole columns
    (split_data: truncations inside re-based to their share), each computed by a learner
    worker; their average weighted by samples is the gradient one learner computes on the
    union (advantages not normalized: with normalization each learner uses its own columns'
    moments, as the loop's docstring says)."""
    from core.learning.learner import average_gradients
    from core.learning.parameter_server import LearnerWorker
    from core.types import WEIGHTS_VERSION_KEY, GradientRequest
    flags = ("--env_name", "gym_env", *CASES[case], "--no_advantage_norm",
             "--num_learners", "3")
    workers = [make_worker(*flags, index=i) for i in range(2)]
    parts = [fragment(w, 12)[1] for w in workers]
    spec = run_spec(parse_args(["--config", "none", "--model_name", "appo", "--num_workers",
                                "0", "--num_envs_per_worker", "4", "--seed", "0", *flags]))
    spaces = workers[0].spaces()
    request = GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 7)
    weights = {**workers[0].model.get_weights(), WEIGHTS_VERSION_KEY: np.asarray(7)}
    alone = LearnerWorker(spec, *spaces, 0, threads=1)  # as the loop: --torch_threads
    assert alone.adopt_data(parts) == sum(int(p["valid"].sum()) for p in parts)
    whole = alone.fetch_grads(weights, request)
    shares = workers[0].agent.split_data(parts, 3)
    assert [s["rewards"].shape[1] for s in shares] == [3, 3, 2]
    truncations = sum(len(s["truncated_index"]) for s in shares)
    assert truncations == sum(len(p["truncated_index"]) for p in parts)
    results = []
    for i, share in enumerate(shares):
        learner = LearnerWorker(spec, *spaces, i + 1, threads=1)
        learner.adopt_data([share])
        results.append(learner.fetch_grads(weights, request))
    assert sum(r.num_samples for r in results) == whole.num_samples
    averaged = average_gradients([r.gradients for r in results],
                                 [r.num_samples for r in results])
    assert set(averaged) == set(whole.gradients)
    for name, gradient in whole.gradients.items():
        np.testing.assert_allclose(averaged[name], gradient, rtol=2e-4, atol=1e-6,
                                   err_msg=name)
    assert any(np.abs(g).max() > 0 for g in whole.gradients.values())


@pytest.mark.contract
def test_minibatches_are_whole_columns_with_their_own_truncations():
    flags = ("--env_name", "gym_env", "--gym_id", "CartPole-v1", "--max_episode_steps", "5")
    worker = make_worker(*flags)
    _, part = fragment(worker, 11)
    agent = make_worker(*flags, index=1).agent
    agent.adopt_data([part, part])
    index = agent.data["truncated_index"]
    batch = agent.batch(np.array([5, 6]))  # columns 1 and 2 of the second copy
    kept = index[(index[:, 1] == 5) | (index[:, 1] == 6)]
    got = batch.truncated_index.numpy()
    assert len(got) == len(kept) > 0
    assert sorted(map(tuple, got)) == sorted((t, e - 5) for t, e in kept)
    np.testing.assert_array_equal(batch.rewards.numpy(), part["rewards"][:, 1:3])
    steps = 11
    assert batch.observations.shape[0] == (steps + 1) * 2  # and the bootstrap rows
    np.testing.assert_array_equal(batch.observations[-2:].numpy(),
                                  part["last_observations"][1:3])


@pytest.mark.e2e
@pytest.mark.parametrize("extra", [(), ("--num_learners", "2", "--target_update_interval",
                                        "3", "--num_minibatches", "2"),
                                   ("--normalize_reward",)],
                         ids=["one-learner", "two-learners-target", "reward-normalized"])
def test_pause_then_restore_ends_at_the_weights_of_the_straight_run(tmp_path, extra):
    """--num_workers 0: N steps, stop, --restore to 2N == 2N straight, bit for bit (the queue
    of fragments not learned yet travels in the checkpoint; so do the target network and the
    learner workers' minibatch draws)."""
    from core.run.checkpoint import load_checkpoint
    from tests.test_e2e import run_main, run_mains
    common = ("--model_name", "appo", "--num_workers", "0", "--seed", "3",
              "--total_steps", "3000", "--batch_size", "384", "--eval_interval", "1024",
              "--eval_episodes", "2", "--target_return", "none",
              "--checkpoint_interval", "1000", "--quiet", *extra)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "1500"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    a, _ = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta["env_steps"] >= 3000
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


@pytest.mark.chaos
def test_a_sigkilled_worker_loses_its_fragments_whole_and_lag_stays_bounded(tmp_path):
    """2 Ray workers, 2 fragments queued on each, --max_policy_lag 0: the fragment queued
    behind one that was learned is stale by then, so it is dropped and counted, and every
    fragment learned was acted by the learner's current weights (policy_lag 0 in every row).
    One worker is SIGKILLed after the first row: what it was sampling never reaches the
    learner (a fragment arrives in one return value or not at all), its replacement joins and
    delivers. Then one of the 2 learner workers (--num_learners 2) is SIGKILLed: its
    replacement takes part again (rows with 2 learners after it). A SIGTERM ends the run with
    a checkpoint holding both workers' states."""
    from tests.test_e2e import read_run
    from tests.test_faults import kill_when, metrics_rows, start_main, stop, wait_until
    run_dir = str(tmp_path / "run")
    proc = start_main("--model_name", "appo", "--num_workers", "2", "--num_envs_per_worker",
                      "4", "--batch_size", "256", "--max_policy_lag", "0", "--seed", "1",
                      "--run_dir", run_dir, "--quiet", "--no-tensorboard", "--total_steps",
                      "100000000", "--target_return", "none",
                      # every row from the Ray workers: with the in-process stand-in of the
                      # elastic start, a row of 2 workers could be the stand-in and the
                      # survivor while the replacement was still starting
                      "--no-elastic_start", "--num_learners", "2")

    def replaced_and_delivering():
        rows = metrics_rows(run_dir)
        restarted = [i for i, r in enumerate(rows) if r.get("worker_restarts") == "1"]
        return bool(restarted) and any(r.get("workers") == "2" and r.get("fragments") not in
                                       ("", "0") for r in rows[restarted[0] + 3:])
    def learner_back():
        rows = metrics_rows(run_dir)
        restarted = [i for i, r in enumerate(rows) if r.get("worker_restarts") == "2"]
        return bool(restarted) and any(r.get("learners") == "2" for r in rows[restarted[0] + 1:])
    learner = None
    try:
        victim = kill_when(proc, "RolloutWorker", lambda: len(metrics_rows(run_dir)) >= 1)
        back = victim is not None and wait_until(proc, replaced_and_delivering)
        if back:
            learner = kill_when(proc, "LearnerWorker", lambda: True)
            learner_back = learner is not None and wait_until(proc, learner_back)
    finally:
        code, out, err = stop(proc)
    assert victim is not None, "no rollout worker to kill: " + err[-2000:]
    assert back, "the replacement never delivered: " + err[-3000:]
    assert learner is not None, "no learner worker to kill: " + err[-2000:]
    assert learner_back, "the learner worker's replacement never took part: " + err[-3000:]
    assert code == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["worker_restarts"] == 2, summary
    learned = [r for r in rows if r["fragments"] not in ("", "0")]
    assert learned and all(float(r["policy_lag"]) == 0.0 for r in learned)
    assert sum(int(r["dropped_fragments"]) for r in rows) > 0
    from core.run.checkpoint import load_checkpoint
    payload, meta = load_checkpoint(os.path.join(run_dir, "checkpoints", "last.pt"))
    assert meta["env_steps"] == summary["env_steps"]
    assert list(payload["state"]["worker_slots"]) == [0, 1]


@pytest.mark.unit
def test_the_slow_env_draws_uneven_steps_and_slows_the_named_workers():
    """benchmarks/plugins/slow_env.py: lognormal step times of the given mean (heavy-tailed),
    --slow_factor times longer in the envs of --slow_workers (ddrl hands an env that takes it
    its ``worker_index``); the plain env by default."""
    from core.plugins import load_plugins, make_env
    args = parse_args(["--config", "none", "--user_dir", os.path.join("benchmarks", "plugins"),
                       "--env_name", "slow_env", "--step_ms", "5", "--step_sigma", "1",
                       "--slow_workers", "1", "--slow_factor", "4"])
    plugins = load_plugins(run_spec(args))
    spec = run_spec(args)
    fast = make_env(plugins, spec.env, seed=1, worker_index=0)
    slow = make_env(plugins, spec.env, seed=1, worker_index=1)
    draws = np.array([fast.step_time() for _ in range(20000)])
    assert draws.mean() == pytest.approx(0.005, rel=0.05)
    assert np.quantile(draws, 0.99) > 4 * 0.005          # the heavy tail
    slow_draws = np.array([slow.step_time() for _ in range(20000)])
    assert slow_draws.mean() == pytest.approx(0.020, rel=0.05)
    plain = parse_args(["--config", "none", "--user_dir", os.path.join("benchmarks", "plugins"),
                        "--env_name", "slow_env"])
    env = make_env(load_plugins(run_spec(plain)), run_spec(plain).env, seed=1, worker_index=0)
    assert {env.step_time() for _ in range(10)} == {0.005}


@pytest.mark.e2e
def test_appo_learns_cartpole_in_one_process():
    """The V-trace loss on the preset's settings, one process (deterministic): CartPole's
    evaluation reaches 400 within 40k env steps (seed 0 reached 475 at 14k in one process on
    the AVX-512 machine; random play scores ~20)."""
    from tests.test_e2e import read_run, run_main
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        proc = run_main("--model_name", "appo", "--num_workers", "0", "--num_envs_per_worker",
                        "8", "--seed", "0", "--total_steps", "40000", "--target_return", "400",
                        "--run_dir", run_dir, "--quiet")
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary, rows = read_run(run_dir)
    assert summary["best_eval_return"] >= 400, summary
    assert summary["stopped_because"] == "target_return", summary
    # where the learner computed (the proof a GPU run gives that it ran on CUDA)
    assert [(d["role"], d["device"]) for d in summary["devices"]] == [("learner", "cpu")]


@pytest.mark.e2e
def test_an_lstm_policy_with_an_action_mask_runs_through_ray_workers(tmp_path):
    """The asynchronous loop end to end with memory and a mask: 2 Ray workers, an LSTM
    policy on the masked toy env; fragments carry their columns' first states, the learner
    replays them (on 2 learner workers, --num_learners 2), the test worker evaluates, and a
    checkpoint holds each worker's state."""
    from core.run.checkpoint import load_checkpoint
    from tests.test_e2e import read_run, run_main
    run_dir = str(tmp_path / "run")
    proc = run_main("--model_name", "appo", "--gym_id", "ddrl/MaskedChoice-v0", "--recurrent",
                    "lstm", "--num_workers", "2", "--total_steps", "3000", "--batch_size",
                    "256", "--eval_interval", "1000", "--eval_episodes", "2",
                    "--target_return", "none", "--seed", "0", "--run_dir", run_dir, "--quiet",
                    "--num_learners", "2",
                    # the Ray workers from the start (the elastic start's stand-in in this
                    # process could take the whole short run before they are up)
                    "--no-elastic_start")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 3000 and summary["last_eval_return"] is not None
    assert all(r["workers"] == "2" for r in rows)
    assert any(r["learners"] == "2" for r in rows)
    assert [d["role"] for d in summary["devices"]] == ["learner", "learner worker 0",
                                                       "learner worker 1"], summary["devices"]
    assert all(d["device"] == "cpu" for d in summary["devices"])
    assert int(rows[-1]["updates"]) > 0
    assert all(float(r["ratio_mean"]) == pytest.approx(1.0, abs=0.5) for r in rows
               if r.get("ratio_mean"))
    payload, _ = load_checkpoint(os.path.join(run_dir, "checkpoints", "last.pt"))
    saved = payload["state"]["workers"]
    assert saved and all(set(w["memory"]["state"]) == {"pi/h", "pi/c", "vf/h", "vf/c"}
                         for w in saved)
