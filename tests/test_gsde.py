"""gSDE for PPO (--use_sde): actions mu(s) + phi(s) @ E by hand, the exploration matrices drawn
per env at each fragment's start and every --sde_sample_freq steps, the log-likelihood of the
per-state Gaussian (the same in acting and in the loss), detached features, errors, end to end."""
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal

from core.errors import ConfigError
from models.custom_model import SharedTrunkPPO
from models.ppo import PPOModel
from options.options import parse_args
from test_e2e import read_run, run_main

pytestmark = pytest.mark.unit

OBS = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
ACT = spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)


def make_model(*flags, action_space=ACT):
    args = parse_args(["--config", "none", "--num_workers", "0", "--use_sde",
                       "--log_std_init", "-1.0", *flags])
    torch.manual_seed(0)
    return PPOModel(args, OBS, action_space)


def obs(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)


def by_hand(model, o):
    """(phi(s), mu(s)) from the actor's layers."""
    with torch.no_grad():
        x = torch.as_tensor(o)
        for layer in list(model.actor)[:-1]:
            x = layer(x)
        return x.numpy(), model.actor[-1](x).numpy()


def test_actions_are_the_mean_plus_latent_times_each_envs_matrix():
    model = make_model()
    assert tuple(model.log_std.shape) == (64, 2) and model.numpy_actor is None
    model.begin_fragment(4)
    o = obs(4)
    actions, extras = model.choose_actions(o, values=False)
    latent, mean = by_hand(model, o)
    E = model.exploration_matrices.numpy()
    assert E.shape == (4, 64, 2)
    expected = mean + np.einsum("bl,bla->ba", latent, E)
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)
    # E's entries are N(0, sigma^2) with sigma = exp(-1) (64,000 draws: standard error ~0.001)
    model.resample_exploration(500)
    many = model.exploration_matrices.numpy()
    assert abs(many.std() - np.exp(-1.0)) < 0.01 and abs(many.mean()) < 0.01
    # log-likelihood: the per-state Gaussian N(mu, sqrt(phi^2 @ sigma^2 + 1e-6))
    std = np.sqrt(latent ** 2 @ (np.exp(-2.0) * np.ones((64, 2))) + 1e-6)
    expected_lp = Normal(torch.as_tensor(mean), torch.as_tensor(std)).log_prob(
        torch.as_tensor(actions)).sum(-1).numpy()
    np.testing.assert_allclose(extras["log_probs"], expected_lp, rtol=1e-4)
    deterministic, _ = model.choose_actions(o, deterministic=True, values=False)
    np.testing.assert_allclose(deterministic, mean, rtol=1e-5, atol=1e-6)


def test_matrices_stay_for_the_fragment_and_are_redrawn_at_the_next():
    model = make_model()
    model.begin_fragment(2)
    first = model.exploration_matrices.clone()
    for seed in range(5):
        model.choose_actions(obs(2, seed), values=False)
        assert torch.equal(model.exploration_matrices, first)
    model.begin_fragment(2)
    assert not torch.equal(model.exploration_matrices, first)


def test_sde_sample_freq_redraws_every_n_steps():
    model = make_model("--sde_sample_freq", "3")
    model.begin_fragment(2)
    seen = []
    for t in range(9):
        model.choose_actions(obs(2, t), values=False)
        seen.append(model.exploration_matrices.clone())
    changed = [not torch.equal(seen[t], seen[t - 1]) for t in range(1, 9)]
    # steps 0-2 on the fragment's matrices, new ones at steps 3 and 6
    assert changed == [False, False, True, False, False, True, False, False]


def test_the_same_state_gets_the_same_noise_within_a_fragment():
    """Smooth exploration: with one matrix, the noise is a function of the state."""
    model = make_model()
    model.begin_fragment(1)
    o = obs(1)
    a1, _ = model.choose_actions(o, values=False)
    model.choose_actions(obs(1, 5), values=False)
    a2, _ = model.choose_actions(o, values=False)
    np.testing.assert_allclose(a1, a2)


def test_loss_log_prob_equals_acting_log_prob_and_features_get_no_noise_gradient():
    model = make_model()
    model.begin_fragment(8)
    o = obs(8)
    actions, extras = model.choose_actions(o, values=False)
    dist = model.distribution(torch.as_tensor(o))
    np.testing.assert_allclose(model.log_prob(dist, torch.as_tensor(actions)).detach().numpy(),
                               extras["log_probs"], rtol=1e-5)
    # the entropy depends on sigma and on phi(s) detached: its gradient reaches log_std only
    model.zero_grad(set_to_none=True)
    model.entropy(model.distribution(torch.as_tensor(o))).mean().backward()
    assert model.log_std.grad is not None and model.log_std.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.actor.parameters())


@pytest.mark.contract
def test_errors():
    with pytest.raises(ConfigError, match="Box actions"):
        make_model(action_space=spaces.Discrete(3))
    args = parse_args(["--config", "none", "--num_workers", "0", "--model_name", "custom_model",
                       "--use_sde"])
    with pytest.raises(ConfigError, match="built-in MLP actor"):
        SharedTrunkPPO(args, OBS, ACT)


@pytest.mark.e2e
def test_gsde_runs_end_to_end(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "ppo",
                    "--config", "none", "--use_sde", "--sde_sample_freq", "4",
                    "--num_workers", "0", "--num_envs_per_worker", "2", "--rollout_steps", "64",
                    "--total_steps", "512", "--eval_interval", "256", "--eval_episodes", "1",
                    "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 512 and summary["last_eval_return"] is not None
