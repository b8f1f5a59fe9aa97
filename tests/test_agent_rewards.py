"""Each agent learning from its own reward (ma_ppo --agent_rewards): the env's report per agent
(envs/pettingzoo_env.py, core/types.py STEP_REPORT_KEY), GAE per agent by hand with an agent that
leaves mid-fragment (no samples once gone, its value cut where it left), per-agent
log-probabilities that add up to the team's, gradients blind to agents that did not act, and
short runs of a mixed game (MPE simple_adversary, a policy per side) and of an env whose agents
leave."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from agents.default_agent import DefaultAgent
from core.errors import ConfigError
from core.types import Trajectory
from models.ppo import PPOBatch
from tests.test_multi_agent import model_for, team_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.unit


def test_the_env_reports_each_agents_reward_presence_and_exit():
    env = team_env(pz_env="tests.plugins.leaving_agents", pz_kwargs="{}")
    env.reset(seed=0)
    reports, done = [], False
    while not done:
        _, reward, terminated, truncated, info = env.step(np.array([0, 1, 2]))
        report = info["step_report"]
        assert reward == pytest.approx(report["rewards"].sum())   # the team's is their sum
        reports.append([report[k].tolist() for k in ("rewards", "acted", "terminated")])
        done = terminated or truncated
    # a_i's reward is i + 1; a_0 leaves at step 2, a_1 at step 4 (both terminated); a_2 is
    # truncated at step 6 with the team: a time limit, not an exit (the team's truncation
    # bootstraps it)
    assert reports == [
        [[1, 2, 3], [1, 1, 1], [0, 0, 0]], [[1, 2, 3], [1, 1, 1], [1, 0, 0]],
        [[0, 2, 3], [0, 1, 1], [0, 0, 0]], [[0, 2, 3], [0, 1, 1], [0, 1, 0]],
        [[0, 0, 3], [0, 0, 1], [0, 0, 0]], [[0, 0, 3], [0, 0, 1], [0, 0, 0]]]


def test_the_reports_follow_the_team_actions_order_with_a_policy_map():
    env = team_env(pz_env="tests.plugins.leaving_agents", pz_kwargs="{}",
                   policy_map="a_2=first,*=second")
    env.reset(seed=0)
    info = env.step(np.array([0, 1, 2]))[-1]
    # the team action lists policy first's agent (a_2) first, then second's (a_0, a_1)
    assert info["step_report"]["rewards"].tolist() == [3, 1, 2]


class ValuesFromObservations:
    """V of each agent = its column of the observation (the test says which value is used)."""
    device = "cpu"

    def predict_values(self, obs):
        return np.asarray(obs, np.float32).reshape(-1, 2)


def per_agent_agent(gamma=0.5, lam=0.5):
    from options.options import parse_args
    args = parse_args(["--config", "none", "--num_workers", "0", "--gamma", str(gamma),
                       "--gae_lambda", str(lam)])
    agent = DefaultAgent.__new__(DefaultAgent)
    agent.args, agent.model, agent.order = args, ValuesFromObservations(), None
    return agent


def two_agent_fragment(per_agent):
    """One env, three steps, two agents; agent 0 leaves at step 1, agent 1 stays; the
    fragment goes on after the last step (last observation: V = 3 and 8)."""
    return Trajectory(
        observations=np.full((3, 1, 2), -1000.0, np.float32),
        actions=np.zeros((3, 1, 2), np.int64), rewards=np.array([[1], [3], [4]], np.float32),
        terminated=np.zeros((3, 1), bool), truncated=np.zeros((3, 1), bool),
        log_probs=np.zeros((3, 1, 2), np.float32),
        values=np.array([[[0.5, 0]], [[1.0, 0]], [[0, 0]]], np.float32),
        last_observations=np.array([[3.0, 8.0]], np.float32),
        truncated_index=np.zeros((0, 2), np.int64),
        truncated_observations=np.zeros((0, 2), np.float32), step_report=per_agent)


def test_gae_per_agent_by_hand():
    # gamma = lambda = 0.5.
    # agent 0: rewards 1, 1; V 0.5, 1.0; it leaves at step 1 (its value is cut there):
    #   A_1 = 1 - 1.0 = 0;  A_0 = (1 + .5 * 1.0 - .5) + .25 * A_1 = 1.0
    #   (step 2: it is gone; A_2 = 0 + .5 * 3 - 0 = 1.5 but the sample weighs 0)
    # agent 1: rewards 0, 2, 4; V 0, 0, 0; bootstrapped from the last observation's V = 8:
    #   A_2 = 4 + .5 * 8 = 8;  A_1 = 2 + .25 * 8 = 4;  A_0 = 0 + .25 * 4 = 1
    agent = per_agent_agent()
    stats = agent.send_trajectory(two_agent_fragment({
        "rewards": np.array([[[1, 0]], [[1, 2]], [[0, 4]]], np.float32),
        "acted": np.array([[[1, 1]], [[1, 1]], [[0, 1]]], np.float32),
        "terminated": np.array([[[0, 0]], [[1, 0]], [[0, 0]]], np.float32)}))
    np.testing.assert_allclose(agent.data["advantages"].numpy(), [[1, 1], [0, 4], [1.5, 8]])
    np.testing.assert_allclose(agent.data["returns"].numpy(), [[1.5, 1], [1, 4], [1.5, 8]])
    np.testing.assert_array_equal(agent.data["weights"].numpy(), [[1, 1], [1, 1], [0, 1]])
    # the round's moments count the samples of agents that acted: 1 + 1 + 0 + 4 + 8
    assert stats["advantage_count"] == 5 and stats["advantage_sum"] == pytest.approx(14)
    assert stats["advantage_sq_sum"] == pytest.approx(1 + 1 + 16 + 64)
    assert stats["sample_rows"] == 3     # minibatches split steps, each with all its agents


def test_the_team_end_cuts_every_agent_and_a_time_limit_bootstraps_each():
    # Team truncated at step 1 (final observation: V = 5 and 6), a new episode at step 2.
    agent = per_agent_agent()
    fragment = two_agent_fragment({
        "rewards": np.array([[[1, 0]], [[1, 2]], [[0, 4]]], np.float32),
        "acted": np.ones((3, 1, 2), np.float32),
        "terminated": np.zeros((3, 1, 2), np.float32)})
    fragment.truncated[1, 0] = True
    fragment.truncated_index = np.array([[1, 0]])
    fragment.truncated_observations = np.array([[5.0, 6.0]], np.float32)
    agent.send_trajectory(fragment)
    # agent 0: A_1 = 1 + .5 * 5 - 1 = 2.5; A_0 = 1 + .5 - .5 + .25 * 2.5 = 1.625; A_2 = 1.5
    # agent 1: A_1 = 2 + .5 * 6 = 5;       A_0 = 0 + .25 * 5 = 1.25;          A_2 = 8
    np.testing.assert_allclose(agent.data["advantages"].numpy(),
                               [[1.625, 1.25], [2.5, 5], [1.5, 8]])


def test_values_per_agent_need_the_envs_report():
    with pytest.raises(ConfigError, match="does not report each agent's reward.*--agent_rewards"):
        per_agent_agent().send_trajectory(two_agent_fragment(None))


@pytest.mark.parametrize("critic", ["central", "local"])
def test_per_agent_terms_add_up_to_the_teams(critic):
    env = team_env(agent_ids=True)
    team = model_for(env, "--agent_ids", "--ma_critic", critic)
    own = model_for(env, "--agent_ids", "--ma_critic", critic, "--agent_rewards")
    own.actor.load_state_dict(team.actor.state_dict())
    rows = torch.randn(8, 3, 22)
    actions = torch.randint(0, 5, (8, 3))
    team_log_prob, team_entropy = team.policy_terms(team.features(rows), actions)
    log_prob, entropy = own.policy_terms(own.features(rows), actions)
    assert log_prob.shape == entropy.shape == (8, 3)
    torch.testing.assert_close(log_prob.sum(-1), team_log_prob)
    torch.testing.assert_close(entropy.sum(-1), team_entropy)
    assert own.values(own.features(rows)).shape == (8, 3)           # a value per agent
    acted, extras = own.choose_actions(rows.numpy())
    assert acted.shape == (8, 3) and extras["log_probs"].shape == extras["values"].shape == (8, 3)
    # the reported log-probabilities are those of the actions taken
    again = own.policy_terms(own.features(rows), torch.as_tensor(acted))[0]
    np.testing.assert_allclose(extras["log_probs"], again.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_continuous_agents_log_probs_per_agent():
    env = team_env(pz_kwargs='{"N": 3, "max_cycles": 25, "continuous_actions": true}')
    team = model_for(env, "--agent_rewards")
    rows = torch.randn(4, 3, 19)
    actions, extras = team.choose_actions(rows.numpy())
    assert actions.shape == (4, 3, 5) and extras["log_probs"].shape == (4, 3)
    mean = team.actor(team.features(rows)).reshape(4, 3, 5)
    std = team.log_std.exp().reshape(3, 5)
    by_hand = torch.distributions.Normal(mean, std).log_prob(torch.as_tensor(actions)).sum(-1)
    np.testing.assert_allclose(extras["log_probs"], by_hand.detach().numpy(), rtol=1e-5,
                               atol=1e-5)


def test_an_agent_that_did_not_act_moves_no_gradient():
    env = team_env(agent_ids=True)
    model = model_for(env, "--agent_ids", "--agent_rewards")
    rows = torch.randn(6, 3, 22)
    actions = torch.randint(0, 5, (6, 3))
    old = model.policy_terms(model.features(rows), actions)[0].detach()
    weights = torch.tensor([[0.0, 1, 1]] * 6)           # agent 0 is gone at every step

    def gradients(agent_0_advantage, agent_0_return):
        advantages = torch.ones(6, 3)
        returns = torch.zeros(6, 3)
        advantages[:, 0], returns[:, 0] = agent_0_advantage, agent_0_return
        batch = PPOBatch(rows, actions, old - 0.1, advantages, returns,
                         torch.zeros(6, 3), weights=weights)
        return model.step(batch)[0]

    first, second = gradients(5.0, 3.0), gradients(-7.0, 100.0)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    weights[:, 0] = 1.0                                 # now it acted: its terms count
    changed = gradients(-7.0, 100.0)
    assert any(not np.array_equal(first[n], changed[n]) for n in first)


def test_a_mixed_game_and_leaving_agents_train_on_their_own_rewards(tmp_path):
    """MPE simple_adversary (an adversary against two good agents, each side its own policy
    and reward) and the env whose agents leave: short runs to the end, then --evaluate."""
    common = [sys.executable, "main.py", "--env_name", "pettingzoo_env", "--model_name",
              "ma_ppo", "--agent_rewards", "--num_workers", "0", "--quiet",
              "--no-tensorboard", "--target_return", "none"]
    mixed = str(tmp_path / "mixed")
    train = subprocess.run(
        [*common, "--pz_env", "mpe2.simple_adversary_v3", "--pz_kwargs",
         '{"N": 2, "max_cycles": 25, "continuous_actions": false}', "--policy_map",
         "adversary_*=adversary,agent_*=good", "--ma_critic", "local", "--total_steps", "1600",
         "--eval_interval", "800", "--run_dir", mixed], cwd=REPO, capture_output=True,
        text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    import csv
    with open(os.path.join(mixed, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert {"return_adversary", "return_good"} <= set(rows[0])
    evaluate = subprocess.run([sys.executable, "main.py", "--evaluate", mixed,
                               "--eval_episodes", "2"], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert evaluate.returncode == 0 and "2 deterministic episodes" in evaluate.stdout
    # benchmarks/team_returns.py: each side's return, in cross-play and against a random side
    scored = subprocess.run([sys.executable, "benchmarks/team_returns.py", mixed, "--episodes",
                             "3", "--cross", f"adversary={mixed}", "--random", "good"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert scored.returncode == 0, scored.stderr[-3000:]
    row = json.loads(scored.stdout.splitlines()[-1])
    assert set(row["returns"]) == {"adversary", "good"} and row["episodes"] == 3
    leaving = subprocess.run(
        [*common, "--pz_env", "tests.plugins.leaving_agents", "--pz_kwargs", "{}",
         "--total_steps", "600", "--eval_interval", "300", "--num_envs_per_worker", "2",
         "--rollout_steps", "7", "--batch_size", "14", "--run_dir", str(tmp_path / "leaving")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert leaving.returncode == 0, leaving.stderr[-3000:]
    with open(tmp_path / "leaving" / "summary.json") as f:
        summary = json.load(f)
    assert summary["env_errors"] == 0 and summary["env_steps"] >= 600
