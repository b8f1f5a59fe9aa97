"""The replay buffer on the learner's device (core/learning/device_replay.py, --replay_device
cuda): on the CPU its torch columns must hold what the numpy buffer holds, its batches must be
the stored rows, its state must restore the same draws, and the settings it cannot serve are
clear errors. On a GPU the same code runs with device "cuda"."""
import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.learning.device_replay import TorchReplayBuffer
from core.learning.replay_buffer import ReplayBuffer, Transitions
from options.options import parse_args
from test_e2e import read_run, run_main

OBS = {"image": (2, 2), "vector": (3,)}
DTYPES = {"image": np.uint8, "vector": np.float32}


def block(n, start, structured=False, discounts=True):
    steps = np.arange(start, start + n)
    obs = ({"image": np.broadcast_to((steps % 256).astype(np.uint8)[:, None, None], (n, 2, 2)),
            "vector": np.repeat(steps[:, None].astype(np.float32), 3, 1)} if structured
           else np.repeat(steps[:, None].astype(np.float32), 3, 1))
    return Transitions(obs, (steps % 4).astype(np.int64), steps.astype(np.float32), obs,
                       (steps % 5 == 0).astype(np.float32),
                       np.full(n, 0.9, np.float32) if discounts else None)


def as_numpy(column):
    if isinstance(column, dict):
        return {k: as_numpy(v) for k, v in column.items()}
    return column.cpu().numpy() if isinstance(column, torch.Tensor) else column


@pytest.mark.unit
@pytest.mark.parametrize("structured", [False, True], ids=["box", "dict"])
def test_its_columns_hold_what_the_numpy_buffer_holds(structured):
    shape, dtype = (OBS, DTYPES) if structured else ((3,), np.float32)
    args = (7, shape, (), dtype, np.int64)
    ring, torch_ring = (ReplayBuffer(*args, with_discounts=True),
                        TorchReplayBuffer(*args, with_discounts=True))
    start = 0
    for n in (3, 5, 2, 11):  # wraps, and a block longer than the ring
        for buffer in (ring, torch_ring):
            assert buffer.add(block(n, start, structured)) == min(n, 7)
        start += n
    assert len(torch_ring) == len(ring) == 7 and torch_ring.total_added == ring.total_added
    for name, a, b in zip(Transitions._fields, ring._columns, torch_ring._columns):
        if a is None:
            assert b is None
            continue
        for x, y in zip(list(a.values()) if isinstance(a, dict) else [a],
                        list(b.values()) if isinstance(b, dict) else [b]):
            np.testing.assert_array_equal(x, y.numpy(), err_msg=name)
            assert y.dtype == torch.from_numpy(x[:0].copy()).dtype, name
    assert torch_ring.nbytes() == ring.nbytes()


@pytest.mark.unit
def test_a_batch_is_the_stored_rows_drawn_on_its_device():
    buffer = TorchReplayBuffer(50, (3,), (), np.float32, np.int64, seed=3, with_discounts=True)
    buffer.add(block(40, 100))
    batch = buffer.sample(64)
    assert batch.indices.device == buffer.device and batch.indices.dtype == torch.int64
    assert int(batch.indices.min()) >= 0 and int(batch.indices.max()) < 40
    t = batch.transitions
    # row i was step 100 + i: every column of the batch belongs to its slot
    steps = batch.indices + 100
    torch.testing.assert_close(t.rewards, steps.float())
    torch.testing.assert_close(t.observations[:, 0], steps.float())
    torch.testing.assert_close(t.actions, steps % 4)
    assert torch.equal(batch.weights, torch.ones(64))
    assert len(buffer.sample_batches(8, 3)) == 3
    with pytest.raises(ValueError, match="empty"):
        TorchReplayBuffer(5, (3,), ()).sample(1)


@pytest.mark.unit
def test_its_state_restores_the_rows_and_the_draws():
    buffer = TorchReplayBuffer(20, (3,), (), np.float32, np.int64, seed=1, with_discounts=True)
    buffer.add(block(25, 0))
    buffer.sample(4)
    state = buffer.state_dict()
    assert isinstance(state["observations"], np.ndarray)  # checkpoints hold host arrays
    restored = TorchReplayBuffer(20, (3,), (), np.float32, np.int64, seed=99,
                                 with_discounts=True)
    restored.load_state_dict(state)
    a, b = buffer.sample(16), restored.sample(16)
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.transitions.observations, b.transitions.observations)
    with pytest.raises(ValueError, match="capacity"):
        TorchReplayBuffer(21, (3,), ()).load_state_dict(state)


@pytest.mark.unit
@pytest.mark.parametrize("flags,named", [
    (["--num_workers", "2"], "--num_workers 2"),
    (["--num_learners", "2", "--num_workers", "1"], "--num_learners 2"),
    (["--prioritized_replay"], "--prioritized_replay"),
])
def test_settings_it_cannot_serve_are_named(flags, named):
    from core.algos.replay_trainer import check_replay_device
    args = parse_args(["--model_name", "sac", "--gym_id", "Pendulum-v1", "--num_workers", "0",
                       "--replay_device", "cuda", *flags])
    with pytest.raises(ConfigError, match="--replay_device cuda keeps the replay buffer") as err:
        check_replay_device(args)
    assert named in str(err.value) and "--replay_device cpu" in str(err.value)


@pytest.mark.e2e
def test_sac_learns_from_a_torch_buffer_in_its_own_process(tmp_path):
    """--replay_device cuda on a machine without a GPU: the buffer's tensors on the CPU, said
    once, the run trains through device rounds to its budget."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "sac",
                    "--config", "none", "--num_workers", "0", "--num_envs_per_worker", "4",
                    "--replay_device", "cuda", "--device_rounds", "on",
                    "--sac_hidden_sizes", "32,32", "--learner_threads", "1",
                    "--total_steps", "1024", "--learning_starts", "256", "--start_steps", "256",
                    "--eval_interval", "512", "--eval_episodes", "1", "--log_steps", "256",
                    "--checkpoint_buffer", "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("the replay buffer's tensors stay on the CPU") == 1
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 1024 and int(rows[-1]["updates"]) > 0
    assert np.isfinite(float(rows[-1]["critic_loss"]))
    assert summary["devices"][0]["device_rounds"] is True
