"""gym_env's --hide_obs (envs/toys.py HideObs): the space and values it leaves, the errors of bad
indices, the registered ddrl/CartPoleNoVel-v1 and ddrl/PendulumNoVel-v1 against the flag,
evaluation envs, presets and exact resume through the wrapper."""
import gymnasium as gym
import numpy as np
import pytest

from core.plugins import load_plugins, make_env
from core.registry import unwrap_actor_class
from core.errors import ConfigError
from core.run.state import from_payload, to_payload
from envs import ENV_REGISTRY, toys
from envs.gym_env import index_list
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit

GymEnv = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))


def make(gym_id, *flags, seed=None):
    return GymEnv(parse_args(["--env_name", "gym_env", "--gym_id", gym_id, *flags]), seed=seed)


# -- the space and the values -------------------------------------------------------------------
def test_cartpole_keeps_its_position_and_angle():
    env = make("CartPole-v1", "--hide_obs", "1,3")
    raw = gym.make("CartPole-v1")
    full = raw.observation_space
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.shape == (2,)
    assert space.dtype == np.float32
    np.testing.assert_array_equal(space.low, full.low[[0, 2]])   # [-4.8, -0.418...]
    np.testing.assert_array_equal(space.high, full.high[[0, 2]])
    assert np.isfinite(space.low).all()  # the two infinite velocity bounds went with them
    obs, _ = env.reset(seed=0)
    want, _ = raw.reset(seed=0)
    for t in range(30):
        assert obs.shape == (2,) and obs.dtype == np.float32 and space.contains(obs)
        assert obs[0] == want[0] and obs[1] == want[2]  # x and theta, by hand
        step = env.step(t % 2)
        want, reward, terminated, truncated, _ = raw.step(t % 2)
        obs = step.obs
        assert (step.reward, step.terminated, step.truncated) == (reward, terminated, truncated)
        if terminated or truncated:
            break


def test_pendulum_keeps_cos_and_sin():
    env = make("Pendulum-v1", "--hide_obs", "2")
    space = env.observation_space
    assert space == gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    obs, _ = env.reset(seed=1)
    want, _ = gym.make("Pendulum-v1").reset(seed=1)
    np.testing.assert_array_equal(obs, want[:2])
    np.testing.assert_allclose(obs[0] ** 2 + obs[1] ** 2, 1.0, rtol=1e-5)


def test_the_flag_parses_to_a_tuple_and_defaults_to_none():
    assert parse_args(["--env_name", "gym_env", "--hide_obs", "1, 3"]).hide_obs == (1, 3)
    assert parse_args(["--env_name", "gym_env"]).hide_obs == ()
    assert index_list("none") == () and index_list("") == ()
    env = make("CartPole-v1")  # nothing hidden: the id's own observation
    assert env.observation_space.shape == (4,)


def test_a_preset_list_is_read_back(tmp_path):
    """config.yaml (a preset, or the one saved with a run) holds the tuple as a list."""
    preset = tmp_path / "preset.yaml"
    preset.write_text("gym_id: CartPole-v1\nhide_obs: [1, 3]\n")
    args = parse_args(["--env_name", "gym_env", "--config", str(preset)])
    assert args.hide_obs == (1, 3)
    assert run_spec(args).env.hide_obs == (1, 3)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    ("1,x", r"--hide_obs: '1,x': 'x' is not an integer index.*from 0"),
    ("1.5", r"'1.5' is not an integer index"),
    ("1,,3", r"'' is not an integer index"),
    ("-1", r"-1 is negative; indices count from 0"),
    ("1,3,1", r"'1,3,1' gives index 1 more than once"),
])
def test_a_bad_list_is_an_argument_error_naming_it(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_args(["--env_name", "gym_env", "--hide_obs", value])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("gym_id, value, message", [
    ("CartPole-v1", "4", r"--hide_obs 4: index 4 is out of range.*indices 0 to 3 of its 4 "
                         r"entries"),
    ("CartPole-v1", "1,7,9", r"--hide_obs 1,7,9: index 7, 9 is out of range"),
    ("CartPole-v1", "0,1,2,3", r"--hide_obs 0,1,2,3 hides every entry.*keep at least one"),
    ("Pendulum-v1", "3", r"index 3 is out of range.*indices 0 to 2 of its 3 entries"),
    ("ddrl/MaskedChoice-v0", "0", r"--hide_obs 0: the observation space Dict.* is not a 1-D "
                                  r"Box.*Leave --hide_obs out"),
    ("ddrl/TinyGrid-v0", "0", r"Box\(0, 255, \(16, 16, 1\), uint8\) is not a 1-D Box"),
])
def test_indices_the_observation_lacks_are_a_config_error_naming_them(gym_id, value, message):
    with pytest.raises(ConfigError, match=message) as info:
        make(gym_id, "--hide_obs", value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("indices, message", [
    ((1, 1), r"index 1 is given more than once"),
    ((1.0,), r"not a list of integer indices"),
    (("1",), r"not a list of integer indices"),
    ((True,), r"not a list of integer indices"),
])
def test_the_wrapper_checks_what_the_flag_type_would_have(indices, message):
    """HideObs is also made directly (the NoVel ids, a user's own code), past index_list."""
    with pytest.raises(ConfigError, match=message):
        toys.HideObs(gym.make("CartPole-v1"), indices)
    toys.HideObs(gym.make("CartPole-v1"), (np.int64(1),))  # numpy integers are indices


# -- the registered ids -------------------------------------------------------------------------
def test_the_no_vel_ids_have_their_base_ids_limits():
    assert toys.NO_VEL_IDS == ("ddrl/CartPoleNoVel-v1", "ddrl/PendulumNoVel-v1")
    assert not set(toys.NO_VEL_IDS) & set(toys.IDS)
    cartpole, pendulum = (gym.spec(i) for i in toys.NO_VEL_IDS)
    assert (cartpole.max_episode_steps, cartpole.reward_threshold) == (500, 475.0)
    assert (pendulum.max_episode_steps, pendulum.reward_threshold) == (200, None)


def episodes(env, seed, action, steps):
    """(obs, reward, terminated, truncated) of ``steps`` steps, resetting at each episode's end
    (gym_env's step gives an OBSERVATION, gymnasium's a tuple: the same order)."""
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for t in range(steps):
        obs, reward, terminated, truncated, _ = env.step(action(t))
        out.append((obs, float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            obs, _ = env.reset()
            out.append((obs, 0.0, False, False))
    return out


@pytest.mark.parametrize("no_vel, base, hidden, action, steps", [
    ("ddrl/CartPoleNoVel-v1", "CartPole-v1", "1,3", lambda t: (t // 3) % 2, 300),
    ("ddrl/PendulumNoVel-v1", "Pendulum-v1", "2",
     lambda t: np.array([2.0 * np.sin(t / 7.0)], np.float32), 450),
])
def test_a_no_vel_id_equals_the_flag_step_by_step(no_vel, base, hidden, action, steps):
    registered = episodes(gym.make(no_vel), 7, action, steps)
    flagged = episodes(make(base, "--hide_obs", hidden), 7, action, steps)
    through_gym_env = episodes(make(no_vel), 7, action, steps)
    assert len(registered) == len(flagged) == len(through_gym_env)
    ends = 0
    for a, b, c in zip(registered, flagged, through_gym_env):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[0], c[0])
        assert a[0].dtype == b[0].dtype == np.float32 and a[0].shape == (2,)
        assert a[1:] == b[1:] == c[1:]
        ends += a[2] or a[3]
    assert ends >= 2  # more than one episode: the resets match too
    if no_vel == "ddrl/PendulumNoVel-v1":  # the time limit cut it at 200 steps, twice
        assert [i for i, x in enumerate(registered) if x[3]] == [200, 401]


# -- evaluation envs and exact resume -----------------------------------------------------------
def test_evaluation_envs_hide_the_same_entries():
    spec = run_spec(parse_args(["--env_name", "gym_env", "--gym_id", "CartPole-v1",
                                "--hide_obs", "1,3"]))
    plugins = load_plugins(spec)
    train = make_env(plugins, spec.env, seed=0)
    evaluation = make_env(plugins, spec.env, seed=0, evaluation=True)
    assert train.observation_space == evaluation.observation_space
    assert evaluation.observation_space.shape == (2,)
    np.testing.assert_array_equal(train.reset(seed=3)[0], evaluation.reset(seed=3)[0])


@pytest.mark.parametrize("gym_id, flags, actions", [
    ("CartPole-v1", ("--hide_obs", "1,3"), lambda t: (t // 2) % 2),
    ("ddrl/CartPoleNoVel-v1", (), lambda t: (t // 2) % 2),
    ("ddrl/PendulumNoVel-v1", (), lambda t: np.array([np.sin(t)], np.float32)),
])
def test_get_state_set_state_round_trip_through_the_wrapper(gym_id, flags, actions):
    env = make(gym_id, *flags, seed=0)
    env.reset(seed=0)
    for t in range(7):
        env.step(actions(t))
    state = from_payload(to_payload(env.get_state()))  # as a checkpoint holds it
    assert state is not None
    inner = env.env.unwrapped.state.copy()  # the hidden velocities live here
    expected = [env.step(actions(t)) for t in range(7, 20)]

    other = make(gym_id, *flags, seed=5)
    other.reset(seed=5)
    other.set_state(state)
    np.testing.assert_array_equal(other.env.unwrapped.state, inner)
    for t, want in zip(range(7, 20), expected):
        got = other.step(actions(t))
        np.testing.assert_array_equal(got.obs, want.obs)
        assert (got.reward, got.terminated, got.truncated) == (
            want.reward, want.terminated, want.truncated)
