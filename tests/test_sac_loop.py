"""The replay-based (SAC) loop: parameter server, learners, UTD budget, end to end."""
import numpy as np
import pytest

from core.learning.learner import Learner, average_gradients
from core.learning.parameter_server import LearnerWorker, ParameterServer
from core.learning.replay_buffer import ReplayBuffer, Transitions
from options.options import parse_args, run_spec
from test_e2e import read_run, run_main

pytestmark = pytest.mark.contract

SAC = ["--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "sac",
       "--agent_name", "sac_agent", "--config", "none"]


def pendulum_spec(*flags):
    args = parse_args(SAC + ["--num_workers", "0", "--sac_hidden_sizes", "32,32", *flags])
    import gymnasium as gym
    env = gym.make("Pendulum-v1")
    return run_spec(args), \
        (env.observation_space, env.action_space)


def filled_buffer(spaces, n=512, seed=0):
    rng = np.random.default_rng(seed)
    buffer = ReplayBuffer(n, spaces[0].shape, spaces[1].shape, seed=seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    buffer.add(Transitions(obs, rng.uniform(-2, 2, size=(n, 1)).astype(np.float32),
                           rng.normal(size=n).astype(np.float32),
                           rng.normal(size=(n, 3)).astype(np.float32),
                           (rng.random(n) < 0.1).astype(np.float32)))
    return buffer


def test_two_learners_give_one_averaged_update_not_the_last_push():
    spec, spaces = pendulum_spec()
    server = ParameterServer(spec, *spaces)
    weights = server.get_weights()
    learners = [LearnerWorker(spec, *spaces, i) for i in range(2)]
    buffer = filled_buffer(spaces)
    batches = [buffer.sample(64), buffer.sample(64)]
    results = [learner.compute(weights, 0, batch) for learner, batch in zip(learners, batches)]
    # Different data, different gradients: the test would not notice an overwrite otherwise.
    key = next(iter(results[0].gradients))
    assert not np.allclose(results[0].gradients[key], results[1].gradients[key])

    server.apply(*results)
    averaged = server.get_weights()

    reference_model = ParameterServer(spec, *spaces).model  # same seed, same initial weights
    reference = Learner(reference_model)
    reference.apply(average_gradients([r.gradients for r in results], [64, 64]))
    for name, value in reference.get_weights().items():
        np.testing.assert_allclose(averaged[name], value, rtol=1e-5, atol=1e-6)

    last_only = Learner(ParameterServer(spec, *spaces).model)
    last_only.apply(results[1].gradients)
    assert any(not np.allclose(averaged[k], v, atol=1e-6)
               for k, v in last_only.get_weights().items())
    assert server.version == 1


@pytest.mark.unit
def test_utd_budget_holds_both_ways():
    from core.algos.replay_trainer import ReplayTrainer
    trainer = ReplayTrainer.__new__(ReplayTrainer)
    trainer.args = parse_args(SAC + ["--learning_starts", "100", "--start_steps", "100",
                                     "--utd_ratio", "0.5", "--batch_size", "32"])
    trainer.num_workers, trainer.fragment = 2, 64
    # Learner waits for data: nothing before the warm-up, then utd x new steps.
    assert trainer.updates_allowed(env_steps=99, replay_size=99) == 0
    assert trainer.updates_allowed(env_steps=300, replay_size=300) == 101
    # Workers wait for the learner: 100 warm-up + 10 updates / 0.5 + 2 x 64 slack = 248.
    assert trainer.may_collect(env_steps_submitted=247, updates_done=10)
    assert not trainer.may_collect(env_steps_submitted=248, updates_done=10)


@pytest.mark.unit
def test_a_warm_up_shorter_than_a_batch_still_collects_a_whole_batch():
    """--learning_starts 100 with --batch_size 256: the first update waits for 256 transitions,
    so the workers must be let past 100 + slack (before, both sides waited for ever)."""
    from core.algos.replay_trainer import ReplayTrainer
    trainer = ReplayTrainer.__new__(ReplayTrainer)
    trainer.args = parse_args(SAC + ["--learning_starts", "100", "--start_steps", "100",
                                     "--batch_size", "256"])
    trainer.num_workers, trainer.fragment = 1, 64
    assert trainer.updates_allowed(env_steps=192, replay_size=192) == 0
    assert trainer.may_collect(env_steps_submitted=192, updates_done=0)
    assert trainer.updates_allowed(env_steps=256, replay_size=256) > 0


@pytest.mark.e2e
def test_sac_on_discrete_actions_is_a_clear_error(tmp_path):
    proc = run_main("--model_name", "sac", "--agent_name", "sac_agent", "--num_workers", "0",
                    "--run_dir", str(tmp_path / "r"), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "SAC" in proc.stderr and "Discrete" in proc.stderr and "ppo" in proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("placement", [
    # One learner thread: 32-unit layers gain nothing from the second that --learner_threads
    # auto gives a run without Ray workers (test_presets runs the Pendulum preset with auto).
    ["--num_workers", "0", "--learner_threads", "1"],
    # the server learns, its updates as device rounds on the CPU (--cuda_graphs: a note there)
    ["--num_workers", "1", "--prioritized_replay", "--num_cpus", "2", "--device_rounds", "on",
     "--cuda_graphs", "on"],
    ["--num_workers", "2", "--num_learners", "2", "--prioritized_replay", "--num_cpus", "2"],
])
def test_sac_runs_end_to_end(tmp_path, placement):
    run_dir = str(tmp_path / "run")
    proc = run_main(*SAC, *placement, "--sac_hidden_sizes", "32,32", "--total_steps", "768",
                    "--learning_starts", "256", "--start_steps", "256", "--eval_interval", "512",
                    "--eval_episodes", "1", "--log_steps", "256", "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 768 and summary["last_eval_return"] is not None
    last = rows[-1]
    assert int(last["replay_size"]) == summary["env_steps"]
    assert int(last["updates"]) > 0
    assert 0.5 <= float(last["utd_achieved"]) <= 1.5  # --utd_ratio 1 by default
    # where the updates were computed: the server, and the learner workers when several
    roles = [d["role"] for d in summary["devices"]]
    learners = int(placement[placement.index("--num_learners") + 1]) if (
        "--num_learners" in placement) else 0
    assert roles == ["parameter server"] + [f"learner worker {i}" for i in range(learners)]
    assert all(d["device"] == "cpu" for d in summary["devices"])
    rounds = "--device_rounds" in placement
    assert summary["devices"][0]["device_rounds"] is rounds
    assert summary["devices"][0]["cuda_graphs"] is False
    assert ("--cuda_graphs is not used: the learner is not on a CUDA device" in proc.stderr) \
        is rounds


def test_sac_brings_its_own_agent_unless_one_is_named():
    assert parse_args(["--model_name", "sac", "--gym_id", "Pendulum-v1"]).agent_name == "sac_agent"
    assert parse_args([]).agent_name == "default_agent"
    assert parse_args(["--model_name", "custom_model"]).agent_name == "default_agent"


def test_the_server_runs_the_lr_schedule_on_the_progress_it_is_given():
    spec, spaces = pendulum_spec("--sac_lr_schedule", "linear", "--actor_lr", "1e-3",
                                 "--critic_lr", "1e-3", "--alpha_lr", "1e-3")
    server = ParameterServer(spec, *spaces)
    buffer = filled_buffer(spaces)
    server.update(buffer.sample_batches(64, 2), progress=0.75)
    assert [g["lr"] for g in server.learner.optimizer.param_groups] == pytest.approx([2.5e-4] * 3)


def halves(batch):
    """A ReplayBatch cut in two."""
    n = len(batch.indices) // 2
    cut = [lambda a: a[:n], lambda a: a[n:]]
    return [type(batch)(type(batch.transitions)(*(None if x is None else c(x)
                                                  for x in batch.transitions)),
                        c(batch.indices), c(batch.generations), c(batch.weights)) for c in cut]


def test_split_batch_learners_make_the_whole_batch_update(monkeypatch):
    """Two learner workers on the halves of a batch, averaged by the server: the same update as
    one learner on the whole batch. Sampling noise is switched off (a' and the actor's actions
    are then functions of the batch alone) so the two computations can be compared exactly."""
    import torch
    from core.algos.replay_trainer import split_batch
    assert split_batch(256, 2) == [128, 128] and split_batch(10, 3) == [4, 3, 3]
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    spec, spaces = pendulum_spec()
    whole = filled_buffer(spaces).sample(64)
    server = ParameterServer(spec, *spaces)
    weights = server.get_weights()
    learners = [LearnerWorker(spec, *spaces, i) for i in range(2)]
    stats = server.apply(*[learner.compute(weights, 0, half)
                           for learner, half in zip(learners, halves(whole))])
    reference = ParameterServer(spec, *spaces)  # same seed: same initial weights
    reference_stats = reference.update([whole])[0]
    for name, value in reference.get_weights().items():
        np.testing.assert_allclose(server.get_weights()[name], value, rtol=1e-5, atol=1e-6)
    assert stats["critic_loss"] == pytest.approx(reference_stats["critic_loss"], rel=1e-5)
    # and not a no-op: the update moved the weights
    assert any(not np.allclose(weights[k], v) for k, v in server.get_weights().items())


def test_the_servers_in_place_update_equals_the_numpy_path_and_skips_nan():
    """One learner: the parameter server steps the gradients where its model left them. The same
    update as handing them over as numpy arrays; a NaN batch changes nothing."""
    import torch
    spec, spaces = pendulum_spec()
    batch = filled_buffer(spaces).sample(64)
    in_place, by_numpy = ParameterServer(spec, *spaces), ParameterServer(spec, *spaces)
    torch.manual_seed(5)
    stats = in_place.update([batch])[0]
    torch.manual_seed(5)
    result = by_numpy.agent.fetch_grads(None, batch)
    assert result.gradients is not None  # outside the server's update: numpy gradients
    result.weights_version = 0
    by_numpy.apply(result)
    for name, value in by_numpy.get_weights().items():
        np.testing.assert_allclose(in_place.get_weights()[name], value, rtol=1e-6, atol=1e-7)
    assert stats["grad_norm"] > 0 and in_place.version == 1

    t = batch.transitions
    bad = batch._replace(transitions=t._replace(rewards=np.full_like(t.rewards, np.nan)))
    before = in_place.get_weights()
    assert in_place.update([bad])[0]["skipped"] == 1.0
    assert in_place.version == 1
    for name, value in in_place.get_weights().items():
        np.testing.assert_array_equal(value, before[name])


@pytest.mark.unit
@pytest.mark.parametrize("flags, expected", [
    (["--num_workers", "0"], 2),                                   # alone: both cores
    (["--num_workers", "2"], 1),                                   # the workers need a core
    (["--num_workers", "2", "--torch_threads", "3"], 3),
    (["--num_workers", "0", "--learner_threads", "1"], 1),         # as asked
    (["--num_workers", "2", "--learner_threads", "4"], 4),
])
def test_learner_threads_auto_gives_a_process_alone_two_threads(monkeypatch, flags, expected):
    from core.learning.parameter_server import learner_threads
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert learner_threads(parse_args(SAC + flags)) == expected
    monkeypatch.setattr("os.cpu_count", lambda: 1)   # one CPU: nothing to spread over
    assert learner_threads(parse_args(SAC + ["--num_workers", "0"])) == 1


def test_a_rollout_worker_in_the_learners_process_leaves_it_the_learners_threads(monkeypatch):
    """--num_workers 0: the parameter server, the rollout worker and the evaluator share the
    driver's process and torch's one thread pool; the worker, made after the server, used to
    set it back to one thread, so '--learner_threads 2' ran on one."""
    import torch
    from core.distributed import process
    from core.sampling.evaluator import Evaluator
    from core.sampling.rollout import RolloutWorker
    # As in a fresh process; conftest's one_torch_thread puts the test process back afterwards.
    monkeypatch.setattr(process, "_process_threads", 0)
    spec, spaces = pendulum_spec("--learner_threads", "2")
    ParameterServer(spec, *spaces)
    assert torch.get_num_threads() == 2
    RolloutWorker(spec)
    Evaluator(spec, 1)
    assert torch.get_num_threads() == 2
