"""PPOModel numerics: hand-written sampling log-probs, the clipped objective, the ratio after an
update, and the learner's gradient-norm clipping."""
import copy
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Categorical, Normal

from core.learning.learner import Learner, average_gradients
from core.algos.ppo_trainer import advantage_moments
from core.sampling.rollout import RolloutWorker
from core.types import GradientRequest
from models.ppo import PPOBatch, PPOModel
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit

OBS = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)


def make_model(action_space, *flags):
    args = parse_args(["--config", "none", "--num_workers", "0", *flags])
    torch.manual_seed(0)
    return PPOModel(args, OBS, action_space)


def random_obs(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, 4)).astype(np.float32)


# -- choose_actions' hand-written log-probs, through numpy (plain MLP actors on the CPU) and
# through torch (any other actor, or a GPU) --------------------------------------------------
PATHS = ["numpy", "torch"]


def acting_through(model, path):
    if path == "torch":
        model.numpy_actor = None
    else:
        assert model.numpy_actor is not None
    return model


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("deterministic", [False, True])
def test_discrete_sampling_log_probs_match_categorical(deterministic, path):
    model = acting_through(make_model(spaces.Discrete(3)), path)
    with torch.no_grad():  # make the logits large enough to matter
        model.actor[-1].weight.mul_(300.0)
    obs = random_obs(64)
    actions, extras = model.choose_actions(obs, deterministic=deterministic)
    with torch.no_grad():
        dist = Categorical(logits=model.actor(torch.as_tensor(obs)))
        expected = dist.log_prob(torch.as_tensor(actions)).numpy()
    np.testing.assert_allclose(extras["log_probs"], expected, atol=1e-5)
    np.testing.assert_allclose(extras["values"], model.predict_values(obs), atol=1e-6)
    if deterministic:
        np.testing.assert_array_equal(actions, dist.probs.argmax(-1).numpy())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("deterministic", [False, True])
def test_box_sampling_log_probs_match_summed_normal(deterministic, path):
    model = acting_through(make_model(spaces.Box(-1.0, 1.0, shape=(2,)), "--log_std_init",
                                      "-0.7"), path)
    obs = random_obs(64)
    actions, extras = model.choose_actions(obs, deterministic=deterministic)
    with torch.no_grad():
        mean = model.actor(torch.as_tensor(obs))
        dist = Normal(mean, model.log_std.exp().expand_as(mean))
        expected = dist.log_prob(torch.as_tensor(actions)).sum(-1).numpy()
    np.testing.assert_allclose(extras["log_probs"], expected, atol=1e-5)
    if deterministic:
        np.testing.assert_allclose(actions, mean.numpy(), atol=1e-7)


@pytest.mark.parametrize("path", PATHS)
def test_gumbel_max_sampling_draws_from_the_softmax(path):
    # Logits set by hand: zero weights, bias = log(0.2, 0.3, 0.5); 40000 seeded draws.
    model = acting_through(make_model(spaces.Discrete(3)), path)
    with torch.no_grad():
        model.actor[-1].weight.zero_()
        model.actor[-1].bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    torch.manual_seed(1)
    actions, _ = model.choose_actions(random_obs(40000))
    frequencies = np.bincount(actions, minlength=3) / len(actions)
    # standard error sqrt(.25/40000) = .0025; 0.01 is 4 standard errors
    np.testing.assert_allclose(frequencies, [0.2, 0.3, 0.5], atol=0.01)


def test_the_numpy_actor_follows_every_change_of_the_torch_weights():
    """set_weights, an optimizer step and load_state_dict all reach the numpy copy."""
    model = make_model(spaces.Discrete(3))
    obs = random_obs(8)

    def agree():
        with torch.no_grad():
            expected = model.actor(torch.as_tensor(obs)).numpy()
        np.testing.assert_allclose(model.numpy_actor(obs), expected, rtol=1e-5, atol=1e-6)
        return expected

    before = agree()
    model.set_weights({k: v * 1.5 for k, v in model.get_weights().items()})
    after_set = agree()
    learner = Learner(model)
    gradients = {k: np.ones_like(v) for k, v in model.get_weights().items()}
    learner.apply(gradients)
    after_step = agree()
    model.load_state_dict(make_model(spaces.Discrete(3)).state_dict())
    agree()
    assert not np.allclose(before, after_set) and not np.allclose(after_set, after_step)


def test_a_network_that_is_not_a_plain_mlp_acts_through_torch():
    from models.numpy_mlp import NumpyMLP
    # (a LayerNorm over the features is one it computes, since PQN: tests/test_pqn.py)
    assert NumpyMLP.of(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))) is None
    assert NumpyMLP.of(torch.nn.Sequential(torch.nn.Linear(4, 8),
                                           torch.nn.LayerNorm((2, 4)))) is None
    assert NumpyMLP.of(torch.nn.Linear(4, 8)) is None
    assert NumpyMLP.of(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())) is not None


# -- the clipped objective ---------------------------------------------------------------------
def batch_with_ratios(model, ratios, advantages):
    """A PPOBatch whose old log-probs make the ratio new/old exactly ``ratios``."""
    obs = torch.as_tensor(random_obs(len(ratios)))
    actions = torch.zeros(len(ratios), dtype=torch.int64)
    with torch.no_grad():
        log_prob = model.log_prob(model.distribution(obs), actions)
    old = log_prob - torch.log(torch.tensor(ratios))
    zeros = torch.zeros(len(ratios))
    return PPOBatch(obs, actions, old, torch.tensor(advantages), zeros, zeros)


def test_clipped_objective_equals_hand_computed_value():
    model = make_model(spaces.Discrete(2), "--clip_range", "0.2", "--clip_schedule", "constant")
    # eps = 0.2, clip(r) in [0.8, 1.2]; per sample min(r A, clip(r) A):
    #   r=1.5, A= 2   : min(3.0,   2.4)  = 2.4    (clipped)
    #   r=1.5, A=-1   : min(-1.5, -1.2)  = -1.5
    #   r=0.5, A= 3   : min(1.5,   2.4)  = 1.5
    #   r=0.5, A=-0.5 : min(-0.25, -0.4) = -0.4   (clipped)
    # mean = (2.4 - 1.5 + 1.5 - 0.4) / 4 = 0.5; policy_loss = -0.5
    batch = batch_with_ratios(model, [1.5, 1.5, 0.5, 0.5], [2.0, -1.0, 3.0, -0.5])
    _, stats = model.step(batch)
    assert stats["policy_loss"] == pytest.approx(-0.5, abs=1e-5)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # (1.5+1.5+.5+.5)/4
    assert stats["clip_fraction"] == 1.0


def test_clipped_samples_give_no_policy_gradient():
    # Only the two samples where min() picks the clipped term: the policy loss is flat there.
    model = make_model(spaces.Discrete(2), "--clip_range", "0.2", "--vf_coef", "0.0",
                       "--ent_coef", "0.0")
    grads, _ = model.step(batch_with_ratios(model, [1.5, 0.5], [2.0, -0.5]))
    assert all(np.all(g == 0) for k, g in grads.items() if k.startswith("actor."))
    # ... while the unclipped pair of the same ratios does move the actor
    grads, _ = model.step(batch_with_ratios(model, [1.5, 0.5], [-1.0, 3.0]))
    assert any(np.any(g != 0) for k, g in grads.items() if k.startswith("actor."))


def test_clip_range_follows_the_linear_schedule():
    # linear schedule at progress 0.5: eps = 0.2 * 0.5 = 0.1, clip(1.5) = 1.1
    # r=1.5, A=2: min(3.0, 2.2) = 2.2; policy_loss = -2.2
    model = make_model(spaces.Discrete(2), "--clip_range", "0.2", "--clip_schedule", "linear")
    _, stats = model.step(batch_with_ratios(model, [1.5], [2.0]), progress=0.5)
    assert stats["policy_loss"] == pytest.approx(-2.2, abs=1e-5)


# -- the ratio after one update ----------------------------------------------------------------
@pytest.mark.contract
def test_ratio_is_one_on_the_first_minibatch_and_differs_after_an_update():
    args = parse_args(["--config", "none", "--num_workers", "0", "--num_envs_per_worker",
                       "2", "--rollout_steps", "16", "--batch_size", "16", "--seed", "3"])
    worker = RolloutWorker(run_spec(args))
    torch.manual_seed(args.seed)
    learner = Learner(PPOModel(args, *worker.spaces()))
    rollout = worker.collect(learner.weights_for_workers(), learner.version, args.rollout_steps)
    mean, std = advantage_moments([rollout])

    def request(minibatch):
        return GradientRequest(0, minibatch, 2, mean, std, 0.0, learner.version)

    first = worker.fetch_grads(learner.weights_for_workers(), request(0))
    assert first.num_samples == 16
    # the acting policy and the learning policy are the same weights: ratio exactly 1
    assert first.stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    learner.apply(average_gradients([first.gradients], [first.num_samples]))
    second = worker.fetch_grads(learner.weights_for_workers(), request(1))
    assert second.weights_version == 1
    assert abs(second.stats["ratio_mean"] - 1.0) > 1e-5
    assert second.stats["approx_kl"] > 0.0
    worker.close()


# -- the learner's gradient-norm clipping --------------------------------------------------------
def huge_gradients(model, value=1000.0):
    return {k: np.full(tuple(p.shape), value, dtype=np.float32)
            for k, p in model.named_parameters()}


def test_learner_clips_the_global_gradient_norm_before_adam():
    model = make_model(spaces.Discrete(2), "--max_grad_norm", "0.5", "--lr_schedule", "constant")
    reference = copy.deepcopy(model)
    learner = Learner(model)
    grads = huge_gradients(model)
    num_params = sum(g.size for g in grads.values())
    norm = learner.apply({k: v.copy() for k, v in grads.items()})
    assert norm == pytest.approx(1000.0 * math.sqrt(num_params), rel=1e-5)

    # Adam's first moment after one step is (1 - beta1) g = 0.1 g: g must have norm 0.5
    exp_avg = [learner.optimizer.state[p]["exp_avg"] for p in model.parameters()]
    assert torch.linalg.vector_norm(torch.cat([m.flatten() for m in exp_avg])).item() / 0.1 \
        == pytest.approx(0.5, rel=1e-4)

    # and the parameters moved exactly as Adam with the gradient scaled to norm 0.5
    optimizer = reference.configure_optimizer()
    for name, p in reference.named_parameters():
        p.grad = torch.as_tensor(grads[name]).clone()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    optimizer.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7, msg=name)


def test_learner_does_not_clip_when_max_grad_norm_is_zero():
    model = make_model(spaces.Discrete(2), "--max_grad_norm", "0")
    learner = Learner(model)
    grads = huge_gradients(model, 3.0)
    num_params = sum(g.size for g in grads.values())
    norm = learner.apply(grads)
    assert norm == pytest.approx(3.0 * math.sqrt(num_params), rel=1e-5)
    exp_avg = torch.cat([learner.optimizer.state[p]["exp_avg"].flatten()
                         for p in model.parameters()])
    torch.testing.assert_close(exp_avg, torch.full_like(exp_avg, 0.1 * 3.0))


# -- --value_norm ------------------------------------------------------------------------------
def test_value_norm_merges_the_rounds_returns_and_scales_the_critic():
    model = make_model(spaces.Discrete(2), "--value_norm")
    rounds = [np.array([1.0, 3.0, 5.0]), np.array([-2.0, 10.0]), np.array([4.0] * 5)]
    for returns in rounds:  # a round's (count, mean, variance), as the trainer sends them
        model.observe_returns(len(returns), returns.mean(), returns.var())
    everything = np.concatenate(rounds)
    assert float(model.return_count) == len(everything)
    assert float(model.return_mean) == pytest.approx(everything.mean())
    assert float(model.return_var) == pytest.approx(everything.var())
    # the values are the critic's output scaled back; predict_values and acting agree
    obs = torch.as_tensor(random_obs(5))
    raw = model.critic(model.features(obs)).squeeze(-1)
    expected = raw * everything.std() + everything.mean()
    torch.testing.assert_close(model.values(model.features(obs)), expected.float())
    torch.testing.assert_close(torch.as_tensor(model.predict_values(obs.numpy())),
                               expected.detach().float())
    # the value loss is the standardized one: (target - mu) / sigma against the critic's output
    returns = torch.tensor([0.0, 7.0, -3.0, 2.0, 12.0])
    batch = PPOBatch(obs, torch.zeros(5, dtype=torch.int64),
                     torch.zeros(5), torch.zeros(5), returns, torch.zeros(5))
    _, stats = model.step(batch)
    target = (returns - everything.mean()) / everything.std()
    assert stats["value_loss"] == pytest.approx(float(((target - raw) ** 2).mean()), rel=1e-4)
    # without the flag nothing changes scale
    plain = make_model(spaces.Discrete(2))
    torch.testing.assert_close(plain.values(plain.features(obs)),
                               plain.critic(plain.features(obs)).squeeze(-1))
    plain.observe_returns(3, 5.0, 4.0)
    assert not hasattr(plain, "return_mean")


def test_return_moments_pool_every_workers_returns():
    from core.algos.ppo_trainer import return_moments
    from core.types import RolloutStats
    parts = [np.array([1.0, 2.0, 6.0]), np.array([-3.0, 4.0])]
    rollouts = [RolloutStats(env_steps=len(p), episode_returns=[], episode_lengths=[],
                             weights_version=0,
                             agent_stats={"advantage_count": len(p), "return_sum": p.sum(),
                                          "return_sq_sum": (p ** 2).sum()}) for p in parts]
    count, mean, var = return_moments(rollouts)
    both = np.concatenate(parts)
    assert count == 5 and mean == pytest.approx(both.mean()) and var == pytest.approx(both.var())
    del rollouts[0].agent_stats["return_sum"]  # an agent that does not report them
    assert return_moments(rollouts) is None


@pytest.mark.e2e
def test_value_norm_counts_every_learned_return(tmp_path):
    """A short run with --value_norm: the checkpoint's moments count every sample learned
    from (the loop merges each round's after its updates)."""
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run_dir = str(tmp_path / "vn")
    done = subprocess.run([sys.executable, "main.py", "--num_workers", "0", "--value_norm",
                           "--num_envs_per_worker", "4", "--rollout_steps", "32",
                           "--total_steps", "512", "--quiet", "--no-tensorboard",
                           "--target_return", "none", "--run_dir", run_dir], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)
    assert float(saved["model"]["return_count"]) == 512
    assert float(saved["model"]["return_mean"]) > 1.0  # CartPole's returns-to-go are positive


# -- --ppo_precision ------------------------------------------------------------------------------
def test_a_bf16_update_computes_the_fp32_gradients_to_bf16_precision():
    """bf16 autocast over the forward pass: the same statistics and gradients as fp32 to
    bfloat16's ~3 significant digits, the loss's arithmetic in float32, float32 gradients."""
    fp32 = make_model(spaces.Discrete(2), "--ppo_precision", "fp32")
    bf16 = make_model(spaces.Discrete(2), "--ppo_precision", "bf16")
    batch = batch_with_ratios(fp32, [1.1, 0.9, 1.0, 1.05] * 8, list(np.linspace(-1, 1, 32)))
    expected, expected_stats = fp32.step(batch)
    got, stats = bf16.step(batch)
    assert bf16.update_precision("cpu") == "bf16"
    for name, grad in expected.items():
        assert got[name].dtype == np.float32
        scale = np.abs(grad).max() + 1e-3
        assert np.abs(got[name] - grad).max() <= 0.05 * scale, name
    for key in ("policy_loss", "value_loss", "entropy"):
        assert stats[key] == pytest.approx(expected_stats[key], rel=0.02, abs=1e-3), key


def test_auto_precision_times_the_first_minibatch_once(monkeypatch, capsys):
    """--ppo_precision auto where bf16 is native: the first step times the update on a copy of
    the model in both precisions (time_precisions), keeps the faster, says so once."""
    import core.distributed.devices as devices
    calls = []

    def fake_time(update, device, repeats=10, margin=0.05):
        calls.append(str(device))
        update()  # the copy's update
        return "bf16", {"fp32": 3.0, "bf16": 1.5}
    monkeypatch.setattr(devices, "resolve_precision",
                        lambda requested, device_type="cpu": "bf16" if requested == "auto"
                        else requested)
    monkeypatch.setattr(devices, "time_precisions", fake_time)
    model = make_model(spaces.Discrete(2), "--ppo_precision", "auto")
    batch = batch_with_ratios(model, [1.0] * 8, [0.5] * 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        model.step(batch)
    assert calls == ["cpu"] and model.update_precision("cpu") == "bf16"
    assert model.precision_timings == {"device": "cpu", "chosen": "bf16", "fp32_ms": 3.0,
                                       "bf16_ms": 1.5}
    assert capsys.readouterr().err.count("--ppo_precision auto on cpu: bf16") == 1
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
