"""TD3+BC: the actor's loss by hand (lambda from Q1's own scale, detached; the squared distance
to the batch's actions in the actor's units), its gradient reaching the actor alone, the critics
and the delay left as TD3's, the policy held near the data where TD3's drifts; flags; end to
end: it learns Pendulum from a scripted controller's data, offline, and exports."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.data import DatasetWriter
from core.errors import ConfigError
from models.td3 import TD3Model
from models.td3_bc import TD3BCModel
from options.options import parse_args
from test_e2e import read_run, run_main
from test_td3 import ACT, ACT2, OBS, random_batch

pytestmark = pytest.mark.unit


def make_args(*flags, name="td3_bc"):
    return parse_args(["--config", "none", "--num_workers", "0", "--gym_id", "Pendulum-v1",
                       "--model_name", name, "--td3_hidden_sizes", "16,16", *flags])


def make_model(*flags, seed=0, action_space=ACT, cls=TD3BCModel):
    torch.manual_seed(seed)
    name = "td3_bc" if cls is TD3BCModel else "td3"
    return cls(make_args(*flags, name=name), OBS, action_space)


# -- the actor's loss, by hand ------------------------------------------------------------------
def linear_model(alpha):
    """No hidden layers: pi(s) = tanh(W s + b) and Q1(s, a) = u . [s, a] + c, set by hand."""
    model = make_model("--td3_hidden_sizes", "none", "--policy_delay", "1", "--td3_bc_alpha",
                       str(alpha), action_space=ACT2)
    with torch.no_grad():
        model.actor.mu.weight.copy_(torch.tensor([[0.3, -0.2, 0.1], [-0.4, 0.5, 0.2]]))
        model.actor.mu.bias.copy_(torch.tensor([0.1, -0.3]))
        q1 = model.critic.q1[0] if isinstance(model.critic.q1, torch.nn.Sequential) else \
            model.critic.q1
        q1.weight.copy_(torch.tensor([[0.5, -1.0, 0.25, 2.0, -3.0]]))
        q1.bias.copy_(torch.tensor([0.7]))
    return model


def test_the_actor_loss_is_lambda_scaled_q_plus_the_squared_distance_to_the_data():
    """-lambda mean Q1(s, pi(s)) + mean (pi(s) - a)^2, lambda = alpha / mean |Q1(s, pi(s))|,
    a the batch's action rescaled from the bounds [-1, 1] x [0, 4] into [-1, 1]; in numpy."""
    model = linear_model(alpha=2.5)
    batch = random_batch(16, seed=3, action_space=ACT2)
    _, stats = model.step(batch)
    t = batch.transitions
    W = np.array([[0.3, -0.2, 0.1], [-0.4, 0.5, 0.2]])
    pi = np.tanh(t.observations.astype(np.float64) @ W.T + np.array([0.1, -0.3]))
    q = np.concatenate([t.observations, pi], axis=1) @ np.array([0.5, -1.0, 0.25, 2.0, -3.0]) + 0.7
    unit = (t.actions - np.array([0.0, 2.0])) / np.array([1.0, 2.0])
    lam = 2.5 / np.abs(q).mean()
    bc = ((pi - unit) ** 2).mean()
    assert stats["bc_lambda"] == pytest.approx(lam, rel=1e-5)
    assert stats["bc_loss"] == pytest.approx(bc, rel=1e-5)
    assert stats["actor_loss"] == pytest.approx(-lam * q.mean() + bc, rel=1e-5)


def test_lambda_is_a_constant_and_the_gradient_reaches_the_actor_alone():
    """The actor's gradient is that of -lambda mean Q1 + bc with lambda a number (no gradient
    through mean |Q1|), Q1's parameters seen as constants; the critics' gradients are TD3's
    critic loss alone (the same as plain TD3's on the same batch and noise)."""
    model = linear_model(alpha=0.7)
    batch = random_batch(32, seed=5, action_space=ACT2)
    torch.manual_seed(11)
    grads, stats = model.step(batch)

    obs, actions, *_ = model.unpack(batch)
    model.zero_grad()
    pi = torch.tanh(model.actor(obs))
    q = model.critic(obs, pi)[0]
    lam = float(stats["bc_lambda"])
    (-lam * q.mean() + (pi - actions).pow(2).mean()).backward()
    for name, p in model.actor.named_parameters():
        np.testing.assert_allclose(grads[f"actor.{name}"], p.grad.numpy(), rtol=1e-5, atol=1e-7)

    plain = TD3Model(make_args("--td3_hidden_sizes", "none", "--policy_delay", "1",
                               name="td3"), OBS, ACT2)
    plain.load_state_dict(model.state_dict())
    torch.manual_seed(11)
    plain_grads, _ = plain.step(batch)
    for name, _ in model.critic.named_parameters():
        np.testing.assert_allclose(grads[f"critic.{name}"], plain_grads[f"critic.{name}"],
                                   rtol=1e-6, atol=1e-8)


def test_between_policy_updates_only_the_critics_learn_as_in_td3():
    """--policy_delay 2: the first update has no actor loss (no bc columns, no actor
    gradients); the second has both."""
    model = make_model("--policy_delay", "2")
    grads, stats = model.step(random_batch(16, seed=1))
    assert not any(name.startswith("actor.") for name in grads)
    assert "bc_loss" not in stats and "actor_loss" not in stats
    model.weights_version += 1
    grads, stats = model.step(random_batch(16, seed=2))
    assert any(name.startswith("actor.") for name in grads)
    assert {"bc_loss", "bc_lambda", "actor_loss"} <= set(stats)


def test_the_bc_term_holds_the_policy_near_the_datas_actions_where_td3_drifts():
    """The same seed, batch and 300 updates on a fixed batch with one action for every state:
    TD3+BC's policy ends nearer the data's action than TD3's (whose actor follows its critic
    only), and a smaller alpha nearer still. Measured: mean squared distances 0.084 (TD3),
    0.047 (alpha 2.5), 0.012 (alpha 0.1)."""
    rng = np.random.default_rng(0)
    batch = random_batch(64, seed=7)
    batch.transitions.actions[:] = 1.0  # 0.5 in the actor's units

    def distance(cls, *flags):
        model = make_model("--policy_delay", "1", *flags, cls=cls)
        optimizer = model.configure_optimizer()
        for _ in range(300):
            optimizer.zero_grad()
            grads, _ = model.step(batch)
            for name, p in model.named_parameters():
                if name in grads:
                    p.grad = torch.as_tensor(grads[name])
            optimizer.step()
            model.after_update()
            model.weights_version += 1
        with torch.no_grad():
            obs = torch.as_tensor(rng.uniform(-2, 2, (256, 3)).astype(np.float32))
            return float((model.policy(obs) - 0.5).pow(2).mean())

    td3, bc, tight = (distance(TD3Model), distance(TD3BCModel),
                      distance(TD3BCModel, "--td3_bc_alpha", "0.1"))
    assert tight < bc < td3, (tight, bc, td3)
    assert tight < 0.05


@pytest.mark.contract
def test_defaults_are_d3rlpys_td3plusbc_and_the_model_is_td3s_otherwise():
    args = make_args()
    assert args.td3_bc_alpha == 2.5 and args.batch_size == 256
    assert (args.actor_lr, args.critic_lr, args.tau, args.td3_gamma, args.policy_delay,
            args.target_policy_noise, args.target_noise_clip) == (3e-4, 3e-4, 0.005, 0.99, 2,
                                                                  0.2, 0.5)
    assert args.agent_name == "sac_agent"
    with pytest.raises(ConfigError, match="--td3_bc_alpha: '0' must be > 0"):
        make_args("--td3_bc_alpha", "0")
    # acting and export are TD3's own (the same actor)
    model = make_model(action_space=ACT2)
    obs = np.random.default_rng(0).uniform(-2, 2, (5, 3)).astype(np.float32)
    acted, _ = model.choose_actions(obs, deterministic=True)
    with torch.no_grad():
        exported = model.export_module()(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(acted, exported, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match=r"needs continuous \(Box\) actions.*Discrete\(3\)"):
        TD3BCModel.check_spaces(OBS, spaces.Discrete(3))


# -- end to end ---------------------------------------------------------------------------------
def swing_up(obs, rng, noise):
    """A scripted Pendulum controller: energy pumping, then a PD law near the top (about -135
    an episode over seeds 0-9 with noise 1.0 on its torque; uniform random play about -1,200)."""
    cos, sin, velocity = obs
    if cos > 0.85:
        torque = -(12.0 * np.arctan2(sin, cos) + 2.5 * velocity)
    elif 0.5 * velocity ** 2 + 15.0 * cos < 15.0:   # below the top's energy: push along
        torque = 2.0 if velocity >= 0 else -2.0
    else:
        torque = -0.5 * np.sign(velocity)
    return np.clip([torque + noise * rng.standard_normal()], -2.0, 2.0).astype(np.float32)


def scripted_pendulum_dataset(directory, episodes=10, noise=1.0):
    import gymnasium as gym
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    with DatasetWriter(str(directory), env.observation_space, env.action_space,
                       env_id="Pendulum-v1", algorithm_name="scripted swing-up") as writer:
        for episode in range(episodes):
            obs, _ = env.reset(seed=episode)
            done = False
            while not done:
                action = swing_up(obs, rng, noise)
                next_obs, reward, terminated, truncated, _ = env.step(action)
                writer.add_steps(obs[None], action[None], [reward], [terminated], [truncated],
                                 next_obs[None].astype(np.float32))
                obs, done = next_obs, terminated or truncated
    return str(directory)


@pytest.mark.e2e
def test_td3_bc_learns_pendulum_from_a_scripted_controllers_data(tmp_path, record_property):
    """Offline (--dataset, no env stepped but the test worker's), the paper's recipe
    (--normalize_obs), 64x64, deterministic (--num_workers 0, seed 0). Behaviour -134 over the
    10 episodes (2,000 transitions). Measured: seeds 0 and 1 reached -146 and -147 within
    1,000-1,500 updates (evaluations at 500: -1,128, -146, -170, -297 and -1,511, -976, -147,
    -298); random play scores about -1,200, so the bar of -400 leaves room for another CPU's
    rounding."""
    data = scripted_pendulum_dataset(tmp_path / "pendulum-scripted-v0")
    run_dir = str(tmp_path / "run")
    proc = run_main("--model_name", "td3_bc", "--gym_id", "Pendulum-v1", "--config", "none",
                    "--dataset", data, "--normalize_obs", "--num_workers", "0",
                    "--td3_hidden_sizes", "64,64", "--learner_threads", "1", "--seed", "0",
                    "--total_steps", "2000", "--eval_interval", "250", "--eval_episodes", "3",
                    "--target_return", "none", "--run_dir", run_dir, "--quiet",
                    "--no-tensorboard", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    record_property("best_eval_return", summary["best_eval_return"])
    assert summary["step_clock"] == "updates"
    assert summary["best_eval_return"] >= -400, [r.get("eval_return") for r in rows]
    bc = [float(r["bc_loss"]) for r in rows if r.get("bc_loss") not in (None, "")]
    assert bc and bc[-1] < bc[0]  # the policy moved towards the data
