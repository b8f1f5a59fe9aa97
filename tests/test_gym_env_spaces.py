"""gym_env with structured spaces: --drop_keys, --action_mask_key (renamed, lifted from info,
turned off), actions of every array space reaching the env in its dtype and shape, and exact
resume through the new wrappers."""
import gymnasium as gym
import numpy as np
import pytest

from core.registry import unwrap_actor_class
from core.errors import ConfigError
from core.run.state import from_payload, to_payload
from core.spaces import ACTION_MASK
from envs import ENV_REGISTRY, toys
from options.options import parse_args

pytestmark = pytest.mark.unit

GymEnv = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))


def make(gym_id, *flags, seed=None):
    return GymEnv(parse_args(["--env_name", "gym_env", "--gym_id", gym_id, *flags]), seed=seed)


# test-only ids: MaskedChoice with its mask under another observation key, and with a second
# (all-zero) mask in info beside the observation's
class MaskUnderAnotherKey(gym.ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        spaces = dict(env.observation_space.spaces)
        spaces["legal"] = spaces.pop(ACTION_MASK)
        self.observation_space = gym.spaces.Dict(spaces, sort_keys=False)

    def observation(self, observation):
        observation = dict(observation)
        observation["legal"] = observation.pop(ACTION_MASK)
        return observation


class ZeroMaskInInfo(gym.Wrapper):
    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, ACTION_MASK: np.zeros(8, np.int8)}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, ACTION_MASK: np.zeros(8, np.int8)}


for _id, _wrapper in (("ddrl_test/LegalKey-v0", MaskUnderAnotherKey),
                      ("ddrl_test/TwoMasks-v0", ZeroMaskInInfo)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=lambda w=_wrapper, **kw: w(toys.MaskedChoiceEnv(**kw)),
                     max_episode_steps=20)


# -- --drop_keys --------------------------------------------------------------------------------
@pytest.mark.contract
def test_minigrid_is_registered_and_drop_keys_removes_its_mission():
    env = make("MiniGrid-DoorKey-5x5-v0", "--drop_keys", "mission")
    assert isinstance(env.observation_space, gym.spaces.Dict)
    assert set(env.observation_space.spaces) == {"image", "direction"}
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"image", "direction"}
    obs = env.step(env.action_space.sample()).obs
    assert set(obs) == {"image", "direction"}
    assert env.observation_space.contains(obs)
    env.close()


def test_drop_keys_parses_a_comma_list_into_a_tuple():
    args = parse_args(["--env_name", "gym_env", "--drop_keys", "mission, direction"])
    assert args.drop_keys == ("mission", "direction")
    assert parse_args(["--env_name", "gym_env"]).drop_keys == ()


def test_an_unknown_drop_key_is_a_config_error_naming_the_keys():
    with pytest.raises(ConfigError, match="no key 'missing'.*direction, image, mission"):
        make("MiniGrid-DoorKey-5x5-v0", "--drop_keys", "missing")
    with pytest.raises(ConfigError, match="not a Dict"):
        make("CartPole-v1", "--drop_keys", "mission")


# -- --action_mask_key --------------------------------------------------------------------------
def test_an_info_mask_is_lifted_into_the_observation():
    env = make("ddrl/MaskedChoiceInfo-v0")
    space = env.observation_space
    assert isinstance(space, gym.spaces.Dict)
    assert list(space.spaces) == ["observation", ACTION_MASK]
    assert space[ACTION_MASK] == gym.spaces.Box(0, 1, (8,), np.int8)
    assert space["observation"] == gym.make("ddrl/MaskedChoiceInfo-v0").observation_space
    obs, info = env.reset(seed=0)
    for _ in range(25):
        assert space.contains(obs)
        np.testing.assert_array_equal(obs[ACTION_MASK], info[ACTION_MASK])
        assert obs[ACTION_MASK].dtype == np.int8
        valid = int(np.flatnonzero(obs[ACTION_MASK])[0])
        obs, reward, terminated, truncated, info = env.step(valid)
        assert reward >= 0.0
        if terminated or truncated:
            obs, info = env.reset()


def test_the_info_mask_env_is_deterministic_for_a_seed():
    def run(seed):
        env = make("ddrl/MaskedChoiceInfo-v0")
        out = [env.reset(seed=seed)[0][ACTION_MASK]]
        out += [env.step(t % 8).obs[ACTION_MASK] for t in range(10)]
        return np.array(out)
    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_a_mask_under_another_key_is_renamed():
    env = make("ddrl_test/LegalKey-v0", "--action_mask_key", "legal")
    assert list(env.observation_space.spaces) == ["observation", ACTION_MASK]
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"observation", ACTION_MASK} and obs[ACTION_MASK].sum() == 4
    # without the flag the key stays what it is (and no mask)
    assert "legal" in make("ddrl_test/LegalKey-v0").observation_space.spaces


def test_the_observation_mask_wins_over_the_info_one():
    env = make("ddrl_test/TwoMasks-v0")
    obs, info = env.reset(seed=0)
    assert not info[ACTION_MASK].any()
    assert obs[ACTION_MASK].sum() == 4
    assert env.step(0).obs[ACTION_MASK].sum() == 4


def test_action_mask_key_none_turns_masks_off():
    env = make("ddrl/MaskedChoice-v0", "--action_mask_key", "none")
    assert list(env.observation_space.spaces) == ["observation"]
    assert set(env.reset(seed=0)[0]) == {"observation"}
    env = make("ddrl/MaskedChoiceInfo-v0", "--action_mask_key", "none")
    assert isinstance(env.observation_space, gym.spaces.Box)


def test_envs_without_a_mask_keep_their_box_observation():
    assert isinstance(make("Pendulum-v1").observation_space, gym.spaces.Box)
    assert isinstance(make("CartPole-v1").observation_space, gym.spaces.Box)


# -- actions -----------------------------------------------------------------------------------
def spy(env):
    """The actions that reach the base env."""
    seen, base = [], env.env.unwrapped
    step = base.step

    def recording_step(action):
        seen.append(action)
        return step(action)
    base.step = recording_step
    return seen


@pytest.mark.parametrize("gym_id, given, dtype, shape", [
    ("ddrl/MultiButton-v0", np.array([2.0, 0.0, 1.0]), np.int64, (3,)),
    ("ddrl/MultiButton-v0", np.array([[2, 0, 1]], dtype=np.int32), np.int64, (3,)),
    ("ddrl/BitMatch-v0", np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), np.int8, (6,)),
    ("ddrl/BitMatch-v0", np.array([1, 0, 1, 1, 0, 0], dtype=np.int64), np.int8, (6,)),
    ("ddrl/PointReachGrid-v0", np.array([0.5, -0.5]), np.float32, (1, 2)),
    ("ddrl/PointReach-v0", np.array([[0.5, -0.5]]), np.float32, (2,)),
    ("Pendulum-v1", np.array([0.5], dtype=np.float64), np.float32, (1,)),
])
def test_actions_reach_the_env_in_its_dtype_and_shape(gym_id, given, dtype, shape):
    env = make(gym_id)
    env.reset(seed=0)
    seen = spy(env)
    env.step(given)
    action = seen[-1]
    assert isinstance(action, np.ndarray)
    assert action.dtype == dtype and action.shape == shape
    np.testing.assert_array_equal(action.reshape(-1), given.reshape(-1).astype(dtype))
    assert env.action_space.contains(action)


def test_discrete_actions_reach_the_env_as_ints():
    env = make("ddrl/MaskedChoice-v0")
    env.reset(seed=0)
    seen = spy(env)
    env.step(np.array([3]))
    env.step(np.int64(5))
    assert [type(a) for a in seen] == [int, int] and seen == [3, 5]


def test_multi_discrete_and_binary_rewards_follow_the_actions():
    env = make("ddrl/BitMatch-v0")
    obs, _ = env.reset(seed=0)
    assert env.step((obs > 0).astype(np.float32)).reward == 1.0
    env = make("ddrl/MultiButton-v0")
    obs, _ = env.reset(seed=0)
    assert env.step(np.argmax(obs.reshape(3, 3), axis=1)).reward == 1.0


# -- exact resume -----------------------------------------------------------------------------
@pytest.mark.parametrize("gym_id, actions", [
    ("CartPole-v1", lambda t: t % 2),
    # MountainCar keeps its state as a tuple of numpy floats after a step: plain data too
    ("MountainCar-v0", lambda t: t % 3),
    ("MountainCarContinuous-v0", lambda t: np.array([np.sin(t)], np.float32)),
    ("Acrobot-v1", lambda t: t % 3),
    ("Pendulum-v1", lambda t: np.array([np.cos(t)], np.float32)),
    ("ddrl/DictCartPole-v0", lambda t: t % 2),
    ("ddrl/MaskedChoiceInfo-v0", lambda t: t % 8),
    ("ddrl/PointReachGrid-v0", lambda t: np.array([[np.sin(t), np.cos(t)]], np.float32)),
])
def test_get_state_set_state_round_trip(gym_id, actions):
    env = make(gym_id, seed=0)
    env.reset(seed=0)
    for t in range(7):
        env.step(actions(t))
    state = from_payload(to_payload(env.get_state()))  # as a checkpoint holds it
    assert state is not None
    expected = [env.step(actions(t)) for t in range(7, 20)]

    other = make(gym_id, seed=5)
    other.reset(seed=5)
    other.set_state(state)
    for t, want in zip(range(7, 20), expected):
        got = other.step(actions(t))
        for a, b in zip(*(o.values() if isinstance(o, dict) else [o]
                          for o in (got.obs, want.obs))):
            np.testing.assert_array_equal(a, b)
        assert (got.reward, got.terminated, got.truncated) == (
            want.reward, want.terminated, want.truncated)


def test_an_env_without_plain_state_still_gives_none():
    env = make("MiniGrid-DoorKey-5x5-v0", "--drop_keys", "mission")
    env.reset(seed=0)
    assert env.get_state() is None
