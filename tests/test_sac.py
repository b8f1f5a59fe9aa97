"""SACModel and SACAgent numerics: the tanh-Gaussian log-prob, action bounds, the soft Bellman
target by hand, gradients against a plain reimplementation (no actor-loss gradient in the
critics), the temperature's direction, polyak targets, weights transport, spaces, and the
transitions of a fragment with a termination and a truncation."""
import math
import sys
import types
from typing import NamedTuple

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from core.errors import ConfigError
from core.types import Trajectory
from options.options import parse_args

try:
    from core.learning.replay_buffer import ReplayBatch, Transitions
except ImportError:  # the replay buffer is written elsewhere; the same contract, for these tests
    class Transitions(NamedTuple):
        observations: np.ndarray
        actions: np.ndarray
        rewards: np.ndarray
        next_observations: np.ndarray
        terminated: np.ndarray

    class ReplayBatch(NamedTuple):
        transitions: Transitions
        indices: np.ndarray
        generations: np.ndarray
        weights: np.ndarray

    _module = types.ModuleType("core.learning.replay_buffer")
    _module.Transitions, _module.ReplayBatch = Transitions, ReplayBatch
    sys.modules["core.learning.replay_buffer"] = _module

from agents.sac_agent import SACAgent
from models.sac import SACModel, tanh_log_prob_correction

pytestmark = pytest.mark.unit

OBS = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
# Asymmetric bounds, so that the rescaling to and from [-1, 1] is exercised.
ACT = spaces.Box(np.array([-2.0, -0.5], np.float32), np.array([2.0, 1.5], np.float32))
LOW, HIGH = ACT.low.astype(np.float64), ACT.high.astype(np.float64)


def make_args(*flags):
    return parse_args(["--config", "none", "--num_workers", "0", "--model_name", "sac",
                       "--agent_name", "sac_agent", "--sac_hidden_sizes", "16,16", *flags])


def make_model(*flags, seed=0):
    torch.manual_seed(seed)
    return SACModel(make_args(*flags), OBS, ACT)


def random_batch(n, seed=0, weights=None, terminated=None):
    rng = np.random.default_rng(seed)
    transitions = Transitions(
        observations=rng.uniform(-2, 2, (n, 3)).astype(np.float32),
        actions=rng.uniform(LOW, HIGH, (n, 2)).astype(np.float32),
        rewards=rng.normal(size=n).astype(np.float32),
        next_observations=rng.uniform(-2, 2, (n, 3)).astype(np.float32),
        terminated=(rng.uniform(size=n) < 0.3).astype(np.float32) if terminated is None
        else np.asarray(terminated, np.float32))
    if weights is None:
        weights = np.ones(n, np.float32)
    return ReplayBatch(transitions, np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64),
                       np.asarray(weights, np.float32))


def critic_params(model):
    return {n: p for n, p in model.named_parameters() if n.startswith("critic.")}


def actor_params(model):
    return {n: p for n, p in model.named_parameters() if n.startswith("actor.")}


# -- flags and spaces ----------------------------------------------------------------------------
def test_flags_have_defaults_and_no_gamma_clash():
    args = parse_args(["--config", "none", "--model_name", "sac", "--agent_name", "sac_agent"])
    assert args.sac_hidden_sizes == [256, 256]
    assert (args.actor_lr, args.critic_lr, args.alpha_lr) == (3e-4, 3e-4, 3e-4)
    assert (args.tau, args.init_alpha, args.sac_gamma) == (0.005, 1.0, 0.99)
    assert args.target_entropy == "auto"
    assert not hasattr(args, "gamma")  # default_agent's flag, not loaded with sac_agent
    assert make_model().target_entropy == -2.0
    assert make_model("--target_entropy", "-0.5").target_entropy == -0.5


def test_check_spaces():
    SACModel.check_spaces(OBS, ACT)
    with pytest.raises(ConfigError, match=r"continuous \(Box\) actions.*--model_name ppo"):
        SACModel.check_spaces(OBS, spaces.Discrete(3))
    SACModel.check_spaces(OBS, spaces.Box(-1, 1, shape=(2, 2)))  # any shape: flattened
    SACModel.check_spaces(spaces.Dict({"a": OBS, "b": spaces.Discrete(4)}), ACT)
    with pytest.raises(ConfigError, match="Graph space"):
        SACModel.check_spaces(spaces.Graph(spaces.Box(-1, 1, (2,)), None), ACT)
    with pytest.raises(ConfigError, match="finite"):
        SACModel.check_spaces(OBS, spaces.Box(-np.inf, np.inf, shape=(2,)))


# -- the policy ----------------------------------------------------------------------------------
def test_log_prob_matches_transformed_distribution():
    model = make_model()
    with torch.no_grad():  # a wide range of means and stds, some deep in the tanh's tails
        model.actor.mu.weight.mul_(8.0)
        model.actor.log_std.weight.mul_(4.0)
    obs = torch.as_tensor(random_batch(256).transitions.observations)
    torch.manual_seed(3)
    with torch.no_grad():
        actions, log_prob = model.sample(obs)
        mu, log_std = model.actor(obs)
    assert log_std.min() >= -20 and log_std.max() <= 2
    torch.manual_seed(3)
    u = mu + log_std.exp() * torch.randn_like(mu)
    tanh = TanhTransform(cache_size=1)
    squashed = tanh(u)  # cached: log_prob inverts to this u exactly, not through atanh
    expected = TransformedDistribution(Normal(mu, log_std.exp()), [tanh]).log_prob(squashed)
    np.testing.assert_allclose(actions.numpy(), squashed.numpy(), atol=1e-7)
    np.testing.assert_allclose(log_prob.numpy(), expected.sum(-1).numpy(), rtol=1e-5, atol=1e-4)


def test_tanh_correction_is_stable_in_the_tails():
    u = torch.tensor([[0.0, 1.5, -3.0]], dtype=torch.float64)
    naive = torch.log(1 - torch.tanh(u) ** 2).sum(-1)
    np.testing.assert_allclose(tanh_log_prob_correction(u).numpy(), naive.numpy(), rtol=1e-12)
    far = torch.tensor([[40.0, -40.0]])  # tanh(40) == 1 in float32: log(1 - 1) = -inf
    assert torch.isinf(torch.log(1 - torch.tanh(far) ** 2)).all()
    expected = 2 * (2 * (math.log(2) - 40.0))  # softplus(-80) is 0 to float precision
    assert tanh_log_prob_correction(far).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_actions_within_bounds_and_deterministic_is_the_squashed_mean(path):
    model = make_model()
    if path == "torch":  # acting through torch (a GPU, bf16, or an actor of a plugin's own)
        model.numpy_actor = None
    assert model.numpy_actor is not None or path == "torch"
    obs = random_batch(512).transitions.observations
    with torch.no_grad():  # push the means far out, both ways
        model.actor.mu.weight.mul_(100.0)
    actions, extras = model.choose_actions(obs)
    assert extras == {}
    assert actions.shape == (512, 2) and actions.dtype == np.float32
    assert np.all(actions >= ACT.low) and np.all(actions <= ACT.high)
    assert np.any(actions[:, 0] > 1.99) and np.any(actions[:, 0] < -1.99)  # reaches both ends

    with torch.no_grad():  # mean 0 -> tanh 0 -> the middle of the bounds
        model.actor.mu.weight.zero_()
        model.actor.mu.bias.zero_()
    actions, _ = model.choose_actions(obs[:4], deterministic=True)
    np.testing.assert_allclose(actions, np.tile((LOW + HIGH) / 2, (4, 1)), atol=1e-6)
    with torch.no_grad():
        model.actor.mu.bias.copy_(torch.tensor([0.4, -1.1]))
    actions, _ = model.choose_actions(obs[:4], deterministic=True)
    expected = LOW + (np.tanh([0.4, -1.1]) + 1) * (HIGH - LOW) / 2
    np.testing.assert_allclose(actions, np.tile(expected, (4, 1)), atol=1e-6)


def test_numpy_acting_draws_what_the_torch_actor_draws():
    """The numpy path's mean and spread are the torch actor's: deterministic actions agree, and
    the squashed Gaussian draws of both paths have the same moments."""
    model = make_model()
    obs = random_batch(64).transitions.observations
    deterministic, _ = model.choose_actions(obs, deterministic=True)
    numpy_draws = np.stack([model.choose_actions(obs[:1])[0][0] for _ in range(4000)])
    numpy_actor, model.numpy_actor = model.numpy_actor, None
    expected, _ = model.choose_actions(obs, deterministic=True)
    torch.manual_seed(0)
    torch_draws = np.stack([model.choose_actions(obs[:1])[0][0] for _ in range(4000)])
    np.testing.assert_allclose(deterministic, expected, atol=1e-5)
    np.testing.assert_allclose(numpy_draws.mean(0), torch_draws.mean(0), atol=0.05)
    np.testing.assert_allclose(numpy_draws.std(0), torch_draws.std(0), rtol=0.1)
    model.numpy_actor = numpy_actor
    with torch.no_grad():  # it follows the torch weights
        model.actor.mu.bias.add_(0.5)
    moved, _ = model.choose_actions(obs, deterministic=True)
    assert not np.allclose(moved, deterministic)


# -- the soft Bellman target by hand ---------------------------------------------------------------
def set_constant_networks(model, mu, log_std, q_online, q_target):
    """Zero every weight: the actor outputs (mu, log_std) and each Q net its bias, everywhere."""
    with torch.no_grad():
        for p in model.parameters():
            if p is not model.log_alpha:
                p.zero_()
        for b in model.critic_target.buffers():
            b.zero_()
        model.actor.mu.bias.copy_(torch.tensor(mu))
        model.actor.log_std.bias.copy_(torch.tensor(log_std))
        model.critic.q1[-1].bias.fill_(q_online[0])
        model.critic.q2[-1].bias.fill_(q_online[1])
        model.critic_target.q1[-1].bias.fill_(q_target[0])
        model.critic_target.q2[-1].bias.fill_(q_target[1])


def hand_log_prob(mu, log_std, noise):
    """Float64 numpy: Gaussian log-density of u minus log(1 - tanh(u)^2), summed over actions."""
    mu, log_std, noise = (np.asarray(x, np.float64) for x in (mu, log_std, noise))
    u = mu + np.exp(log_std) * noise
    gaussian = -0.5 * noise ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    return (gaussian - np.log(1 - np.tanh(u) ** 2)).sum(-1)


def test_critic_target_td_errors_and_loss_by_hand():
    model = make_model("--init_alpha", "0.5", "--sac_gamma", "0.9")
    mu, log_std = [0.3, -0.2], [-1.0, -0.5]
    set_constant_networks(model, mu, log_std, q_online=(1.0, 2.0), q_target=(1.5, 0.7))
    rewards = np.array([1.0, -2.0, 0.5])
    terminated = np.array([0.0, 1.0, 0.0])
    weights = np.array([1.0, 0.5, 2.0])
    batch = random_batch(3, weights=weights, terminated=terminated)
    batch = batch._replace(transitions=batch.transitions._replace(
        rewards=rewards.astype(np.float32)))

    torch.manual_seed(7)
    next_noise = torch.randn(3, 2).double().numpy()  # the model draws next actions first
    torch.manual_seed(7)
    _, stats = model.step(batch)
    next_log_prob = hand_log_prob(mu, log_std, next_noise)
    # min(1.5, 0.7) = 0.7; the terminal row is its reward alone
    target = rewards + 0.9 * (1 - terminated) * (0.7 - 0.5 * next_log_prob)
    assert target[1] == -2.0
    np.testing.assert_allclose(stats["td_errors"], np.abs(1.0 - target), rtol=1e-5)
    expected_loss = 0.5 * (np.mean(weights * (1.0 - target) ** 2)
                           + np.mean(weights * (2.0 - target) ** 2))
    assert stats["critic_loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert stats["q_mean"] == pytest.approx(1.0)
    assert stats["alpha"] == pytest.approx(0.5)
    assert stats["td_error_mean"] == pytest.approx(np.abs(1.0 - target).mean(), rel=1e-5)
    # td_errors() draws the same next actions and computes the same thing, without gradients
    torch.manual_seed(7)
    np.testing.assert_allclose(model.td_errors(batch), np.abs(1.0 - target), rtol=1e-5)


def test_terminated_masks_the_bootstrap_and_truncation_bootstraps():
    model = make_model("--sac_gamma", "0.9")
    t = random_batch(6, terminated=[1, 1, 1, 0, 0, 0]).transitions
    rewards, next_obs, done = (torch.as_tensor(x) for x in (t.rewards, t.next_observations,
                                                           t.terminated))
    torch.manual_seed(0)
    before = model.critic_targets(rewards, next_obs, done)
    with torch.no_grad():  # next states become worth 10 more to both target critics
        model.critic_target.q1[-1].bias.add_(10.0)
        model.critic_target.q2[-1].bias.add_(10.0)
    torch.manual_seed(0)
    after = model.critic_targets(rewards, next_obs, done)
    # terminated: the reward alone, whatever the next state is worth
    np.testing.assert_array_equal(before[:3].numpy(), t.rewards[:3])
    np.testing.assert_array_equal(after[:3].numpy(), t.rewards[:3])
    # not terminated (a truncated step is stored so): bootstraps, the target moves by gamma * 10
    np.testing.assert_allclose((after - before)[3:].numpy(), 9.0, rtol=1e-5)


# -- gradients against a plain reimplementation ---------------------------------------------------
def reference_losses(model, batch, seed):
    """SAC's three losses written out plainly (SB3's train()), on the model's own modules; the
    actor loss here DOES reach the critics, so each gradient is taken w.r.t. its owner only."""
    t = batch.transitions
    obs, next_obs = torch.as_tensor(t.observations), torch.as_tensor(t.next_observations)
    actions = (torch.as_tensor(t.actions) - torch.tensor((LOW + HIGH) / 2, dtype=torch.float32)
               ) / torch.tensor((HIGH - LOW) / 2, dtype=torch.float32)
    rewards, done = torch.as_tensor(t.rewards), torch.as_tensor(t.terminated)
    weights = torch.as_tensor(batch.weights)
    alpha = model.log_alpha.exp().detach()

    def policy(o):
        mu, log_std = model.actor(o)
        u = mu + log_std.exp() * torch.randn_like(mu)
        tanh = TanhTransform(cache_size=1)
        a = tanh(u)
        return a, TransformedDistribution(Normal(mu, log_std.exp()), [tanh]).log_prob(a).sum(-1)

    def q(net, o, a):
        x = torch.cat([o, a], -1)
        return net.q1(x).squeeze(-1), net.q2(x).squeeze(-1)

    torch.manual_seed(seed)
    with torch.no_grad():
        next_a, next_logp = policy(next_obs)
        next_q = torch.min(*q(model.critic_target, next_obs, next_a)) - alpha * next_logp
        target = rewards + (1 - done) * model.args.sac_gamma * next_q
    current = q(model.critic, obs, actions)
    critic_loss = 0.5 * sum((weights * (c - target) ** 2).mean() for c in current)
    new_a, logp = policy(obs)
    actor_loss = (alpha * logp - torch.min(*q(model.critic, obs, new_a))).mean()
    alpha_loss = -(model.log_alpha * (logp + model.target_entropy).detach()).mean()
    return critic_loss, actor_loss, alpha_loss


def test_gradients_match_reference_and_actor_loss_stays_out_of_the_critics():
    model = make_model("--init_alpha", "0.3")
    batch = random_batch(32, seed=1, weights=np.random.default_rng(2).uniform(0.1, 2.0, 32))
    torch.manual_seed(11)
    gradients, stats = model.step(batch)
    assert set(gradients) == {n for n, _ in model.named_parameters()}
    assert isinstance(stats["td_errors"], np.ndarray) and stats["td_errors"].shape == (32,)

    critic_loss, actor_loss, alpha_loss = reference_losses(model, batch, seed=11)
    assert stats["critic_loss"] == pytest.approx(critic_loss.item(), rel=1e-5)
    assert stats["actor_loss"] == pytest.approx(actor_loss.item(), rel=1e-5, abs=1e-6)
    assert stats["alpha_loss"] == pytest.approx(alpha_loss.item(), rel=1e-5, abs=1e-6)
    critics, actor = critic_params(model), actor_params(model)
    expected = dict(zip(critics, torch.autograd.grad(critic_loss, list(critics.values()),
                                                     retain_graph=True)))
    expected.update(zip(actor, torch.autograd.grad(actor_loss, list(actor.values()),
                                                   retain_graph=True)))
    expected["log_alpha"], = torch.autograd.grad(alpha_loss, [model.log_alpha],
                                                 retain_graph=True)
    for name, grad in expected.items():
        np.testing.assert_allclose(gradients[name], grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)

    # The check is sensitive: letting the actor loss reach the critics changes their gradients.
    leaked = torch.autograd.grad(critic_loss + actor_loss, list(critics.values()))
    assert any(not np.allclose(gradients[n], g.numpy(), atol=1e-6)
               for n, g in zip(critics, leaked))


def test_importance_weights_scale_the_critic_loss_only():
    model = make_model()
    ones, twos = random_batch(16, seed=4), random_batch(16, seed=4, weights=np.full(16, 2.0))
    torch.manual_seed(5)
    g1, s1 = model.step(ones)
    torch.manual_seed(5)
    g2, s2 = model.step(twos)
    assert s2["critic_loss"] == pytest.approx(2 * s1["critic_loss"], rel=1e-6)
    for name in critic_params(model):
        np.testing.assert_allclose(g2[name], 2 * g1[name], rtol=1e-5, atol=1e-7, err_msg=name)
    for name in list(actor_params(model)) + ["log_alpha"]:
        np.testing.assert_allclose(g2[name], g1[name], rtol=1e-6, atol=1e-8, err_msg=name)
    np.testing.assert_allclose(s2["td_errors"], s1["td_errors"], rtol=1e-6)


@pytest.mark.parametrize("target_entropy, direction", [("5.0", +1), ("-50", -1)])
def test_alpha_moves_toward_the_target_entropy(target_entropy, direction):
    model = make_model("--target_entropy", target_entropy, "--alpha_lr", "0.01")
    batch = random_batch(64)
    gradients, stats = model.step(batch)
    # d/dlog_alpha of -(log_alpha * (log_prob + target)).mean() = entropy - target
    assert gradients["log_alpha"].item() == pytest.approx(
        stats["entropy"] - float(target_entropy), rel=1e-5)
    assert np.sign(float(target_entropy) - stats["entropy"]) == direction
    optimizer = model.configure_optimizer()
    assert [g["lr"] for g in optimizer.param_groups] == [3e-4, 3e-4, 0.01]
    assert model.learning_rate(0.5) is None and model.max_grad_norm() is None
    for name, p in model.named_parameters():
        p.grad = torch.as_tensor(gradients[name])
    alpha_before = model.alpha.item()
    optimizer.step()
    assert np.sign(model.alpha.item() - alpha_before) == direction


# -- target critics --------------------------------------------------------------------------------
def test_after_update_is_polyak_averaging():
    model = make_model("--tau", "0.05")
    with torch.no_grad():
        for b in model.critic_target.buffers():
            b.copy_(torch.randn_like(b))
    online = {n[len("critic."):]: p.detach().clone() for n, p in critic_params(model).items()}
    old = {n: b.clone() for n, b in model.critic_target.named_buffers()}
    assert set(online) == set(old)
    model.after_update()
    for name, target in model.critic_target.named_buffers():
        np.testing.assert_allclose(target.numpy(), (0.05 * online[name] + 0.95 * old[name]).numpy(),
                                   rtol=1e-6, atol=1e-7, err_msg=name)
        assert not torch.equal(target, old[name])
    for name, p in critic_params(model).items():  # the online critics are untouched
        assert torch.equal(p.detach(), online[name[len("critic."):]])


def test_targets_travel_with_the_weights_but_are_not_parameters():
    model = make_model(seed=0)
    parameter_names = {n for n, _ in model.named_parameters()}
    assert not any(n.startswith("critic_target") for n in parameter_names)
    assert "log_alpha" in parameter_names
    weights = model.get_weights()
    for name in critic_params(model):
        assert "critic_target." + name[len("critic."):] in weights
    assert "action_scale" not in weights  # bounds come from the env, not the weights
    # the target starts as a copy of the online critics
    for name in critic_params(model):
        np.testing.assert_array_equal(weights[name],
                                      weights["critic_target." + name[len("critic."):]])

    with torch.no_grad():
        for b in model.critic_target.buffers():
            b.add_(1.0)
    weights = model.get_weights()
    other = make_model(seed=1)
    other.set_weights(weights)
    for name, value in other.get_weights().items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    optimizer = model.configure_optimizer()
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for p in model.parameters()}
    assert not any(id(b) in in_optimizer for b in model.critic_target.buffers())


# -- the agent ------------------------------------------------------------------------------------
def fragment():
    """T=3 steps of E=2 envs, 1-D observations 10 * t + e. Env 1 terminates at t=0 (the next
    stored observation, 11, is its reset observation); env 0 is truncated at t=1 with final
    observation 99 (the stored 20 is its reset observation)."""
    T, E = 3, 2
    obs = np.array([[[10.0 * t + e] for e in range(E)] for t in range(T)], np.float32)
    terminated = np.zeros((T, E), bool)
    truncated = np.zeros((T, E), bool)
    terminated[0, 1] = True
    truncated[1, 0] = True
    return Trajectory(
        observations=obs,
        actions=np.arange(T * E * 2, dtype=np.float32).reshape(T, E, 2) / 10,
        rewards=np.arange(T * E, dtype=np.float32).reshape(T, E),
        terminated=terminated, truncated=truncated, log_probs=None, values=None,
        last_observations=np.array([[30.0], [31.0]], np.float32),
        truncated_index=np.array([[1, 0]], np.int64),
        truncated_observations=np.array([[99.0]], np.float32))


def test_transitions_of_a_fragment():
    t = SACAgent.transitions(fragment())
    assert isinstance(t, Transitions)
    # row-major (t, e): (0,0) (0,1) (1,0) (1,1) (2,0) (2,1)
    np.testing.assert_array_equal(t.observations[:, 0], [0, 1, 10, 11, 20, 21])
    np.testing.assert_array_equal(t.next_observations[:, 0], [10, 11, 99, 21, 30, 31])
    np.testing.assert_array_equal(t.terminated, [0, 1, 0, 0, 0, 0])  # truncation: 0
    np.testing.assert_array_equal(t.rewards, [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(t.actions, np.arange(12, dtype=np.float32).reshape(6, 2) / 10)
    assert t.terminated.dtype == np.float32 and t.rewards.dtype == np.float32
    assert t.observations.dtype == np.float32 and t.next_observations.shape == (6, 1)


def test_agent_send_take_and_fetch_grads():
    from agents import AGENT_REGISTRY
    assert AGENT_REGISTRY.get("sac_agent") is SACAgent
    model = make_model(seed=0)
    agent = SACAgent(model.args, model, seed=0)
    trajectory = fragment()
    trajectory.observations = np.repeat(trajectory.observations, 3, -1)  # 3-D observations
    trajectory.last_observations = np.repeat(trajectory.last_observations, 3, -1)
    trajectory.truncated_observations = np.repeat(trajectory.truncated_observations, 3, -1)
    assert agent.send_trajectory(trajectory) == {"transitions": 6}
    block = agent.take_transitions()
    assert agent.pending is None and agent.take_transitions() is None
    assert agent.priorities(block).shape == (6,)

    learner_side = make_model(seed=5)
    # weights as a learner hands them out: with their version (core/types.py)
    from core.types import WEIGHTS_VERSION_KEY
    weights = {**learner_side.get_weights(), WEIGHTS_VERSION_KEY: np.asarray(3)}
    batch = random_batch(8)
    with pytest.raises(ValueError, match="weights_version"):
        agent.fetch_grads(weights, batch)
    result = agent.fetch_grads(weights, batch, 3)
    assert result.weights_version == 3 and result.num_samples == 8
    for name, value in model.get_weights().items():
        np.testing.assert_array_equal(value, weights[name])
    torch.manual_seed(9)
    result = agent.fetch_grads(None, batch)  # keeps version 3
    torch.manual_seed(9)
    expected, _ = learner_side.step(batch)
    assert result.weights_version == 3
    for name, grad in expected.items():
        np.testing.assert_allclose(result.gradients[name], grad, rtol=1e-6, atol=1e-8)


def test_bf16_precision_changes_only_the_arithmetic_of_the_update():
    """--sac_precision bf16 computes the same gradients to bfloat16 accuracy (not bit-equal:
    the products really ran in bfloat16), and leaves weights and gradients in float32."""
    fp32 = make_model("--sac_hidden_sizes", "64,64")
    bf16 = make_model("--sac_hidden_sizes", "64,64", "--sac_precision", "bf16")
    bf16.set_weights(fp32.get_weights())
    batch = random_batch(256)
    torch.manual_seed(1)
    grads32, stats32 = fp32.step(batch)
    torch.manual_seed(1)  # the same noise draws
    grads16, stats16 = bf16.step(batch)
    assert set(grads16) == set(grads32)
    differs = False
    for name, g32 in grads32.items():
        g16 = grads16[name]
        assert g16.dtype == np.float32
        # ~0.1-3% relative error measured (64x64 nets, batch 256); 10% is the margin.
        assert np.linalg.norm(g16 - g32) <= 0.1 * np.linalg.norm(g32) + 1e-8, name
        differs |= not np.array_equal(g16, g32)
    assert differs, "bf16 gave bit-identical gradients: autocast did not run"
    assert abs(stats16["critic_loss"] - stats32["critic_loss"]) <= 0.05 * abs(stats32["critic_loss"])
    assert all(p.dtype == torch.float32 for p in bf16.parameters())


@pytest.mark.parametrize("faster", ["fp32", "bf16"])
def test_auto_precision_where_bf16_is_native_keeps_what_the_first_update_measures(
        monkeypatch, capsys, faster):
    """--sac_precision auto on hardware with bf16 units times the first update in both
    precisions (core/distributed/devices.py time_precisions) and keeps the faster: once per
    device, both figures on stderr and in precision_timings; the update then runs in it."""
    import core.distributed.devices as sac_module  # TimedPrecision (models/base.py) asks it
    calls = []

    def fake_time(update, device, repeats=10, margin=0.05):
        calls.append(str(device))
        with torch.random.fork_rng():  # as the real one: draws nothing the run would see
            update()  # the probe's update, on a copy
        return faster, {"fp32": 2.0, "bf16": 1.0 if faster == "bf16" else 3.0}
    monkeypatch.setattr(sac_module, "resolve_precision", lambda requested, device_type="cpu":
                        "bf16" if requested == "auto" else requested)
    monkeypatch.setattr(sac_module, "time_precisions", fake_time)
    auto = make_model("--sac_hidden_sizes", "16,16", "--sac_precision", "auto")
    plain = make_model("--sac_hidden_sizes", "16,16", "--sac_precision", faster)
    plain.set_weights(auto.get_weights())
    batch = random_batch(64)
    for _ in range(2):
        torch.manual_seed(3)
        got, _ = auto.step(batch)
        torch.manual_seed(3)
        expected, _ = plain.step(batch)
        for name, grad in expected.items():  # the same arithmetic as the explicit precision
            np.testing.assert_array_equal(got[name], grad, err_msg=name)
    assert calls == ["cpu"] and auto.update_precision("cpu") == faster
    assert auto.precision_timings == {"device": "cpu", "chosen": faster, "fp32_ms": 2.0,
                                      "bf16_ms": 1.0 if faster == "bf16" else 3.0}
    err = capsys.readouterr().err
    assert err.count("--sac_precision auto on cpu: " + faster) == 1


def test_measuring_the_precision_leaves_the_update_as_an_explicit_choice_computes_it(
        monkeypatch):
    """The real timing (on a copy of the model, the random generators restored): the first
    update's gradients are those of a model told the chosen precision outright."""
    import core.distributed.devices as sac_module  # TimedPrecision (models/base.py) asks it
    monkeypatch.setattr(sac_module, "resolve_precision", lambda requested, device_type="cpu":
                        "bf16" if requested == "auto" else requested)
    auto = make_model("--sac_hidden_sizes", "16,16", "--sac_precision", "auto")
    weights = auto.get_weights()
    batch = random_batch(64)
    torch.manual_seed(3)
    got, _ = auto.step(batch)
    chosen = auto.precision_timings["chosen"]
    plain = make_model("--sac_hidden_sizes", "16,16", "--sac_precision", chosen)
    plain.set_weights(weights)
    torch.manual_seed(3)
    expected, _ = plain.step(batch)
    for name, grad in expected.items():
        np.testing.assert_array_equal(got[name], grad, err_msg=name)
    assert auto.get_weights().keys() == weights.keys()


def test_linear_lr_schedule_scales_every_group_and_constant_keeps_them():
    from core.learning.learner import Learner
    model = make_model("--sac_lr_schedule", "linear", "--actor_lr", "1e-3", "--critic_lr", "2e-3",
                       "--alpha_lr", "4e-3")
    learner = Learner(model)
    learner.apply(model.step(random_batch(32))[0], progress=0.25)
    lrs = {g["name"]: g["lr"] for g in learner.optimizer.param_groups}
    assert lrs == pytest.approx({"critic": 1.5e-3, "actor": 0.75e-3, "alpha": 3e-3})
    assert model.learning_rate(1.5) == {"critic": 0.0, "actor": 0.0, "alpha": 0.0}
    assert make_model().learning_rate(0.9) is None  # constant: the configured rates stay
