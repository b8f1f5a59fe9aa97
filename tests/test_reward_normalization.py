"""--normalize_reward (core/learning/normalizer.py RewardNormalizer and scale_rewards, the
rollout worker's discounted returns): the scaling against hand-computed values, the statistics
merged and saved, a worker's fragment scaled while its episodes' returns stay the env's, and the
flag where it belongs (PPO's and APPO's loops) and where it does not (the replay loop)."""
import numpy as np
import pytest

from core.errors import ConfigError
from core.learning.normalizer import Moments, RewardNormalizer, discount_step, scale_fragment
from core.sampling.rollout import RolloutWorker
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit


def test_a_step_discounts_and_resets_returns_at_episode_ends():
    returns = np.array([0.0, 2.0, 1.0])
    seen = discount_step(returns, np.array([1.0, 4.0, -30.0], np.float32),
                         np.array([False, True, False]), 0.5)
    np.testing.assert_allclose(seen, [1.0, 5.0, -29.5])       # 0.5 * return + reward
    np.testing.assert_allclose(returns, [1.0, 0.0, -29.5])    # the ended env starts again


def test_a_fragment_is_scaled_by_the_runs_returns_merged_with_its_own_and_clipped():
    before = np.array([0.0, 2.0, 4.0, 6.0])                   # the run's statistics so far
    seen = np.array([[1.0, 3.0], [5.0, 7.0]])                 # this fragment's returns [T, E]
    rewards = np.array([[1.0, -2.0], [100.0, 0.5]], np.float32)
    scaled, own = scale_fragment(rewards, seen, (Moments.of(before), 0.9, 10.0))
    std = np.sqrt(np.var([0, 2, 4, 6, 1, 3, 5, 7]) + 1e-8)     # 2.29...
    np.testing.assert_allclose(scaled, [[1 / std, -2 / std], [10.0, 0.5 / std]], rtol=1e-6)
    assert scaled.dtype == np.float32
    assert own.count == 4 and own.mean == pytest.approx(4.0)  # for the driver to merge
    first, _ = scale_fragment(rewards, seen, (Moments(0.0, np.zeros(()), np.zeros(())), 0.9,
                                              10.0))           # no statistics yet: its own
    np.testing.assert_allclose(first[0], rewards[0] / np.sqrt(np.var(seen) + 1e-8), rtol=1e-6)


def test_the_statistics_are_the_variance_of_the_returns_merged_across_workers():
    normalizer = RewardNormalizer(gamma=0.9, clip=5.0)
    assert normalizer.var == 1.0 and normalizer.scaling()[1:] == (0.9, 5.0)
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 11.0])
    normalizer.update(Moments.of(a))
    normalizer.update(Moments.of(b))
    normalizer.update(None)                                     # a fragment without them
    assert normalizer.var == pytest.approx(np.var(np.concatenate([a, b])))
    assert normalizer.scaling()[0].count == 5
    again = RewardNormalizer(gamma=0.9)
    again.load_state_dict(normalizer.state_dict())
    assert again.var == normalizer.var and again.moments.count == 5


def worker(*flags):
    args = parse_args(["--config", "none", "--gym_id", "CartPole-v1", "--num_workers", "0",
                       "--num_envs_per_worker", "2", "--seed", "0", "--max_episode_steps",
                       "5", *flags])
    return RolloutWorker(run_spec(args))


@pytest.mark.contract
def test_a_fragment_learns_scaled_rewards_and_reports_the_envs_returns():
    """CartPole pays 1 a step; with the episodes cut at 5 steps by the time limit, each env's
    discounted returns (gamma 0.5) run 1, 1.5, 1.75, 1.875, 1.9375, then again."""
    w = worker()
    captured = []
    w.agent.send_trajectory = lambda trajectory: captured.append(trajectory) or {}
    stats = w.collect(None, None, 12, reward_scaling=(Moments.of(np.array([0.0, 4.0])), 0.5,
                                                         10.0))
    one = [1.0, 1.5, 1.75, 1.875, 1.9375]
    seen = np.array(one + one + one[:2])                      # 12 steps of one env
    std = np.sqrt(np.var(np.concatenate([[0.0, 4.0], seen, seen])) + 1e-8)
    np.testing.assert_allclose(captured[0].rewards, 1 / std, rtol=1e-6)  # every step's 1
    assert stats.episode_returns == [5.0, 5.0, 5.0, 5.0]      # the env's, unscaled
    assert stats.return_moments.count == 24
    assert stats.return_moments.mean == pytest.approx(seen.mean())
    assert stats.return_moments.m2 / 24 == pytest.approx(seen.var())
    state = w.get_state()                                     # mid-episode: kept for resume
    np.testing.assert_allclose(state["discounted_return"], [1.5, 1.5])
    unscaled = w.collect(None, None, 3)
    assert unscaled.return_moments is None and captured[-1].rewards.max() == 1.0


@pytest.mark.contract
def test_the_flag_is_the_on_policy_loops_and_takes_the_agents_gamma():
    args = parse_args(["--config", "none", "--normalize_reward", "--gamma", "0.9"])
    assert args.normalize_reward and args.reward_clip == 10.0
    assert parse_args(["--config", "none", "--model_name", "appo",
                       "--normalize_reward"]).normalize_reward
    with pytest.raises(ConfigError, match="--normalize_reward is a flag of the appo loop.*"
                                          "and of the ppo loop"):
        parse_args(["--config", "none", "--model_name", "sac", "--normalize_reward"])
