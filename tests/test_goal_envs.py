"""The goal-conditioned envs: envs/goal_envs.py's toys (rewards, their vectorized
compute_reward, a scripted policy past the threshold and a random one below it, exact resume)
and gymnasium-robotics' FetchReach-v4 through gym_env and its mujoco shim."""
import gymnasium as gym
import numpy as np
import pytest

import envs.robotics_shim as robotics_shim
from core.plugins import load_plugins, make_env
from envs.goal_envs import IDS
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit


def episode_return(env, policy, seed):
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total += reward
        assert reward == env.unwrapped.compute_reward(obs["achieved_goal"][None],
                                                      obs["desired_goal"][None], {})[0]
        if terminated or truncated:
            return total, info["is_success"]


def test_point_goal_scripted_policy_passes_the_threshold_and_random_does_not():
    env = gym.make("ddrl/PointGoal-v0")
    assert env.spec.max_episode_steps == 50 and env.spec.reward_threshold == -20

    def straight(obs):  # full speed toward the goal, then the exact remaining step
        delta = (obs["desired_goal"] - obs["achieved_goal"]) / 0.1
        return delta / max(1.0, np.abs(delta).max())

    scripted = [episode_return(env, straight, seed) for seed in range(20)]
    assert np.mean([r for r, _ in scripted]) > -15 and all(s == 1.0 for _, s in scripted)
    env.action_space.seed(0)
    rand = [episode_return(env, lambda obs: env.action_space.sample(), seed)[0]
            for seed in range(20)]
    assert np.mean(rand) < -45


def test_bit_flip_terminates_at_the_goal_and_truncates_after_n_steps():
    env = gym.make("ddrl/BitFlip-v0", n_bits=6)
    obs, _ = env.reset(seed=1)
    differ = np.flatnonzero(obs["observation"] != obs["desired_goal"])
    assert len(differ) > 0
    for i, bit in enumerate(differ):
        obs, reward, terminated, truncated, _ = env.step(bit)
        assert (reward, terminated) == ((0.0, True) if i == len(differ) - 1 else (-1.0, False))
    env.reset(seed=1)
    steps = 0
    while True:  # flipping bit 0 back and forth never reaches a goal that differs elsewhere
        obs, reward, terminated, truncated, _ = env.step(0)
        steps += 1
        if terminated or truncated:
            break
    assert truncated == (not terminated) and steps <= 6
    achieved = np.array([[0, 1, 1], [1, 1, 1]], np.int8)
    desired = np.array([[0, 1, 1], [0, 1, 1]], np.int8)
    unwrapped = gym.make("ddrl/BitFlip-v0", n_bits=3).unwrapped
    assert unwrapped.compute_reward(achieved, desired, {}).tolist() == [0.0, -1.0]
    assert unwrapped.compute_terminated(achieved, desired, {}).tolist() == [True, False]


@pytest.mark.contract
@pytest.mark.parametrize("gym_id", IDS)
def test_goal_envs_resume_exactly_through_gym_env(gym_id):
    spec = run_spec(parse_args(["--config", "none", "--model_name", "sac", "--gym_id", gym_id,
                                "--num_workers", "0"]))
    plugins = load_plugins(spec)
    first, second = make_env(plugins, spec.env), make_env(plugins, spec.env)
    first.reset(seed=4)
    first.step(first.action_space.sample())
    state = first.get_state()
    assert state is not None
    second.reset(seed=9)
    second.set_state(state)
    action = first.action_space.sample()
    a, b = first.step(action), second.step(action)
    for key in a.obs:
        np.testing.assert_array_equal(a.obs[key], b.obs[key])
    assert a.reward == b.reward


# -- gymnasium-robotics ---------------------------------------------------------------------------
def test_the_joint_type_shim_compares_numpy_integers_as_mujoco_2_did():
    mujoco = pytest.importorskip("mujoco")
    shim = robotics_shim.IntJointTypes(mujoco)
    joint = np.int32(int(mujoco.mjtJoint.mjJNT_HINGE))
    assert joint in (shim.mjtJoint.mjJNT_HINGE, shim.mjtJoint.mjJNT_SLIDE)
    assert shim.mjtJoint.mjJNT_FREE == 0 and shim.mj_name2id is mujoco.mj_name2id
    # what the shim is for, on the mujoco installed (3.14: the enum member refuses the numpy int)
    assert robotics_shim.joint_types_broken(mujoco) == (joint not in (mujoco.mjtJoint.mjJNT_HINGE,))


@pytest.mark.contract
def test_fetch_reach_works_through_gym_env():
    pytest.importorskip("gymnasium_robotics")
    from gymnasium_robotics.utils import mujoco_utils
    from core.algos.replay_trainer import ReplayTrainer
    assert robotics_shim.fix_robotics_joint_types() == robotics_shim.joint_types_broken(
        getattr(mujoco_utils.mujoco, "_mujoco", mujoco_utils.mujoco))
    spec = run_spec(parse_args(["--config", "none", "--model_name", "sac", "--gym_id",
                                "FetchReach-v4", "--num_workers", "0", "--her"]))
    plugins = load_plugins(spec)
    env = make_env(plugins, spec.env, seed=0)
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert env.observation_space["observation"].shape == (10,)
    result = env.step(env.action_space.sample())
    assert result.reward in (-1.0, 0.0) and not result.terminated
    # compute_reward on rows, from the gymnasium env beneath the wrapper
    goals = np.stack([obs["achieved_goal"], obs["achieved_goal"] + 1.0])
    rewards = env.env.unwrapped.compute_reward(goals, np.stack([goals[0], goals[0]]), {})
    assert rewards.tolist() == [0.0, -1.0]
    ReplayTrainer.check_plugins(plugins, spec)  # --her takes it
    env.close()
