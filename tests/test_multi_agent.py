"""Many agents as one team (envs/pettingzoo_env.py, models/ma_ppo.py): a row per agent, the team
reward, agents that leave mid-episode, one actor shared by every agent, the team's log-prob the
sum of the agents', and a whole run (train, evaluate, export) on MPE's simple_spread."""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.errors import ConfigError
from envs.pettingzoo_env import PettingZooTeamEnv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.unit


def team_env(**flags):
    args = argparse.Namespace(pz_env="mpe2.simple_spread_v3",
                              pz_kwargs='{"N": 3, "max_cycles": 25, "continuous_actions": false}',
                              team_reward="sum", agent_ids=False, policy_map=None,
                              render_mode=None, global_state=False)
    vars(args).update(flags)
    return PettingZooTeamEnv(args)


def train_resume_export(tmp_path, flags, steps, resumed_steps):
    """A short team run with ``flags`` (one process), resumed to ``resumed_steps``, then
    exported to ONNX: (run directory, the .onnx file)."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "team.onnx")
    common = [sys.executable, "main.py", "--env_name", "pettingzoo_env", "--num_workers", "0",
              "--agent_ids", "--quiet", "--no-tensorboard", "--target_return", "none", *flags]
    train = subprocess.run([*common, "--total_steps", str(steps), "--run_dir", run_dir],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    resumed = subprocess.run([sys.executable, "main.py", "--restore", run_dir, "--total_steps",
                              str(resumed_steps), "--quiet", "--no-tensorboard"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["env_steps"] >= resumed_steps
    exported = subprocess.run([sys.executable, "main.py", "--export", run_dir, "--out", out],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    return run_dir, out


def exported_and_loaded_actions(run_dir, out, env, steps=10):
    """The exported program's actions (onnxruntime) and ``ddrl.load``'s on the observations of
    ``steps`` steps of ``env`` driven by the loaded policy."""
    import onnxruntime

    import ddrl
    policy = ddrl.load(run_dir)
    rows = []
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        rows.append(obs)
        obs, *_ = env.step(policy.act(obs))
    batch = np.stack(rows).astype(np.float32)
    session = onnxruntime.InferenceSession(out)
    return session.run(None, {session.get_inputs()[0].name: batch})[0], policy.act(batch)


def test_a_row_per_agent_and_the_team_reward():
    env = team_env(agent_ids=True)
    assert env.observation_space.shape == (3, 18 + 1 + 3)
    assert env.action_space == spaces.MultiDiscrete([5, 5, 5])
    rows, _ = env.reset(seed=0)
    assert rows.shape == (3, 22) and (rows[:, 18] == 1).all()
    np.testing.assert_array_equal(rows[:, 19:], np.eye(3))
    rows, reward, terminated, truncated, info = env.step(np.array([1, 2, 3]))
    assert reward == pytest.approx(sum(info["agent_rewards"].values()))
    assert not terminated and not truncated
    for _ in range(24):
        *_, terminated, truncated, _ = env.step(np.zeros(3, np.int64))
    assert truncated and not terminated      # max_cycles: a time limit, bootstrapped
    mean = team_env(team_reward="mean")
    mean.reset(seed=0)
    _, reward, *_, info = mean.step(np.array([1, 2, 3]))
    assert reward == pytest.approx(np.mean(list(info["agent_rewards"].values())))


def test_agents_that_leave_get_no_actions_and_zero_rows():
    env = team_env(pz_env="tests.plugins.leaving_agents", pz_kwargs="{}")
    assert env.observation_space.shape == (3, 4 + 1)    # the widest agent's 4, then alive
    rows, _ = env.reset(seed=0)
    np.testing.assert_array_equal(rows[0], [0.5, 0.5, 0, 0, 1])   # padded to the widest
    rewards, alive = [], []
    done = False
    while not done:
        rows, reward, terminated, truncated, _ = env.step(np.array([0, 1, 2]))
        rewards.append(reward)
        alive.append(rows[:, 4].tolist())
        done = terminated or truncated
    # agent 0 leaves after step 2, agent 1 after step 4, agent 2 is truncated at step 6
    assert rewards == [6, 6, 5, 5, 3, 3]
    assert alive[1] == [0, 1, 1] and alive[3] == [0, 0, 1] and not any(alive[5])
    assert truncated and not terminated
    assert not rows.any()                              # no agent left: every row zero


def test_agents_that_arrive_get_rows_and_actions_from_then_on():
    env = team_env(pz_env="tests.plugins.arriving_agents", pz_kwargs="{}")
    rows, _ = env.reset(seed=0)
    assert rows[:, 2].tolist() == [1, 0, 0]              # only a_0 is there at the start
    present, acted, done = [], [], False
    while not done:
        rows, reward, terminated, truncated, info = env.step(np.array([1, 1, 1]))
        present.append(rows[:, 2].tolist())
        acted.append(info["step_report"]["acted"].tolist())
        assert reward == sum(acted[-1])                  # the team's: one per agent present
        done = terminated or truncated
    # a_1 comes after step 1, a_2 after step 2 (the env refuses actions for absent agents)
    assert acted == [[1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
    assert present[:3] == [[1, 1, 0], [1, 1, 1], [1, 1, 1]] and not any(present[3])
    assert truncated and not terminated


def test_the_global_state_goes_to_the_central_critic_alone():
    env = team_env(global_state=True, agent_ids=True)
    assert set(env.observation_space.spaces) == {"team", "state"}
    assert env.observation_space["state"].shape == (54,)       # simple_spread's state()
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["state"], env.env.state())
    assert obs["team"].shape == (3, 22)
    model = model_for(env, "--agent_ids")
    rows = torch.randn(5, 3, 22)
    state = torch.randn(5, 54)

    def values_and_logits(rows, state):
        features = model.features({"team": rows, "state": state})
        return model.values(features), model.actor(features)
    values, logits = values_and_logits(rows, state)
    other_values, same_logits = values_and_logits(rows, torch.randn(5, 54))
    torch.testing.assert_close(same_logits, logits)       # the actors never see the state
    assert not torch.allclose(other_values, values)
    same_values, other_logits = values_and_logits(torch.randn(5, 3, 22), state)
    torch.testing.assert_close(same_values, values)       # the critic sees the state alone
    assert not torch.allclose(other_logits, logits)
    assert model.metric_columns_of(env.observation_space) == ("return_team",)
    with pytest.raises(ConfigError, match="has no global state"):
        team_env(pz_env="tests.plugins.leaving_agents", pz_kwargs="{}", global_state=True)
    with pytest.raises(ConfigError, match="a policy named 'state'"):
        team_env(global_state=True, policy_map="*=state")
    with pytest.raises(ConfigError, match="--ma_critic local"):
        model_for(env, "--ma_critic", "local")


def test_bad_modules_and_kwargs_are_one_paragraph():
    from envs.pettingzoo_env import _parse_kwargs
    with pytest.raises(ConfigError, match="cannot import it"):
        team_env(pz_env="no_such_module_anywhere")
    with pytest.raises(ConfigError, match="has no parallel_env"):
        team_env(pz_env="numpy")
    with pytest.raises(ConfigError, match="is not JSON"):
        _parse_kwargs("{N: 3}")


def model_for(env, *flags):
    from models.ma_ppo import TeamPPOModel
    from options.options import parse_args
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--model_name",
                       "ma_ppo", "--num_workers", "0", *flags])
    torch.manual_seed(0)
    return TeamPPOModel(args, env.observation_space, env.action_space)


def test_one_actor_for_every_agent_and_the_team_log_prob_is_their_sum():
    env = team_env(agent_ids=True)
    model = model_for(env, "--agent_ids")
    rows = torch.randn(8, 3, 22)
    logits = model.actor(rows.reshape(8, -1)).reshape(8, 3, 5)
    # agent i's logits are the shared network's on row i alone
    for i in range(3):
        torch.testing.assert_close(logits[:, i], model.actor.net(rows[:, i]))
    # swapping two agents' rows swaps their logits (the one network, no agent-specific weights)
    swapped = rows[:, [1, 0, 2]]
    torch.testing.assert_close(model.actor(swapped.reshape(8, -1)).reshape(8, 3, 5),
                               logits[:, [1, 0, 2]])
    actions = torch.randint(0, 5, (8, 3))
    log_prob, entropy = model.policy_terms(model.features(rows), actions)
    per_agent = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(log_prob, per_agent.sum(-1))
    # the central critic sees every row; the local one averages a shared net over rows
    assert model.critic(rows).shape == (8, 1)
    local = model_for(env, "--agent_ids", "--ma_critic", "local")
    values = local.critic(rows)
    torch.testing.assert_close(values, local.critic.net(rows).mean(dim=1))


def test_the_model_names_what_it_takes():
    from models.ma_ppo import TeamPPOModel
    with pytest.raises(ConfigError, match="a row per agent"):
        TeamPPOModel.check_spaces(spaces.Box(-1, 1, (4,)), spaces.Discrete(2))
    with pytest.raises(ConfigError, match="one Discrete\\(A\\) per agent"):
        TeamPPOModel.check_spaces(spaces.Box(-1, 1, (3, 4)), spaces.MultiDiscrete([2, 3, 2]))
    with pytest.raises(ConfigError, match="--recurrent lstm"):
        model_for(team_env(), "--recurrent", "lstm")


@pytest.mark.e2e
def test_simple_spread_trains_evaluates_and_exports(tmp_path):
    """A short run on MPE simple_spread in one process, then --evaluate and --export; and an
    env whose agents leave mid-episode trains to the end without an error."""
    run_dir = str(tmp_path / "spread")
    common = [sys.executable, "main.py", "--env_name", "pettingzoo_env", "--model_name",
              "ma_ppo", "--num_workers", "0", "--agent_ids", "--quiet", "--no-tensorboard",
              "--target_return", "none"]
    train = subprocess.run([*common, "--total_steps", "2000", "--eval_interval", "1000",
                            "--run_dir", run_dir], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    evaluate = subprocess.run([sys.executable, "main.py", "--evaluate", run_dir,
                               "--eval_episodes", "2", "--record_video",
                               str(tmp_path / "video")], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert evaluate.returncode == 0 and "2 deterministic episodes" in evaluate.stdout
    assert os.path.getsize(tmp_path / "video" / "episode-0.gif") > 0   # the whole env, drawn
    exported = subprocess.run([sys.executable, "main.py", "--export", run_dir, "--out",
                               str(tmp_path / "team.onnx")], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "float32[batch,3,22]" in exported.stdout
    leaving = subprocess.run([*common, "--pz_env", "tests.plugins.leaving_agents", "--pz_kwargs",
                              "{}", "--total_steps", "600", "--eval_interval", "300",
                              "--num_envs_per_worker", "2", "--rollout_steps", "7",
                              "--batch_size", "14", "--run_dir", str(tmp_path / "leaving")],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert leaving.returncode == 0, leaving.stderr[-3000:]
    import json
    with open(tmp_path / "leaving" / "summary.json") as f:
        summary = json.load(f)
    # the env refuses actions for agents that are gone: none reached it (no error survived)
    assert summary["env_errors"] == 0 and summary["env_steps"] >= 600
    state = subprocess.run([*common, "--global_state", "--ma_critic", "central",
                            "--total_steps", "600",
                            "--eval_interval", "300", "--run_dir", str(tmp_path / "state")],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert state.returncode == 0, state.stderr[-3000:]
    exported = subprocess.run([sys.executable, "main.py", "--export", str(tmp_path / "state"),
                               "--out", str(tmp_path / "state.onnx")], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "state float32[batch,54], team float32[batch,3,22]" in exported.stdout
    arriving = subprocess.run([*common, "--pz_env", "tests.plugins.arriving_agents",
                               "--pz_kwargs", "{}", "--total_steps", "300", "--eval_interval",
                               "150", "--num_envs_per_worker", "2", "--rollout_steps", "6",
                               "--batch_size", "12", "--run_dir", str(tmp_path / "arriving")],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    assert arriving.returncode == 0, arriving.stderr[-3000:]
    with open(tmp_path / "arriving" / "summary.json") as f:
        assert json.load(f)["env_errors"] == 0
