"""IQN (models/iqn.py) against hand-computed values: the loss at drawn fractions, the network's
shape (psi times phi(tau) through the head), the target's next action by the mean at the fixed
acting fractions, numpy acting against torch's, the learner's keyed draws, the defaults; and one
short run of main.py."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from models.iqn import IQNModel, NumpyImplicitQ
from models.qr_dqn import quantile_huber_loss
from options.options import parse_args
from tests.test_e2e import read_run, run_main

OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = spaces.Discrete(2)


def make_model(*flags, obs_space=OBS, action_space=ACTIONS, seed=0):
    args = parse_args(["--config", "none", "--num_workers", "0", "--model_name", "iqn",
                       "--gym_id", "CartPole-v1", *flags])
    torch.manual_seed(seed)
    return IQNModel(args, obs_space, action_space)


@pytest.mark.unit
def test_the_quantile_huber_loss_at_given_fractions_by_hand():
    """Current [0, 1] at tau [0.1, 0.9], target [0.5, 3]. u = target_j - current_i: i=0: 0.5, 3
    (weight 0.1; Huber 0.125, 2.5: 0.2625); i=1: -0.5 (weight |0.9 - 1| = 0.1, Huber 0.125),
    2 (weight 0.9, Huber 1.5: 1.3625). Summed over i, averaged over j: 0.8125."""
    loss = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]),
                               torch.tensor([[0.1, 0.9]]))
    assert loss.item() == pytest.approx(0.8125)
    # the fixed fractions are QR-DQN's (2i - 1) / 2N: passing them gives its loss
    current, target = torch.randn(3, 4), torch.randn(3, 5)
    midpoints = torch.tensor([0.125, 0.375, 0.625, 0.875]).expand(3, 4)
    assert torch.equal(quantile_huber_loss(current, target, midpoints),
                       quantile_huber_loss(current, target))


@pytest.mark.unit
def test_the_network_is_psi_times_phi_of_tau_through_the_head():
    model = make_model("--dqn_hidden_sizes", "8,6", "--quantile_embedding_dim", "5",
                       action_space=spaces.Discrete(3))
    net = model.q_net
    obs, taus = torch.randn(2, 4), torch.rand(2, 7)
    psi = net.trunk(net.encoder(obs))
    assert psi.shape == (2, 8)  # all hidden layers but the last
    cosines = torch.cos(torch.pi * taus.unsqueeze(-1) * torch.arange(1.0, 6.0))
    phi = torch.relu(cosines @ net.tau_embedding[0].weight.T + net.tau_embedding[0].bias)
    expected = net.q(net.head_trunk(psi.unsqueeze(1) * phi)).transpose(1, 2)
    z = net.quantiles(obs, taus)
    assert z.shape == (2, 3, 7) and torch.allclose(z, expected, atol=1e-6)
    # Q: the mean at the K midpoints (2k - 1) / 2K
    k = model.args.num_quantile_samples
    midpoints = (torch.arange(k) + 0.5) / k
    assert torch.allclose(net(obs), net.quantiles(obs, midpoints).mean(-1), atol=1e-6)
    # the target's one pass of psi gives both
    z_both, q_both = net.quantiles_and_q(obs, taus)
    assert torch.allclose(z_both, z, atol=1e-6) and torch.allclose(q_both, net(obs), atol=1e-6)


@pytest.mark.unit
@pytest.mark.parametrize("flags", [(), ("--dueling",), ("--exploration", "noisy"),
                                   ("--dueling", "--exploration", "noisy")])
def test_numpy_acting_gives_torchs_q_values(flags):
    model = make_model("--dqn_hidden_sizes", "32,32", *flags, action_space=spaces.Discrete(3))
    assert isinstance(model.numpy_q, NumpyImplicitQ)
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    model.begin_fragment(5)
    with torch.no_grad():
        expected = model.q_net(torch.as_tensor(obs)).numpy()
    assert model.q_values(obs) == pytest.approx(expected, abs=1e-5)


def constant_quantiles(network, values):
    """A network whose Z_tau(s, a) is values[a] for every s and tau: zero weights but the
    head's bias (a target network's are buffers: its state_dict has both)."""
    with torch.no_grad():
        for tensor in network.state_dict().values():
            tensor.zero_()
        network.q.bias.copy_(torch.as_tensor(values, dtype=torch.float32))


@pytest.mark.unit
def test_the_target_and_the_loss_by_hand():
    """Constant quantiles: target network (1, 2) for actions (0, 1): a* = 1 (no double Q), y =
    r + discount (1 - terminated) 2 at every tau'. Online (0, 5): row 0 took action 0 (u = 3 -
    0 = 3 for every pair: each i's weight tau_i, Huber 2.5), row 1 action 1 (u = 3 - 5 = -2:
    weight 1 - tau_i, Huber 1.5)."""
    model = make_model("--dqn_hidden_sizes", "4", "--no-double_q",
                       "--num_tau_samples", "2", "--num_tau_prime_samples", "3")
    constant_quantiles(model.q_target, [1.0, 2.0])
    constant_quantiles(model.q_net, [0.0, 5.0])
    obs = torch.zeros(2, 4)
    taus = torch.tensor([[0.2, 0.6], [0.5, 0.9]])
    loss, stats, td = model.update_loss(obs, torch.tensor([0, 1]), torch.ones(2), obs,
                                        torch.zeros(2), torch.ones(2), torch.tensor([1.0, 3.0]),
                                        taus, torch.rand(2, 3))
    row0 = (0.2 + 0.6) * 2.5
    row1 = ((1 - 0.5) + (1 - 0.9)) * 1.5
    assert loss.item() == pytest.approx((row0 + 3 * row1) / 2)
    assert td.tolist() == pytest.approx([3.0, 2.0])
    assert stats["q_mean"].item() == pytest.approx(2.5)


@pytest.mark.unit
def test_the_learners_fractions_are_keyed_by_the_seed_and_the_update():
    model = make_model()
    a, a_prime = model.draw_fractions(4, 7)
    assert a.shape == (4, 64) and a_prime.shape == (4, 64)
    assert torch.equal(a, model.draw_fractions(4, 7)[0])          # the same update: the same
    assert not torch.equal(a, model.draw_fractions(4, 8)[0])      # the next: new ones
    other = make_model(seed=1)
    assert not torch.equal(a, other.draw_fractions(4, 7)[0])      # another run: its own
    other.load_state_dict(model.state_dict())                     # resumed: the run's own
    assert torch.equal(a, other.draw_fractions(4, 7)[0])
    assert 0.0 <= float(a.min()) and float(a.max()) < 1.0


@pytest.mark.contract
def test_the_defaults_are_the_papers():
    model = make_model("--batch_size", "32")
    args = model.args
    assert (args.num_tau_samples, args.num_tau_prime_samples, args.num_quantile_samples,
            args.quantile_embedding_dim, args.max_grad_norm) == (64, 64, 32, 64, 0.0)
    assert model.configure_optimizer().param_groups[0]["eps"] == pytest.approx(0.01 / 32)
    assert make_model("--iqn_adam_eps", "1e-5").configure_optimizer().param_groups[0]["eps"] \
        == pytest.approx(1e-5)


@pytest.mark.e2e
def test_iqn_trains_and_evaluates_in_one_process(tmp_path):
    """A short run end to end (replay, learner, target updates, evaluation, checkpoint); not a
    learning test: IQN's learning is not measured yet."""
    run_dir = tmp_path / "run"
    proc = run_main("--model_name", "iqn", "--gym_id", "CartPole-v1", "--num_workers", "0",
                    "--config", "none", "--dqn_hidden_sizes", "32,32", "--num_tau_samples", "8",
                    "--num_tau_prime_samples", "8", "--num_quantile_samples", "8",
                    "--total_steps", "1500", "--learning_starts", "500", "--start_steps", "500",
                    "--eval_interval", "750", "--target_return", "none", "--seed", "0",
                    "--run_dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary, _ = read_run(run_dir)
    assert summary["stopped_because"] == "total_steps"
    assert (run_dir / "checkpoints" / "last.pt").exists()
