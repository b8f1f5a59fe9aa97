"""Noisy networks (models/noisy.py; dqn's --exploration noisy) against hand-computed values: the
factorised weight and bias, the paper's initialisation, the mean weights when the noise is off,
gradients on mu and sigma; DQN's use of them: every linear layer after the encoder noisy, no
epsilon, greedy evaluation on the mean weights, a fresh draw per fragment, the learner's draws
keyed by the update's number (what a resume needs), the export on the mean weights; end to end:
a run resumes bit for bit."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from models.dqn import DQNActing, DQNModel
from models.noisy import (NoisyLinear, keyed_generator, noise_disabled, noisy_layers,
                          without_noise)
from models.c51 import C51Model
from models.qr_dqn import QRDQNModel
from options.options import parse_args
from tests.test_e2e import run_main, run_mains

OBS = spaces.Box(-np.inf, np.inf, (4,), np.float32)


def noisy_model(*flags, name="dqn", seed=0):
    args = parse_args(["--config", "none", "--num_workers", "0", "--model_name", name,
                       "--gym_id", "CartPole-v1", "--exploration", "noisy",
                       "--dqn_hidden_sizes", "16,16", *flags])
    torch.manual_seed(seed)
    cls = {"qr_dqn": QRDQNModel, "c51": C51Model}.get(name, DQNModel)
    return cls(args, OBS, spaces.Discrete(3))


@pytest.mark.unit
def test_the_factorised_weight_and_bias_by_hand():
    layer = NoisyLinear(2, 2, sigma0=0.5)
    with torch.no_grad():
        layer.weight_mu.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        layer.weight_sigma.fill_(0.5)
        layer.bias_mu.copy_(torch.tensor([0.0, 1.0]))
        layer.bias_sigma.fill_(2.0)
        layer.eps_in.copy_(torch.tensor([1.0, 2.0]))  # already f(eps): the forward's inputs
        layer.eps_out.copy_(torch.tensor([3.0, -1.0]))
    # W = mu + 0.5 * outer([3, -1], [1, 2]) = [[2.5, 3], [-0.5, 0]]; b = [0, 1] + 2 [3, -1]
    x = torch.tensor([[1.0, 1.0]])
    assert layer(x).tolist() == [[2.5 + 3.0 + 6.0, -0.5 + 0.0 - 1.0]]
    with noise_disabled(layer):
        assert layer(x).tolist() == [[1.0, 2.0]]
    assert layer.noise_enabled  # back on after the block


@pytest.mark.unit
def test_the_papers_factorised_initialisation_and_noise():
    layer = NoisyLinear(16, 8, sigma0=0.5)
    bound = 1 / math.sqrt(16)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    assert torch.all(layer.weight_sigma == 0.5 * bound) and torch.all(layer.bias_sigma == 0.5 * bound)
    # f(x) = sign(x) sqrt|x| of standard normals, drawn from the generator given
    layer.resample(keyed_generator(7))
    expected = torch.randn(16, generator=keyed_generator(7))
    assert torch.equal(layer.eps_in, expected.sign() * expected.abs().sqrt())
    # the noise is not in state_dict: weights handed to a worker do not carry it
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}


@pytest.mark.unit
def test_the_small_batch_form_without_gradients_is_the_same_layer():
    layer = NoisyLinear(8, 5)
    x = torch.randn(3, 8)
    with torch.no_grad():
        two_products = layer(x)  # 3 rows, no gradient: the factorised products
    built = layer(x)  # with gradients: the noisy weight built
    assert torch.allclose(two_products, built, atol=1e-6)


@pytest.mark.unit
def test_gradients_reach_mu_and_sigma():
    layer = NoisyLinear(3, 2)
    layer(torch.randn(5, 3)).sum().backward()
    for p in (layer.weight_mu, layer.weight_sigma, layer.bias_mu, layer.bias_sigma):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.unit
@pytest.mark.parametrize("name", ["dqn", "qr_dqn", "c51"])
def test_every_linear_layer_after_the_encoder_is_noisy_and_acting_has_no_epsilon(name):
    model = noisy_model("--dueling", name=name)
    net = model.q_net
    assert not any(type(m) is nn.Linear for m in net.modules())
    assert len(noisy_layers(net)) == 4  # two hidden layers, the value and advantage heads
    # numpy acting on views of the parameters and the noise: torch's values, noise on and off
    assert model.numpy_q is not None
    obs = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    for _ in range(2):
        model.begin_fragment(3, 0.0)
        with torch.no_grad():
            expected = net(torch.as_tensor(obs)).numpy()
        np.testing.assert_allclose(model.q_values(obs), expected, rtol=1e-5, atol=1e-5)
        with noise_disabled(net), torch.no_grad():
            np.testing.assert_allclose(model.q_values(obs), net(torch.as_tensor(obs)).numpy(),
                                       rtol=1e-5, atol=1e-5)
    model.begin_fragment(5, 0.0)
    assert model.epsilons.tolist() == [0.0] * 5 and model.exploration_now(0.0) == 0.0


@pytest.mark.unit
@pytest.mark.parametrize("name", ["dqn", "qr_dqn", "c51"])
def test_evaluation_is_greedy_on_the_mean_weights_and_training_on_each_fragments_noise(name):
    model = noisy_model("--noisy_sigma0", "5", name=name)  # noise large enough to flip argmaxes
    obs = np.random.default_rng(0).standard_normal((200, 4)).astype(np.float32)
    with torch.no_grad():
        mean_q = without_noise(model.q_net)(torch.as_tensor(obs)).numpy()
    greedy = mean_q.argmax(-1).tolist()
    draws = []
    for _ in range(3):
        model.begin_fragment(200, 0.0)  # a new draw of the noise
        assert model.choose_actions(obs, deterministic=True)[0].tolist() == greedy
        draws.append(model.choose_actions(obs)[0].tolist())
    # the same fragment acts on one draw; fragments on different draws
    assert model.choose_actions(obs)[0].tolist() == draws[-1]
    assert draws[0] != greedy and draws[0] != draws[1]


@pytest.mark.unit
def test_the_learners_noise_is_keyed_by_the_update_so_a_resumed_learner_draws_the_same():
    a, b = noisy_model(seed=0), noisy_model(seed=1)
    b.set_weights(a.get_weights())  # a restored learner: the same weights and noise seed
    for version in (0, 5):
        a.weights_version = b.weights_version = version
        a.draw_update_noise(version)
        b.draw_update_noise(version)
        for la, lb in zip(noisy_layers(a), noisy_layers(b)):
            assert torch.equal(la.eps_in, lb.eps_in) and torch.equal(la.eps_out, lb.eps_out)
    # online and target draw apart
    online, target = noisy_layers(a.q_net)[0], noisy_layers(a.q_target)[0]
    assert not torch.equal(online.eps_in, target.eps_in)
    # after an update the next update's noise is drawn (after_update: version + 1)
    before = noisy_layers(a.q_net)[0].eps_in.clone()
    a.after_update()
    assert a.noise_version == 6 and not torch.equal(before, noisy_layers(a.q_net)[0].eps_in)


@pytest.mark.unit
def test_a_fragment_in_the_learners_process_makes_the_learner_draw_its_own_again():
    """--num_workers 0: the acting model may be the learner's; a fragment's draw must not
    stand in for the update's keyed draw."""
    from core.learning.replay_buffer import Transitions
    model = noisy_model()
    rows = 4
    batch = Transitions(observations=np.zeros((rows, 4), np.float32),
                        actions=np.zeros(rows, np.int64), rewards=np.zeros(rows, np.float32),
                        next_observations=np.zeros((rows, 4), np.float32),
                        terminated=np.zeros(rows, np.float32),
                        discounts=np.full(rows, 0.99, np.float32))
    model.update_inputs(batch)  # the first update's noise: keyed by version 0
    assert model.noise_version == 0
    keyed = noisy_layers(model.q_net)[0].eps_in.clone()
    model.begin_fragment(1, 0.0)  # acting draws its own
    assert model.noise_version is None
    assert not torch.equal(noisy_layers(model.q_net)[0].eps_in, keyed)
    model.update_inputs(batch)  # so the update draws its keyed noise again
    assert torch.equal(noisy_layers(model.q_net)[0].eps_in, keyed)


@pytest.mark.unit
def test_the_exported_module_acts_on_the_mean_weights():
    model = noisy_model()
    acting = DQNActing(model)
    assert acting.q_net is not model.q_net
    assert not any(layer.noise_enabled for layer in noisy_layers(acting.q_net))
    assert all(layer.noise_enabled for layer in noisy_layers(model.q_net))
    obs = torch.randn(7, 4)
    with noise_disabled(model.q_net), torch.no_grad():
        assert torch.equal(acting(obs), model.q_net(obs).argmax(-1))


@pytest.mark.contract
def test_plain_dqn_keeps_its_layers_and_checkpoint_keys():
    args = parse_args(["--config", "none", "--model_name", "dqn", "--gym_id", "CartPole-v1"])
    model = DQNModel(args, OBS, spaces.Discrete(2))
    assert not noisy_layers(model) and "noise_seed" not in model.state_dict()
    assert model.numpy_q is not None


@pytest.mark.e2e
def test_a_noisy_dqn_run_resumes_exactly(tmp_path):
    """N steps straight == N/2, stop, --restore to N, bit for bit, with noisy networks (the
    learner's noise keyed by the update, the fragments' by the restored acting generator)."""
    from core.run.checkpoint import load_checkpoint
    common = ("--model_name", "qr_dqn", "--gym_id", "CartPole-v1", "--num_workers", "0",
              "--config", "none", "--exploration", "noisy", "--n_quantiles", "8",
              "--dqn_hidden_sizes", "32,32", "--batch_size", "32", "--learning_starts", "200",
              "--start_steps", "200", "--target_update_interval", "50", "--utd_ratio", "0.5",
              "--num_envs_per_worker", "1", "--learner_threads", "1", "--eval_interval",
              "100000", "--target_return", "none", "--quiet", "--no-tensorboard", "--seed",
              "4", "--total_steps", "2048", "--checkpoint_interval", "100000",
              "--checkpoint_buffer")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "1000"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    rest = run_main("--restore", resumed, "--quiet")
    assert rest.returncode == 0, rest.stderr
    a, meta_a = load_checkpoint(f"{straight}/checkpoints/last.pt")
    b, meta_b = load_checkpoint(f"{resumed}/checkpoints/last.pt")
    assert meta_a["env_steps"] == meta_b["env_steps"] >= 2048 and meta_a["updates"] > 0
    assert "noise_seed" in a["model"]
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
