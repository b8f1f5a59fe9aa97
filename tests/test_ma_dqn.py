"""DQN for a team by value decomposition (models/ma_dqn.py, VDN): the team's Q and target by
hand, each agent greedy on its own, exploration per agent within its own actions, a network
per policy that learns from its own agents only, the spaces it refuses, and a whole run on MPE
simple_spread (train, resume, export equal to the model's greedy actions)."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.learning.replay_buffer import Transitions
from core.errors import ConfigError
from tests.test_multi_agent import exported_and_loaded_actions, team_env, train_resume_export

pytestmark = pytest.mark.unit


def team_dqn(observation_space, action_space, *flags):
    from models.ma_dqn import TeamDQNModel
    from options.options import parse_args
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--model_name",
                       "ma_dqn", "--num_workers", "0", *flags])
    torch.manual_seed(0)
    return TeamDQNModel(args, observation_space, action_space)


def set_linear_q(net, weight):
    """A QNetwork without hidden layers: Q(o) = weight @ o (no bias)."""
    with torch.no_grad():
        net.q.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        net.q.bias.zero_()


def test_the_team_q_and_its_target_by_hand():
    model = team_dqn(spaces.Box(-1, 1, (2, 2)), spaces.MultiDiscrete([3, 3]),
                     "--dqn_hidden_sizes", "none", "--no-double_q")
    # Q_i(o) = W o with W = [[1, 0], [0, 1], [1, 1]]: row (a, b) -> (a, b, a + b)
    weight = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    set_linear_q(model.q_net.nets["team"], weight)
    set_linear_q(model.q_target.nets["team"], np.asarray(weight) * 2)  # the target: doubled
    obs = np.array([[[1.0, 2.0], [0.5, -1.0]]], np.float32)
    next_obs = np.array([[[0.0, 1.0], [2.0, 0.0]]], np.float32)
    q = model.q_values(obs)
    np.testing.assert_allclose(q[0], [[1.0, 2.0, 3.0], [0.5, -1.0, -0.5]])
    actions, _ = model.choose_actions(obs, deterministic=True)
    np.testing.assert_array_equal(actions, [[2, 0]])  # each agent's own argmax
    batch = Transitions(observations=obs, actions=np.array([[1, 2]]),
                        rewards=np.array([0.5], np.float32), next_observations=next_obs,
                        terminated=np.array([0.0], np.float32),
                        discounts=np.array([0.9], np.float32))
    o, a, r, n, t, d, _ = model.unpack(batch)
    # Q(s, a) = Q_0(o_0, 1) + Q_1(o_1, 2) = 2.0 + -0.5
    assert model.q_taken(o, a).item() == pytest.approx(1.5)
    # target network's max per agent at s': agent 0 (0, 1) -> 2 * max(0, 1, 1) = 2;
    # agent 1 (2, 0) -> 2 * max(2, 0, 2) = 4; y = 0.5 + 0.9 * 6
    assert model.targets(r, n, t, d).item() == pytest.approx(0.5 + 0.9 * 6.0)
    assert model.targets(r, n, torch.ones(1), d).item() == pytest.approx(0.5)
    np.testing.assert_allclose(model.td_errors(batch), [abs(1.5 - 5.9)], rtol=1e-6)
    # a target network that disagrees with the online one: Q_target(o) = (0, 0, 3 o_1)
    set_linear_q(model.q_target.nets["team"], [[0.0, 0.0], [0.0, 0.0], [0.0, 3.0]])
    # its own max: agent 0 (0, 1) -> 3, agent 1 (2, 0) -> 0
    assert model.targets(r, n, t, d).item() == pytest.approx(0.5 + 0.9 * 3.0)
    # double Q: the online network picks each agent's a* (agent 0 (0, 1, 1) -> 1, the first
    # max; agent 1 (2, 0, 2) -> 0), the target values it: 0 + 0
    model.args = model.args.__class__(**{**vars(model.args), "double_q": True})
    assert model.targets(r, n, t, d).item() == pytest.approx(0.5)


def test_exploration_is_per_agent_within_its_own_actions():
    space = spaces.Dict({"a": spaces.Box(-1, 1, (1, 4)), "b": spaces.Box(-1, 1, (2, 4))})
    model = team_dqn(space, spaces.MultiDiscrete([2, 5, 5]))
    obs = {"a": np.zeros((400, 1, 4), np.float32), "b": np.ones((400, 2, 4), np.float32)}
    q = model.q_values(obs)
    assert q.shape == (400, 3, 5) and (q[:, 0, 2:] < -1e8).all()  # a's padding
    model.epsilons = np.full(400, 1.0)  # every agent explores
    actions, _ = model.choose_actions(obs)
    assert actions.shape == (400, 3)
    assert set(actions[:, 0].tolist()) == {0, 1} and set(actions[:, 1].tolist()) == set(range(5))
    assert (actions[:, 1] != actions[:, 2]).any()  # agents of one env explore apart
    model.epsilons = np.full(400, 0.0)
    greedy, _ = model.choose_actions(obs)
    np.testing.assert_array_equal(greedy, q.argmax(-1))


def test_each_policy_learns_from_its_own_agents_only():
    space = spaces.Dict({"a": spaces.Box(-1, 1, (1, 4)), "b": spaces.Box(-1, 1, (2, 4))})
    model = team_dqn(space, spaces.MultiDiscrete([2, 5, 5]))
    rng = np.random.default_rng(0)
    obs = {"a": rng.normal(size=(8, 1, 4)).astype(np.float32),
           "b": rng.normal(size=(8, 2, 4)).astype(np.float32)}
    o = model.flat_obs(obs)
    actions = torch.as_tensor(np.stack([rng.integers(0, 2, 8), rng.integers(0, 5, 8),
                                        rng.integers(0, 5, 8)], 1))
    # the team's Q moves with a's network through agent 0 alone: perturbing b's rows leaves
    # a's gradient as it was
    grads = []
    for shift in (0.0, 1.0):
        model.zero_grad(set_to_none=True)
        moved = {"a": o["a"], "b": o["b"] + shift}
        model.q_taken(moved, actions).sum().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.q_net.nets["a"].parameters()]))
    torch.testing.assert_close(grads[0], grads[1])
    assert all(p.grad is not None for p in model.q_net.nets["b"].parameters())


def test_spaces_it_refuses():
    from models.ma_dqn import TeamDQNModel
    with pytest.raises(ConfigError, match="a row per agent"):
        TeamDQNModel.check_spaces(spaces.Box(-1, 1, (4,)), spaces.Discrete(2))
    with pytest.raises(ConfigError, match="Discrete action per agent .* --model_name ma_ppo"):
        TeamDQNModel.check_spaces(spaces.Box(-1, 1, (3, 4)), spaces.Box(-1, 1, (3, 2)))


@pytest.mark.e2e
def test_simple_spread_trains_resumes_and_exports(tmp_path):
    pytest.importorskip("onnxruntime")
    flags = ["--model_name", "ma_dqn", "--num_envs_per_worker", "4", "--learning_starts", "200",
             "--eval_interval", "400", "--eval_episodes", "2"]
    run_dir, out = train_resume_export(tmp_path, flags, 800, 1200)
    onnx_actions, loaded = exported_and_loaded_actions(run_dir, out, team_env(agent_ids=True))
    np.testing.assert_array_equal(onnx_actions, loaded)


def test_noisy_networks_explore_for_the_team_and_evaluate_on_the_mean_weights():
    from models.noisy import noise_disabled, noisy_layers
    space = spaces.Dict({"a": spaces.Box(-1, 1, (1, 4)), "b": spaces.Box(-1, 1, (2, 4))})
    model = team_dqn(space, spaces.MultiDiscrete([2, 5, 5]), "--exploration", "noisy",
                     "--noisy_sigma0", "5")
    assert len(noisy_layers(model.q_net)) == 2 * 3  # a network per policy: 2 hidden, 1 head
    rng = np.random.default_rng(0)
    obs = {"a": rng.standard_normal((300, 1, 4)).astype(np.float32),
           "b": rng.standard_normal((300, 2, 4)).astype(np.float32)}
    with noise_disabled(model.q_net):
        mean_greedy = model.q_values(obs).argmax(-1)
    model.begin_fragment(300, 0.0)
    assert model.epsilons.tolist() == [0.0] * 300
    np.testing.assert_array_equal(model.choose_actions(obs, deterministic=True)[0], mean_greedy)
    assert (model.choose_actions(obs)[0] != mean_greedy).any()
