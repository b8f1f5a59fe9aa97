"""Aggregate statistics across seeds, as rliable defines them (Agarwal et al. 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS): the interquartile
mean, stratified-bootstrap confidence intervals, the probability of improvement and performance
profiles. ``ddrl report`` (ddrl/report.py) gives them for a user's runs, benchmarks/compare.py
beside its medians [min, max]: with 3-5 seeds a median says little, and an interval says how
little. ``bootstrap_interval`` is the plain percentile bootstrap of a mean (``ddrl evaluate
--eval_seeds``).

Written here in numpy alone, because the two libraries that have them are not usable: the
`rliable` package fails to import beside pandas 3.x (which ray[tune] pulls in), and scipy (whose
trim_mean and mannwhitneyu rliable calls) is not installed and is not to be added for this.

Scores are matrices [runs, tasks]: one row per seed, one column per task (env). A 1-D array is
taken as one task. rliable's conventions hold throughout: scores are pooled over runs and tasks
for the IQM and the profile, and the bootstrap resamples runs within each task.

Direction: higher scores are better unless a function is told ``higher_is_better=False`` (time
to target). Only the comparisons need it (probability_of_improvement, performance_profile): the
IQM and the intervals do not depend on which way is better, so times stay in seconds, never
negated. A run that never reached the target is scored as +inf seconds: the IQM and the
intervals then come out inf when such runs reach the middle half, and two runs that both failed
tie.
"""
import numpy as np


def as_score_matrix(scores):
    """``scores`` as a float matrix [runs, tasks] (a 1-D array is one task); NaN is refused,
    because a missing run must be left out or scored (inf) by the caller, not averaged over."""
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f"expected a non-empty [runs, tasks] matrix, got shape {matrix.shape}")
    if np.isnan(matrix).any():
        raise ValueError("scores contain NaN")
    return matrix


def iqm(scores):
    """Interquartile mean of all the scores pooled (rliable's aggregate_iqm, which is
    scipy.stats.trim_mean(scores, 0.25, axis=None)): sort the n scores, drop int(0.25 * n) from
    each end and average the rest. With fewer than 4 scores nothing is dropped (the mean). Less
    swayed by one outlying seed than the mean, less coarse than the median. +inf scores are
    allowed: the IQM is inf when one of them is among those kept."""
    flat = np.sort(as_score_matrix(scores), axis=None)
    cut = int(0.25 * flat.size)
    return float(np.mean(flat[cut:flat.size - cut]))


def resample_within_tasks(matrices, rng):
    """One stratified bootstrap draw of each [runs, tasks] matrix: in each task (column), its
    runs drawn with replacement from that column alone, so a resample never puts one task's run
    in another task's column. Each matrix is drawn independently (two systems' seeds are not
    paired)."""
    drawn = []
    for matrix in matrices:
        runs, tasks = matrix.shape
        rows = rng.integers(0, runs, size=(runs, tasks))
        drawn.append(np.take_along_axis(matrix, rows, axis=0))
    return drawn


def percentile_interval(samples, confidence):
    """The (lo, hi) percentiles of ``samples`` along axis 0 that hold ``confidence`` of them,
    interpolated linearly as np.percentile does, but defined where samples are infinite
    (np.percentile returns nan between inf and a finite value or two infs)."""
    ordered = np.sort(np.asarray(samples, dtype=float), axis=0)
    tail = 100 * (1 - confidence) / 2
    return tuple(_percentile_of_sorted(ordered, q) for q in (tail, 100 - tail))


def _percentile_of_sorted(ordered, q):
    position = q / 100 * (len(ordered) - 1)
    below = int(np.floor(position))
    above = min(below + 1, len(ordered) - 1)
    a, b, frac = ordered[below], ordered[above], position - below
    with np.errstate(invalid="ignore"):
        lerp = a + (b - a) * frac
    value = np.where((a == b) | (frac == 0), a,
                     np.where(np.isposinf(b), np.inf, np.where(np.isneginf(a), -np.inf, lerp)))
    return value.item() if value.ndim == 0 else value


def _bootstrap_interval(matrices, statistic, reps, confidence, seed):
    """Percentile interval of ``statistic(*resampled matrices)`` over ``reps`` stratified draws."""
    matrices = [as_score_matrix(m) for m in matrices]
    rng = np.random.default_rng(seed)
    samples = [statistic(*resample_within_tasks(matrices, rng)) for _ in range(reps)]
    return percentile_interval(samples, confidence)


def stratified_bootstrap_ci(score_matrix, statistic, reps=2000, confidence=0.95, seed=0):
    """(lo, hi): the percentile ``confidence`` interval of ``statistic(score_matrix)`` under
    rliable's stratified bootstrap (runs resampled with replacement within each task, tasks kept;
    rliable's get_interval_estimates with method 'percentile'). ``statistic`` maps a matrix to a
    number (iqm) or to an array (a performance profile: lo and hi are then arrays). The same
    ``seed`` gives the same interval."""
    return _bootstrap_interval([score_matrix], statistic, reps, confidence, seed)


def probability_of_improvement(x, y, higher_is_better=True):
    """P(X > Y): the probability that a run of X scores better than a run of Y on the same task,
    averaged over tasks (rliable's probability_of_improvement). Per task, the Mann-Whitney U
    statistic of X against Y over n * m: every pair of a run of X and a run of Y counts 1 when X's
    is better, 1/2 when they are equal (two failed runs at inf tie), 0 otherwise. 0.5: neither is
    ahead. ``x`` is [n runs, tasks], ``y`` [m runs, tasks]; with ``higher_is_better=False`` (time
    to target) better means lower."""
    x, y = as_score_matrix(x), as_score_matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has {x.shape[1]} tasks, y {y.shape[1]}")
    if not higher_is_better:
        x, y = -x, -y
    pairs_x, pairs_y = x[:, None, :], y[None, :, :]  # [n, m, tasks]
    wins = (pairs_x > pairs_y) + 0.5 * (pairs_x == pairs_y)
    return float(np.mean(wins.mean(axis=(0, 1))))


def probability_of_improvement_ci(x, y, higher_is_better=True, reps=2000, confidence=0.95, seed=0):
    """(lo, hi) of probability_of_improvement(x, y) under the stratified bootstrap: the runs of X
    and those of Y resampled independently, each within each task."""
    def statistic(xs, ys):
        return probability_of_improvement(xs, ys, higher_is_better)
    return _bootstrap_interval([x, y], statistic, reps, confidence, seed)


def performance_profile(score_matrix, taus, higher_is_better=True):
    """The fraction of runs scoring better than each threshold tau: for each tau, the mean over
    tasks of the fraction of that task's runs with score > tau (< tau when lower is better).
    rliable's score distribution (np.mean(scores > tau) over the matrix, the same when every task
    has as many runs). A system whose curve lies above another's everywhere does at least as well
    at every bar one could set. Its interval: stratified_bootstrap_ci(score_matrix, lambda m:
    performance_profile(m, taus)) gives arrays lo, hi."""
    matrix = as_score_matrix(score_matrix)
    taus = np.asarray(taus, dtype=float)[:, None, None]
    better = matrix[None] > taus if higher_is_better else matrix[None] < taus
    return better.mean(axis=1).mean(axis=1)  # runs within each task, then tasks


def bootstrap_interval(values, confidence=0.95, reps=10_000, seed=0):
    """The percentile bootstrap interval of the mean of ``values`` (one task; the same
    ``seed`` gives the same interval)."""
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(reps, len(values)))].mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
