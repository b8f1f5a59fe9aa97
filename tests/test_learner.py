"""average_gradients, and the property the distributed design rests on: the sample-weighted
average of workers' gradients equals one worker's gradient on the union of their data."""
import copy
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agents.default_agent import DefaultAgent
from core.learning.learner import average_gradients
from core.algos.ppo_trainer import advantage_moments
from core.types import GradientRequest, RolloutStats, Trajectory
from models.ppo import PPOBatch, PPOModel
from options.options import parse_args

pytestmark = pytest.mark.unit

OBS = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
ACTION_SPACES = {"discrete": spaces.Discrete(3),
                 "box": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)}


# -- average_gradients -------------------------------------------------------------------------
def test_each_parameter_is_averaged_from_its_own_gradients_weighted_by_samples():
    a = {"actor.w": np.array([1.0, 2.0], np.float32), "critic.w": np.array([10.0], np.float32)}
    b = {"actor.w": np.array([4.0, 8.0], np.float32), "critic.w": np.array([40.0], np.float32)}
    avg = average_gradients([a, b], [1, 3])
    # actor: (1*[1,2] + 3*[4,8]) / 4 = [13, 26] / 4 = [3.25, 6.5]
    np.testing.assert_array_equal(avg["actor.w"], [3.25, 6.5])
    # critic: (1*10 + 3*40) / 4 = 130 / 4 = 32.5  (not mixed with the actor's)
    np.testing.assert_array_equal(avg["critic.w"], [32.5])
    assert avg["actor.w"].dtype == np.float32


def test_equal_weights_give_the_plain_mean():
    a = {"actor.w": np.array([1.0]), "critic.w": np.array([-2.0])}
    b = {"actor.w": np.array([2.0]), "critic.w": np.array([6.0])}
    avg = average_gradients([a, b], [5, 5])
    assert avg["actor.w"][0] == 1.5 and avg["critic.w"][0] == 2.0


def test_mismatched_parameter_names_raise():
    a = {"actor.w": np.zeros(1), "critic.w": np.zeros(1)}
    b = {"actor.w": np.zeros(1), "critic.v": np.zeros(1)}
    with pytest.raises(ValueError, match="critic"):
        average_gradients([a, b], [1, 1])


def test_no_gradients_raise():
    with pytest.raises(ValueError):
        average_gradients([], [])


# -- two workers' average == one worker on the union ---------------------------------------------
def make_model(kind, *flags):
    args = parse_args(["--config", "none", "--num_workers", "0", "--ent_coef", "0.01",
                       *flags])
    torch.manual_seed(0)
    return PPOModel(args, OBS, ACTION_SPACES[kind])


def random_batch(model, n, seed=0):
    """N samples with old log-probs perturbed around the model's own, so that some ratios fall
    outside the clip range."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 4, generator=g) * 2 - 1
    with torch.no_grad():
        dist = model.distribution(obs)
        actions = dist.sample()
        old_log_probs = model.log_prob(dist, actions) + 0.3 * torch.randn(n, generator=g)
    return PPOBatch(obs, actions, old_log_probs, torch.randn(n, generator=g),
                    torch.randn(n, generator=g), torch.randn(n, generator=g))


def half(batch, sl):
    return PPOBatch(*(None if x is None else x[sl] for x in batch))


@pytest.mark.parametrize("kind", ["discrete", "box"])
@pytest.mark.parametrize("flags", [(), ("--clip_range_vf", "0.2")], ids=["", "clip_vf"])
def test_average_of_two_halves_equals_the_gradient_on_the_union(kind, flags):
    model = make_model(kind, *flags)
    batch = random_batch(model, 64)
    union, stats = model.step(batch)
    assert 0.0 < stats["clip_fraction"] < 1.0  # the clipped and unclipped branches both count

    first, second = copy.deepcopy(model), copy.deepcopy(model)
    grads_a, _ = first.step(half(batch, slice(0, 32)))
    grads_b, _ = second.step(half(batch, slice(32, 64)))
    averaged = average_gradients([grads_a, grads_b], [32, 32])

    assert set(averaged) == set(union)
    for name in union:
        assert torch.allclose(torch.as_tensor(averaged[name]), torch.as_tensor(union[name]),
                              atol=1e-6), name
    # the halves alone are not the union: the test compares something that can differ
    assert not all(np.allclose(grads_a[k], union[k], atol=1e-6) for k in union)


def test_unequal_shares_are_weighted_by_their_sample_counts():
    model = make_model("discrete")
    batch = random_batch(model, 60, seed=1)
    union, _ = model.step(batch)
    grads_a, _ = copy.deepcopy(model).step(half(batch, slice(0, 15)))
    grads_b, _ = copy.deepcopy(model).step(half(batch, slice(15, 60)))
    averaged = average_gradients([grads_a, grads_b], [15, 45])
    for name in union:
        assert torch.allclose(torch.as_tensor(averaged[name]), torch.as_tensor(union[name]),
                              atol=1e-6), name


# -- the same through DefaultAgent.fetch_grads, with the rollout's global advantage moments ------
def random_trajectory(model, T, E, seed):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, size=(T, E, 4)).astype(np.float32)
    actions, extras = model.choose_actions(obs.reshape(T * E, 4))
    actions = actions.reshape(T, E, *actions.shape[1:])
    terminated = np.zeros((T, E), dtype=bool)
    truncated = np.zeros((T, E), dtype=bool)
    terminated[2, 0] = True
    truncated[4, 1] = True
    truncated[5, 3] = True
    return Trajectory(
        observations=obs, actions=actions,
        rewards=rng.normal(size=(T, E)).astype(np.float32),
        terminated=terminated, truncated=truncated,
        log_probs=(extras["log_probs"].reshape(T, E)
                   + 0.3 * rng.normal(size=(T, E))).astype(np.float32),
        values=rng.normal(size=(T, E)).astype(np.float32),
        last_observations=rng.uniform(-1, 1, size=(E, 4)).astype(np.float32),
        truncated_index=np.array([[4, 1], [5, 3]], dtype=np.int64),
        truncated_observations=rng.uniform(-1, 1, size=(2, 4)).astype(np.float32))


def env_columns(traj, envs, index_map):
    """The sub-trajectory of some envs (columns), re-indexing its truncations."""
    keep = [k for k, (t, e) in enumerate(traj.truncated_index) if e in envs]
    return Trajectory(
        traj.observations[:, envs], traj.actions[:, envs], traj.rewards[:, envs],
        traj.terminated[:, envs], traj.truncated[:, envs], traj.log_probs[:, envs],
        traj.values[:, envs], traj.last_observations[envs],
        np.array([[t, index_map[e]] for t, e in traj.truncated_index[keep]],
                 dtype=np.int64).reshape(-1, 2),
        traj.truncated_observations[keep])


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_two_agents_fetch_grads_equal_one_agent_on_the_union(kind):
    model = make_model(kind)
    weights = model.get_weights()
    traj = random_trajectory(model, T=8, E=4, seed=2)
    union_agent = DefaultAgent(model.args, copy.deepcopy(model), seed=0)
    agents = [DefaultAgent(model.args, copy.deepcopy(model), seed=1),
              DefaultAgent(model.args, copy.deepcopy(model), seed=2)]
    union_stats = union_agent.send_trajectory(traj)
    stats = [agents[0].send_trajectory(env_columns(traj, [0, 1], {0: 0, 1: 1})),
             agents[1].send_trajectory(env_columns(traj, [2, 3], {2: 0, 3: 1}))]

    # the global moments, as the trainer computes them from the workers' sums
    mean, std = advantage_moments([RolloutStats(0, [], [], 0, agent_stats=s) for s in stats])
    u_mean, u_std = advantage_moments([RolloutStats(0, [], [], 0, agent_stats=union_stats)])
    assert mean == pytest.approx(u_mean, abs=1e-6) and std == pytest.approx(u_std, abs=1e-6)
    assert std > 0.1

    request = GradientRequest(0, 0, 1, mean, std, 0.0, weights_version=7)
    union = union_agent.fetch_grads(weights, request)
    results = [a.fetch_grads(weights, request) for a in agents]
    assert union.num_samples == 32 and [r.num_samples for r in results] == [16, 16]
    averaged = average_gradients([r.gradients for r in results],
                                 [r.num_samples for r in results])
    for name in union.gradients:
        assert torch.allclose(torch.as_tensor(averaged[name]),
                              torch.as_tensor(union.gradients[name]), atol=1e-6), name


def test_fetch_grads_normalizes_with_the_requested_moments_not_its_own():
    # The same agent and data with two different requested means give different gradients.
    model = make_model("discrete", "--vf_coef", "0")
    agent = DefaultAgent(model.args, model, seed=0)
    agent.send_trajectory(random_trajectory(model, T=8, E=4, seed=3))
    weights = model.get_weights()
    g0 = agent.fetch_grads(weights, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 0)).gradients
    g1 = agent.fetch_grads(weights, GradientRequest(0, 0, 1, 5.0, 1.0, 0.0, 0)).gradients
    assert not np.allclose(g0["actor.0.weight"], g1["actor.0.weight"])


def test_minibatch_scope_normalizes_each_minibatch_with_its_own_moments():
    """--advantage_norm_scope minibatch: the model gets each minibatch's advantages at mean 0
    and std 1 (torch's std, as SB3), whatever moments the request carries."""
    model = make_model("discrete", "--advantage_norm_scope", "minibatch")
    agent = DefaultAgent(model.args, model, seed=0)
    agent.send_trajectory(random_trajectory(model, T=8, E=4, seed=3))
    handed = []
    model.step = lambda batch, progress: handed.append(batch.advantages) or ({}, {})
    for minibatch in range(2):
        agent.fetch_grads(None, GradientRequest(0, minibatch, 2, 5.0, 3.0, 0.0, 0))
    raw = agent.data["advantages"]
    assert [len(a) for a in handed] == [16, 16]
    for advantages in handed:
        assert float(advantages.mean()) == pytest.approx(0.0, abs=1e-6)
        assert float(advantages.std()) == pytest.approx(1.0, abs=1e-4)
    # and they are the raw advantages of two disjoint halves, standardized
    order = agent.order
    for minibatch, advantages in enumerate(handed):
        part = raw[torch.as_tensor(np.array_split(order, 2)[minibatch])]
        assert torch.allclose(advantages, (part - part.mean()) / (part.std() + 1e-8))


@pytest.mark.unit
def test_optimizer_step_is_torchs_step():
    """core/learning/learner.py optimizer_step: the same Adam update as optimizer.step(), bit
    for bit."""
    from core.learning.learner import optimizer_step
    torch.manual_seed(0)
    nets = [torch.nn.Linear(4, 3) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    optimizers = [torch.optim.Adam(n.parameters(), lr=1e-2, fused=True) for n in nets]
    for _ in range(3):
        x = torch.randn(5, 4)
        for net, optimizer in zip(nets, optimizers):
            optimizer.zero_grad()
            net(x).pow(2).sum().backward()
        optimizers[0].step()
        optimizer_step(optimizers[1])
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)


@pytest.mark.contract
def test_a_learner_never_imports_dynamo():
    """A process that trains (PPO's Learner: construct, apply, state) never imports
    torch._dynamo (1.6 s of CPU at start-up; core/learning/learner.py says why)."""
    script = ("import sys; from options.options import parse_args; import torch\n"
              "from models.ppo import PPOModel; from core.learning.learner import Learner\n"
              "import gymnasium as gym\n"
              "args = parse_args(['--config', 'none'])\n"
              "env = gym.make('CartPole-v1')\n"
              "from options.options import run_spec\n"
              "model = PPOModel(run_spec(args).model, env.observation_space, env.action_space)\n"
              "learner = Learner(model)\n"
              "for p in model.parameters(): p.grad = torch.ones_like(p)\n"
              "learner.apply_in_place(); learner.state()\n"
              "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(
                             __file__)))).stdout
    assert out.strip().splitlines()[-1] == "False"
