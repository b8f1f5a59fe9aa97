"""CrossQ: batch renormalization by hand in training and eval modes, the joint critic pass's
statistics, no target critics, the delayed actor (and a learner that leaves it alone between its
updates), flags and errors, and a run end to end."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.learning.learner import Learner
from core.errors import ConfigError
from core.learning.replay_buffer import ReplayBatch, Transitions
from models.crossq import BatchRenorm, CrossQModel
from options.options import parse_args
from test_e2e import read_run, run_main

pytestmark = pytest.mark.unit

OBS = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
ACT = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)


def make_args(*flags):
    return parse_args(["--config", "none", "--num_workers", "0", "--gym_id", "Pendulum-v1",
                       "--model_name", "crossq", "--sac_hidden_sizes", "16,16",
                       "--crossq_critic_sizes", "32,32", *flags])


def make_model(*flags, seed=0):
    torch.manual_seed(seed)
    return CrossQModel(make_args(*flags), OBS, ACT)


def random_batch(n, seed=0):
    rng = np.random.default_rng(seed)
    t = Transitions(rng.uniform(-2, 2, (n, 3)).astype(np.float32),
                    rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                    rng.normal(size=n).astype(np.float32),
                    rng.uniform(-2, 2, (n, 3)).astype(np.float32),
                    (rng.uniform(size=n) < 0.3).astype(np.float32))
    return ReplayBatch(t, np.arange(n), np.ones(n, np.int64), np.ones(n, np.float32))


# -- batch renormalization, by hand ---------------------------------------------------------------
def test_batch_renorm_warm_up_is_batch_norm_and_moves_the_running_statistics():
    layer = BatchRenorm(2, momentum=0.1, eps=1e-3, warmup_steps=5).train()
    x = torch.tensor([[1.0, 10.0], [3.0, 14.0], [5.0, 12.0]])
    mean, var = np.array([3.0, 12.0]), np.array([8 / 3, 8 / 3])  # biased variance
    y = layer(x)
    expected = (x.numpy() - mean) / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.1 * mean, rtol=1e-6)
    np.testing.assert_allclose(layer.running_var.numpy(), 0.9 + 0.1 * var, rtol=1e-6)
    assert int(layer.steps) == 1


def warm_renorm_layer():
    layer = BatchRenorm(2, momentum=0.1, eps=0.0, warmup_steps=0, r_max=3.0, d_max=5.0).train()
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([0.0, 100.0]))
        layer.running_var.copy_(torch.tensor([1.0, 4.0]))
        layer.weight.copy_(torch.tensor([2.0, 1.0]))
        layer.bias.copy_(torch.tensor([0.5, 0.0]))
    return layer


def test_batch_renorm_after_warm_up_corrects_towards_running_statistics_with_clipping():
    layer = warm_renorm_layer()
    x = torch.tensor([[1.0, 10.0], [3.0, 14.0], [5.0, 12.0]], requires_grad=True)
    y = layer(x)
    std = np.sqrt(8 / 3)
    # feature 0: r = std / 1 (inside [1/3, 3]), d = (3 - 0) / 1 = 3
    # feature 1: r = std / 2, d = (12 - 100) / 2 = -44, clipped to -5
    r, d = np.array([std, std / 2]), np.array([3.0, -5.0])
    x_hat = (x.detach().numpy() - [3.0, 12.0]) / std * r + d
    np.testing.assert_allclose(y.detach().numpy(), x_hat * [2.0, 1.0] + [0.5, 0.0], rtol=1e-5)
    # r and d are constants for the gradient: d(sum y)/dx is batch norm's, scaled by weight * r
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.zeros((3, 2)), atol=1e-5)
    x2 = x.detach().clone().requires_grad_(True)
    warm_renorm_layer()(x2)[0, 0].backward()  # a fresh layer: the same running statistics
    xc = x2.detach().numpy()[:, 0] - 3.0
    expected = 2.0 * r[0] / std * (np.array([1.0, 0.0, 0.0]) - 1 / 3 - xc[0] * xc / (3 * std**2))
    np.testing.assert_allclose(x2.grad.numpy()[:, 0], expected, rtol=1e-4, atol=1e-6)


def test_batch_renorm_eval_mode_uses_running_statistics_and_changes_nothing():
    layer = BatchRenorm(2, eps=1e-3).eval()
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([1.0, -1.0]))
        layer.running_var.copy_(torch.tensor([4.0, 0.25]))
    x = torch.tensor([[3.0, 0.0]])  # one row: training-mode statistics would be degenerate
    y = layer(x)
    np.testing.assert_allclose(y.detach().numpy(),
                               [[2.0 / np.sqrt(4.001), 1.0 / np.sqrt(0.251)]], rtol=1e-5)
    assert int(layer.steps) == 0
    np.testing.assert_allclose(layer.running_mean.numpy(), [1.0, -1.0])


# -- the model --------------------------------------------------------------------------------------
def renorm_layers(module):
    return [m for m in module.modules() if isinstance(m, BatchRenorm)]


def test_no_targets_renorm_everywhere_and_eval_mode_outside_step():
    model = make_model()
    assert not hasattr(model, "critic_target")
    # critics: before each of their 3 linear layers; actor: before each of 2, and after the last
    assert len(renorm_layers(model.critic.q1)) == 3 and len(renorm_layers(model.actor)) == 3
    assert not any(m.training for m in model.modules())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.choose_actions(np.zeros((1, 3), np.float32))  # acting: one row, running statistics
    model.step(random_batch(64))
    assert not any(m.training for m in model.modules())
    for k, v in model.state_dict().items():  # acting moved nothing; the step moved statistics
        if k.endswith("running_mean") and k.startswith("critic"):
            assert not torch.equal(v, before[k]), k


def test_joint_pass_normalizes_current_and_next_state_actions_together():
    model = make_model("--bn_momentum", "1.0")  # running statistics = the last batch's
    batch = random_batch(32, seed=3)
    torch.manual_seed(7)
    model.step(batch)
    t = batch.transitions
    torch.manual_seed(7)  # the same draw of a' ~ pi(.|s') the step made first
    with torch.no_grad():
        next_actions, _ = model.sample(torch.as_tensor(t.next_observations))
    actions = model.from_env_actions(torch.as_tensor(t.actions))
    joint = torch.cat([torch.cat([torch.as_tensor(t.observations), actions], 1),
                       torch.cat([torch.as_tensor(t.next_observations), next_actions], 1)])
    first = model.critic.q1[0]
    np.testing.assert_allclose(first.running_mean.numpy(), joint.mean(0).numpy(), rtol=1e-5)
    np.testing.assert_allclose(first.running_var.numpy(), joint.var(0, unbiased=False).numpy(),
                               rtol=1e-4)


def test_actor_and_alpha_move_every_policy_delay_updates_only():
    model = make_model("--policy_delay", "3")
    learner = Learner(model)
    actor = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith("actor.")}
    moved = []
    for i in range(6):
        gradients, stats = model.step(random_batch(64, seed=i))
        has_actor = any(n.startswith("actor.") for n in gradients)
        assert has_actor == ("log_alpha" in gradients) == ("actor_loss" in stats)
        assert all(n.startswith("critic.") or has_actor for n in gradients)
        learner.apply(gradients)
        now = {n: p.detach().clone() for n, p in model.named_parameters()
               if n.startswith("actor.")}
        moved.append(any(not torch.equal(now[n], actor[n]) for n in now))
        actor = now
    assert moved == [False, False, True, False, False, True]
    assert int(model.critic_updates) == 6


def test_learner_leaves_parameters_without_gradients_alone():
    model = make_model()
    learner = Learner(model)
    gradients, _ = model.step(random_batch(64))  # the first update: critics only
    assert "log_alpha" not in gradients
    alpha = model.log_alpha.detach().clone()
    learner.apply(gradients)
    assert torch.equal(model.log_alpha.detach(), alpha)
    assert model.log_alpha not in learner.optimizer.state  # no Adam moments started either
    with pytest.raises(ValueError, match="does not have"):
        learner.apply({"nonexistent": np.zeros(1, np.float32)})


def test_statistics_and_update_count_travel_with_the_weights():
    source, sink = make_model(seed=0), make_model(seed=1)
    Learner(source).apply(source.step(random_batch(64))[0])
    weights = source.get_weights()
    assert "critic_updates" in weights and "critic.q1.0.running_mean" in weights
    sink.set_weights(weights)
    for k, v in sink.state_dict().items():
        assert torch.equal(v, source.state_dict()[k]), k
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(sink.choose_actions(obs, deterministic=True)[0],
                               source.choose_actions(obs, deterministic=True)[0])


def test_td_errors_use_running_statistics_and_leave_them():
    model = make_model()
    before = model.critic.q1[0].running_mean.clone()
    td = model.td_errors(random_batch(16))
    assert td.shape == (16,) and np.all(td >= 0)
    assert torch.equal(model.critic.q1[0].running_mean, before)


@pytest.mark.contract
def test_flags_errors_and_optimizer():
    args = make_args()
    assert (args.actor_lr, args.critic_lr, args.alpha_lr) == (1e-3, 1e-3, 1e-3)
    assert args.policy_delay == 3 and args.crossq_critic_sizes == [32, 32]
    assert make_args("--critic_lr", "5e-4").critic_lr == 5e-4
    betas = {g["name"]: g["betas"] for g in make_model().configure_optimizer().param_groups}
    assert betas == {"critic": (0.5, 0.999), "actor": (0.5, 0.999), "alpha": (0.9, 0.999)}
    from core.algos.trainers import trainer_class
    from core.plugins import load_plugins
    from options.options import run_spec
    spec = run_spec(make_args("--num_learners", "3"))
    with pytest.raises(ConfigError, match="--num_learners 3 with --model_name crossq"):
        trainer_class("replay").check_plugins(load_plugins(spec), spec)


@pytest.mark.e2e
@pytest.mark.parametrize("placement", [["--num_workers", "0", "--learner_threads", "1"],
                                       ["--num_workers", "1", "--num_cpus", "2"]])
def test_crossq_runs_end_to_end(tmp_path, placement):
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "crossq",
                    "--config", "none", *placement, "--sac_hidden_sizes", "32,32",
                    "--crossq_critic_sizes", "64,64", "--total_steps", "768",
                    "--learning_starts", "256", "--start_steps", "256", "--eval_interval", "512",
                    "--eval_episodes", "1", "--log_steps", "256", "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 768 and summary["last_eval_return"] is not None
    assert int(rows[-1]["updates"]) > 0 and rows[-1]["actor_loss"] not in ("", None)


def test_crossq_acts_through_torch_with_running_statistics():
    """Its actor is SAC's with a renormalized trunk: not a plain MLP, so no numpy acting (which
    would skip the normalization)."""
    model = make_model()
    assert model.numpy_actor is None
