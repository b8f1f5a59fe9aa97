"""SAC for a team with continuous actions (models/ma_sac.py): each agent's action from its own
row alone (one actor shared, or one per policy), the critic on every row and the whole team
action, the entropy target over the team, the spaces it refuses, and a whole run on MPE
simple_spread with continuous actions (train, resume, export equal to ddrl.load's actions)."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.errors import ConfigError
from tests.test_multi_agent import exported_and_loaded_actions, team_env, train_resume_export

pytestmark = pytest.mark.unit

CONTINUOUS = '{"N": 3, "max_cycles": 25, "continuous_actions": true}'


def team_sac(observation_space, action_space, *flags):
    from models.ma_sac import TeamSACModel
    from options.options import parse_args
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--pz_kwargs",
                       CONTINUOUS, "--model_name", "ma_sac", "--num_workers", "0", *flags])
    torch.manual_seed(0)
    return TeamSACModel(args, observation_space, action_space)


def test_actors_see_their_own_rows_and_the_critic_sees_all():
    model = team_sac(spaces.Box(-np.inf, np.inf, (3, 4)), spaces.Box(-1, 1, (3, 2)))
    assert model.target_entropy == -6.0  # 3 agents x 2 entries
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(5, 3, 4)).astype(np.float32)
    moved = obs.copy()
    moved[:, 2] += 1.0  # agent 2's row only
    before, _ = model.choose_actions(obs, deterministic=True)
    after, _ = model.choose_actions(moved, deterministic=True)
    assert before.shape == (5, 3, 2)
    np.testing.assert_array_equal(before[:, :2], after[:, :2])   # agents 0 and 1 unmoved
    assert not np.allclose(before[:, 2], after[:, 2])
    actions = torch.as_tensor(before.reshape(5, -1))
    q_before = model.critic(model.flat_obs(obs), actions)[0]
    q_after = model.critic(model.flat_obs(moved), actions)[0]
    assert not torch.allclose(q_before, q_after)                 # central: it sees row 2


def test_a_policy_map_gives_each_policy_its_own_actor():
    space = spaces.Dict({"a": spaces.Box(-np.inf, np.inf, (1, 4)),
                         "b": spaces.Box(-np.inf, np.inf, (2, 4))})
    model = team_sac(space, spaces.Box(-1, 1, (3, 2)))
    assert set(model.actor.nets) == {"a", "b"}
    obs = {"a": np.zeros((2, 1, 4), np.float32), "b": np.zeros((2, 2, 4), np.float32)}
    # equal rows: a's agent and b's agents act apart (different networks), b's two alike
    actions, _ = model.choose_actions(obs, deterministic=True)
    np.testing.assert_array_equal(actions[:, 1], actions[:, 2])
    assert not np.allclose(actions[:, 0], actions[:, 1])
    # a's actor learns from a's agent alone: the actor loss's gradient on it ignores b's rows
    grads = []
    for shift in (0.0, 1.0):
        model.zero_grad(set_to_none=True)
        batch = model.flat_obs({"a": obs["a"], "b": obs["b"] + shift})
        mu, log_std = model.actor(batch)
        (mu[:, :2].sum() + log_std[:, :2].sum()).backward()  # agent 0's (policy a's) entries
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.actor.nets["a"].parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def test_spaces_it_refuses():
    from models.ma_sac import TeamSACModel
    with pytest.raises(ConfigError, match="model ma_sac takes an observation with a row per "
                                          "agent.*--model_name sac"):
        TeamSACModel.check_spaces(spaces.Box(-1, 1, (4,)), spaces.Box(-1, 1, (2,)))
    with pytest.raises(ConfigError, match="continuous action per agent.*ma_dqn or ma_ppo"):
        TeamSACModel.check_spaces(spaces.Box(-1, 1, (3, 4)), spaces.MultiDiscrete([5, 5, 5]))


@pytest.mark.e2e
def test_continuous_simple_spread_trains_resumes_and_exports(tmp_path):
    pytest.importorskip("onnxruntime")
    flags = ["--model_name", "ma_sac", "--pz_kwargs", CONTINUOUS, "--num_envs_per_worker", "4",
             "--learning_starts", "200", "--utd_ratio", "0.25", "--eval_interval", "300",
             "--eval_episodes", "2"]
    run_dir, out = train_resume_export(tmp_path, flags, 600, 900)
    env = team_env(agent_ids=True, pz_kwargs=CONTINUOUS)
    onnx_actions, loaded = exported_and_loaded_actions(run_dir, out, env)
    np.testing.assert_allclose(onnx_actions, loaded, rtol=1e-5, atol=1e-6)
