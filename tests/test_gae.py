"""compute_gae and DefaultAgent.send_trajectory against advantages computed by hand.

Every case uses gamma = 0.5 and lambda = 0.5 (gamma * lambda = 0.25), so every number below is
exact in float32. delta_t = r_t + gamma * V_next_t * (1 - terminated_t) - V_t and
A_t = delta_t + gamma * lambda * (1 - ended_t) * A_{t+1}.
"""
import numpy as np
import pytest
from gymnasium import spaces

from agents.default_agent import DefaultAgent, compute_gae
from core.types import Trajectory
from models.ppo import PPOModel
from options.options import parse_args

pytestmark = pytest.mark.unit

GAMMA, LAM = 0.5, 0.5


def column(x):
    """A single env's [T] list as a time-major [T, 1] array."""
    return np.asarray(x, dtype=np.float32).reshape(-1, 1)


def gae(rewards, values, next_values, terminated=(0, 0, 0), truncated=(0, 0, 0)):
    adv, ret = compute_gae(column(rewards), column(values), column(next_values),
                           column(terminated).astype(bool), column(truncated).astype(bool),
                           GAMMA, LAM)
    return adv[:, 0], ret[:, 0]


def test_no_episode_end_bootstraps_from_the_last_value():
    # rewards 1,2,3; V = .5, 1, 1.5; V(last observation) = 2
    # delta_2 = 3 + .5*2   - 1.5 = 2.5         A_2 = 2.5
    # delta_1 = 2 + .5*1.5 - 1   = 1.75        A_1 = 1.75 + .25*2.5   = 2.375
    # delta_0 = 1 + .5*1   - .5  = 1.0         A_0 = 1.0  + .25*2.375 = 1.59375
    adv, ret = gae([1, 2, 3], [0.5, 1.0, 1.5], [1.0, 1.5, 2.0])
    np.testing.assert_array_equal(adv, [1.59375, 2.375, 2.5])
    # returns = A + V
    np.testing.assert_array_equal(ret, [2.09375, 3.375, 4.0])


def test_termination_in_the_middle_does_not_bootstrap_and_cuts_the_recursion():
    # terminated at t=1: next_values[1] = 99 must be ignored (a terminal state is worth 0)
    # delta_2 = 2.5                            A_2 = 2.5
    # delta_1 = 2 + 0 - 1 = 1.0                A_1 = 1.0 (A_2 does not flow back)
    # delta_0 = 1.0                            A_0 = 1.0 + .25*1.0 = 1.25
    adv, ret = gae([1, 2, 3], [0.5, 1.0, 1.5], [1.0, 99.0, 2.0], terminated=(0, 1, 0))
    np.testing.assert_array_equal(adv, [1.25, 1.0, 2.5])
    np.testing.assert_array_equal(ret, [1.75, 2.0, 4.0])


def test_truncation_in_the_middle_bootstraps_from_the_final_observation_and_cuts():
    # truncated at t=1: next_values[1] = V(final observation) = 4
    # delta_2 = 2.5                            A_2 = 2.5
    # delta_1 = 2 + .5*4 - 1 = 3.0             A_1 = 3.0 (A_2 does not flow back)
    # delta_0 = 1 + .5*1 - .5 = 1.0            A_0 = 1.0 + .25*3.0 = 1.75
    adv, ret = gae([1, 2, 3], [0.5, 1.0, 1.5], [1.0, 4.0, 2.0], truncated=(0, 1, 0))
    np.testing.assert_array_equal(adv, [1.75, 3.0, 2.5])
    np.testing.assert_array_equal(ret, [2.25, 4.0, 4.0])


def test_terminated_and_truncated_on_the_same_step_counts_as_terminated():
    # as the termination case: next_values[1] ignored, recursion cut
    adv, _ = gae([1, 2, 3], [0.5, 1.0, 1.5], [1.0, 4.0, 2.0], terminated=(0, 1, 0),
                 truncated=(0, 1, 0))
    np.testing.assert_array_equal(adv, [1.25, 1.0, 2.5])


def test_two_envs_time_major_are_computed_column_by_column():
    # env 0: the no-end case; env 1: the truncation case. Arrays are [T=3, E=2].
    rewards = np.array([[1, 1], [2, 2], [3, 3]], dtype=np.float32)
    values = np.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5]], dtype=np.float32)
    next_values = np.array([[1.0, 1.0], [1.5, 4.0], [2.0, 2.0]], dtype=np.float32)
    terminated = np.zeros((3, 2), dtype=bool)
    truncated = np.array([[0, 0], [0, 1], [0, 0]], dtype=bool)
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, LAM)
    assert adv.shape == (3, 2) and ret.shape == (3, 2)
    np.testing.assert_array_equal(adv[:, 0], [1.59375, 2.375, 2.5])
    np.testing.assert_array_equal(adv[:, 1], [1.75, 3.0, 2.5])
    np.testing.assert_array_equal(ret[:, 0], [2.09375, 3.375, 4.0])
    np.testing.assert_array_equal(ret[:, 1], [2.25, 4.0, 4.0])


# -- DefaultAgent.send_trajectory: which observation each bootstrap value comes from ------------
def make_agent():
    args = parse_args(["--config", "none", "--num_workers", "0", "--gamma", str(GAMMA),
                       "--gae_lambda", str(LAM)])
    model = PPOModel(args, spaces.Box(-10, 10, shape=(1,)), spaces.Discrete(2))
    # V(obs) = the observation's single coordinate: the observation says which value is used.
    model.predict_values = lambda obs: np.asarray(obs, dtype=np.float32).reshape(-1)
    return DefaultAgent(args, model)


def trajectory(rewards, values, terminated, truncated, last_obs, trunc_index, trunc_obs):
    rewards = np.asarray(rewards, dtype=np.float32)
    T, E = rewards.shape
    return Trajectory(
        observations=np.full((T, E, 1), -1000.0, dtype=np.float32),  # values come from `values`
        actions=np.zeros((T, E), dtype=np.int64), rewards=rewards,
        terminated=np.asarray(terminated, dtype=bool), truncated=np.asarray(truncated, dtype=bool),
        log_probs=np.zeros((T, E), dtype=np.float32),
        values=np.asarray(values, dtype=np.float32),
        last_observations=np.asarray(last_obs, dtype=np.float32).reshape(E, 1),
        truncated_index=np.asarray(trunc_index, dtype=np.int64).reshape(-1, 2),
        truncated_observations=np.asarray(trunc_obs, dtype=np.float32).reshape(-1, 1))


def test_send_trajectory_bootstraps_from_truncated_and_last_observations():
    # env 0: rewards 1,2,3, V .5,1,1.5, truncated at t=1 with final observation [4] (V = 4),
    #        last observation [2] (V = 2): the truncation case, A = 1.75, 3.0, 2.5
    # env 1: rewards 0,0,1, V 0,0,0, no end, last observation [8] (V = 8):
    #        delta_2 = 1 + .5*8 - 0 = 5      A_2 = 5
    #        delta_1 = 0 + .5*0 - 0 = 0      A_1 = 0 + .25*5    = 1.25
    #        delta_0 = 0                     A_0 = 0 + .25*1.25 = 0.3125
    agent = make_agent()
    stats = agent.send_trajectory(trajectory(
        rewards=[[1, 0], [2, 0], [3, 1]], values=[[0.5, 0], [1.0, 0], [1.5, 0]],
        terminated=np.zeros((3, 2)), truncated=[[0, 0], [1, 0], [0, 0]],
        last_obs=[[2.0], [8.0]], trunc_index=[[1, 0]], trunc_obs=[[4.0]]))
    # flattened in (t, e) order
    np.testing.assert_array_equal(agent.data["advantages"].numpy(),
                                  [1.75, 0.3125, 3.0, 1.25, 2.5, 5.0])
    np.testing.assert_array_equal(agent.data["returns"].numpy(),
                                  [2.25, 0.3125, 4.0, 1.25, 4.0, 5.0])
    assert stats["advantage_count"] == 6
    # 1.75 + .3125 + 3 + 1.25 + 2.5 + 5 = 13.8125
    assert stats["advantage_sum"] == pytest.approx(13.8125, abs=1e-12)
    # 3.0625 + .09765625 + 9 + 1.5625 + 6.25 + 25 = 44.97265625
    assert stats["advantage_sq_sum"] == pytest.approx(44.97265625, abs=1e-12)


def test_send_trajectory_truncated_last_step_uses_the_final_not_the_reset_observation():
    # T=2, one env, truncated at the last step t=1. last_observations is the observation after
    # the automatic reset ([100], V = 100): it must not be used; the final observation [4] is.
    # delta_1 = 2 + .5*4 - 1 = 3                A_1 = 3
    # delta_0 = 1 + .5*1 - .5 = 1               A_0 = 1 + .25*3 = 1.75
    agent = make_agent()
    agent.send_trajectory(trajectory(
        rewards=[[1], [2]], values=[[0.5], [1.0]], terminated=[[0], [0]],
        truncated=[[0], [1]], last_obs=[[100.0]], trunc_index=[[1, 0]], trunc_obs=[[4.0]]))
    np.testing.assert_array_equal(agent.data["advantages"].numpy(), [1.75, 3.0])
