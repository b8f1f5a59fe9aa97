"""The toy envs of envs/toys.py: gymnasium's checker, seeding, the masked env's rules, and the
returns the docstring gives (a hand-written optimal policy reaches each threshold, a random one
does not)."""
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs import toys

pytestmark = pytest.mark.unit

EPISODES = 100


def make(gym_id):
    return gym.make(gym_id)


# -- hand-written optimal policies: each reads only the observation (and the info's mask) ----------
def masked_choice(obs, info):
    box, mask = ((obs, info["action_mask"]) if isinstance(obs, np.ndarray)
                 else (obs["observation"], obs["action_mask"]))
    preferred, fallback = int(np.argmax(box[:8])), int(np.argmax(box[8:]))
    return preferred if mask[preferred] else fallback


def tiny_grid(obs, info):
    image = obs[:, :, 0]
    agent = np.argwhere(image == toys.TinyGridEnv.agent_value)[0]
    goal = np.argwhere(image == toys.TinyGridEnv.goal_value)[0]
    drow, dcol = goal - agent
    if drow:
        return 0 if drow < 0 else 1
    return 2 if dcol < 0 else 3


def multi_button(obs, info):
    return np.argmax(obs.reshape(3, 3), axis=1)


def bit_match(obs, info):
    return (obs > 0).astype(np.int8)


def point_reach(obs, info):
    return np.clip((obs["goal"] - obs["position"]) / toys.PointReachEnv.speed, -1.0, 1.0)


def dict_cartpole(obs, info):
    theta, omega = obs["pole"]
    return int(theta + 0.5 * omega > 0)


def deep_sea(obs, info):
    cell = int(np.argmax(obs))
    size = int(round(len(obs) ** 0.5))
    return int(toys.DeepSeaEnv.action_mapping(size)[cell // size, cell % size])


OPTIMAL = {
    "ddrl/MaskedChoice-v0": masked_choice,
    "ddrl/MaskedChoiceInfo-v0": masked_choice,
    "ddrl/TinyGrid-v0": tiny_grid,
    "ddrl/MultiButton-v0": multi_button,
    "ddrl/BitMatch-v0": bit_match,
    "ddrl/PointReach-v0": point_reach,
    "ddrl/PointReachGrid-v0": point_reach,
    "ddrl/DictCartPole-v0": dict_cartpole,
    "ddrl/DeepSea-v0": deep_sea,
}


def mean_return(gym_id, policy, episodes=EPISODES, seed=0):
    env = make(gym_id)
    env.action_space.seed(seed)
    shape = env.action_space.shape
    returns = []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action = policy(obs, info) if policy else env.action_space.sample()
            if isinstance(env.action_space, gym.spaces.Box):
                action = np.asarray(action, dtype=np.float32).reshape(shape)
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def test_every_toy_is_registered_with_a_threshold_and_a_time_limit():
    assert set(OPTIMAL) == set(toys.IDS)
    for gym_id in toys.IDS:
        spec = gym.spec(gym_id)
        assert spec.reward_threshold is not None and spec.max_episode_steps


@pytest.mark.parametrize("gym_id", toys.IDS)
def test_gymnasium_env_checker_passes(gym_id):
    env = gym.make(gym_id, disable_env_checker=True).unwrapped
    if gym_id == "ddrl/DictCartPole-v0":  # CartPole itself under the Dict observation wrapper
        env = toys.make_dict_cartpole()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning of the checker is a failure here...
        # ...but these two, of any wrapper and of CartPole's own unbounded velocities
        warnings.filterwarnings("ignore", message=".*different from the unwrapped")
        warnings.filterwarnings("ignore", message=".*infinity")
        check_env(env, skip_render_check=True)
    env.close()


def test_tiny_grid_renders_an_rgb_array():
    env = gym.make("ddrl/TinyGrid-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (128, 128, 3) and frame.dtype == np.uint8 and frame.max() == 255


def trajectory(gym_id, seed, steps=30):
    env = make(gym_id)
    env.action_space.seed(123)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append((obs, reward))
        if terminated or truncated:
            out.append(env.reset()[0])
    return out


def flat(items):
    return np.concatenate([np.concatenate([np.ravel(v) for v in
                                           (x.values() if isinstance(x, dict) else [x])])
                           if not isinstance(x, tuple) else
                           np.concatenate([flat([x[0]]), [x[1]]]) for x in items])


@pytest.mark.parametrize("gym_id", toys.IDS)
def test_same_seed_same_trajectory(gym_id):
    np.testing.assert_array_equal(flat(trajectory(gym_id, 3)), flat(trajectory(gym_id, 3)))
    if gym_id != "ddrl/DeepSea-v0":  # (its start and its map do not depend on the seed)
        assert not np.array_equal(flat(trajectory(gym_id, 3)), flat(trajectory(gym_id, 4)))


@pytest.mark.parametrize("gym_id", ["ddrl/MaskedChoice-v0", "ddrl/MaskedChoiceInfo-v0"])
def test_masked_choice_masks_half_and_penalizes_and_counts_invalid_actions(gym_id):
    env = make(gym_id)
    obs, info = env.reset(seed=0)
    mask_of = ((lambda o, i: i["action_mask"]) if gym_id.endswith("Info-v0")
               else (lambda o, i: o["action_mask"]))
    invalid = 0
    for t in range(20):
        mask = mask_of(obs, info)
        assert mask.dtype == np.int8 and mask.shape == (8,) and mask.sum() == 4
        if t % 2:
            action, expected = int(np.flatnonzero(mask == 0)[0]), -1.0   # invalid
            invalid += 1
        else:
            action = masked_choice(obs, info)
            expected = 1.0
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == expected
        assert info["invalid_actions"] == invalid
        assert not terminated and truncated == (t == 19)
    assert env.reset(seed=1)[1]["invalid_actions"] == 0


def test_masked_choice_needs_the_mask():
    """The best policy blind to the mask (always the fallback) stays far below the
    threshold: 20 * 4/7."""
    def fallback(obs, info):
        return int(np.argmax(obs["observation"][8:]))
    got = mean_return("ddrl/MaskedChoice-v0", fallback)
    assert abs(got - 20 * 4 / 7) < 1.0
    assert got < gym.spec("ddrl/MaskedChoice-v0").reward_threshold - 5


@pytest.mark.parametrize("gym_id", toys.IDS)
def test_optimal_reaches_the_threshold_and_random_does_not(gym_id):
    threshold = gym.spec(gym_id).reward_threshold
    episodes = 20 if gym_id == "ddrl/DictCartPole-v0" else EPISODES
    optimal = mean_return(gym_id, OPTIMAL[gym_id], episodes)
    random = mean_return(gym_id, None, episodes)
    assert optimal >= threshold, (optimal, threshold)
    assert random < threshold, (random, threshold)


# -- MemoryChoice -------------------------------------------------------------------------------
MEMORY = "ddrl/MemoryChoice-v0"
WAIT_ONLY, CHOICES = [1, 0, 0, 0, 0], [0, 1, 1, 1, 1]


class MemoryChoicePolicy:
    """The optimal policy, the one here with memory: it keeps the cue of an episode's first
    observation (every episode has one) until the decision."""

    def __init__(self):
        self.cue = None

    def __call__(self, obs, info):
        if obs["cue"].any():
            self.cue = int(np.argmax(obs["cue"]))
        return 1 + self.cue if obs["phase"][1] else 0


OPTIMAL[MEMORY] = MemoryChoicePolicy()


def memory_episode(seed, choose, delay=None, waiting_action=0):
    """One episode: ``waiting_action`` while waiting, ``choose(cue)`` at the decision; returns
    (the cue, the observations, the rewards, the final step's terminated and truncated, infos)."""
    env = gym.make(MEMORY) if delay is None else gym.make(MEMORY, delay=delay)
    obs, info = env.reset(seed=seed)
    cue = int(np.argmax(obs["cue"]))
    observations, rewards, infos = [obs], [], [info]
    done = False
    while not done:
        action = choose(cue) if obs["phase"][1] else waiting_action
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        infos.append(info)
        done = terminated or truncated
    return cue, observations, rewards, (terminated, truncated), infos


def test_memory_choice_shows_the_cue_on_the_first_step_only():
    cues = set()
    for seed in range(20):
        cue, observations, _, _, _ = memory_episode(seed, lambda c: 1 + c)
        cues.add(cue)
        first = observations[0]["cue"]
        assert first.dtype == np.float32 and first.sum() == 1.0 and first[cue] == 1.0
        for obs in observations[1:]:
            assert not obs["cue"].any()
    assert cues == {0, 1, 2, 3}


@pytest.mark.parametrize("delay", [0, 1, 4, 7])
def test_memory_choice_masks_each_phase_and_lasts_delay_plus_two_steps(delay):
    _, observations, rewards, (terminated, truncated), _ = memory_episode(
        3, lambda c: 1 + c, delay=delay)
    assert len(rewards) == delay + 2
    assert terminated and not truncated
    space = gym.make(MEMORY, delay=delay).observation_space
    assert list(space.spaces) == ["cue", "phase", "action_mask"]
    assert space["action_mask"] == gym.spaces.Box(0, 1, (5,), np.int8)
    for t, obs in enumerate(observations):
        assert space.contains(obs)
        deciding = t == delay + 1  # the final observation (t == delay + 2) waits again
        assert obs["action_mask"].tolist() == (CHOICES if deciding else WAIT_ONLY)
        assert obs["phase"].tolist() == ([0.0, 1.0] if deciding else [1.0, 0.0])


def test_memory_choice_rewards_the_cued_choice_only():
    for seed in range(8):
        cue, _, rewards, _, infos = memory_episode(seed, lambda c: 1 + c)
        assert rewards == [0.0] * 5 + [1.0] and infos[-1]["invalid_actions"] == 0
        _, _, rewards, _, infos = memory_episode(seed, lambda c: 1 + (c + 1) % 4)
        assert rewards == [0.0] * 5 + [-1.0] and infos[-1]["invalid_actions"] == 0
        _, _, rewards, _, infos = memory_episode(seed, lambda c: 0)  # wait: invalid, wrong
        assert rewards == [0.0] * 5 + [-1.0] and infos[-1]["invalid_actions"] == 1


def test_memory_choice_charges_an_invalid_wait_and_plays_it_as_a_wait():
    cue, observations, rewards, _, infos = memory_episode(2, lambda c: 1 + c, waiting_action=1)
    assert len(rewards) == 6 and rewards == [-1.0] * 5 + [1.0]
    assert [i["invalid_actions"] for i in infos] == [0, 1, 2, 3, 4, 5, 5]


def test_memory_choice_observation_tells_nothing_but_the_first_cue():
    """Episodes of different cues differ in the first observation only (and nowhere in info)."""
    runs = {}
    for seed in range(20):
        cue, observations, _, _, infos = memory_episode(seed, lambda c: 1)
        runs.setdefault(cue, (observations, infos))
    assert len(runs) == 4
    (base, base_infos), *others = runs.values()
    for observations, infos in others:
        assert infos == base_infos
        assert not np.array_equal(observations[0]["cue"], base[0]["cue"])
        for a, b in zip(observations[1:], base[1:]):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])


def test_memory_choice_is_deterministic_under_a_seed():
    def cues(seed):
        env = gym.make(MEMORY)
        out = [int(np.argmax(env.reset(seed=seed)[0]["cue"]))]
        for _ in range(30):  # unseeded resets go on from the seeded generator
            out.append(int(np.argmax(env.reset()[0]["cue"])))
        return out
    assert cues(5) == cues(5)
    assert cues(5) != cues(6)


def test_memory_choice_without_memory_is_at_chance():
    """The best memoryless policy (always the same choice) gets 1/4 - 3/4 = -0.5."""
    got = mean_return(MEMORY, lambda obs, info: 1 if obs["phase"][1] else 0, episodes=400)
    assert abs(got + 0.5) < 0.15
    assert got < gym.spec(MEMORY).reward_threshold - 1


def test_memory_choice_other_sizes_and_bad_ones():
    env = gym.make(MEMORY, num_cues=3, delay=2)
    assert env.action_space == gym.spaces.Discrete(4)
    assert env.observation_space["cue"].shape == (3,)
    with pytest.raises(ValueError, match="num_cues=1; it takes an integer >= 2"):
        toys.MemoryChoiceEnv(num_cues=1)
    with pytest.raises(ValueError, match="delay=-1; it takes an integer >= 0"):
        toys.MemoryChoiceEnv(delay=-1)
    with pytest.raises(ValueError, match="delay=2.5"):
        toys.MemoryChoiceEnv(delay=2.5)


def test_memory_choice_resumes_exactly_through_gym_env():
    """gym_env's get_state holds the cue and the step count (a toy: plain attributes)."""
    from core.registry import unwrap_actor_class
    from envs import ENV_REGISTRY
    from options.options import parse_args
    gym_env = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))

    def make_env(seed):
        return gym_env(parse_args(["--env_name", "gym_env", "--gym_id", MEMORY]), seed=seed)
    env = make_env(0)
    obs, _ = env.reset(seed=0)
    cue = int(np.argmax(obs["cue"]))
    for _ in range(3):
        env.step(0)
    state = env.get_state()
    other = make_env(1)
    other.reset(seed=11)
    other.set_state(state)
    for _ in range(2):
        assert other.step(0).reward == 0.0
    last = other.step(1 + cue)
    assert (last.reward, last.terminated) == (1.0, True)


# -- DeepSea -------------------------------------------------------------------------------------
def test_deep_sea_pays_only_the_path_right_all_the_way():
    """Size 4 by hand: the corner is reached by three moves right; right costs 0.01 / 4 each,
    the last step from the corner pays 1 whichever way it goes; a left at column 0 stays."""
    env = toys.DeepSeaEnv(size=4, mapping_seed=3)
    right = env.right_action
    obs, _ = env.reset(seed=0)
    assert obs.shape == (16,) and obs[0] == 1.0
    total, done, t = 0.0, False, 0
    while not done:
        action = right[env.row, env.col] if t < 3 else 1 - right[env.row, env.col]
        obs, reward, done, truncated, _ = env.step(action)
        total, t = total + reward, t + 1
    assert (t, env.col, truncated) == (4, 2, False)
    assert total == pytest.approx(1.0 - 3 * 0.01 / 4)
    env.reset()
    env.step(1 - right[0, 0])  # left at the edge: stays in column 0, no cost
    assert (env.row, env.col) == (1, 0)


def test_deep_sea_random_play_almost_never_finds_the_reward():
    env = gym.make("ddrl/DeepSea-v0", size=20)
    env.action_space.seed(0)
    found = 0
    for episode in range(500):
        env.reset(seed=episode)
        done, total = False, 0.0
        while not done:
            _, reward, done, _, _ = env.step(env.action_space.sample())
            total += reward
        found += total > 0.5
    assert found == 0
    with pytest.raises(ValueError, match="size=1"):
        toys.DeepSeaEnv(size=1)
