"""Env wrappers follow gymnasium's API; EnvGroup auto-resets in both placements."""
import numpy as np
import pytest
from gymnasium import spaces

from core.sampling.envs import EnvGroup, to_env_action
from core.plugins import load_plugins
from core.registry import unwrap_actor_class
from core.seeding import worker_envs as worker_seeds
from envs import ENV_REGISTRY
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit

GymEnv = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))
PointMassEnv = ENV_REGISTRY.get("custom_env")


def gym_args(gym_id, *flags):
    return parse_args(["--env_name", "gym_env", "--gym_id", gym_id, *flags])


def custom_args(*flags):
    return parse_args(["--env_name", "custom_env", *flags])


def check_api(env, num_steps=5):
    obs, info = env.reset(seed=0)
    assert isinstance(info, dict)
    assert env.observation_space.contains(np.asarray(obs, dtype=env.observation_space.dtype))
    for _ in range(num_steps):
        result = env.step(env.action_space.sample())
        assert len(result) == 5
        obs, reward, terminated, truncated, info = result
        assert env.observation_space.contains(np.asarray(obs, dtype=env.observation_space.dtype))
        assert type(reward) is float
        assert type(terminated) is bool and type(truncated) is bool
        assert isinstance(info, dict)
        if terminated or truncated:
            env.reset()


# -- gym_env ------------------------------------------------------------------------------------
@pytest.mark.parametrize("gym_id, action_type, threshold", [
    ("CartPole-v1", spaces.Discrete, 475.0), ("Pendulum-v1", spaces.Box, None)])
def test_gym_env_follows_the_api(gym_id, action_type, threshold):
    env = GymEnv(gym_args(gym_id), seed=0)
    assert isinstance(env.observation_space, spaces.Box)
    assert isinstance(env.action_space, action_type)
    assert env.reward_threshold == threshold
    check_api(env, 30)
    env.close()


def test_gym_env_max_episode_steps_truncates():
    env = GymEnv(gym_args("Pendulum-v1", "--max_episode_steps", "3"))
    env.reset(seed=0)
    ends = [env.step(np.zeros(1, dtype=np.float32))[3] for _ in range(3)]
    assert ends == [False, False, True]


def test_gym_env_is_deterministic_for_a_seed():
    def run(seed):
        env = GymEnv(gym_args("CartPole-v1"))
        out = [env.reset(seed=seed)[0]]
        out += [env.step(t % 2)[0] for t in range(5)]
        return np.array(out)
    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


# -- custom_env ---------------------------------------------------------------------------------
@pytest.mark.parametrize("flags, action_type", [((), spaces.Box),
                                                (("--custom_env_discrete",), spaces.Discrete)])
def test_custom_env_follows_the_api(flags, action_type):
    env = PointMassEnv(custom_args(*flags), seed=0)
    assert isinstance(env.action_space, action_type)
    check_api(env, 30)


def test_custom_env_step_dynamics_by_hand():
    env = PointMassEnv(custom_args())
    env.reset(seed=0)
    env.sim.set_state(0.5, 0.0)
    obs, reward, terminated, truncated, _ = env.step(np.array([1.0]))
    # v = 0 + (1 - 0.5*0) * 0.05 = 0.05; x = 0.5 + 0.05 * 0.05 = 0.5025
    # reward = -|x| - 0.01 * 1^2 = -0.5125
    np.testing.assert_allclose(obs, [0.5025, 0.05], rtol=1e-6)
    assert reward == pytest.approx(-0.5125, abs=1e-12)
    assert (terminated, truncated) == (False, False)


@pytest.mark.parametrize("flags, no_force", [((), np.array([0.0])),
                                             (("--custom_env_discrete",), 1)])
def test_custom_env_terminates_on_reaching_the_goal(flags, no_force):
    env = PointMassEnv(custom_args(*flags))
    env.reset(seed=0)
    env.sim.set_state(0.01, 0.0)
    _, reward, terminated, truncated, _ = env.step(no_force)
    # at rest, |x| = 0.01 < 0.05: goal; reward = -0.01 - 0 + 10 = 9.99
    assert (terminated, truncated) == (True, False)
    assert reward == pytest.approx(9.99, abs=1e-12)


def test_custom_env_terminates_when_leaving_the_track():
    env = PointMassEnv(custom_args())
    env.reset(seed=0)
    env.sim.set_state(2.0, 1.0)
    obs, reward, terminated, truncated, _ = env.step(np.array([0.0]))
    # v = 1 + (0 - 0.5*1)*0.05 = 0.975; x = 2 + 0.975*0.05 = 2.04875 > 2: off the track
    # reward = -2.04875 - 0 - 10; the observation is clipped to the box
    assert (terminated, truncated) == (True, False)
    assert reward == pytest.approx(-12.04875, abs=1e-9)
    np.testing.assert_allclose(obs, [2.0, 0.975], rtol=1e-6)


def test_custom_env_truncates_at_the_time_limit():
    env = PointMassEnv(custom_args("--custom_env_episode_steps", "5"))
    env.reset(seed=0)
    env.sim.set_state(1.0, 0.0)  # at rest away from the goal: no force keeps it there
    ends = [env.step(np.array([0.0]))[2:4] for _ in range(5)]
    assert ends == [(False, False)] * 4 + [(False, True)]


def test_custom_env_is_deterministic_for_a_seed():
    def run(seed):
        env = PointMassEnv(custom_args(), seed=seed)
        out = [env.reset(seed=seed)[0]]
        out += [env.step(np.array([0.3]))[0] for _ in range(5)]
        out.append(env.reset()[0])  # an unseeded reset continues the seeded generator
        return np.array(out)
    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


# -- EnvGroup ------------------------------------------------------------------------------------
def constant_actions(action_space, num_envs):
    if isinstance(action_space, spaces.Discrete):
        return np.zeros(num_envs, dtype=np.int64)
    return np.zeros((num_envs, *action_space.shape), dtype=np.float32)


@pytest.mark.contract
@pytest.mark.parametrize("placement", ["worker", "actor", "actor-hosting-2"])
@pytest.mark.parametrize("env_name, flags", [
    ("custom_env", ["--custom_env_episode_steps", "3"]),      # a plain class
    ("gym_env", ["--gym_id", "CartPole-v1", "--max_episode_steps", "3"]),  # @ray.remote
])
def test_env_group_auto_resets_and_reports_final_observations(env_name, flags, placement,
                                                              request):
    if placement != "worker":  # one env actor per env, or one hosting both (--envs_per_actor)
        request.getfixturevalue("ray_session")
        flags = flags + ["--envs_per_actor", "2" if placement.endswith("2") else "1"]
    args = parse_args(["--env_name", env_name, *flags])
    plugins = load_plugins(run_spec(args))
    seeds = [11, 12]
    group = EnvGroup(plugins, args, seeds, placement=placement.split("-")[0])
    if placement != "worker":
        assert len(group.hosts) == (1 if placement.endswith("2") else 2)
    # The reference: the same plain class stepped by hand, reset by hand when an episode ends.
    reference = [plugins.env_cls(args, seed=s) for s in seeds]
    try:
        assert len(group) == 2
        assert type(group.action_space) is type(reference[0].action_space)
        expected_obs = np.stack([env.reset(seed=s)[0] for env, s in zip(reference, seeds)])
        np.testing.assert_array_equal(group.reset(), expected_obs)
        actions = constant_actions(group.action_space, 2)
        ended_somewhere = False
        for _ in range(4):
            result = group.step(actions)
            expected_final = {}
            for e, env in enumerate(reference):
                obs, reward, terminated, truncated, _ = env.step(
                    to_env_action(group.action_space, actions[e]))
                assert result.rewards[e] == np.float32(reward)
                assert (result.terminated[e], result.truncated[e]) == (terminated, truncated)
                if terminated or truncated:
                    expected_final[e] = obs
                    obs, _ = env.reset()
                expected_obs[e] = obs
            assert sorted(result.final_observations) == sorted(expected_final)
            for e, obs in expected_final.items():
                np.testing.assert_array_equal(result.final_observations[e], obs)
                # the group's observation is the reset one, not the final one
                assert not np.array_equal(result.observations[e], obs)
            np.testing.assert_array_equal(result.observations, expected_obs)
            ended_somewhere |= bool(expected_final)
        assert ended_somewhere  # the time limit of 3 steps ended episodes within 4 steps
    finally:
        group.close()


def test_to_env_action_clips_box_actions_and_leaves_discrete_alone():
    box = spaces.Box(-1.0, 1.0, shape=(2,))
    np.testing.assert_array_equal(to_env_action(box, np.array([3.0, -0.5])), [1.0, -0.5])
    assert to_env_action(spaces.Discrete(3), 2) == 2


def test_worker_seeds_are_distinct_across_workers_and_envs():
    # base = seed + 10000 * (worker + 1)
    assert worker_seeds(5, 0, 2) == [10005, 10006]
    assert worker_seeds(5, 2, 2) == [30005, 30006]
    seeds = [s for w in range(4) for s in worker_seeds(0, w, 8)]
    assert len(set(seeds)) == len(seeds) == 32
