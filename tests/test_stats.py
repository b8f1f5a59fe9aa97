"""ddrl/stats.py (rliable's estimators in numpy) against values worked out by hand, and
compare.py's interval estimates of a made-up suite (2 systems x 4 seeds), no subprocess."""
import math
import os
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.unit

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import compare  # noqa: E402  (benchmarks/ on the path first)
from ddrl.stats import (iqm, percentile_interval, performance_profile,  # noqa: E402
                        probability_of_improvement, probability_of_improvement_ci,
                        resample_within_tasks, stratified_bootstrap_ci)

REPS = 500  # enough for the properties checked, and fast


# -- IQM ---------------------------------------------------------------------------------------
def test_iqm_drops_a_quarter_each_side():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # 8 values: drop 2 each side, mean(3, 4, 5, 6)
    # 10 values: int(2.5) = 2 dropped each side -> mean(3, 4, 6, 7, 8, 9) = 37 / 6
    assert iqm([10, 1, 9, 2, 8, 3, 7, 4, 6, 100]) == pytest.approx(37 / 6)


def test_iqm_pools_runs_and_tasks_and_is_the_mean_under_four_runs():
    assert iqm([[1, 5], [2, 6], [3, 7], [4, 8]]) == pytest.approx(4.5)  # the 8 values of [1..8]
    assert iqm([1, 2, 6]) == pytest.approx(3.0)  # int(0.75) = 0: nothing dropped


def test_iqm_of_times_with_failed_runs():
    assert iqm([10, 20, 30, math.inf]) == pytest.approx(25.0)  # the inf is dropped
    assert iqm([10, 20, math.inf, math.inf]) == math.inf  # one inf among the middle two


def test_iqm_refuses_nan_and_nothing():
    with pytest.raises(ValueError):
        iqm([1.0, float("nan")])
    with pytest.raises(ValueError):
        iqm([])


# -- probability of improvement ------------------------------------------------------------------
def test_probability_of_improvement_with_ties():
    x, y = [3, 1, 2], [2, 2, 0]
    # x=3 beats 2, 2, 0 (3); x=1 beats 0 (1); x=2 ties 2, 2 and beats 0 (0.5 + 0.5 + 1): 6 / 9
    assert probability_of_improvement(x, y) == pytest.approx(6 / 9)
    # lower is better: x=1 beats 2, 2 (2); x=2 ties 2, 2 (1); x=3 nothing: 3 / 9
    assert probability_of_improvement(x, y, higher_is_better=False) == pytest.approx(3 / 9)
    assert probability_of_improvement(x, x) == pytest.approx(0.5)


def test_probability_of_improvement_unequal_runs_and_tasks():
    assert probability_of_improvement([5, 1], [4, 4, 6]) == pytest.approx(2 / 6)  # 5 beats 4, 4
    # two tasks, averaged: 6/9 on the first (above), 0 on the second
    x = [[3, 0], [1, 0], [2, 0]]
    y = [[2, 1], [2, 1], [0, 1]]
    assert probability_of_improvement(x, y) == pytest.approx((6 / 9 + 0) / 2)
    with pytest.raises(ValueError):
        probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 1)))


def test_probability_of_improvement_failed_runs_tie():
    # times, lower better: 10 beats both infs (2), inf ties both infs (0.5 + 0.5): 3 / 4
    assert probability_of_improvement([10, math.inf], [math.inf, math.inf],
                                      higher_is_better=False) == pytest.approx(0.75)


# -- performance profile ---------------------------------------------------------------------
def test_performance_profile_of_a_4x2_matrix():
    m = [[1, 10], [2, 20], [3, 30], [4, 40]]
    # tau 0: all; 2.5: task 0 {3, 4} = 1/2, task 1 all; 3 (strictly above): {4} = 1/4 and all;
    # 25: none and {30, 40} = 1/2; 100: none
    np.testing.assert_allclose(performance_profile(m, [0, 2.5, 3, 25, 100]),
                               [1.0, 0.75, 0.625, 0.25, 0.0])
    # lower is better at 2.5: task 0 {1, 2} = 1/2, task 1 none
    np.testing.assert_allclose(performance_profile(m, [2.5], higher_is_better=False), [0.25])


# -- the stratified bootstrap ------------------------------------------------------------------
def test_percentile_interval_as_numpy_and_with_infinities():
    lo, hi = percentile_interval(np.arange(11.0), 0.95)  # positions 0.25 and 9.75
    assert (lo, hi) == (pytest.approx(0.25), pytest.approx(9.75))
    # positions 0.75 (between 1 and 2) and 2.25 (between inf and inf: np.percentile gives nan)
    assert percentile_interval([1, 2, math.inf, math.inf], 0.5) == (pytest.approx(1.75), math.inf)


def test_ci_holds_the_estimate_and_narrows_with_more_runs():
    few = np.random.default_rng(0).normal(size=(5, 1))
    many = np.tile(few, (20, 1))  # the same scores, 20 times as many runs of each
    lo_few, hi_few = stratified_bootstrap_ci(few, iqm, reps=REPS)
    lo_many, hi_many = stratified_bootstrap_ci(many, iqm, reps=REPS)
    assert lo_few <= iqm(few) <= hi_few and lo_many <= iqm(many) <= hi_many
    assert hi_many - lo_many < (hi_few - lo_few) / 2


def test_ci_is_reproducible_with_a_seed():
    scores = np.random.default_rng(1).normal(size=(6, 2))
    first = stratified_bootstrap_ci(scores, iqm, reps=REPS, seed=3)
    assert stratified_bootstrap_ci(scores, iqm, reps=REPS, seed=3) == first
    assert stratified_bootstrap_ci(scores, iqm, reps=REPS, seed=4) != first


def test_ci_of_a_constant_column_is_a_point():
    assert stratified_bootstrap_ci(np.full((5, 1), 7.0), iqm, reps=REPS) == (7.0, 7.0)
    beside_noise = np.column_stack([np.full(5, 7.0), np.arange(5.0)])
    assert stratified_bootstrap_ci(beside_noise, lambda m: m[:, 0].mean(), reps=REPS) == (7.0, 7.0)


def test_resampling_never_mixes_tasks():
    scores = np.column_stack([np.arange(5.0), 100 + np.arange(5.0)])
    seen = []

    def statistic(resampled):
        seen.append(resampled)
        return 0.0

    stratified_bootstrap_ci(scores, statistic, reps=REPS)
    drawn = np.stack(seen)  # [reps, runs, tasks]
    assert drawn.shape == (REPS, 5, 2)
    assert np.isin(drawn[:, :, 0], scores[:, 0]).all() and np.isin(drawn[:, :, 1], scores[:, 1]).all()
    # the tasks are drawn independently: the runs picked in task 0 are not those of task 1
    assert (drawn[:, :, 1] - 100 != drawn[:, :, 0]).any()
    x, y = resample_within_tasks([scores, scores + 1000], np.random.default_rng(0))
    assert np.isin(x[:, 1], scores[:, 1]).all() and np.isin(y[:, 0], scores[:, 0] + 1000).all()


def test_probability_of_improvement_ci():
    always = probability_of_improvement_ci([5, 6, 7], [1, 2, 3], reps=REPS)
    assert always == (1.0, 1.0)  # every resample of x beats every resample of y
    x, y = [3, 1, 2, 5], [2, 2, 0, 4]
    lo, hi = probability_of_improvement_ci(x, y, reps=REPS)
    assert lo <= probability_of_improvement(x, y) <= hi and 0 <= lo < hi <= 1
    assert probability_of_improvement_ci(x, y, reps=REPS) == (lo, hi)


def test_profile_ci_is_a_band_around_the_profile():
    scores = np.random.default_rng(2).normal(size=(8, 2))
    taus = np.linspace(-2, 2, 9)
    lo, hi = stratified_bootstrap_ci(scores, lambda m: performance_profile(m, taus), reps=REPS)
    profile = performance_profile(scores, taus)
    assert lo.shape == hi.shape == taus.shape
    assert (lo <= profile).all() and (profile <= hi).all()


# -- compare.py's interval estimates -----------------------------------------------------------
def fake_run(system, seed, last, best, time_to_target):
    """A compare.py run record: its eval curve ends at ``last`` (``best`` on the way); the
    target reached at ``time_to_target`` s, or never (None)."""
    reached = time_to_target is not None
    return dict(system=system, seed=seed, reached=reached, curve=[[1.0, best], [2.0, last]],
                summary=dict(last_eval_return=last, best_eval_return=best, target_reached=reached,
                             time_to_target_s=time_to_target))


def fake_suite():
    mine = [fake_run("mine", 0, 100, 500, 10), fake_run("mine", 1, 200, 500, 20),
            fake_run("mine", 2, 300, 300, 30), fake_run("mine", 3, 400, 400, None)]
    # a run stopped before writing its summary: its curve's returns, never reached
    mine[3].update(summary=None, reached=False, curve=[[1.0, 250], [2.0, 400]])
    peer = [fake_run("peer", s, last, best, t) for s, (last, best, t) in
            enumerate([(150, 150, 15), (150, 200, 25), (250, 250, 35), (50, 600, 45)])]
    return mine + peer


def test_compare_interval_estimates_by_hand():
    estimates = compare.interval_estimates(fake_suite(), ["mine", "peer"], "peer", target=475)
    mine, peer = estimates["systems"]["mine"], estimates["systems"]["peer"]
    assert mine["runs"] == peer["runs"] == 4
    # 4 runs: drop 1 each side, mean of the middle two
    assert mine["last_eval_return"]["iqm"] == pytest.approx(250)  # 100 [200 300] 400
    assert mine["best_eval_return"]["iqm"] == pytest.approx(450)  # 300 [400 500] 500
    assert mine["time_to_target_s"]["iqm"] == pytest.approx(25)  # 10 [20 30] inf
    assert peer["last_eval_return"]["iqm"] == pytest.approx(150)  # 50 [150 150] 250
    assert peer["time_to_target_s"]["iqm"] == pytest.approx(30)  # 15 [25 35] 45
    # last return, mine over peer: 100 beats 50 (1); 200 beats 150, 150, 50 (3); 300, 400 all (4 + 4)
    assert mine["p_last_eval_return_above_peer"]["p"] == pytest.approx(12 / 16)
    # time, lower better: 10 beats all 4; 20 beats 25, 35, 45 (3); 30 beats 35, 45 (2); inf none
    assert mine["p_time_to_target_below_peer"]["p"] == pytest.approx(9 / 16)
    for key in ("last_eval_return", "best_eval_return", "time_to_target_s"):
        lo, hi = mine[key]["ci"]
        assert lo <= mine[key]["iqm"] <= hi, key
    assert peer["p_last_eval_return_above_peer"] is None and peer["p_time_to_target_below_peer"] is None


def test_compare_interval_table():
    runs = fake_suite()
    runs[0].update(reached=False)  # mine: 3 runs of 4 never reached -> IQM time inf
    runs[1].update(reached=False)
    estimates = compare.interval_estimates(runs, ["mine", "peer"], "peer", target=475)
    table = compare.interval_markdown(estimates, "peer")
    row = next(line for line in table.splitlines() if line.startswith("| mine |"))
    assert row.startswith("| mine | 4 | 250.0 [") and "| inf [" in row and row.endswith("] |")
    assert "| peer | 4 | 150.0 [" in table and table.rstrip().endswith("| — | — |")
    no_target = compare.interval_estimates(runs, ["mine", "peer"], "peer", target=None)
    assert no_target["systems"]["mine"]["time_to_target_s"] is None
    assert no_target["systems"]["mine"]["p_time_to_target_below_peer"] is None
