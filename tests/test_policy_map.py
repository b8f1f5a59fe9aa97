"""Policy mapping (envs/pettingzoo_env.py --policy_map, models/ma_ppo.py's policies): which
agents each pattern takes, which rows and actions reach which agent, that a policy's parameters
learn from its own agents' samples only, a policy's own flags and learning rate, the returns
per policy, one-paragraph errors, and a whole run (train, resume, evaluate, export)."""
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
from envs.pettingzoo_env import PettingZooTeamEnv, policy_groups

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.unit
AGENTS = ["scout_0", "tank_0", "scout_1"]


def kinds_env(policy_map="scout_*=scout,tank_*=tank", **flags):
    args = argparse.Namespace(pz_env="tests.plugins.two_kinds", pz_kwargs="{}",
                              team_reward="sum", agent_ids=False, policy_map=policy_map,
                              render_mode=None, global_state=False)
    vars(args).update(flags)
    return PettingZooTeamEnv(args)


def test_patterns_first_match_and_per_agent():
    assert policy_groups(AGENTS, ["scout_*=scout", "*=rest"]) == {"scout": [0, 2], "rest": [1]}
    # the first pattern that matches wins
    assert policy_groups(AGENTS, ["*_0=zero", "scout_*=scout", "*=rest"]) == {
        "zero": [0, 1], "scout": [2]}
    assert policy_groups(AGENTS, ["per_agent"]) == {"scout_0": [0], "tank_0": [1],
                                                    "scout_1": [2]}
    with pytest.raises(ConfigError, match="no pattern covers agent\\(s\\) tank_0"):
        policy_groups(AGENTS, ["scout_*=scout"])
    with pytest.raises(ConfigError, match="adversary_\\* match none"):
        policy_groups(AGENTS, ["adversary_*=bad", "*=all"])
    with pytest.raises(ConfigError, match="PATTERN=NAME pairs"):
        kinds_env(policy_map="scout_*")


def test_rows_by_policy_and_each_action_reaches_its_agent():
    env = kinds_env()
    # policies in sorted order: scout (scout_0, scout_1), then tank
    assert list(env.observation_space.spaces) == ["scout", "tank"]
    assert env.observation_space["scout"].shape == (2, 3 + 1)
    assert env.observation_space["tank"].shape == (1, 3 + 1)
    assert env.action_space == spaces.MultiDiscrete([3, 3, 4])
    obs, _ = env.reset(seed=0)
    # a row holds its agent's own observation (filled with its index), padded, then alive
    np.testing.assert_allclose(obs["scout"][:, :2], [[0, 0], [2, 2]])
    np.testing.assert_allclose(obs["tank"][0, :3], [1, 1, 1])
    assert (obs["scout"][:, 2] == 0).all() and (obs["scout"][:, 3] == 1).all()
    # the team action lists scout_0, scout_1, tank_0
    *_, info = env.step(np.array([2, 1, 3]))
    assert env.env.received[-1] == {"scout_0": 2, "scout_1": 1, "tank_0": 3}
    assert info["agent_rewards"] == {"scout_0": 2.0, "tank_0": 3.0, "scout_1": 1.0}
    for _ in range(4):
        *_, terminated, _, info = env.step(np.array([0, 1, 2]))
    assert terminated
    # each policy's return: the mean over its agents of their own rewards' sums
    assert info["episode_metrics"] == {"return_scout": pytest.approx((2 + 0 * 4 + 1 + 4) / 2),
                                       "return_tank": pytest.approx(3 + 2 * 4)}


def policies_model(env, *flags):
    from models.ma_ppo import TeamPPOModel
    from options.options import parse_args
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--pz_env",
                       "tests.plugins.two_kinds", "--model_name", "ma_ppo", "--num_workers",
                       "0", *flags])
    torch.manual_seed(0)
    return TeamPPOModel(args, env.observation_space, env.action_space)


def random_obs(env, n=6):
    rng = np.random.default_rng(0)
    return {name: torch.as_tensor(rng.normal(size=(n, *box.shape)), dtype=torch.float32)
            for name, box in env.observation_space.spaces.items()}


def test_each_policy_learns_from_its_own_agents_rows_only():
    env = kinds_env()
    model = policies_model(env)
    obs = random_obs(env)
    logits = model.actor(model.features(obs))
    assert logits.shape == (6, 3 + 3 + 4)
    # the scouts' logits are the scout network's on each scout row; the tank's the tank's
    torch.testing.assert_close(logits[:, :3], model.actor.nets["scout"](obs["scout"][:, 0]))
    torch.testing.assert_close(logits[:, 3:6], model.actor.nets["scout"](obs["scout"][:, 1]))
    torch.testing.assert_close(logits[:, 6:], model.actor.nets["tank"](obs["tank"][:, 0]))
    # a loss on the tank's log-probs alone moves the tank's parameters, none of the scouts'
    actions = torch.tensor([[0, 1, 3]] * 6)
    model.zero_grad()
    dist_logits = logits[:, 6:]
    torch.log_softmax(dist_logits, -1).gather(1, actions[:, 2:]).sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.actor.nets["scout"].parameters())
    assert any(p.grad is not None and p.grad.any() for p in model.actor.nets["tank"].parameters())
    # and the team's log-prob is the sum over every agent, each under its own policy's head
    log_prob, _ = model.policy_terms(model.features(obs), actions)
    by_hand = sum(torch.log_softmax(logits[:, s], -1)[:, a]
                  for s, a in ((slice(0, 3), 0), (slice(3, 6), 1), (slice(6, 10), 3)))
    torch.testing.assert_close(log_prob, by_hand)


def test_a_policy_has_its_own_flags_and_learning_rate():
    env = kinds_env()
    model = policies_model(env, "--ma_critic", "local", "--lr", "3e-4", "--lr_schedule",
                           "constant", "--policy_args",
                           "tank=--hidden_sizes 16 --activation relu --lr 1e-3")
    assert model.actor.nets["tank"][0].out_features == 16
    assert isinstance(model.actor.nets["tank"][1], torch.nn.ReLU)
    assert model.actor.nets["scout"][0].out_features == 64
    optimizer = model.configure_optimizer()
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert set(groups) == {"shared", "policy:tank"} and groups["policy:tank"]["lr"] == 1e-3
    tank = {id(p) for p in model.actor.nets["tank"].parameters()}
    tank |= {id(p) for p in model.critic.values.nets["tank"].parameters()}
    assert {id(p) for p in groups["policy:tank"]["params"]} == tank
    assert model.learning_rate(0.5) == {"shared": 3e-4, "policy:tank": 1e-3}
    # the returns per policy reach metrics.csv's columns
    assert type(model).metric_columns_of(env.observation_space) == ("return_scout",
                                                                     "return_tank")
    assert model.observe_episodes([{"return_scout": 1.0, "return_tank": 4.0},
                                   {"return_scout": 3.0, "return_tank": 6.0}]) == {
        "return_scout": 2.0, "return_tank": 5.0}


def test_errors_name_the_policy_and_what_it_takes():
    # a scout and the tank under one policy: two action sizes for one head
    env = kinds_env(policy_map="*_0=zero,*=rest")
    with pytest.raises(ConfigError, match="policy 'zero' act in Discrete spaces of different "
                                          "sizes \\(3, 4\\)"):
        policies_model(env)
    env = kinds_env()
    with pytest.raises(ConfigError, match="no such policy; the env's --policy_map makes scout, "
                                          "tank"):
        policies_model(env, "--policy_args", "tanks=--lr 1e-3")
    with pytest.raises(ConfigError, match="--policy_args tank="):
        policies_model(env, "--policy_args", "tank=--hidden_sizes many")


@pytest.mark.e2e
def test_policies_train_resume_evaluate_and_export(tmp_path):
    run_dir = str(tmp_path / "kinds")
    common = [sys.executable, "main.py", "--env_name", "pettingzoo_env", "--pz_env",
              "tests.plugins.two_kinds", "--pz_kwargs", "{}", "--model_name", "ma_ppo",
              "--policy_map", "scout_*=scout,tank_*=tank", "--policy_args",
              "tank=--hidden_sizes 16 --lr 1e-3", "--num_workers", "0", "--quiet",
              "--no-tensorboard", "--target_return", "none", "--num_envs_per_worker", "4",
              "--rollout_steps", "10", "--batch_size", "40", "--eval_interval", "200"]
    train = subprocess.run([*common, "--total_steps", "400", "--run_dir", run_dir], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    from core.run.metrics import read_metrics
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    finished = [row for row in rows if row["episodes"]]
    assert finished and all(0 <= row["return_scout"] <= 2 * 5 for row in finished)
    assert all(0 <= row["return_tank"] <= 3 * 5 for row in finished)
    saved = torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)
    assert saved["model"]["actor.nets.tank.0.weight"].shape == (16, 4)
    resumed = subprocess.run([sys.executable, "main.py", "--restore", run_dir, "--total_steps",
                              "600", "--quiet", "--no-tensorboard"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_metrics(os.path.join(run_dir, "metrics.csv"))[-1]["env_steps"] >= 600
    evaluate = subprocess.run([sys.executable, "main.py", "--evaluate", run_dir,
                               "--eval_episodes", "2"], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert evaluate.returncode == 0 and "2 deterministic episodes" in evaluate.stdout
    exported = subprocess.run([sys.executable, "main.py", "--export", run_dir, "--out",
                               str(tmp_path / "kinds.onnx")], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "scout float32[batch,2,4], tank float32[batch,1,4]" in exported.stdout
    # the exported program acts as the loaded policy does, each agent by its policy
    import onnxruntime
    import ddrl
    policy = ddrl.load(run_dir)
    session = onnxruntime.InferenceSession(str(tmp_path / "kinds.onnx"))
    env = policy.make_env()
    obs, _ = env.reset(seed=3)
    batch = {k: v[None].astype(np.float32) for k, v in obs.items()}
    names = [i.name for i in session.get_inputs()]
    (exported_action,) = session.run(None, {n: batch[n] for n in names})
    np.testing.assert_array_equal(exported_action[0], policy.act(obs))
    # each policy on its own: its agents' rows in, their actions out, as in the team's
    for name, columns in (("scout", [0, 1]), ("tank", [2])):
        out = tmp_path / f"{name}.onnx"
        alone = subprocess.run([sys.executable, "main.py", "--export", run_dir,
                                "--export_policy", name, "--out", str(out)], cwd=REPO,
                               capture_output=True, text=True, timeout=300)
        assert alone.returncode == 0, alone.stderr[-3000:]
        assert f"policy {name} of ma_ppo" in alone.stdout
        session = onnxruntime.InferenceSession(str(out))
        (action,) = session.run(None, {"obs": batch[name]})
        np.testing.assert_array_equal(action[0], policy.act(obs)[columns])
        with open(f"{out}.json") as f:
            assert json.load(f)["policy"] == name
    wrong = subprocess.run([sys.executable, "main.py", "--export", run_dir, "--export_policy",
                            "pilot"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "this team's policies are scout, tank" in wrong.stderr


def test_the_plot_draws_each_policys_return(tmp_path):
    from core.run.plots import LearningCurves, policy_return_columns
    curves = LearningCurves(str(tmp_path))
    for step in range(1, 4):
        curves.add({"env_steps": str(100 * step), "wall_time_s": str(step), "train_return": "-5",
                    "eval_return": "", "return_scout": str(-step), "return_tank": "-2",
                    "policy_loss": "0.1"})
    assert policy_return_columns(curves.rows) == ["return_scout", "return_tank"]
    assert [row["return_scout"] for row in curves.rows] == [-1.0, -2.0, -3.0]
    curves.maybe_draw(force=True)
    assert os.path.getsize(curves.path) > 0
