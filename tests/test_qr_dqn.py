"""QR-DQN (models/qr_dqn.py) against hand-computed values: the quantile fractions, the quantile
Huber loss on a pair of two-quantile rows, its minimizer (the data's quantiles), the target
distribution with the next action chosen by the mean (and by the online network under
--double_q), the importance weights per row, numpy acting against torch's, the defaults that
are sb3-contrib's QRDQN's; end to end: it learns CartPole in one process."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.errors import ConfigError
from models.qr_dqn import NumpyQuantileQ, QRDQNModel, quantile_fractions, quantile_huber_loss
from options.options import parse_args
from tests.test_e2e import read_run, run_main

OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = spaces.Discrete(2)


def make_model(*flags, obs_space=OBS, action_space=ACTIONS, seed=0):
    args = parse_args(["--config", "none", "--num_workers", "0", "--model_name", "qr_dqn",
                       "--gym_id", "CartPole-v1", *flags])
    torch.manual_seed(seed)
    return QRDQNModel(args, obs_space, action_space)


@pytest.mark.unit
def test_the_fractions_are_the_midpoints_of_n_equal_slices():
    assert quantile_fractions(4).tolist() == [0.125, 0.375, 0.625, 0.875]


@pytest.mark.unit
def test_the_quantile_huber_loss_by_hand():
    """Current [0, 1] at tau [0.25, 0.75], target [0.5, 3]. Pairs u = target_j - current_i:
    i=0: 0.5, 3 (both >= 0: weight 0.25; Huber 0.125, 2.5); i=1: -0.5 (weight |0.75 - 1| =
    0.25, Huber 0.125), 2 (weight 0.75, Huber 1.5). Summed over i: 0.0625 and 1.75; their mean
    0.90625."""
    current = torch.tensor([[0.0, 1.0]])
    target = torch.tensor([[0.5, 3.0]])
    assert quantile_huber_loss(current, target).tolist() == [0.90625]
    # per row: a second row, the first's values shifted by 10, has the same loss
    both = quantile_huber_loss(torch.tensor([[0.0, 1.0], [10.0, 11.0]]),
                               torch.tensor([[0.5, 3.0], [10.5, 13.0]]))
    assert both.tolist() == [0.90625, 0.90625]


def autograd_quantile_huber(current, target, tau):
    """The loss written out for autograd: what QuantileHuber computes with its own gradient."""
    u = target.unsqueeze(-2) - current.unsqueeze(-1)
    huber = torch.where(u.abs() > 1.0, u.abs() - 0.5, 0.5 * u.pow(2))
    return ((tau.unsqueeze(-1) - (u.detach() < 0).float()).abs() * huber).sum(-2).mean(-1)


@pytest.mark.unit
@pytest.mark.parametrize("rows, n, n_target, per_row_tau", [
    (8, 5, 7, False), (4, 6, 6, True), (16, 50, 46, False)])
def test_the_loss_and_its_gradient_are_autograds_of_the_written_out_loss(rows, n, n_target,
                                                                         per_row_tau):
    """Pairs on both sides of |u| = 1 and of 0, fixed and per-row fractions (IQN's), rows
    weighted unequally: values and d/d current as autograd gives them for the plain formula;
    no gradient reaches the target."""
    g = torch.Generator().manual_seed(0)
    current = (torch.randn(rows, n, generator=g) * 2).requires_grad_()
    target = (torch.randn(rows, n_target, generator=g) * 2).requires_grad_()
    tau = (torch.rand(rows, n, generator=g) if per_row_tau
           else quantile_fractions(n).expand(rows, n))
    row_weights = torch.arange(1.0, rows + 1)
    expected = autograd_quantile_huber(current, target.detach(), tau)
    (expected * row_weights).sum().backward()
    expected_grad, current.grad = current.grad, None
    got = quantile_huber_loss(current, target, tau)
    (got * row_weights).sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(current.grad, expected_grad, rtol=1e-5, atol=1e-6)
    assert target.grad is None


@pytest.mark.unit
def test_minimizing_the_loss_puts_the_quantiles_at_the_datas():
    """Against 100 target samples 0..99, four free quantiles settle at the samples'
    12.5/37.5/62.5/87.5 % quantiles (Huber's kappa 1 smooths each by under a sample)."""
    target = torch.arange(100.0).unsqueeze(0)
    current = torch.zeros(1, 4, requires_grad=True)
    opt = torch.optim.Adam([current], lr=0.5)
    for _ in range(3000):
        opt.zero_grad()
        quantile_huber_loss(current, target).sum().backward()
        opt.step()
    assert current.detach()[0].numpy() == pytest.approx([12.0, 37.0, 62.0, 87.0], abs=1.0)


def set_linear_quantiles(network, weight, bias):
    """A network without hidden layers: its head's weight and bias, [A * N, obs]."""
    with torch.no_grad():
        network.q.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        network.q.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))


@pytest.mark.unit
def test_the_target_takes_the_next_action_of_the_highest_mean():
    """Two actions, two quantiles, a bias-only target network: action 0's quantiles (-4, 6),
    mean 1, the higher quantile; action 1's (1.5, 2), mean 1.75. The target follows action 1
    (the mean), y = r + discount (1 - terminated) (1.5, 2)."""
    model = make_model("--dqn_hidden_sizes", "none", "--n_quantiles", "2", "--no-double_q",
                       obs_space=spaces.Box(-1, 1, (1,), np.float32))
    set_linear_quantiles(model.q_target, np.zeros((4, 1)), [-4.0, 6.0, 1.5, 2.0])
    rewards, terminated = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])
    discounts = torch.tensor([0.5, 0.5])
    y = model.target_quantiles(rewards, torch.zeros(2, 1), terminated, discounts)
    assert y.tolist() == [[1.75, 2.0], [1.0, 1.0]]
    assert model.targets(rewards, torch.zeros(2, 1), terminated, discounts).tolist() == [
        1.875, 1.0]
    # --double_q: the online network chooses (here action 0), the target network values it
    double = make_model("--dqn_hidden_sizes", "none", "--n_quantiles", "2", "--double_q",
                        obs_space=spaces.Box(-1, 1, (1,), np.float32))
    set_linear_quantiles(double.q_target, np.zeros((4, 1)), [-4.0, 6.0, 1.5, 2.0])
    set_linear_quantiles(double.q_net, np.zeros((4, 1)), [5.0, 5.0, 0.0, 0.0])
    y = double.target_quantiles(rewards, torch.zeros(2, 1), terminated, discounts)
    assert y.tolist() == [[-1.0, 4.0], [1.0, 1.0]]


@pytest.mark.unit
def test_the_update_loss_weights_each_rows_quantile_loss():
    model = make_model("--dqn_hidden_sizes", "none", "--n_quantiles", "2", "--no-double_q",
                       obs_space=spaces.Box(-1, 1, (1,), np.float32))
    # online: action 0 (0, 1), action 1 (10, 20); target: the constant (0.5, 3) - 1 for both
    set_linear_quantiles(model.q_net, np.zeros((4, 1)), [0.0, 1.0, 10.0, 20.0])
    set_linear_quantiles(model.q_target, np.zeros((4, 1)), [-0.5, 2.0, -0.5, 2.0])
    obs = torch.zeros(2, 1)
    actions = torch.tensor([0, 1])
    rewards, terminated, discounts = torch.ones(2), torch.zeros(2), torch.ones(2)
    loss, stats, td_errors = model.update_loss(obs, actions, rewards, obs, terminated,
                                               discounts, torch.tensor([2.0, 0.0]))
    # row 0 is the hand-computed pair (0.90625), weighted 2; row 1 weighted 0
    assert loss.item() == pytest.approx(2 * 0.90625 / 2)
    # |Q(s, a) - mean y|: |0.5 - 1.75| and |15 - 1.75|
    assert td_errors.tolist() == pytest.approx([1.25, 13.25])
    assert stats["q_mean"].item() == pytest.approx((0.5 + 15.0) / 2)
    # the gradient reaches the online network only
    loss.backward()
    assert model.q_net.q.bias.grad is not None
    assert all(p.grad is None for p in model.q_target.parameters())


@pytest.mark.unit
@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_acting_gives_torchs_q_values(dueling):
    model = make_model("--dqn_hidden_sizes", "32,32", "--n_quantiles", "7",
                       "--dueling" if dueling else "--no-dueling",
                       action_space=spaces.Discrete(3))
    assert isinstance(model.numpy_q, NumpyQuantileQ)
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with torch.no_grad():
        expected = model.q_net(torch.as_tensor(obs)).numpy()
        quantiles = model.q_net.quantiles(torch.as_tensor(obs)).numpy()
    assert quantiles.shape == (5, 3, 7)
    assert expected == pytest.approx(quantiles.mean(-1), abs=1e-5)
    assert model.q_values(obs) == pytest.approx(expected, abs=1e-5)
    actions, _ = model.choose_actions(obs, deterministic=True)
    assert actions.tolist() == expected.argmax(-1).tolist()


@pytest.mark.unit
def test_dueling_quantiles_are_value_plus_centred_advantage():
    model = make_model("--dqn_hidden_sizes", "8", "--n_quantiles", "3", "--dueling",
                       action_space=spaces.Discrete(2))
    obs = torch.randn(4, 4)
    net = model.q_net
    latent = net.trunk(net.encoder(obs))
    advantage = net.advantage(latent).view(4, 2, 3)
    expected = net.value(latent).unsqueeze(1) + advantage - advantage.mean(1, keepdim=True)
    assert torch.allclose(net.quantiles(obs), expected)


@pytest.mark.contract
def test_the_defaults_are_sb3_contribs_qrdqns():
    model = make_model("--batch_size", "64")
    args = model.args
    assert args.n_quantiles == 200 and args.max_grad_norm == 0.0
    assert not model.max_grad_norm()  # the learner clips nothing
    optimizer = model.configure_optimizer()
    assert optimizer.param_groups[0]["eps"] == pytest.approx(0.01 / 64)
    assert make_model("--qr_adam_eps", "1e-5").configure_optimizer().param_groups[0]["eps"] \
        == pytest.approx(1e-5)
    # DQN's own defaults stay: gradient clipping at 10, Adam's 1e-8
    dqn = parse_args(["--config", "none", "--model_name", "dqn", "--gym_id", "CartPole-v1"])
    assert dqn.max_grad_norm == 10.0
    # the preset: RL-Zoo's qrdqn.yml CartPole entry
    preset = parse_args(["--model_name", "qr_dqn", "--gym_id", "CartPole-v1"])
    assert (preset.n_quantiles, preset.dqn_lr, preset.max_grad_norm, preset.double_q) == (
        10, 0.0023, 0.0, False)


@pytest.mark.contract
def test_continuous_actions_are_refused_in_a_paragraph():
    with pytest.raises(ConfigError, match="takes Discrete actions"):
        QRDQNModel.check_spaces(OBS, spaces.Box(-1, 1, (2,), np.float32))


@pytest.mark.e2e
def test_qr_dqn_learns_cartpole_in_one_process(tmp_path, record_property):
    """Deterministic (--num_workers 0, seed 0): test_dqn_loop's CartPole flags (RL-Zoo's
    entry's shape with 64x64 layers), 10 quantiles, no gradient clipping. Random play scores
    about 20. Measured over seeds 0-4 with these flags: the best evaluation within 6,144
    steps was 283, 188, 345, 310 and 273; the bar of 150 leaves a margin for a CPU whose
    rounding takes another trajectory."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--model_name", "qr_dqn", "--gym_id", "CartPole-v1", "--num_workers", "0",
                    "--config", "none", "--n_quantiles", "10",
                    "--dqn_hidden_sizes", "64,64", "--dqn_lr", "2.3e-3", "--batch_size", "64",
                    "--learning_starts", "1000", "--start_steps", "1000",
                    "--target_update_interval", "128", "--utd_ratio", "0.5", "--eps_final",
                    "0.04", "--num_envs_per_worker", "1", "--learner_threads", "1",
                    "--eval_interval", "1024", "--eval_episodes", "5", "--target_return",
                    "none", "--quiet", "--no-tensorboard", "--seed", "0", "--total_steps",
                    "6144", "--eps_fraction", str(2400 / 6144), "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    record_property("best_eval_return", summary["best_eval_return"])
    assert summary["best_eval_return"] >= 150, summary
    assert {"q_loss", "q_mean", "td_error_mean", "epsilon"} <= set(rows[0])
