"""Pixels and physics: Atari preprocessing, uint8 observations end to end, the Nature CNN
encoder, MuJoCo's exact resume."""
import argparse
import os

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.registry import unwrap_actor_class
from core.errors import ConfigError
from envs.gym_env import GymEnv
from models.encoders import NatureCNN, make_encoder, resolve_encoder
from options.options import parse_args, run_spec
from test_e2e import REPO, read_run, run_main

pytestmark = pytest.mark.unit

PLUGINS = os.path.join(REPO, "tests", "plugins")
Env = unwrap_actor_class(GymEnv)


def args_for(*flags):
    return parse_args(["--config", "none", *flags])


def make(*flags, evaluation=False, seed=0):
    args = args_for(*flags)
    if evaluation:
        args = argparse.Namespace(**{**vars(args), "evaluation": True})
    return Env(args, seed=seed)


# -- preprocessing -----------------------------------------------------------------------------
@pytest.mark.parametrize("flags, shape", [
    ((), (4, 84, 84)),
    (("--frame_stack", "1"), (84, 84)),
    (("--no-grayscale",), (4, 84, 84, 3)),
    (("--screen_size", "64", "--frame_stack", "2"), (2, 64, 64)),
    (("--no-atari_preprocessing",), (210, 160, 3)),
])
def test_atari_observations_are_uint8_of_the_preprocessed_shape(flags, shape):
    env = make("--gym_id", "ALE/Breakout-v5", *flags)
    obs, _ = env.reset(seed=0)
    step = env.step(env.action_space.sample())
    for o in (obs, step.obs):
        assert o.shape == shape and o.dtype == np.uint8
    assert env.observation_space.shape == shape and env.observation_space.dtype == np.uint8


def test_training_rewards_are_clipped_and_evaluation_keeps_the_score():
    """SpaceInvaders pays 5 to 30 points per invader: the same seeded play is sign-clipped in
    a training env and the game's score in an evaluation env."""
    def play(env):
        env.reset(seed=3)
        rng = np.random.default_rng(0)
        rewards = []
        for _ in range(400):
            step = env.step(rng.integers(env.action_space.n))
            rewards.append(step.reward)
            if step.terminated or step.truncated:
                break
        return np.array(rewards)

    train = play(make("--gym_id", "ALE/SpaceInvaders-v5"))
    score = play(make("--gym_id", "ALE/SpaceInvaders-v5", evaluation=True))
    assert set(np.unique(train)) <= {-1.0, 0.0, 1.0} and train.max() == 1.0
    assert score.max() >= 5.0
    assert np.array_equal(np.sign(score), train)  # same play, only the reward differs
    no_clip = play(make("--gym_id", "ALE/SpaceInvaders-v5", "--no-clip_reward"))
    assert np.array_equal(no_clip, score)


def test_episodic_life_ends_training_episodes_at_a_life_lost_but_not_evaluation():
    def steps_to_end(env):
        env.reset(seed=0)
        for t in range(1, 5000):
            step = env.step(0)  # NOOP: Breakout's ball (fired at the start) is missed
            if step.terminated or step.truncated:
                return t
        return None

    one_life = steps_to_end(make("--gym_id", "ALE/Breakout-v5", "--episodic_life"))
    whole_game = steps_to_end(make("--gym_id", "ALE/Breakout-v5", "--episodic_life",
                                   evaluation=True))
    assert one_life is not None and whole_game is not None
    assert whole_game > 3 * one_life  # five lives, each relaunched by --fire_reset


def test_bad_atari_flags_are_config_errors():
    with pytest.raises(ConfigError, match="--frame_stack: '0' must be >= 1"):
        make("--gym_id", "ALE/Breakout-v5", "--frame_stack", "0")
    with pytest.raises(ConfigError, match="--repeat_action_probability: '1.5' must be between"):
        make("--gym_id", "ALE/Breakout-v5", "--repeat_action_probability", "1.5")
    # what the flag's type lets through, the env still refuses (ALE: a probability below 1)
    with pytest.raises(ConfigError, match=r"--repeat_action_probability 1.0 .*\[0, 1\)"):
        make("--gym_id", "ALE/Breakout-v5", "--repeat_action_probability", "1")
    with pytest.raises(ConfigError, match="--screen_size 4 is out of range"):
        make("--gym_id", "ALE/Breakout-v5", "--screen_size", "4")


# -- encoders ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 84, 84), (84, 84), (84, 84, 3), (4, 84, 84, 3),
                                   (96, 96, 3)])
def test_nature_cnn_takes_every_image_layout(shape):
    space = spaces.Box(0, 255, shape, np.uint8)
    assert resolve_encoder(args_for(), space) == "nature_cnn"
    cnn = NatureCNN(space)
    obs = torch.randint(0, 256, (5, *shape), dtype=torch.uint8)
    out = cnn(obs)
    assert out.shape == (5, 512) and out.dtype == torch.float32
    assert (out >= 0).all()  # ends in a ReLU


def test_nature_cnn_scales_pixels_to_unit_range():
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cnn = NatureCNN(space)
    pixels = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    expected = cnn.linear(cnn.cnn(pixels.float() / 255.0))
    torch.testing.assert_close(cnn(pixels), expected)


def test_encoder_choice_and_its_errors():
    vector = spaces.Box(-1, 1, (8,), np.float32)
    image = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert resolve_encoder(args_for(), vector) == "mlp"
    assert resolve_encoder(args_for("--encoder", "mlp"), image) == "mlp"
    assert make_encoder(args_for("--encoder", "mlp"), image).features_dim == 4 * 84 * 84
    with pytest.raises(ConfigError, match="--encoder nature_cnn takes image observations"):
        resolve_encoder(args_for("--encoder", "nature_cnn"), vector)
    with pytest.raises(ConfigError, match="not a Box"):
        resolve_encoder(args_for(), spaces.Dict({"a": vector}))


def test_a_text_leaf_is_a_clear_error_for_the_models():
    """Dict observations are taken (core/spaces.py); a leaf that cannot become an array is
    one paragraph naming its key and the way out."""
    from models.ppo import PPOModel
    from models.sac import SACModel
    dict_space = spaces.Dict({"pixels": spaces.Box(0, 255, (84, 84), np.uint8),
                              "mission": spaces.Text(20)})
    for model, actions in ((PPOModel, spaces.Discrete(3)),
                           (SACModel, spaces.Box(-1, 1, (2,), np.float32))):
        with pytest.raises(ConfigError, match="key 'mission' is a Text space.*--drop_keys mission"):
            model.check_spaces(dict_space, actions)


def test_ppo_on_pixels_shares_one_cnn_and_keeps_uint8_to_the_model():
    from models.ppo import PPOModel
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = PPOModel(args_for(), space, spaces.Discrete(4))
    assert isinstance(model.encoder, NatureCNN)
    assert model.actor[0].in_features == 512 and len(model.actor) == 1  # heads on the features
    assert model.numpy_actor is None and model.values_with_actions
    obs = np.random.default_rng(0).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    assert model.flat_obs(obs).dtype == torch.uint8
    actions, extras = model.choose_actions(obs)
    assert actions.shape == (3,) and extras["values"].shape == (3,)
    np.testing.assert_allclose(extras["values"], model.predict_values(obs), rtol=1e-5)


def test_sac_on_pixels_gives_the_actor_and_the_critics_their_own_cnn():
    from core.learning.replay_buffer import Transitions
    from models.sac import SACModel
    space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    model = SACModel(args_for("--model_name", "sac", "--sac_hidden_sizes", "32"), space,
                     spaces.Box(-1, 1, (2,), np.float32))
    actor_cnn, critic_cnn = model.actor.trunk[0], model.critic.encoder
    assert isinstance(actor_cnn, NatureCNN) and isinstance(critic_cnn, NatureCNN)
    assert actor_cnn is not critic_cnn
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (6, 64, 64, 3), dtype=np.uint8)
    batch = Transitions(observations=obs, actions=rng.uniform(-1, 1, (6, 2)).astype(np.float32),
                        rewards=np.ones(6, np.float32), next_observations=obs[::-1].copy(),
                        terminated=np.zeros(6, np.float32))
    gradients, stats = model.step(batch)
    assert np.isfinite(stats["critic_loss"])
    assert np.abs(gradients["critic.encoder.cnn.0.weight"]).sum() > 0
    assert np.abs(gradients["actor.trunk.0.cnn.0.weight"]).sum() > 0
    assert model.choose_actions(obs[:2])[0].shape == (2, 2)


def test_crossq_on_pixels_is_a_clear_error():
    from models.crossq import CrossQModel
    with pytest.raises(ConfigError, match="crossq has no image encoder"):
        CrossQModel(args_for("--model_name", "crossq"),
                    spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Box(-1, 1, (2,)))


# -- uint8 end to end ----------------------------------------------------------------------------
@pytest.mark.contract
def test_a_fragment_and_a_replay_sample_stay_uint8():
    from agents.sac_agent import SACAgent
    from core.learning.replay_buffer import ReplayBuffer
    from core.sampling.rollout import RolloutWorker
    args = args_for("--gym_id", "ALE/Breakout-v5", "--num_envs_per_worker", "2")
    worker = RolloutWorker(run_spec(args))
    trajectory, _, _ = worker.sample(5)
    assert trajectory.observations.dtype == np.uint8
    assert trajectory.observations.shape == (5, 2, 4, 84, 84)
    assert trajectory.last_observations.dtype == np.uint8
    worker.deliver((trajectory, *worker.sample(1)[1:]))
    assert worker.agent.data["observations"].dtype == torch.uint8

    transitions = SACAgent.transitions(trajectory)
    assert transitions.observations.dtype == np.uint8
    assert transitions.next_observations.dtype == np.uint8
    buffer = ReplayBuffer(100, (4, 84, 84), (), observation_dtype=np.uint8)
    buffer.add(transitions._replace(actions=np.zeros((10,), np.float32)))
    sample = buffer.sample(4)
    assert sample.transitions.observations.dtype == np.uint8


@pytest.mark.e2e
def test_minus_h_shows_the_atari_and_encoder_flags():
    proc = run_main("--gym_id", "ALE/Breakout-v5", "-h")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--frame_stack", "--clip_reward", "--episodic_life", "--noop_max",
                 "--fire_reset", "--encoder", "--cnn_features"):
        assert flag in proc.stdout, flag


@pytest.mark.e2e
def test_ppo_trains_on_breakout_end_to_end_with_a_plugin_cnn_model(tmp_path):
    """The Atari preset with a plugin model on the CNN encoder, through main.py."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--user_dir", PLUGINS, "--config", os.path.join(REPO, "configs",
                    "ppo-atari.yaml"), "--model_name", "pixel_ppo", "--gym_id",
                    "ALE/Breakout-v5", "--num_envs_per_worker", "4", "--rollout_steps", "32",
                    "--batch_size", "64", "--num_epochs", "1", "--total_steps", "128",
                    "--eval_interval", "128", "--eval_episodes", "1", "--max_episode_frames",
                    "1000", "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 128 and rows[-1]["eval_return"] != ""
    with open(os.path.join(run_dir, "config.yaml")) as f:
        config = f.read()
    assert "head_width: 128" in config and "clip_range: 0.1" in config


@pytest.mark.contract
def test_an_atari_id_finds_the_atari_preset():
    from options.options import find_preset
    for gym_id in ("ALE/Pong-v5", "ALE/Breakout-v5"):
        found = find_preset("ppo", gym_id)
        assert found == os.path.join(REPO, "configs", "ppo-atari.yaml")
    assert find_preset("ppo", "Acrobot-v1") is None
    args = parse_args(["--gym_id", "ALE/Pong-v5"])  # applied without --config; the id stays
    assert args.clip_range == 0.1 and args.gym_id == "ALE/Pong-v5"


@pytest.mark.contract
def test_a_mujoco_id_finds_the_mujoco_presets():
    for model in ("sac", "ppo"):
        args = parse_args(["--model_name", model, "--gym_id", "Walker2d-v5"])
        assert args.config == os.path.join(REPO, "configs", f"{model}-mujoco.yaml")
        assert args.gym_id == "Walker2d-v5"
    assert parse_args(["--model_name", "sac", "--gym_id", "Walker2d-v5"]).learning_starts == 10000


# -- MuJoCo ------------------------------------------------------------------------------------
def test_mujoco_state_restores_the_episode_exactly():
    env = make("--gym_id", "HalfCheetah-v5")
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(20):
        env.step(rng.uniform(-1, 1, 6).astype(np.float32))
    state = env.get_state()
    assert state is not None and "mujoco" in state
    actions = rng.uniform(-1, 1, (10, 6)).astype(np.float32)
    expected = [env.step(a) for a in actions]

    other = make("--gym_id", "HalfCheetah-v5", seed=9)
    other.reset(seed=9)
    other.set_state(state)
    for a, want in zip(actions, expected):
        got = other.step(a)
        np.testing.assert_array_equal(got.obs, want.obs)
        assert got.reward == want.reward
    assert other.env._elapsed_steps == env.env._elapsed_steps  # the time limit's count too


@pytest.mark.contract
def test_the_readme_sac_plugin_builds_and_steps():
    """tests/plugins/wide_critic_sac.py, the README's SAC-subclass example."""
    from core.registry import import_user_dir
    from core.learning.replay_buffer import Transitions
    from models import MODEL_REGISTRY
    import_user_dir(PLUGINS)
    model_cls = MODEL_REGISTRY.get("wide_critic_sac")
    args = args_for("--user_dir", PLUGINS, "--model_name", "wide_critic_sac",
                    "--sac_hidden_sizes", "16,8")
    model = model_cls(args, spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-2, 2, (1,)))
    assert model.critic.q1[0].out_features == 32 and model.actor.trunk[0].out_features == 16
    rng = np.random.default_rng(0)
    batch = Transitions(observations=rng.normal(size=(4, 3)).astype(np.float32),
                        actions=rng.uniform(-2, 2, (4, 1)).astype(np.float32),
                        rewards=np.ones(4, np.float32),
                        next_observations=rng.normal(size=(4, 3)).astype(np.float32),
                        terminated=np.zeros(4, np.float32))
    gradients, stats = model.step(batch)
    assert np.isfinite(stats["critic_loss"]) and "critic.q1.0.weight" in gradients
