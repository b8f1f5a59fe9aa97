"""Random Network Distillation (models/ppo_rnd.py, agents/rnd_agent.py): the intrinsic
advantages against numbers by hand, the networks' roles, the moments' merge, bad input, and a
tiny run."""
import os

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agents.rnd_agent import RNDAgent
from core.errors import ConfigError
from core.run.checkpoint import load_checkpoint
from core.types import Trajectory
from models.ppo import PPOBatch, PPOModel
from models.ppo_rnd import PPORNDModel, RNDBatch, merge_moments
from options.options import parse_args
from test_e2e import read_run, run_main, run_mains

OBS = spaces.Box(-10, 10, shape=(1,), dtype=np.float32)


def make_args(*flags):
    return parse_args(["--config", "none", "--num_workers", "0", "--model_name", "ppo_rnd",
                       "--gym_id", "MountainCar-v0", "--rnd_hidden_sizes", "16,16",
                       "--rnd_output_dim", "8", *flags])


def make_model(*flags, observation_space=OBS):
    torch.manual_seed(0)
    return PPORNDModel(make_args(*flags), observation_space, spaces.Discrete(2))


def one_env(observations, rewards, values, last):
    """A fragment of one env, no episode end, observations [T] of one coordinate."""
    T = len(rewards)
    return Trajectory(
        observations=np.asarray(observations, np.float32).reshape(T, 1, 1),
        actions=np.zeros((T, 1), np.int64),
        rewards=np.asarray(rewards, np.float32).reshape(T, 1),
        terminated=np.zeros((T, 1), bool), truncated=np.zeros((T, 1), bool),
        log_probs=np.zeros((T, 1), np.float32),
        values=np.asarray(values, np.float32).reshape(T, 1),
        last_observations=np.asarray([[last]], np.float32),
        truncated_index=np.zeros((0, 2), np.int64),
        truncated_observations=np.zeros((0, 1), np.float32))


# -- the agent's numbers, by hand ---------------------------------------------------------------
@pytest.mark.unit
def test_the_advantages_add_the_normalized_intrinsic_ones_by_hand():
    """gamma = lambda = int_gamma = 0.5; V(s) = V_int-free stubs: the extrinsic value of the
    last observation is its coordinate, the novelty of an observation its coordinate, the
    intrinsic values 0.

    Observations 1, 2, last 3: r_int = novelty of the next observations = 2, 3. The forward
    filter: 2, then 0.5 * 2 + 3 = 4: mean 3, variance 1 (no earlier rounds), so r_int / 1.
    A_int: 3; 2 + 0.25 * 3 = 2.75 (no episode end stops it), int returns the same (V_int 0).
    A_ext (rewards 1, 2, V .5, 1, V(last) 3): delta 2.5 and 1.0, A 1.625, 2.5.
    Advantages: 2 * A_ext + 1 * A_int = 6.0, 8.0; the value targets: A_ext + V = 2.125, 3.5."""
    args = make_args("--gamma", "0.5", "--gae_lambda", "0.5", "--int_gamma", "0.5")
    model = PPORNDModel(args, OBS, spaces.Discrete(2))
    model.predict_values = lambda obs: np.asarray(obs, np.float32).reshape(-1)
    model.intrinsic_rewards = lambda rows: np.asarray(rows, np.float32).reshape(-1)
    model.intrinsic_values = lambda rows: np.zeros(len(rows), np.float32)
    agent = RNDAgent(args, model)
    stats = agent.send_trajectory(one_env([1, 2], [1, 2], [0.5, 1.0], last=3))
    np.testing.assert_allclose(agent.data["advantages"].numpy(), [6.0, 8.0])
    np.testing.assert_allclose(agent.data["returns"].numpy(), [2.125, 3.5])
    np.testing.assert_allclose(agent.data["int_returns"].numpy(), [2.75, 3.0])
    assert (stats["int_return_count"], stats["int_return_sum"], stats["int_return_sq_sum"],
            stats["int_reward_sum"]) == (2, 6.0, 20.0, 5.0)
    assert stats["advantage_sum"] == pytest.approx(14.0)

    # The filter goes on into the next fragment (and through a checkpoint): observations 3,
    # last 1: r_int 3, 1; filter 0.5 * 4 + 3 = 5, then 0.5 * 5 + 1 = 3.5.
    restored = RNDAgent(args, model)
    restored.set_state(agent.get_state())
    stats = restored.send_trajectory(one_env([3, 3], [0, 0], [0, 0], last=1))
    assert stats["int_return_sum"] == pytest.approx(8.5)


@pytest.mark.unit
def test_the_run_s_moments_scale_the_intrinsic_rewards():
    """With the run's moments merged in (count 2, mean 3, variance 1 from above, and this
    fragment's 2, 4 again: count 4, mean 3, variance 1), the rewards are divided by 1; with a
    run whose returns spread four times as wide (variance 16 over many), by about 4."""
    assert merge_moments(2, 3.0, 1.0, 2, 3.0, 1.0) == (4, 3.0, 1.0)
    count, mean, var = merge_moments(1e6, 3.0, 16.0, 2, 3.0, 1.0)
    assert var == pytest.approx(16.0, rel=1e-4)
    args = make_args("--gamma", "0.5", "--gae_lambda", "0.5", "--int_gamma", "0.5")
    model = PPORNDModel(args, OBS, spaces.Discrete(2))
    model.intrinsic_rewards = lambda rows: np.asarray(rows, np.float32).reshape(-1)
    model.intrinsic_values = lambda rows: np.zeros(len(rows), np.float32)
    model.observe_round([{"int_return_count": 10 ** 6, "int_return_sum": 3e6,
                          "int_return_sq_sum": 25e6, "int_reward_sum": 1.0}])
    assert model.int_return_moments() == pytest.approx((1e6, 3.0, 16.0))
    agent = RNDAgent(args, model)
    agent.send_trajectory(one_env([1, 2], [0, 0], [0, 0], last=3))
    # r_int / 4 = 0.5, 0.75: A_int 0.75; 0.5 + 0.25 * 0.75
    np.testing.assert_allclose(agent.data["int_returns"].numpy(), [0.6875, 0.75], rtol=1e-4)


# -- the model -----------------------------------------------------------------------------------
@pytest.mark.unit
def test_the_predictor_learns_the_fixed_target_and_novelty_falls_where_it_learned():
    """One minibatch repeated: the target's weights (buffers) do not move and get no gradient,
    the predictor's do; the novelty of the observations it learned on falls, that of far-away
    ones much less."""
    model = make_model("--rnd_update_proportion", "1.0",
                       observation_space=spaces.Box(-10, 10, shape=(8,), dtype=np.float32))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    seen = torch.randn(64, 8, generator=generator) * 0.3 + 1.0  # a small region
    far = torch.randn(64, 8, generator=generator) * 0.3 - 2.0   # one the predictor never saw
    target_before = {k: v.clone() for k, v in model.rnd_target.named_buffers()}
    before_seen, before_far = model.novelty(seen).mean(), model.novelty(far).mean()
    n = len(seen)
    batch = RNDBatch(
        ppo=PPOBatch(
            seen, torch.zeros(n, dtype=torch.int64), torch.zeros(n), torch.zeros(n),
            torch.zeros(n), torch.zeros(n)),
        int_returns=torch.zeros(n))
    for _ in range(200):
        gradients, stats = model.step(batch)
        assert not any(k.startswith("rnd_target") for k in gradients)
        assert any(k.startswith("rnd_predictor") for k in gradients)
        optimizer.step()
    for k, v in model.rnd_target.named_buffers():
        torch.testing.assert_close(v, target_before[k])
    assert model.novelty(seen).mean() < 0.2 * before_seen
    assert model.novelty(far).mean() > 0.5 * before_far
    assert {"rnd_loss", "int_value_loss", "policy_loss"} <= set(stats)


@pytest.mark.unit
def test_observe_round_merges_every_worker_s_moments():
    model = make_model()
    columns = model.observe_round([
        {"int_return_count": 2, "int_return_sum": 6.0, "int_return_sq_sum": 20.0,
         "int_reward_sum": 5.0},
        {"int_return_count": 2, "int_return_sum": 2.0, "int_return_sq_sum": 2.0,
         "int_reward_sum": 1.0}])
    # the four numbers 2, 4, 1, 1 (sums 8, squares 22): mean 2, variance 22/4 - 4 = 1.5; the
    # run had none before, so its moments are the round's
    assert model.int_return_moments() == pytest.approx((4.0, 2.0, 1.5))
    assert columns == pytest.approx({"int_reward_mean": 1.5, "int_return_std": 1.5 ** 0.5})
    assert model.observe_round([{"sample_rows": 3}]) == {}


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.contract
def test_what_rnd_does_not_take_is_one_paragraph():
    with pytest.raises(ConfigError, match="vector observations"):
        make_model(observation_space=spaces.Box(0, 255, (84, 84, 3), np.uint8))
    with pytest.raises(ConfigError, match="--recurrent"):
        make_model("--recurrent", "lstm")
    with pytest.raises(ConfigError, match="--value_norm"):
        make_model("--value_norm")
    args = make_args()
    with pytest.raises(ConfigError, match="--model_name ppo_rnd"):
        RNDAgent(args, PPOModel(args, OBS, spaces.Discrete(2)))


@pytest.mark.e2e
def test_a_model_and_an_agent_that_do_not_go_together_are_refused_before_the_run():
    for flags, message in (
            (("--agent_name", "default_agent"),
             "model PPORNDModel takes RNDBatch minibatches, but agent DefaultAgent makes PPO's"),
            (("--model_name", "ppo", "--agent_name", "rnd_agent"),
             "model PPOModel takes PPO's minibatches, but agent RNDAgent makes RNDBatch")):
        proc = run_main(*("--gym_id", "MountainCar-v0", "--model_name", "ppo_rnd",
                          "--num_workers", "0", "--total_steps", "64", "--config", "none"),
                        *flags)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]


# -- a run -------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_a_tiny_rnd_run_writes_its_columns_and_resumes_exactly(tmp_path):
    """MountainCar-v0 in one process: metrics.csv carries the intrinsic columns, and a run
    paused in its middle and restored ends with the same weights as the straight one (the
    workers' forward filters, in the checkpoint, and the intrinsic moments, buffers)."""
    common = ("--model_name", "ppo_rnd", "--gym_id", "MountainCar-v0", "--num_workers", "0",
              "--config", "none", "--normalize_obs", "--num_envs_per_worker", "4",
              "--rollout_steps", "16", "--batch_size", "32", "--num_epochs", "2",
              "--rnd_hidden_sizes", "16,16", "--seed", "3",
              "--total_steps", "512", "--eval_interval", "100000",
              "--checkpoint_interval", "100000", "--quiet")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "257"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    _, rows = read_run(straight)
    assert rows and all(float(r["int_reward_mean"]) > 0 and float(r["rnd_loss"]) > 0
                        and float(r["int_return_std"]) > 0 for r in rows)
    a, meta_a = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta_b = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta_a["env_steps"] == meta_b["env_steps"] >= 512
    assert a["model"]["int_return_count"] > 0
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
