"""envpool_env (envs/envpool_env.py): EnvPool's C++ pools as ddrl batched envs.

EnvPool 0.8.4 under numpy 2 hands back arrays with zero strides; the plugin views them in C
order. Checked here against gymnasium's own CartPole stepped from the same states, then the
seeds, the Atari flags and FIRE, the errors, the preset's twin, and a run end to end."""
import argparse

import gymnasium as gym
import numpy as np
import pytest
import yaml
from numpy.lib.stride_tricks import as_strided

from core.errors import ConfigError
from envs import envpool_env
from envs.envpool_env import EnvPoolEnv, _c_order, pool_kwargs

pytestmark = pytest.mark.contract


def flags(*argv, evaluation=False):
    parser = argparse.ArgumentParser()
    EnvPoolEnv.add_args(parser)
    args = parser.parse_args(list(argv))
    args.evaluation, args.render_mode = evaluation, None
    return args


@pytest.mark.unit
def test_arrays_with_zero_strides_are_read_in_c_order_and_right_ones_pass():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    broken = as_strided(data, (3, 4), (0, 0))  # what EnvPool 0.8.4 returns under numpy 2
    assert (broken == 0).all()
    fixed = _c_order(broken)
    np.testing.assert_array_equal(fixed, data)
    assert fixed.flags.owndata  # copied out of the pool's buffer
    assert _c_order(data) is data
    scalar = np.zeros((), np.int32)
    assert _c_order(scalar) is scalar


def test_cartpole_pool_steps_as_gymnasiums_cartpole_env_by_env():
    """Each of 3 envs, from its reset state, follows gymnasium's CartPole physics step by step
    under different actions (so rows are not one env read three times)."""
    env = EnvPoolEnv(flags(), 3, seed=0)
    obs, _ = env.reset(seed=[0, 1, 2])
    assert len({tuple(row) for row in obs.tolist()}) == 3
    references = []
    for row in obs:
        ref = gym.make("CartPole-v1").unwrapped
        ref.reset(seed=0)
        ref.state = row.astype(np.float64).copy()
        references.append(ref)
    actions = np.array([[t % 2, 1, 0] for t in range(8)])
    for step_actions in actions:
        obs, rewards, terminated, truncated, _ = env.step(step_actions)
        for e, ref in enumerate(references):
            expected, reward, done, _, _ = ref.step(int(step_actions[e]))
            np.testing.assert_allclose(obs[e], expected, atol=1e-5)
            assert rewards[e] == reward and bool(terminated[e]) == done
    assert env.reward_threshold == 475  # gymnasium's CartPole-v1 threshold: --target_return auto


def test_env_i_is_seeded_seed_plus_i_and_large_seeds_fit_int32():
    two = EnvPoolEnv(flags(), 2, seed=5).reset(seed=[5, 6])[0]
    one = EnvPoolEnv(flags(), 1, seed=6).reset(seed=[6])[0]
    np.testing.assert_array_equal(two[1], one[0])
    env = EnvPoolEnv(flags(), 2, seed=0)
    first = env.reset(seed=[0, 1])[0]
    other = env.reset(seed=[3_149_834_369, 3_149_834_370])[0]  # the test worker's fresh seeds
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(env.reset(seed=[0, 1])[0], first)  # the pool rebuilt


def test_time_limit_truncates_and_the_next_step_is_the_reset():
    env = EnvPoolEnv(flags("--max_episode_steps", "5"), 2, seed=0)
    env.reset(seed=[0, 1])
    for _ in range(4):
        *_, terminated, truncated, _ = env.step(np.array([0, 1]))[0:5]
    obs, rewards, terminated, truncated, _ = env.step(np.array([0, 1]))
    assert truncated.all() and not terminated.any()
    obs_next, *_ = env.step(np.array([0, 1]))  # NextStep: a fresh episode's first observation
    assert (np.abs(obs_next) <= 0.05).all()  # CartPole resets every entry within +-0.05
    assert EnvPoolEnv.metadata["autoreset_mode"] == "NextStep"


def test_atari_flags_map_onto_envpools_preprocessing():
    import envpool
    args = flags("--envpool_id", "Breakout-v5", "--frame_stack", "2", "--no-grayscale",
                 "--episodic_life", "--noop_max", "7")
    kwargs = pool_kwargs(args, envpool)
    assert kwargs == dict(num_threads=0, noop_max=7, frame_skip=4, img_height=84, img_width=84,
                          gray_scale=False, stack_num=2, reward_clip=True, episodic_life=True,
                          use_fire_reset=True, repeat_action_probability=0.25,
                          max_episode_steps=27_000)
    evaluation = pool_kwargs(flags("--envpool_id", "Breakout-v5", "--episodic_life",
                                   evaluation=True), envpool)
    assert evaluation["reward_clip"] is False and evaluation["episodic_life"] is False
    assert pool_kwargs(flags(), envpool) == {"num_threads": 0}  # not Atari: no Atari flags


def test_breakout_is_served_at_each_start_and_life_so_a_noop_policy_ends_its_games():
    """A policy that never fires: every ball is served for it (FIRE at the first step of an
    episode and after each life lost), so its 5 lives go within a few hundred steps, episode
    after episode; without it the game would stand still until its 27,000-step limit."""
    env = EnvPoolEnv(flags("--envpool_id", "Breakout-v5", evaluation=True), 2, seed=0)
    obs, _ = env.reset(seed=[0, 1])
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert env.fire == 1  # Breakout's minimal action set: NOOP, FIRE, RIGHT, LEFT
    ended = np.zeros(2, dtype=int)
    for _ in range(600):
        _, _, terminated, truncated, _ = env.step(np.zeros(2, dtype=np.int64))
        assert not truncated.any()
        ended += terminated
    assert (ended >= 2).all()
    no_fire = EnvPoolEnv(flags("--envpool_id", "Breakout-v5", "--no-fire_reset",
                               "--max_episode_steps", "300", evaluation=True), 1, seed=0)
    no_fire.reset(seed=[0])
    assert no_fire.fire is None
    for _ in range(300):
        *_, terminated, truncated, _ = no_fire.step(np.zeros(1, dtype=np.int64))
    assert truncated.all()  # stood still until the limit


def test_bad_input_is_one_paragraph(monkeypatch):
    with pytest.raises(ConfigError, match="'CartPole-v9' is not an EnvPool id.*Breakout-v5"):
        EnvPoolEnv(flags("--envpool_id", "CartPole-v9"), 1)
    with pytest.raises(ConfigError, match="EnvPool always preprocesses Atari"):
        EnvPoolEnv(flags("--envpool_id", "Pong-v5", "--no-atari_preprocessing"), 1)
    args = flags()
    args.render_mode = "rgb_array"
    with pytest.raises(ConfigError, match="cannot render"):
        EnvPoolEnv(args, 1)
    import builtins
    real_import = builtins.__import__

    def no_envpool(name, *rest, **kwargs):
        if name == "envpool":
            raise ImportError("No module named 'envpool'")
        return real_import(name, *rest, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_envpool)
    with pytest.raises(ConfigError, match=r"needs EnvPool \(envpool==0.8.4.*pip install"):
        envpool_env.import_envpool()


@pytest.mark.unit
@pytest.mark.parametrize("gym_preset, pool_preset, gym_id, pool_id, changed", [
    ("ppo-atari", "ppo-atari-envpool", "ALE/Breakout-v5", "Breakout-v5", {}),
    ("sac-mujoco", "sac-mujoco-envpool", "HalfCheetah-v5", "HalfCheetah-v4",
     {"num_envs_per_worker": (1, 16)}),
])
def test_the_envpool_presets_keep_their_gym_twins_hyperparameters(gym_preset, pool_preset,
                                                                  gym_id, pool_id, changed):
    from options.options import CONFIG_DIR
    with open(f"{CONFIG_DIR}/{gym_preset}.yaml") as f:
        gym_keys = yaml.safe_load(f)
    with open(f"{CONFIG_DIR}/{pool_preset}.yaml") as f:
        pool_keys = yaml.safe_load(f)
    assert pool_keys.pop("env_name") == "envpool_env" and pool_keys.pop("envpool_id") == pool_id
    assert gym_keys.pop("env_name") == "gym_env" and gym_keys.pop("gym_id") == gym_id
    for key, (gym_value, pool_value) in changed.items():
        assert (gym_keys.pop(key), pool_keys.pop(key)) == (gym_value, pool_value)
    assert pool_keys == gym_keys


@pytest.mark.e2e
def test_a_run_trains_evaluates_and_its_policy_plays_one_env(tmp_path):
    """Two rounds of 64 EnvPool CartPoles in the learner's process, an evaluation on a pool of
    its own, and the saved policy playing the single-env view (core/batched_env.Unbatched)."""
    import ddrl
    from core.batched_env import Unbatched
    from tests.test_e2e import read_run, run_main
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "envpool_env", "--envpool_id", "CartPole-v1", "--config",
                    "none", "--num_workers", "0", "--num_envs_per_worker", "64",
                    "--rollout_steps", "16", "--batch_size", "512", "--num_epochs", "1",
                    "--total_steps", "2048", "--eval_interval", "2048", "--eval_episodes", "4",
                    "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    assert "Gym has been unmaintained" not in proc.stderr  # the old gym's notice is kept off
    summary, _ = read_run(run_dir)
    assert summary["env_steps"] == 2048 and summary["target_return"] == 475
    assert summary["last_eval_return"] is not None and summary["env_errors"] == 0
    policy = ddrl.load(run_dir)
    assert isinstance(policy.make_env(seed=3), Unbatched)
    returns = policy.play(2, seed=3)
    assert len(returns) == 2 and all(1 <= r <= 500 for r in returns)
