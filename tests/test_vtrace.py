"""V-trace (core/learning/vtrace.py) against values computed by hand: on-policy data, truncated
importance ratios, a truncation and a termination inside the sequence; and on-policy V-trace
equal to GAE(1) (agents/default_agent.py compute_gae)."""
import math

import numpy as np
import pytest
import torch

from agents.default_agent import compute_gae
from core.learning.vtrace import vtrace

pytestmark = pytest.mark.unit

GAMMA = 0.9
REWARDS = [1.0, 2.0, 3.0]
VALUES = [0.5, 1.0, 1.5]


def column(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype).reshape(-1, 1)


def run(rhos, next_values, terminated=(False,) * 3, ended=(False,) * 3, **kwargs):
    vs, advantages = vtrace(column([math.log(r) for r in rhos]), column(REWARDS),
                            column(VALUES), column(next_values),
                            column(terminated, torch.bool), column(ended, torch.bool),
                            GAMMA, **kwargs)
    return vs.flatten().tolist(), advantages.flatten().tolist()


def test_on_policy_targets_are_bootstrapped_returns():
    # v2 = 3 + .9 * 2 = 4.8; v1 = 2 + .9 * 4.8 = 6.32; v0 = 1 + .9 * 6.32 = 6.688
    # A_t = r_t + .9 v_{t+1} - V_t (v_3 = the bootstrap value 2.0)
    vs, adv = run([1, 1, 1], [1.0, 1.5, 2.0])
    assert vs == pytest.approx([6.688, 6.32, 4.8])
    assert adv == pytest.approx([6.188, 5.32, 3.3])


def test_truncated_ratios_scale_the_td_errors_and_the_traces():
    # rho = [1, .5, 1] (rho-bar = c-bar = 1): deltas 1.4, .5 * (2 + 1.35 - 1) = 1.175, 3.3;
    # v2 - V2 = 3.3; v1 - V1 = 1.175 + .9 * .5 * 3.3 = 2.66; v0 - V0 = 1.4 + .9 * 2.66 = 3.794
    vs, adv = run([1, 0.5, 1], [1.0, 1.5, 2.0])
    assert vs == pytest.approx([4.294, 3.66, 4.8])
    # A0 = 1 + .9 * 3.66 - .5; A1 = .5 * (2 + .9 * 4.8 - 1); A2 = 3.3
    assert adv == pytest.approx([3.794, 2.66, 3.3])


def test_ratios_above_the_bars_are_truncated():
    # rho0 = 4 counts as 1 in the TD error and the advantage; everything as on-policy
    for got, wanted in zip(run([4, 1, 1], [1.0, 1.5, 2.0]), run([1, 1, 1], [1.0, 1.5, 2.0])):
        assert got == pytest.approx(wanted)
    # with rho-bar = 2 it counts as 2: delta0 = 2 * 1.4, A0 = 2 * (1 + .9 * 6.32 - .5)
    vs, adv = run([4, 1, 1], [1.0, 1.5, 2.0], rho_bar=2.0)
    assert vs[0] == pytest.approx(0.5 + 2.8 + 0.9 * 5.32)
    assert adv[0] == pytest.approx(2 * 6.188)


def test_a_truncation_bootstraps_from_the_final_observation_and_stops_the_trace():
    # step 1 truncated, V(final observation) = 3.0; rho = [2, .5, 1]
    # deltas: 1.4, .5 * (2 + .9 * 3 - 1) = 1.85, 3.3; the trace stops at step 1
    vs, adv = run([2, 0.5, 1], [1.0, 3.0, 2.0], ended=(False, True, False))
    assert vs == pytest.approx([0.5 + 1.4 + 0.9 * 1.85, 1.0 + 1.85, 4.8])
    # A0 = 1 + .9 * v1 - .5; A1 = .5 * (2 + .9 * 3.0 - 1): from the final observation's value
    assert adv == pytest.approx([1 + 0.9 * 2.85 - 0.5, 1.85, 3.3])


def test_a_termination_is_worth_nothing():
    # step 1 terminated: its next value (99, anything) is masked; the trace stops there
    vs, adv = run([1, 1, 1], [1.0, 99.0, 2.0], terminated=(False, True, False),
                  ended=(False, True, False))
    assert vs == pytest.approx([2.8, 2.0, 4.8])
    assert adv == pytest.approx([2.3, 1.0, 3.3])


def test_on_policy_vtrace_is_gae_of_lambda_one():
    rng = np.random.default_rng(0)
    steps, envs = 7, 4
    rewards = rng.normal(size=(steps, envs))
    values = rng.normal(size=(steps, envs))
    next_values = np.concatenate([values[1:], rng.normal(size=(1, envs))])
    terminated = rng.random((steps, envs)) < 0.15
    truncated = ~terminated & (rng.random((steps, envs)) < 0.15)
    next_values[truncated] = rng.normal(size=truncated.sum())  # final observations' values
    gae, returns = compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, 1.0)
    vs, adv = vtrace(torch.zeros(steps, envs, dtype=torch.float64), torch.tensor(rewards),
                     torch.tensor(values), torch.tensor(next_values), torch.tensor(terminated),
                     torch.tensor(terminated | truncated), GAMMA)
    np.testing.assert_allclose(vs.numpy(), returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv.numpy(), gae, rtol=1e-5, atol=1e-5)
