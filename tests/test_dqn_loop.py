"""DQN end to end on the replay loop (issue 32): it learns CartPole in one process; a run with
n-step returns, prioritized replay and the buffer in its checkpoints resumes bit for bit and
plays back; the Ape-X shape (Ray workers with the epsilon ladder, learner workers, worker-made
priorities) learns a masked Dict env; pixels stay uint8 from the env through replay to the CNN."""
import os

import numpy as np
import pytest
import torch

from core.run.checkpoint import load_checkpoint
from tests.test_e2e import read_run, run_main, run_mains

pytestmark = pytest.mark.e2e

# RL-Zoo's CartPole entry's shape (lr 2.3e-3, batch 64, 1,000 warm-up steps, UTD 0.5, the
# target once per 128 updates, epsilon 1 -> 0.04 over the first 2,400 env steps: 16% of 15k)
# with 64x64 layers
CARTPOLE = ("--model_name", "dqn", "--gym_id", "CartPole-v1", "--num_workers", "0",
            "--dqn_hidden_sizes", "64,64", "--dqn_lr", "2.3e-3", "--batch_size", "64",
            "--learning_starts", "1000", "--start_steps", "1000", "--target_update_interval",
            "128", "--utd_ratio", "0.5", "--eps_final", "0.04",
            "--num_envs_per_worker", "1", "--learner_threads", "1", "--eval_interval", "1024",
            "--eval_episodes", "5", "--target_return", "none", "--quiet", "--no-tensorboard")


def test_dqn_learns_cartpole_in_one_process(tmp_path, record_property):
    """Deterministic (--num_workers 0, seed 0). Random play scores about 20. Measured over
    seeds 0-4 with these flags: the best evaluation within 6,144 steps was 232, 225, 276, 213
    and 227 (15k steps: 271, 225, 276, 213, 227); the bar of 150 leaves a margin for a CPU
    whose rounding takes another trajectory."""
    run_dir = str(tmp_path / "run")
    proc = run_main(*CARTPOLE, "--seed", "0", "--total_steps", "6144", "--eps_fraction",
                    str(2400 / 6144), "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    record_property("best_eval_return", summary["best_eval_return"])
    assert summary["best_eval_return"] >= 150, summary
    # the model's update statistics are metrics.csv columns (BaseModel.update_metrics)
    assert {"q_loss", "q_mean", "td_error_mean", "epsilon"} <= set(rows[0])
    epsilons = [float(r["epsilon"]) for r in rows if r["epsilon"]]
    # a row's mean over its updates: 0.38 in the first (updates from 1,000 steps on, epsilon
    # falling to 0.04 at 2,400), then 0.04
    assert epsilons[-1] == pytest.approx(0.04) and epsilons[0] > 0.2


def test_a_dqn_run_resumes_exactly_and_plays_back(tmp_path):
    """n-step returns, prioritized replay, the buffer in the checkpoint: N steps straight ==
    N/2, stop, --restore to N, bit for bit (the open n-step windows, the buffer's rows,
    priorities and sampling generator, the acting generator and the envs all resume); then
    --evaluate (greedy) and --record_video of the checkpoint."""
    common = (*CARTPOLE, "--seed", "3", "--n_step", "3", "--prioritized_replay",
              "--checkpoint_buffer", "--learning_starts", "300", "--start_steps", "300",
              "--eps_fraction", "0.2",
              "--total_steps", "2048", "--checkpoint_interval", "100000")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "1000"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    a, meta_a = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta_b = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta_a["env_steps"] == meta_b["env_steps"] >= 2048
    assert meta_a["updates"] == meta_b["updates"] > 0
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert any(name.startswith("q_target.") for name in a["model"])   # the target travels too
    proc = run_main("--evaluate", os.path.join(resumed, "checkpoints", "last.pt"),
                    "--record_video", str(tmp_path / "video"), "--eval_episodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert "2 deterministic" in proc.stdout
    assert os.listdir(tmp_path / "video") == ["episode-0.gif"]


def test_the_ape_x_shape_learns_a_masked_dict_env(tmp_path, record_property):
    """ddrl/MaskedChoice-v0 (a Dict observation with an action mask; random valid play scores
    5, always the fallback 11.4, the target 18): 2 Ray workers exploring with the epsilon
    ladder over their 8 env slots, 3-step returns, priorities from the workers, 2 learner
    workers. Measured (seed 0, a loaded machine): 17.6 at 1,280 steps, 19.1 at 2,048, the best
    19.4. (gamma 0.5: every step of this env is a bandit of its own; with 0.99 the 3-step
    targets carry the next steps' noise and it stays near 17 for 20k steps.) The run stops at
    the bar (--target_return 15), within the 8,000-step budget it had to reach it in."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--model_name", "dqn", "--gym_id", "ddrl/MaskedChoice-v0", "--seed", "0",
                    "--num_workers", "2", "--num_learners", "2", "--exploration", "ladder",
                    "--prioritized_replay", "--n_step", "3", "--gamma", "0.5",
                    "--learning_starts", "500", "--start_steps", "500", "--dqn_lr", "1e-3",
                    "--target_update_interval", "100", "--eval_interval", "1000",
                    "--total_steps", "8000", "--target_return", "15", "--run_dir", run_dir,
                    "--quiet",
                    "--no-tensorboard", timeout=400)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    record_property("best_eval_return", summary["best_eval_return"])
    assert summary["best_eval_return"] >= 15, summary   # above the fallback: the mask is used
    assert max(int(r["workers"]) for r in rows) == 2
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr


@pytest.mark.contract
def test_pixels_stay_uint8_from_the_env_through_replay_to_the_cnn():
    """ALE/Breakout-v5 (84x84, 4 frames): a DQN worker's n-step transitions keep uint8, the
    replay buffer stores and samples them as uint8, and the Nature CNN's update runs on them."""
    from core.learning.replay_buffer import ReplayBuffer
    from core.sampling.rollout import RolloutWorker
    from options.options import parse_args, run_spec
    args = parse_args(["--model_name", "dqn", "--gym_id", "ALE/Breakout-v5", "--num_workers",
                       "0", "--num_envs_per_worker", "2", "--n_step", "3",
                       "--dqn_hidden_sizes", "none", "--cnn_features", "32"])
    worker = RolloutWorker(run_spec(args))
    worker.collect(None, None, 8)
    transitions = worker.agent.take_transitions()
    assert transitions.observations.dtype == np.uint8
    assert transitions.next_observations.dtype == np.uint8
    buffer = ReplayBuffer(64, transitions.observations.shape[1:], (), np.uint8, np.int64,
                          with_discounts=True)
    buffer.add(transitions)
    batch = buffer.sample(4)
    assert batch.transitions.observations.dtype == np.uint8
    model = worker.agent.model
    gradients, stats = model.step(batch)
    assert np.isfinite(stats["q_loss"])
    assert any(name.startswith("q_net.encoder.") for name in gradients)
