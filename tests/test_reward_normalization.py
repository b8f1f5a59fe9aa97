"""--normalize_reward (core/learning/normalizer.py RewardNormalizer and scale_rewards, the
rollout worker's discounted returns): the scaling against hand-computed values, the statistics
merged and saved, a worker's fragment scaled while its episodes' returns stay the env's, and the
flag where it belongs (PPO's and APPO's loops) and where it does not (the replay loop)."""
import numpy as np
import pytest

from core.errors import ConfigError
from core.learning.normalizer import Moments, RewardNormalizer, scale_rewards
from core.sampling.rollout import RolloutWorker
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit


def test_a_step_scales_by_the_std_clips_and_resets_returns_at_episode_ends():
    returns = np.array([0.0, 2.0, 1.0])
    scaled, seen = scale_rewards(np.array([1.0, 4.0, -30.0], np.float32), returns,
                                 np.array([False, True, False]), (2.0, 0.5, 10.0))
    np.testing.assert_allclose(seen, [1.0, 5.0, -29.5])       # 0.5 * return + reward
    np.testing.assert_allclose(returns, [1.0, 0.0, -29.5])    # the ended env starts again
    np.testing.assert_allclose(scaled, [0.5, 2.0, -10.0])     # / 2, -15 clipped to -10
    assert scaled.dtype == np.float32


def test_the_statistics_are_the_variance_of_the_returns_merged_across_workers():
    normalizer = RewardNormalizer(gamma=0.9, clip=5.0)
    assert normalizer.scaling() == (pytest.approx(1.0), 0.9, 5.0)  # nothing seen: unscaled
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 11.0])
    normalizer.update(Moments.of(a))
    normalizer.update(Moments.of(b))
    normalizer.update(None)                                     # a fragment without them
    assert normalizer.var == pytest.approx(np.var(np.concatenate([a, b])))
    std = normalizer.scaling()[0]
    assert std == pytest.approx(np.sqrt(np.var(np.concatenate([a, b])) + 1e-8))
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
    stats = w.collect(None, None, 12, reward_scaling=(4.0, 0.5, 10.0))
    np.testing.assert_allclose(captured[0].rewards, 0.25)    # 1 / 4 at every step
    assert stats.episode_returns == [5.0, 5.0, 5.0, 5.0]      # the env's, unscaled
    one = [1.0, 1.5, 1.75, 1.875, 1.9375]
    seen = np.array(one + one + one[:2])                      # 12 steps of one env
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
