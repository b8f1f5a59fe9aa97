"""The offline-RL models (issue "Learning from data"): bc, iql, cql and cql_discrete against
values computed by hand on tiny batches (networks without hidden layers, their weights set to
constants, so that every number below is a line of arithmetic): BC's losses, IQL's expectile
value loss, critic target, clipped advantage weights and actor loss, CQL's conservative
penalty (continuous with its sampled actions fixed, discrete with a mask) and its Lagrange
multiplier; then the contract: spaces accepted and refused, actions in bounds with masks
obeyed, exports that act as the models do, weights that travel, and losses that fall."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch.distributions import Categorical, Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from core.errors import ConfigError
from core.spaces import layout_of
from core.learning.replay_buffer import ReplayBatch, Transitions
from models import MODEL_REGISTRY
from models.bc import BCModel
from models.cql import CQLModel
from models.cql_discrete import DiscreteCQLModel
from models.iql import IQLModel
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit

MODELS = {"bc": BCModel, "iql": IQLModel, "cql": CQLModel, "cql_discrete": DiscreteCQLModel}
OBS1 = spaces.Box(-5.0, 5.0, shape=(1,), dtype=np.float32)
OBS3 = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
# 1-D actions in [-2, 4]: scale 3, bias 1, so a rescaling mistake shows
BOX1 = spaces.Box(np.array([-2.0], np.float32), np.array([4.0], np.float32))
BOX2 = spaces.Box(np.array([-2.0, -0.5], np.float32), np.array([2.0, 1.5], np.float32))
DIS = spaces.Discrete(3)
MASKED_OBS = spaces.Dict({"obs": OBS1, "action_mask": spaces.MultiBinary(3)})


def config(name, *flags):
    """The model's own config, as a run builds it (core/config.py: its flags and the
    run-wide ones, nothing of the agent's)."""
    return run_spec(parse_args(["--config", "none", "--num_workers", "0", "--model_name", name,
                                *flags])).model


def make(name, action_space, *flags, obs=OBS1, seed=0, hidden="none"):
    torch.manual_seed(seed)
    prefix = {"bc": "--bc", "iql": "--iql", "cql": "--sac", "cql_discrete": "--dqn"}[name]
    return MODELS[name](config(name, f"{prefix}_hidden_sizes", hidden, *flags), obs,
                        action_space)


def batch_of(obs, actions, rewards, next_obs, terminated, discounts=None, weights=None):
    def arr(x):
        return np.asarray(x, np.float32)
    n = len(rewards)
    transitions = Transitions(
        observations=obs if isinstance(obs, dict) else arr(obs).reshape(n, -1),
        actions=np.asarray(actions), rewards=arr(rewards),
        next_observations=next_obs if isinstance(next_obs, dict) else arr(next_obs).reshape(n, -1),
        terminated=arr(terminated), discounts=None if discounts is None else arr(discounts))
    return ReplayBatch(transitions, np.arange(n), np.ones(n, np.int64),
                       arr(np.ones(n) if weights is None else weights))


def set_linear(layer, weight, bias):
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32).reshape(layer.weight.shape))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float32).reshape(layer.bias.shape))


def scalars_of(model, batch):
    loss, scalars, td_errors = model.update_loss(*model.update_inputs(batch))
    return float(loss.detach()), {k: float(v) for k, v in scalars.items()}, td_errors


def random_batch(n, action_space, obs_dim=3, seed=0, discounts=None):
    rng = np.random.default_rng(seed)
    if isinstance(action_space, spaces.Discrete):
        actions = rng.integers(0, action_space.n, n)
    else:
        actions = rng.uniform(action_space.low, action_space.high,
                              (n, *action_space.shape)).astype(np.float32)
    return batch_of(rng.uniform(-2, 2, (n, obs_dim)), actions, rng.normal(size=n),
                    rng.uniform(-2, 2, (n, obs_dim)), rng.uniform(size=n) < 0.3, discounts)


def train(model, batch, updates, progress=0.0):
    """``updates`` steps of the model's own optimizer on one batch: the first and last
    statistics."""
    optimizer = model.configure_optimizer()
    first = None
    for _ in range(updates):
        _, stats = model.step(batch, progress)
        first = first or stats
        optimizer.step()
        getattr(model, "after_update", lambda: None)()
    return first, stats


# -- flags, registry, spaces ----------------------------------------------------------------------
def test_flags_default_to_d3rlpys():
    bc = config("bc")
    assert (bc.bc_hidden_sizes, bc.bc_lr, bc.bc_policy, bc.bc_beta) == (
        [256, 256], 1e-3, "deterministic", 0.5)
    iql = config("iql")
    assert (iql.iql_actor_lr, iql.iql_critic_lr, iql.iql_value_lr) == (3e-4, 3e-4, 3e-4)
    assert (iql.iql_expectile, iql.iql_beta, iql.iql_max_weight) == (0.7, 3.0, 100.0)
    assert (iql.iql_tau, iql.iql_gamma, iql.iql_actor_lr_schedule) == (0.005, 0.99, "cosine")
    cql = config("cql")
    assert (cql.actor_lr, cql.critic_lr, cql.alpha_lr, cql.tau, cql.sac_gamma) == (
        1e-4, 3e-4, 1e-4, 0.005, 0.99)
    assert (cql.cql_alpha, cql.cql_n_actions, cql.cql_temp, cql.cql_backup) == (
        5.0, 10, 1.0, "mean")
    assert (cql.cql_lagrange_lr, cql.cql_init_lagrange, cql.cql_target_gap) == (1e-4, 1.0, 10.0)
    assert parse_args(["--config", "none", "--model_name", "sac"]).actor_lr == 3e-4  # SAC's own
    discrete = config("cql_discrete")
    assert (discrete.dqn_lr, discrete.target_update_interval, discrete.dqn_hidden_sizes) == (
        6.25e-5, 8000, [256, 256])
    assert (discrete.cql_alpha, discrete.cql_gamma, discrete.double_q) == (1.0, 0.99, True)
    assert not hasattr(discrete, "gamma")  # dqn_agent's flag: not the model's


def test_registered_for_the_replay_loop_with_an_off_policy_agent():
    from agents import AGENT_REGISTRY
    from core.algos.agents import OffPolicyAgent
    for name, cls in MODELS.items():
        assert MODEL_REGISTRY.get(name) is cls and cls.trainer == "replay"
        cls.check_contract(name)
        assert issubclass(AGENT_REGISTRY.get(cls.default_agent), OffPolicyAgent)
        assert "update_graph_safe" in vars(cls)  # declared by the class itself


def test_spaces_taken_and_refused():
    for cls in (BCModel, IQLModel):
        cls.check_spaces(OBS3, BOX2)
        cls.check_spaces(MASKED_OBS, DIS)
        with pytest.raises(ConfigError, match="Box or Discrete.*MultiDiscrete"):
            cls.check_spaces(OBS3, spaces.MultiDiscrete([2, 3]))
        with pytest.raises(ConfigError, match="finite"):
            cls.check_spaces(OBS3, spaces.Box(-np.inf, np.inf, (2,)))
    CQLModel.check_spaces(OBS3, BOX2)
    with pytest.raises(ConfigError, match="--model_name cql_discrete"):
        CQLModel.check_spaces(OBS3, DIS)
    DiscreteCQLModel.check_spaces(MASKED_OBS, DIS)
    with pytest.raises(ConfigError, match="--model_name cql "):
        DiscreteCQLModel.check_spaces(OBS3, BOX2)


# -- BC -----------------------------------------------------------------------------------------
X = np.array([0.5, -1.0, 2.0])
X_NEXT = np.array([1.0, 0.0, -1.5])
REWARDS = np.array([1.0, -0.5, 2.0])
TERMINATED = np.array([0.0, 1.0, 0.0])
# env actions in [-2, 4] and the same rescaled to [-1, 1]: (a - 1) / 3
ENV_ACTIONS = np.array([1.0, 4.0, -2.0])
UNIT_ACTIONS = (ENV_ACTIONS - 1.0) / 3.0


def test_bc_deterministic_loss_is_the_mse_to_the_rescaled_action():
    model = make("bc", BOX1)
    set_linear(model.actor.head, [0.7], [0.1])
    loss, stats, td = scalars_of(model, batch_of(X, ENV_ACTIONS[:, None], REWARDS, X_NEXT,
                                                 TERMINATED, weights=[1.0, 2.0, 0.5]))
    mse = (np.tanh(0.7 * X + 0.1) - UNIT_ACTIONS) ** 2
    assert loss == pytest.approx(np.mean([1.0, 2.0, 0.5] * mse), rel=1e-5)
    assert stats["bc_loss"] == pytest.approx(loss) and td is None
    assert stats["bc_error"] == pytest.approx(mse.mean(), rel=1e-5)


def test_bc_gaussian_loss_is_the_tanh_gaussians_negative_log_likelihood():
    model = make("bc", BOX1, "--bc_policy", "gaussian")
    set_linear(model.actor.head, [0.7], [0.1])
    set_linear(model.actor.log_std_head, [3.0], [-1.0])  # 2.5, -4, 5: the ends clamped to [-5, 2]
    loss, _, _ = scalars_of(model, batch_of(X, ENV_ACTIONS[:, None], REWARDS, X_NEXT,
                                            TERMINATED))
    mu = torch.tensor(0.7 * X + 0.1, dtype=torch.float32)
    std = torch.tensor(np.clip(3.0 * X - 1.0, -5.0, 2.0), dtype=torch.float32).exp()
    # the two ends clipped (float32 as the model: atanh is steep there)
    actions = torch.tensor(UNIT_ACTIONS, dtype=torch.float32).clamp(-1 + 1e-5, 1 - 1e-5)
    log_prob = TransformedDistribution(Normal(mu, std), TanhTransform()).log_prob(actions)
    assert loss == pytest.approx(float(-log_prob.mean()), rel=1e-4)


def test_bc_discrete_loss_is_cross_entropy_over_the_allowed_actions_plus_the_log_prob_penalty():
    """d3rlpy DiscreteBC's penalty squares the normalized log-probabilities (its
    Categorical's .logits), here over the allowed actions."""
    model = make("bc", DIS, "--bc_beta", "0.25", obs=MASKED_OBS)
    weight, bias = np.array([1.0, -2.0, 0.5]), np.array([0.0, 0.3, -0.2])
    set_linear(model.actor.head, weight[:, None], bias)
    mask = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1]], np.int8)
    actions = np.array([0, 2, 1])
    obs = {"obs": X[:, None].astype(np.float32), "action_mask": mask}
    loss, stats, _ = scalars_of(model, batch_of(obs, actions, REWARDS, obs, TERMINATED))
    logits = X[:, None] * weight + bias
    expected, wrong = [], 0
    for row in range(3):
        allowed = logits[row][mask[row] == 1]
        log_z = math.log(np.exp(allowed).sum())
        log_probs = allowed - log_z
        expected.append(-(logits[row, actions[row]] - log_z) + 0.25 * np.mean(log_probs ** 2))
        best = np.where(mask[row] == 1, logits[row], -np.inf).argmax()
        wrong += best != actions[row]
    assert loss == pytest.approx(np.mean(expected), rel=1e-5)
    assert stats["bc_error"] == pytest.approx(wrong / 3)


def test_bc_discrete_penalty_is_d3rlpys_expression_without_a_mask():
    """d3rlpy 2.8.1 (models/torch/imitators.py): penalty = (dist.logits ** 2).mean() with
    dist = Categorical(logits=raw outputs), whose .logits are log_softmax(raw): written here
    with torch.distributions, so the check needs no d3rlpy."""
    model = make("bc", DIS, "--bc_beta", "0.5", obs=OBS1)
    set_linear(model.actor.head, [[2.0], [-1.0], [0.5]], [1.0, 0.0, 3.0])
    actions = np.array([2, 0, 1])
    loss, _, _ = scalars_of(model, batch_of(X[:, None], actions, REWARDS, X[:, None],
                                            TERMINATED))
    raw = torch.tensor(X[:, None] * np.array([2.0, -1.0, 0.5]) + np.array([1.0, 0.0, 3.0]),
                       dtype=torch.float32)
    dist = Categorical(logits=raw)
    expected = (F.nll_loss(F.log_softmax(dist.logits, dim=1), torch.tensor(actions))
                + 0.5 * (dist.logits ** 2).mean())
    assert loss == pytest.approx(float(expected), rel=1e-5)
    assert loss != pytest.approx(float(F.cross_entropy(raw, torch.tensor(actions))
                                       + 0.5 * (raw ** 2).mean()), rel=1e-3)


# -- IQL ----------------------------------------------------------------------------------------
def constant_iql(*flags):
    """IQL on 1-D observations and actions, every network one linear layer of known weights:
    Q1 = x + 2a + 0.5, Q2 = 0.5x - a, targets 1.5x + a and x + a + 0.2, V = 2x - 0.5,
    the actor's mean tanh(0.7x + 0.1), its std 0.5 (a in [-1, 1] units)."""
    model = make("iql", BOX1, *flags)
    set_linear(model.critic.q1[0], [1.0, 2.0], [0.5])
    set_linear(model.critic.q2[0], [0.5, -1.0], [0.0])
    with torch.no_grad():
        model.critic_target.q1[0].weight.copy_(torch.tensor([[1.5, 1.0]]))
        model.critic_target.q1[0].bias.fill_(0.0)
        model.critic_target.q2[0].weight.copy_(torch.tensor([[1.0, 1.0]]))
        model.critic_target.q2[0].bias.fill_(0.2)
        model.actor.log_std.fill_(math.log(0.5))
    set_linear(model.value.mlp[0], [2.0], [-0.5])
    set_linear(model.actor.head, [0.7], [0.1])
    return model


def iql_by_hand(x, a, r, x_next, done, gamma=0.99, discounts=None, expectile=0.7, beta=3.0,
                max_weight=100.0):
    q_t = np.minimum(1.5 * x + a, x + a + 0.2)
    v = 2 * x - 0.5
    diff = q_t - v
    value_loss = np.mean(np.where(diff > 0, expectile, 1 - expectile) * diff ** 2)
    discount = gamma if discounts is None else np.asarray(discounts)
    y = r + discount * (1 - done) * (2 * x_next - 0.5)
    q1, q2 = x + 2 * a + 0.5, 0.5 * x - a
    critic_loss = np.mean((q1 - y) ** 2 + (q2 - y) ** 2)
    weight = np.minimum(np.exp(beta * diff), max_weight)
    clipped = np.clip(a, -1 + 1e-5, 1 - 1e-5)
    mean = np.tanh(0.7 * x + 0.1)
    log_prob = -0.5 * ((clipped - mean) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    return dict(critic_loss=critic_loss, value_loss=value_loss,
                actor_loss=-np.mean(weight * log_prob), q_mean=q1.mean(), v_mean=v.mean(),
                adv_mean=diff.mean(), weight_mean=weight.mean()), (q1, q2, y, v, q_t, diff)


def test_iql_losses_targets_and_clipped_weights_by_hand():
    model = constant_iql()
    x = np.array([0.5, -1.0, 2.0])
    a_env = np.array([1.0, 4.0, -2.0])
    a = (a_env - 1.0) / 3.0                       # 0, 1, -1
    expected, (q1, *_, advantages) = iql_by_hand(x, a, REWARDS, X_NEXT, TERMINATED)
    # the second row's advantage is 2: exp(6) = 403, clipped at 100
    assert advantages[1] == pytest.approx(2.0)
    assert expected["weight_mean"] == pytest.approx(
        (np.exp(3 * advantages[0]) + 100.0 + np.exp(3 * advantages[2])) / 3)
    loss, stats, td = scalars_of(model, batch_of(x, a_env[:, None], REWARDS, X_NEXT,
                                                 TERMINATED))
    for name, value in expected.items():
        assert stats[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert loss == pytest.approx(expected["critic_loss"] + expected["value_loss"]
                                 + expected["actor_loss"], rel=1e-5)
    y = REWARDS + 0.99 * (1 - TERMINATED) * (2 * X_NEXT - 0.5)
    np.testing.assert_allclose(td.numpy(), np.abs(q1 - y), rtol=1e-5)
    np.testing.assert_allclose(model.td_errors(batch_of(x, a_env[:, None], REWARDS, X_NEXT,
                                                        TERMINATED)), np.abs(q1 - y), rtol=1e-5)


def test_iql_expectile_and_weight_flags_and_the_batchs_own_discounts():
    model = constant_iql("--iql_expectile", "0.9", "--iql_beta", "0.5", "--iql_max_weight",
                         "1.5")
    x, a = np.array([0.5, -1.0, 2.0]), np.array([0.0, 1.0, -1.0])
    discounts = [0.5, 0.25, 0.125]
    expected, _ = iql_by_hand(x, a, REWARDS, X_NEXT, TERMINATED, discounts=discounts,
                              expectile=0.9, beta=0.5, max_weight=1.5)
    _, stats, _ = scalars_of(model, batch_of(x, (3 * a + 1)[:, None], REWARDS, X_NEXT,
                                             TERMINATED, discounts=discounts))
    for name, value in expected.items():
        assert stats[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def test_iql_each_network_gets_only_its_own_losss_gradient():
    """One backward pass of the sum: the critics' gradient is the critic loss's alone, V's the
    value loss's (no actor loss through the weights), the target critics get none."""
    model = constant_iql()
    x, a = np.array([0.5, -1.0, 2.0]), np.array([0.0, 1.0, -1.0])
    gradients, _ = model.step(batch_of(x, (3 * a + 1)[:, None], REWARDS, X_NEXT, TERMINATED))
    _, (q1, q2, y, v, q_t, diff) = iql_by_hand(x, a, REWARDS, X_NEXT, TERMINATED)
    inputs = np.stack([x, a], 1)
    np.testing.assert_allclose(gradients["critic.q1.0.weight"][0],
                               (2 * (q1 - y)[:, None] * inputs).mean(0), rtol=1e-5)
    np.testing.assert_allclose(gradients["critic.q2.0.bias"], [np.mean(2 * (q2 - y))],
                               rtol=1e-5)
    weights = np.where(diff > 0, 0.7, 0.3)
    np.testing.assert_allclose(gradients["value.mlp.0.weight"][0],
                               [np.mean(weights * 2 * (v - q_t) * x)], rtol=1e-5)
    assert not any(name.startswith("critic_target") for name in gradients)
    assert {name.split(".")[0] for name in gradients} == {"critic", "value", "actor"}


def test_iql_discrete_losses_by_hand_with_a_mask():
    model = make("iql", DIS, obs=MASKED_OBS)
    nets = {"q1": ([1.0, -1.0, 0.5], [0.0, 0.2, 0.1]), "q2": ([0.5, 0.5, -1.0], [0.1, 0.0, 0.0])}
    targets = {"q1": ([1.2, -0.8, 0.4], [0.0, 0.1, 0.0]), "q2": ([0.4, 0.6, -0.9], [0.0, 0.0, 0.3])}
    for name, (w, b) in nets.items():
        set_linear(getattr(model.critic, name).q, np.array(w)[:, None], b)
    with torch.no_grad():
        for name, (w, b) in targets.items():
            layer = getattr(model.critic_target, name).q
            layer.weight.copy_(torch.tensor(w)[:, None])
            layer.bias.copy_(torch.tensor(b))
    set_linear(model.value.mlp[0], [2.0], [-0.5])
    set_linear(model.actor.head, np.array([1.0, -2.0, 0.5])[:, None], [0.0, 0.3, -0.2])
    mask = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1]], np.int8)
    actions = np.array([0, 2, 1])
    obs = {"obs": X[:, None].astype(np.float32), "action_mask": mask}
    following = {"obs": X_NEXT[:, None].astype(np.float32), "action_mask": mask}
    _, stats, _ = scalars_of(model, batch_of(obs, actions, REWARDS, following, TERMINATED))

    def linear(params, x):
        w, b = params
        return x[:, None] * np.array(w) + np.array(b)
    rows = np.arange(3)
    q_t = np.minimum(linear(targets["q1"], X), linear(targets["q2"], X))[rows, actions]
    v = 2 * X - 0.5
    diff = q_t - v
    y = REWARDS + 0.99 * (1 - TERMINATED) * (2 * X_NEXT - 0.5)
    q1, q2 = linear(nets["q1"], X)[rows, actions], linear(nets["q2"], X)[rows, actions]
    logits = np.where(mask == 1, linear(([1.0, -2.0, 0.5], [0.0, 0.3, -0.2]), X), -np.inf)
    log_pi = logits[rows, actions] - np.log(np.exp(logits).sum(1))
    weight = np.minimum(np.exp(3.0 * diff), 100.0)
    assert stats["critic_loss"] == pytest.approx(np.mean((q1 - y) ** 2 + (q2 - y) ** 2), rel=1e-5)
    assert stats["value_loss"] == pytest.approx(
        np.mean(np.where(diff > 0, 0.7, 0.3) * diff ** 2), rel=1e-5)
    assert stats["actor_loss"] == pytest.approx(-np.mean(weight * log_pi), rel=1e-5)


def test_iql_actor_lr_decays_by_a_cosine_and_constant_keeps_every_rate():
    model = make("iql", BOX1)
    names = {group["name"] for group in model.configure_optimizer().param_groups}
    rates = [model.learning_rate(p) for p in (0.0, 0.5, 1.0, 2.0)]
    assert {name for rate in rates for name in rate} == names == {"critic", "value", "actor"}
    assert [r["actor"] for r in rates] == pytest.approx([3e-4, 1.5e-4, 0.0, 0.0], abs=1e-12)
    assert {r["critic"] for r in rates} == {r["value"] for r in rates} == {3e-4}
    assert make("iql", BOX1, "--iql_actor_lr_schedule", "constant").learning_rate(0.5) is None


def test_iql_after_update_is_polyak_averaging_of_the_critics_only():
    model = make("iql", BOX1, "--iql_tau", "0.25")
    online = model.critic.q1[0].weight.detach().clone()
    target = model.critic_target.q1[0].weight.detach().clone()
    with torch.no_grad():
        model.critic.q1[0].weight.add_(1.0)
    model.after_update()
    torch.testing.assert_close(model.critic_target.q1[0].weight,
                               0.25 * (online + 1.0) + 0.75 * target)
    assert not any("critic_target" in name for name, _ in model.named_parameters())


# -- CQL ----------------------------------------------------------------------------------------
def constant_cql(*flags):
    """CQL on 1-D observations and actions: Q1 = x + 2a + 0.5, Q2 = 0.5x - a, targets
    1.5x + a and x + a + 0.2, the actor's mean 0.7x + 0.1 (pre-tanh), log std -1."""
    model = make("cql", BOX1, "--cql_n_actions", "2", *flags)
    set_linear(model.critic.q1[0], [1.0, 2.0], [0.5])
    set_linear(model.critic.q2[0], [0.5, -1.0], [0.0])
    with torch.no_grad():
        model.critic_target.q1[0].weight.copy_(torch.tensor([[1.5, 1.0]]))
        model.critic_target.q1[0].bias.fill_(0.0)
        model.critic_target.q2[0].weight.copy_(torch.tensor([[1.0, 1.0]]))
        model.critic_target.q2[0].bias.fill_(0.2)
    set_linear(model.actor.mu, [0.7], [0.1])
    set_linear(model.actor.log_std, [0.0], [-1.0])
    return model


# the 3N = 6 actions of each row's logsumexp and their log-densities, fixed for the test
SAMPLED = np.array([[0.2, -0.9, 0.5, 0.1, -0.3, 0.8],
                    [-0.5, 0.4, 0.0, 0.9, -0.1, 0.3],
                    [0.7, -0.2, -0.6, 0.2, 0.6, -0.8]])
DENSITY = np.array([[-0.69, -0.69, 0.3, -0.2, 0.5, 0.1],
                    [-0.69, -0.69, -1.0, 0.4, 0.2, -0.3],
                    [-0.69, -0.69, 0.0, 0.6, -0.4, 0.9]])


def fix_samples(model):
    model.cql_samples = lambda obs, next_obs: (
        torch.tensor(SAMPLED, dtype=torch.float32)[..., None],
        torch.tensor(DENSITY, dtype=torch.float32))


def test_cql_penalty_target_and_lagrange_gradient_by_hand():
    model = constant_cql("--cql_temp", "2.0", "--cql_alpha", "3.0", "--cql_target_gap", "0.5",
                         "--cql_init_lagrange", "2.0")
    fix_samples(model)
    a_env = np.array([1.0, 4.0, -2.0])
    a = (a_env - 1.0) / 3.0
    batch = batch_of(X, a_env[:, None], REWARDS, X_NEXT, TERMINATED)
    _, stats, _ = scalars_of(model, batch)

    # target (--cql_backup mean): the target critics' min at tanh(mean(s')), no entropy term
    next_a = np.tanh(0.7 * X_NEXT + 0.1)
    y = REWARDS + 0.99 * (1 - TERMINATED) * np.minimum(1.5 * X_NEXT + next_a,
                                                        X_NEXT + next_a + 0.2)
    q1, q2 = X + 2 * a + 0.5, 0.5 * X - a
    assert stats["critic_loss"] == pytest.approx(np.mean((q1 - y) ** 2 + (q2 - y) ** 2),
                                                 rel=1e-5)

    def lse(values):  # T * logsumexp(values / T), T = 2
        return 2.0 * np.log(np.exp(values / 2.0).sum(1))
    sampled_q1 = X[:, None] + 2 * SAMPLED + 0.5
    sampled_q2 = 0.5 * X[:, None] - SAMPLED
    gaps = np.array([lse(sampled_q1 - DENSITY).mean() - q1.mean(),
                     lse(sampled_q2 - DENSITY).mean() - q2.mean()])
    conservative = 3.0 * (gaps - 0.5)
    assert stats["cql_gap"] == pytest.approx(gaps.mean(), rel=1e-5)
    assert stats["cql_penalty"] == pytest.approx(2.0 * conservative.sum(), rel=1e-5)
    assert stats["cql_alpha"] == pytest.approx(2.0, rel=1e-6)
    # log alpha' gets -alpha' * mean(conservative): it grows while the gap exceeds the target
    gradients, _ = model.step(batch)
    assert gradients["log_lagrange"] == pytest.approx([-2.0 * conservative.mean()], rel=1e-5)


def test_cql_penalty_gradient_reaches_the_critics_only():
    """The sampled actions are detached: the actor's gradient is SAC's with or without the
    penalty, the critics' is not."""
    batch = random_batch(16, BOX1, obs_dim=1)
    grads = {}
    for weight in ("0", "5"):
        model = make("cql", BOX1, "--cql_alpha", weight, hidden="8")
        torch.manual_seed(1)
        grads[weight], _ = model.step(batch)
    for name in grads["0"]:
        if name.startswith("actor.") or name == "log_alpha":
            np.testing.assert_array_equal(grads["0"][name], grads["5"][name])
    assert not np.allclose(grads["0"]["critic.q1.0.weight"], grads["5"]["critic.q1.0.weight"])


def test_cql_samples_uniform_and_policy_actions_with_their_densities():
    model = make("cql", BOX2, "--cql_n_actions", "50", obs=OBS3, hidden="8")
    obs = torch.zeros(4, 3)
    next_obs = torch.ones(4, 3)
    with torch.no_grad():
        model.actor.log_std.bias.fill_(-25.0)  # clamped to -20: the draws are the means
        model.actor.log_std.weight.zero_()
    actions, log_density = model.cql_samples(obs, next_obs)
    assert actions.shape == (4, 150, 2) and log_density.shape == (4, 150)
    uniform = actions[:, :50]
    assert uniform.abs().max() <= 1 and uniform.std() > 0.4
    torch.testing.assert_close(log_density[:, :50], torch.full((4, 50), -2 * math.log(2)))
    with torch.no_grad():
        at_s, at_next = torch.tanh(model.actor(obs)[0]), torch.tanh(model.actor(next_obs)[0])
    torch.testing.assert_close(actions[:, 50:100], at_s[:, None].expand(4, 50, 2))
    torch.testing.assert_close(actions[:, 100:], at_next[:, None].expand(4, 50, 2))
    # and their log-probabilities are the tanh-Gaussian's
    model = make("cql", BOX2, "--cql_n_actions", "5", obs=OBS3, hidden="8")
    torch.manual_seed(3)
    actions, log_density = model.cql_samples(obs, next_obs)
    with torch.no_grad():
        mu, log_std = model.actor(next_obs)
    dist = TransformedDistribution(Normal(mu[:, None], log_std.exp()[:, None]), TanhTransform())
    torch.testing.assert_close(log_density[:, 10:], dist.log_prob(actions[:, 10:]).sum(-1),
                               rtol=1e-4, atol=1e-4)


def test_cql_backups():
    model = constant_cql()
    rewards, next_obs = torch.tensor(REWARDS).float(), torch.tensor(X_NEXT).float()[:, None]
    done = torch.tensor(TERMINATED).float()
    mean_target = model.critic_targets(rewards, next_obs, done)
    with torch.no_grad():
        model.actor.log_std.bias.fill_(-30.0)   # a drawn action is then the mean
    sample = make("cql", BOX1, "--cql_backup", "sample")
    sample.load_state_dict(model.state_dict())
    torch.testing.assert_close(sample.critic_targets(rewards, next_obs, done), mean_target)
    soft = make("cql", BOX1, "--cql_backup", "soft")
    soft.load_state_dict(model.state_dict())
    torch.manual_seed(0)
    ours = soft.critic_targets(rewards, next_obs, done)
    torch.manual_seed(0)
    from models.sac import SACModel
    torch.testing.assert_close(ours, SACModel.critic_targets(soft, rewards, next_obs, done))


def test_cql_fixed_lagrange_multiplier_is_a_buffer_and_the_groups_match_the_rates():
    learned = make("cql", BOX1, "--sac_lr_schedule", "linear")
    groups = {g["name"] for g in learned.configure_optimizer().param_groups}
    assert groups == {"critic", "actor", "alpha", "cql_alpha"} == set(learned.learning_rate(0.5))
    fixed = make("cql", BOX1, "--cql_lagrange_lr", "0", "--cql_init_lagrange", "3")
    assert "log_lagrange" not in dict(fixed.named_parameters())
    assert "log_lagrange" in fixed.state_dict() and float(fixed.lagrange) == pytest.approx(3.0)
    assert {g["name"] for g in fixed.configure_optimizer().param_groups} == {
        "critic", "actor", "alpha"}
    gradients, stats = fixed.step(random_batch(8, BOX1, obs_dim=1))
    assert "log_lagrange" not in gradients and stats["cql_alpha"] == pytest.approx(3.0)


def test_cql_discrete_penalty_over_the_allowed_actions_and_its_discounts_by_hand():
    def build(*flags):
        model = make("cql_discrete", DIS, "--cql_alpha", "0.5", *flags, obs=MASKED_OBS)
        set_linear(model.q_net.q, np.array([1.0, -1.0, 0.5])[:, None], [0.0, 0.2, 0.1])
        with torch.no_grad():
            model.q_target.q.weight.copy_(torch.tensor([[1.2], [-0.8], [0.4]]))
            model.q_target.q.bias.copy_(torch.tensor([0.0, 0.1, 0.3]))
        return model
    mask = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], np.int8)
    actions = np.array([0, 2, 2])
    obs = {"obs": X[:, None].astype(np.float32), "action_mask": mask}
    following = {"obs": X_NEXT[:, None].astype(np.float32), "action_mask": mask}

    def linear(w, b, x):
        return x[:, None] * np.array(w) + np.array(b)
    rows = np.arange(3)
    q_all = linear([1.0, -1.0, 0.5], [0.0, 0.2, 0.1], X)
    q = q_all[rows, actions]
    allowed = np.where(mask == 1, q_all, -np.inf)
    gap = np.mean(np.log(np.exp(allowed).sum(1)) - q)
    # double Q: the online network's best allowed action at s', valued by the target network
    best = np.where(mask == 1, linear([1.0, -1.0, 0.5], [0.0, 0.2, 0.1], X_NEXT), -np.inf).argmax(1)
    next_q = linear([1.2, -0.8, 0.4], [0.0, 0.1, 0.3], X_NEXT)[rows, best]

    def huber(d):
        return np.where(np.abs(d) < 1, 0.5 * d ** 2, np.abs(d) - 0.5)
    for flags, discounts, gamma in [(("--cql_gamma", "0.5"), None, 0.5),
                                    ((), [0.25, 0.25, 0.25], 0.25)]:
        model = build(*flags)
        loss, stats, _ = scalars_of(model, batch_of(obs, actions, REWARDS, following,
                                                    TERMINATED, discounts=discounts))
        y = REWARDS + gamma * (1 - TERMINATED) * next_q
        assert stats["q_loss"] == pytest.approx(np.mean(huber(q - y)), rel=1e-5)
        assert stats["cql_gap"] == pytest.approx(gap, rel=1e-5)
        assert stats["cql_penalty"] == pytest.approx(0.5 * gap, rel=1e-5)
        assert loss == pytest.approx(np.mean(huber(q - y)) + 0.5 * gap, rel=1e-5)


# -- acting, export, weights, learning ------------------------------------------------------------
CASES = [("bc", BOX2, ()), ("bc", BOX2, ("--bc_policy", "gaussian")), ("bc", DIS, ()),
         ("iql", BOX2, ()), ("iql", DIS, ()), ("cql", BOX2, ()), ("cql_discrete", DIS, ())]


def observations_for(space, rows=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (rows, 3)).astype(np.float32)
    if not isinstance(space, spaces.Dict):
        return x
    mask = (rng.uniform(size=(rows, 3)) < 0.5).astype(np.int8)
    mask[np.arange(rows), rng.integers(0, 3, rows)] = 1   # at least one allowed
    return {"obs": x, "action_mask": mask}


def export_inputs(obs, space):
    """An export module's positional inputs: one tensor per leaf in the layout's order."""
    if isinstance(obs, dict):
        return tuple(torch.as_tensor(obs[path]) for path in layout_of(space).leaves)
    return (torch.as_tensor(obs),)


@pytest.mark.parametrize("name, action_space, flags", CASES,
                         ids=[f"{c[0]}-{type(c[1]).__name__}{'-' + c[2][1] if c[2] else ''}"
                              for c in CASES])
def test_actions_in_bounds_masks_obeyed_and_export_acts_as_the_model(name, action_space, flags):
    discrete = isinstance(action_space, spaces.Discrete)
    obs_space = spaces.Dict({"obs": OBS3, "action_mask": spaces.MultiBinary(3)}) if discrete \
        else OBS3
    model = make(name, action_space, *flags, obs=obs_space, hidden="16,16")
    if discrete and name == "cql_discrete":
        model.begin_fragment(256, 0.0)        # epsilon 1 at the start: uniform, masked
    with torch.no_grad():  # wide means and stds, deep in tanh's tails
        for p in model.parameters():
            p.mul_(4.0)
    obs = observations_for(obs_space)
    stochastic, extras = model.choose_actions(obs)
    greedy, _ = model.choose_actions(obs, deterministic=True)
    assert extras == {}
    for actions in (stochastic, greedy):
        assert actions.shape == (256, *action_space.shape)
        if discrete:
            assert actions.dtype == np.int64
            assert obs["action_mask"][np.arange(256), actions].all()
        else:
            assert actions.dtype == np.float32
            assert (actions >= action_space.low).all() and (actions <= action_space.high).all()
    if not (discrete or (name == "bc" and not flags)):
        assert not np.allclose(stochastic, greedy)   # noise where the policy has some
    module = model.export_module()
    with torch.no_grad():
        exported = module(*export_inputs(obs, obs_space)).numpy()
    np.testing.assert_allclose(exported, greedy, rtol=1e-5, atol=1e-5)
    # the torch path (what a GPU acts with) agrees with the numpy one
    if name in ("bc", "iql"):
        model.numpy_policy = None
        np.testing.assert_allclose(model.choose_actions(obs, deterministic=True)[0], greedy,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, action_space", [("bc", BOX2), ("iql", DIS)])
def test_export_traces_at_a_dynamic_batch_size(name, action_space):
    obs_space = MASKED_OBS if isinstance(action_space, spaces.Discrete) else OBS3
    model = make(name, action_space, obs=obs_space, hidden="8")
    obs = observations_for(obs_space, rows=5) if obs_space is OBS3 else {
        "obs": np.linspace(-1, 1, 5, dtype=np.float32)[:, None],
        "action_mask": np.ones((5, 3), np.int8)}
    inputs = export_inputs(obs, obs_space)
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(model.export_module(), inputs,
                                  dynamic_shapes=(tuple({0: batch} for _ in inputs),))
    greedy, _ = model.choose_actions(obs, deterministic=True)
    with torch.no_grad():
        exported = program.module()(*inputs).numpy()
    np.testing.assert_allclose(exported, greedy, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, action_space", [("bc", DIS), ("iql", BOX2), ("cql", BOX2),
                                                ("cql_discrete", DIS)])
def test_weights_round_trip_targets_included(name, action_space):
    model = make(name, action_space, obs=OBS3, hidden="8", seed=0)
    other = make(name, action_space, obs=OBS3, hidden="8", seed=1)
    weights = model.get_weights()
    assert any("target" in key for key in weights) or name == "bc"
    other.set_weights(weights)
    for key, value in other.get_weights().items():
        np.testing.assert_array_equal(value, weights[key])
    obs = observations_for(OBS3, rows=8)
    np.testing.assert_array_equal(other.choose_actions(obs, deterministic=True)[0],
                                  model.choose_actions(obs, deterministic=True)[0])


def synthetic_dataset(action_space, n=128, seed=0):
    """An expert whose action is a fixed function of the observation, rewarded for it; every
    transition terminal, so that the critics regress onto the rewards."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    if isinstance(action_space, spaces.Discrete):
        actions = (obs[:, 0] > 0).astype(np.int64) + (obs[:, 1] > 0.5)
    else:
        unit = np.tanh(obs[:, :2] * np.array([1.5, -1.0], np.float32))
        actions = (unit * (action_space.high - action_space.low) / 2
                   + (action_space.high + action_space.low) / 2).astype(np.float32)
    rewards = 1.0 + 0.1 * rng.normal(size=n)
    return batch_of(obs, actions, rewards, rng.uniform(-1, 1, (n, 3)), np.ones(n))


@pytest.mark.parametrize("name, action_space, flags, columns", [
    ("bc", BOX2, (), ("bc_loss",)),
    ("bc", DIS, (), ("bc_loss",)),
    ("iql", BOX2, ("--iql_actor_lr", "3e-3", "--iql_critic_lr", "3e-3", "--iql_value_lr",
                   "3e-3", "--iql_tau", "1"), ("critic_loss",)),
    ("iql", DIS, ("--iql_actor_lr", "3e-3", "--iql_critic_lr", "3e-3", "--iql_value_lr",
                  "3e-3", "--iql_tau", "1"), ("critic_loss",)),
    ("cql", BOX2, ("--critic_lr", "3e-3"), ("cql_gap",)),
    ("cql_discrete", DIS, ("--dqn_lr", "3e-3"), ("q_loss", "cql_gap")),
])
def test_a_few_updates_on_a_tiny_dataset_reduce_the_loss(name, action_space, flags, columns):
    """(IQL's value loss starts near 0 with V and Q both near 0 and rises as Q learns the
    returns, and its actor loss is weighted by advantages that move: for it the dataset
    actions' likelihood rises instead, and V follows Q.)"""
    model = make(name, action_space, *flags, obs=OBS3, hidden="32,32")
    data = synthetic_dataset(action_space)

    def likelihood():
        obs, actions, *_ = model.update_inputs(data)
        with torch.no_grad():
            return float(model.log_prob(obs, actions).mean())
    before = likelihood() if name == "iql" else None
    first, last = train(model, data, 60)
    assert set(model.update_metrics) <= set(last) | {"epsilon"}
    for column in columns:
        assert last[column] < first[column], (column, first[column], last[column])
    if name == "iql":
        assert likelihood() > before + 0.2
        assert abs(first["v_mean"]) < 0.2 and last["v_mean"] > 0.7


def test_a_subclass_that_changes_the_acting_path_is_not_exported_as_its_parent_acts():
    class OwnObs(BCModel):
        def flat_obs(self, obs):
            return super().flat_obs(obs) * 2.0
    model = OwnObs(config("bc", "--bc_hidden_sizes", "8"), OBS3, BOX2)
    with pytest.raises(ConfigError, match="Give OwnObs an export_module of its own"):
        model.export_module()
