"""``ddrl report``: finished runs summarized across their seeds, as rliable does (ddrl/stats.py),
and configurations compared: what a paper's table and learning-curve figure need.

    ddrl report runs/sac-seeds runs/crossq-seeds             # folders of run directories
    ddrl report runs/lr-sweep/trials --by lr --out runs/lr-report

**Runs.** A run directory holds config.yaml and metrics.csv (every training run writes them); a
PATH that is not one is searched for them at any depth (a sweep's trials/ too). A run without
summary.json (still running, or killed before it could write one; a trial ASHA stopped) or
never evaluated is left out, and the report says so.

**Tasks and groups.** Raw returns of different envs are never pooled, being on different scales:
each env (TASK_KEYS: the env plugin, its id, ``gym_kwargs``) is a task with a table of its own
(``--normalize``, below, pools normalized ones). Within a task, runs are grouped by the flags whose values differ among them (``--by`` names the
flags instead), leaving out the seed and the flags that do not change what is learned (the
application's own, options.APP_ONLY_KEYS: outputs, Ray's start, sweeps; and the faults group):
a group is one configuration, its runs are its seeds.

**Scores** of each group: the interquartile mean (IQM) of the runs' last evaluation return
(summary.json ``last_eval_return``) and of their best, each with a stratified-bootstrap
interval (95% by default); where the runs had a target return, how many reached it, and the IQM
of the wall time and env steps to it (a run that did not reach it counts as infinitely long: the
IQM is then inf when such runs fill the middle half); and P(X > baseline): the probability that
a run of the group ends higher than a run of the baseline group (the first group found, or
``--baseline``), with its interval.

**Curves.** Each run's evaluation returns against the env steps of the weights evaluated,
interpolated linearly onto a grid of env steps; at each point the IQM over the group's runs, with
a band from the bootstrap over runs (each resample keeps a run's whole curve). The grid starts at
the latest first evaluation and ends at the earliest last one, except that a run stopped because
it reached its target keeps its last evaluation after its end: it was stopped for being good
enough, and leaving it out would lower the curve where it matters.

**Across envs** (``--normalize FILE``: env id -> [low, high], e.g. a random policy's return and
a reference one): each run's last eval return as (return - low) / (high - low), and for each
configuration found on every env named (groups are matched by label) rliable's aggregate: the
IQM of the [runs, envs] matrix with its stratified interval (runs resampled within each env, so
each env needs as many runs), P(> baseline) averaged over envs, and performance profiles
(profile.png).
"""
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import yaml

from core.atomic import atomic_path, atomic_write_text
from core.errors import ConfigError
from core.run.metrics import evaluated_steps, read_metrics
from ddrl.stats import (iqm, percentile_interval, performance_profile,
                        probability_of_improvement, probability_of_improvement_ci,
                        stratified_bootstrap_ci)

RUN_FILES = ("config.yaml", "metrics.csv")
#: what makes two runs the same task (their returns comparable): the env plugin and the
#: built-in plugins' ids (a plugin of the user's that takes an id of its own: its runs on
#: several ids are groups of one task, which --by can name)
ID_KEYS = ("gym_id", "envpool_id", "pz_env")
TASK_KEYS = ("env_name", *ID_KEYS, "gym_kwargs")
#: how a run that went its whole way ended (others: interrupted, error, max_time, paused, a
#: callback's or scheduler's stop; such a run counts as it is, with a note)
FULL_RUN_ENDS = ("total_steps", "target_return")
#: points of a group's curve
CURVE_POINTS = 50


@dataclass
class RunRecord:
    """One finished run: its directory, flags (config.yaml), summary.json and evaluations."""
    path: str
    flags: dict
    summary: dict
    curve: np.ndarray  # [points, 2]: env steps of the weights evaluated, eval return

    @property
    def seed(self):
        return self.flags.get("seed")

    @property
    def held(self):
        """Stopped at its target: its curve holds its last evaluation after its end."""
        return self.summary.get("stopped_because") == "target_return"


def unlearned_keys():
    """The flags that do not change what a run learns: the seed, the application's own
    (options.APP_ONLY_KEYS), --quiet and the faults group (what a run survives)."""
    import argparse
    from options.options import APP_ONLY_KEYS, add_common_args
    parser = argparse.ArgumentParser(add_help=False)
    add_common_args(parser)
    faults = next(g for g in parser._action_groups if g.title.startswith("faults"))
    return {"seed", "quiet", *APP_ONLY_KEYS, *(a.dest for a in faults._group_actions)}


# -- finding the runs --------------------------------------------------------------------------
def is_run_dir(path):
    return all(os.path.isfile(os.path.join(path, name)) for name in RUN_FILES)


def run_dirs_under(path):
    """``path`` itself when it is a run directory, else the run directories below it, sorted
    (a run directory's own subfolders are not searched)."""
    if is_run_dir(path):
        return [path]
    found = []
    for root, subdirs, _ in os.walk(path):
        subdirs.sort()
        if is_run_dir(root):
            found.append(root)
            subdirs[:] = []
    return found


def read_run(path):
    """(RunRecord, None), or (None, why it is left out)."""
    summary_path = os.path.join(path, "summary.json")
    if not os.path.isfile(summary_path):
        return None, "no summary.json (still running, or stopped before it could write one)"
    with open(summary_path) as f:
        summary = json.load(f)
    if summary.get("last_eval_return") is None:
        return None, "never evaluated"
    with open(os.path.join(path, "config.yaml")) as f:
        flags = yaml.safe_load(f) or {}
    points = {}
    for row in read_metrics(os.path.join(path, "metrics.csv")):
        if row.get("eval_return") is not None and row.get("env_steps") is not None:
            points[evaluated_steps(row)] = row["eval_return"]  # the last one at a step counts
    curve = np.array(sorted(points.items()), dtype=float).reshape(-1, 2)
    return RunRecord(path, flags, summary, curve), None


def find_runs(paths):
    """(the finished runs under ``paths``, in the order given, each once; notes on the runs left
    out). ConfigError for a path that does not exist or holds no run directory, and when no
    run is left."""
    runs, notes, seen = [], [], set()
    for path in paths:
        if not os.path.exists(path):
            raise ConfigError(f"report {path}: no such file or directory. Give run directories, "
                              f"or folders that hold them (e.g. runs/, a sweep's trials/).")
        dirs = run_dirs_under(path)
        if not dirs:
            raise ConfigError(f"report {path}: no run directory in it. A run directory holds "
                              f"{' and '.join(RUN_FILES)}, as every `ddrl train` run writes.")
        for directory in dirs:
            real = os.path.realpath(directory)
            if real in seen:
                continue
            seen.add(real)
            run, why = read_run(directory)
            if run is None:
                notes.append(f"{directory}: {why}: left out")
                continue
            runs.append(run)
            stopped = run.summary.get("stopped_because")
            if stopped not in FULL_RUN_ENDS:  # a shorter run, counted as it is: say so
                notes.append(f"{directory}: stopped ({stopped}) at "
                              f"{run.summary.get('env_steps', '?')} env steps")
    if not runs:
        raise ConfigError(f"report: no finished run under {', '.join(paths)} "
                          f"({len(notes)} left out: {'; '.join(notes)}).")
    return runs, notes


# -- tasks and groups --------------------------------------------------------------------------
def shown(value):
    """A flag's value as the tables show it: lists comma-joined, floats in short form."""
    if isinstance(value, (list, tuple)):
        return ",".join(shown(v) for v in value) if value else "[]"
    if isinstance(value, float):
        return format(value, ".4g")
    return str(value)


def task_id(flags):
    """The env's id (config.yaml holds the flags of the run's own env plugin only, so at most
    one of ID_KEYS is set), else the plugin's name: what --normalize names a task by."""
    ids = [shown(flags[k]) for k in ID_KEYS if flags.get(k)]
    return ids[0] if ids else shown(flags.get("env_name"))


def task_label(flags):
    """The env's id and plugin, e.g. 'CartPole-v1 (gym_env)', and its gym_kwargs."""
    env, kwargs = flags.get("env_name"), flags.get("gym_kwargs")
    label = task_id(flags) + (f" ({env})" if task_id(flags) != shown(env) else "")
    return label + (f" [{shown(kwargs)}]" if kwargs else "")


def freeze(value):
    """A hashable form of a flag's value (lists and mappings from YAML)."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def differing_keys(runs, ignored):
    keys = sorted({k for run in runs for k in run.flags} - ignored - set(TASK_KEYS))
    return [k for k in keys if len({freeze(run.flags.get(k)) for run in runs}) > 1]


def values_of(run, keys):
    return tuple(freeze(run.flags.get(k)) for k in keys)


def label_keys(runs, keys):
    """The flags of ``keys`` a group's label shows: those every run has, and of the rest (a
    plugin's own flags, absent from the other plugins' runs) only those the groups need to be
    told apart (``keys`` order)."""
    groups = len({values_of(run, keys) for run in runs})
    chosen = [k for k in keys if all(k in run.flags for run in runs)]
    for k in keys:
        if len({values_of(run, chosen) for run in runs}) == groups:
            break
        if k not in chosen:
            chosen.append(k)
    return [k for k in keys if k in chosen]


def group_runs(runs, by=None):
    """{task label: {group label: [runs]}} in the order the runs came, and for each task the
    flags its groups differ in. ``by``: the flags to group by (default: those that differ,
    less ``unlearned_keys``)."""
    tasks = {}
    for run in runs:
        tasks.setdefault(values_of(run, TASK_KEYS), []).append(run)
    ignored = unlearned_keys()
    if by is not None:
        known = {k for run in runs for k in run.flags}
        unknown = [k for k in by if k not in known]
        if unknown:
            differ = differing_keys(runs, ignored) or ["none"]
            raise ConfigError(f"report --by {','.join(by)}: {', '.join(unknown)} is not a flag of "
                              f"these runs (their config.yaml). The flags whose values differ "
                              f"among them: {', '.join(differ)}.")
    grouped, keys_of = {}, {}
    for members in tasks.values():
        keys = list(by) if by is not None else differing_keys(members, ignored)
        shown_keys = label_keys(members, keys)
        groups = {}
        for run in members:
            label = ", ".join(f"{k}={shown(run.flags.get(k))}" for k in shown_keys) or "all runs"
            groups.setdefault(label, []).append(run)
        name = task_label(members[0].flags)
        grouped[name], keys_of[name] = groups, keys
    return grouped, keys_of


# -- scores ------------------------------------------------------------------------------------
def finite_or_none(value):
    return value if math.isfinite(value) else None


def estimate(scores, reps, confidence, seed=0):
    """The IQM of ``scores`` and its stratified-bootstrap interval (inf stays inf: JSON gets
    null for it)."""
    scores = np.asarray(scores, dtype=float)
    low, high = stratified_bootstrap_ci(scores, iqm, reps, confidence, seed)
    return {"iqm": iqm(scores), "ci": [low, high]}


def column_iqm(matrix):
    """The IQM of each column of ``matrix`` [runs, points] (iqm's trimming, column by column)."""
    ordered = np.sort(matrix, axis=0)
    cut = int(0.25 * len(ordered))
    return ordered[cut:len(ordered) - cut].mean(axis=0)


def aggregate_curve(runs, reps, confidence, seed=0, points=CURVE_POINTS):
    """{"env_steps", "iqm", "low", "high"} of the group's evaluation curves (the module
    docstring says how the grid is chosen and how a run stopped at its target is held), or None
    when no run has an evaluation in metrics.csv."""
    kept = [run for run in runs if len(run.curve)]
    if not kept:
        return None
    start = max(run.curve[0, 0] for run in kept)
    ends = [run.curve[-1, 0] for run in kept if not run.held]
    end = min(ends) if ends else max(run.curve[-1, 0] for run in kept)
    grid = np.linspace(start, end, points) if end > start else np.array([start])
    # np.interp holds a curve's last value after its end: only held runs are read there
    values = np.stack([np.interp(grid, run.curve[:, 0], run.curve[:, 1]) for run in kept])
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(kept), size=(reps, len(kept)))
    low, high = percentile_interval([column_iqm(values[r]) for r in rows], confidence)
    return {"env_steps": grid.tolist(), "iqm": column_iqm(values).tolist(),
            "low": np.atleast_1d(low).tolist(), "high": np.atleast_1d(high).tolist(),
            "runs": len(kept)}


def summarize_group(runs, reps, confidence):
    """A group's scores (module docstring), JSON-ready."""
    last = [run.summary["last_eval_return"] for run in runs]
    best = [run.summary.get("best_eval_return", run.summary["last_eval_return"]) for run in runs]
    out = {"runs": [run.path for run in runs], "seeds": [run.seed for run in runs],
           "last_eval_return": estimate(last, reps, confidence), "last_values": last,
           "best_eval_return": estimate(best, reps, confidence)}
    targets = {run.summary.get("target_return") for run in runs} - {None}
    if targets:
        times = [run.summary.get("time_to_target_s") for run in runs]
        steps = [run.summary.get("steps_to_target") for run in runs]
        out.update(
            target_return=sorted(targets),
            reached=sum(bool(run.summary.get("target_reached")) for run in runs),
            time_to_target_s=estimate([math.inf if t is None else t for t in times], reps,
                                      confidence),
            steps_to_target=estimate([math.inf if s is None else s for s in steps], reps,
                                     confidence),
            time_values=[math.inf if t is None else t for t in times])
    out["curve"] = aggregate_curve(runs, reps, confidence)
    return out


def improvement(mine, theirs, higher_is_better, reps, confidence):
    """P(a run of ``mine`` is better than a run of ``theirs``) and its bootstrap interval."""
    return {"p": probability_of_improvement(mine, theirs, higher_is_better),
            "ci": list(probability_of_improvement_ci(mine, theirs, higher_is_better, reps=reps,
                                                     confidence=confidence))}


def baseline_of(groups, baseline, task):
    """The label of ``task``'s baseline group: ``baseline`` (a label as the table shows it, or
    its row number from 1), else the first group."""
    labels = list(groups)
    if baseline is None:
        return labels[0]
    if baseline in groups:
        return baseline
    if baseline.isdigit() and 1 <= int(baseline) <= len(labels):
        return labels[int(baseline) - 1]
    raise ConfigError(f"report --baseline {baseline!r}: no such group in {task}. Its groups "
                      f"(a label as written, or its row number): "
                      + "; ".join(f"{i}: {label}" for i, label in enumerate(labels, 1)) + ".")


def make_report(paths, by=None, baseline=None, confidence=0.95, reps=2000, normalize=None):
    """The report of the finished runs under ``paths`` (module docstring): a dict, JSON-ready
    but for inf (``as_json`` turns it into null). ``normalize``: ``load_normalization``'s
    spec; with it, also the groups across the tasks it names (``across_tasks``)."""
    if not 0 < confidence < 1:
        raise ConfigError(f"report --confidence {confidence}: give a fraction between 0 and 1, "
                          f"e.g. 0.95.")
    if reps < 1:
        raise ConfigError(f"report --reps {reps}: give a whole number of resamples >= 1.")
    bounds = load_normalization(normalize)  # a bad file is said before any work
    runs, notes = find_runs(paths)
    grouped, keys_of = group_runs(runs, by)
    tasks = {}
    for task, groups in grouped.items():
        base = baseline_of(groups, baseline, task)
        summaries = {label: {"flags": {k: members[0].flags.get(k) for k in keys_of[task]},
                             **summarize_group(members, reps, confidence)}
                     for label, members in groups.items()}
        for label, members in groups.items():
            seeds = [run.seed for run in members]
            repeated = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
            if repeated:
                notes.append(f"{task}, {label}: seed {', '.join(map(str, repeated))} more than "
                             f"once (repeats count as runs)")
            if label == base:
                continue
            mine, theirs = summaries[label], summaries[base]
            mine["p_last_above_baseline"] = improvement(
                mine["last_values"], theirs["last_values"], True, reps, confidence)
            if "time_values" in mine and "time_values" in theirs:
                mine["p_faster_than_baseline"] = improvement(
                    mine["time_values"], theirs["time_values"], False, reps, confidence)
        env_id = task_id(next(iter(groups.values()))[0].flags)
        tasks[task] = {"env_id": env_id, "grouped_by": keys_of[task], "baseline": base,
                       "groups": summaries}
    report = {"paths": list(paths), "confidence": confidence, "reps": reps, "tasks": tasks,
              "notes": notes}
    if bounds is not None:
        report["across_tasks"] = across_tasks(tasks, bounds, baseline, reps, confidence, notes)
    return report


# -- across tasks ------------------------------------------------------------------------------
def load_normalization(spec):
    """{env id: (low, high)} from ``spec``: a YAML file (or, from Python, a mapping) of env ids
    to [low, high], e.g. a random policy's return and a reference return; None for None."""
    if spec is None:
        return None
    data = spec
    if isinstance(spec, (str, os.PathLike)):
        if not os.path.isfile(spec):
            raise ConfigError(f"report --normalize {spec}: no such file. Give a YAML file that "
                              f"maps each env id to [low, high], e.g. `CartPole-v1: [25, 500]`.")
        with open(spec) as f:
            data = yaml.safe_load(f)
    ok = isinstance(data, dict) and data and all(
        isinstance(v, (list, tuple)) and len(v) == 2
        and all(isinstance(x, (int, float)) and math.isfinite(x) for x in v) and v[0] != v[1]
        for v in data.values())
    if not ok:
        raise ConfigError(f"report --normalize {spec}: expected a mapping of env ids to [low, "
                          f"high], two different numbers (a score s becomes (s - low) / (high - "
                          f"low): low = a random policy's return, high = a reference), e.g. "
                          f"`CartPole-v1: [25, 500]`; got {data!r}.")
    return {str(k): (float(v[0]), float(v[1])) for k, v in data.items()}


def across_tasks(tasks, bounds, baseline, reps, confidence, notes):
    """The groups found on every task ``bounds`` normalizes, their normalized last eval returns
    as rliable's [runs, tasks] matrices: the IQM over runs and tasks with its stratified
    interval (runs resampled within each task), the mean, P(> baseline) averaged over tasks,
    and the performance profile (the share of runs above each normalized score)."""
    chosen = [name for name, entry in tasks.items() if entry["env_id"] in bounds]
    if not chosen:
        raise ConfigError(f"report --normalize: it names {', '.join(bounds)}, and these runs are "
                          f"on {', '.join(sorted({e['env_id'] for e in tasks.values()}))}; give "
                          f"[low, high] for their env ids.")
    left = [e["env_id"] for e in tasks.values() if e["env_id"] not in bounds]
    if left:
        notes.append(f"across tasks: {', '.join(left)} not in --normalize: left out")
    labels = [label for label in tasks[chosen[0]]["groups"]
              if all(label in tasks[name]["groups"] for name in chosen)]
    for name in chosen:
        for label in tasks[name]["groups"]:
            if label not in labels:
                notes.append(f"across tasks: `{label}` is not on every task normalized: left "
                             f"out (groups are matched by label; --by can make them alike)")
    if not labels:
        raise ConfigError(f"report --normalize: no configuration is on all of "
                          f"{', '.join(tasks[name]['env_id'] for name in chosen)} (groups are "
                          f"matched across envs by their label); --by FLAGS groups every env's "
                          f"runs by the same flags.")
    matrices = {}
    for label in labels:
        columns = []
        for name in chosen:
            low, high = bounds[tasks[name]["env_id"]]
            values = np.asarray(tasks[name]["groups"][label]["last_values"], dtype=float)
            columns.append((values - low) / (high - low))
        counts = {len(c) for c in columns}
        if len(counts) > 1:
            raise ConfigError(
                f"report --normalize: `{label}` has {', '.join(str(len(c)) for c in columns)} "
                f"runs on {', '.join(tasks[name]['env_id'] for name in chosen)}; the stratified "
                f"bootstrap needs as many on each env. Give the same seeds on every env.")
        matrices[label] = np.stack(columns, axis=1)
    base = baseline_of(matrices, baseline, f"the envs normalized ({', '.join(chosen)})")
    scores = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(min(scores.min(), 0.0), max(scores.max(), 1.0), 101)
    groups = {}
    for label, matrix in matrices.items():
        low, high = stratified_bootstrap_ci(matrix, lambda m: performance_profile(m, taus), reps,
                                            confidence)
        groups[label] = {"runs_per_task": len(matrix), "normalized_last": matrix.tolist(),
                         "iqm": estimate(matrix, reps, confidence),
                         "mean": float(matrix.mean()),
                         "profile": performance_profile(matrix, taus).tolist(),
                         "profile_low": np.atleast_1d(low).tolist(),
                         "profile_high": np.atleast_1d(high).tolist()}
        if label != base:
            groups[label]["p_last_above_baseline"] = improvement(
                matrix, matrices[base], True, reps, confidence)
    return {"tasks": [tasks[name]["env_id"] for name in chosen],
            "normalization": {tasks[name]["env_id"]: list(bounds[tasks[name]["env_id"]])
                              for name in chosen},
            "baseline": base, "taus": taus.tolist(), "groups": groups}


# -- output ------------------------------------------------------------------------------------
def figure(value, digits=1):
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "inf"
    return f"{value:,.{digits}f}"


def with_interval(est, digits=1):
    low, high = est["ci"]
    return f"{figure(est['iqm'], digits)} [{figure(low, digits)}, {figure(high, digits)}]"


def plural(count, noun):
    return f"{count} {noun}{'s' * (count != 1)}"


def chance(group, key, is_baseline):
    if is_baseline:
        return "baseline"
    p = group.get(key)
    return "-" if p is None else f"{p['p']:.2f} [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]"


def markdown(report):
    """The report as Markdown: a table per task, then the notes."""
    level = round(100 * report["confidence"])
    out = []
    for task, entry in report["tasks"].items():
        groups = entry["groups"]
        runs = sum(len(g["runs"]) for g in groups.values())
        targeted = any("target_return" in g for g in groups.values())
        out += [f"## {task}: {plural(len(groups), 'configuration')}, {plural(runs, 'run')}",
                ""]
        compared = len(groups) > 1
        by = ", ".join(entry["grouped_by"]) or "nothing (one configuration)"
        text = (f"Grouped by {by}" + (f"; baseline `{entry['baseline']}`" if compared else "")
                + f". IQM: the mean of the middle half of the runs; [lo, hi]: its {level}% "
                f"stratified-bootstrap interval ({report['reps']:,} resamples)")
        if compared:
            text += ("; P(last > baseline): the chance that a run of the row ends above a run "
                     "of the baseline")
            if targeted:
                text += ("; P(faster): that it reaches the target sooner (a run that did not "
                         "reach it counts as never)")
        out.append(text + ".")
        out.append("")
        header = ["configuration", "runs", "seeds", "last eval return, IQM", "best eval return, IQM"]
        if targeted:
            header += ["reached target", "time to target (s), IQM", "env steps to target, IQM"]
        if compared:
            header += ["P(last > baseline)"] + (["P(faster than baseline)"] if targeted else [])
        out += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for label, g in groups.items():
            row = [f"`{label}`", str(len(g["runs"])), ",".join(map(str, g["seeds"])),
                   with_interval(g["last_eval_return"]), with_interval(g["best_eval_return"])]
            if targeted:
                if "target_return" in g:
                    row += [f"{g['reached']}/{len(g['runs'])}",
                            with_interval(g["time_to_target_s"]),
                            with_interval(g["steps_to_target"], 0)]
                else:
                    row += ["-", "-", "-"]
            if compared:
                row.append(chance(g, "p_last_above_baseline", label == entry["baseline"]))
            if compared and targeted:
                row.append(chance(g, "p_faster_than_baseline", label == entry["baseline"]))
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    across = report.get("across_tasks")
    if across:
        bounds = ", ".join(f"{env} [{shown(lo)}, {shown(hi)}]"
                           for env, (lo, hi) in across["normalization"].items())
        out += [f"## Across {plural(len(across['tasks']), 'env')}, normalized", "",
                f"Each run's last eval return as (return - low) / (high - low): {bounds}. The "
                f"IQM pools the runs of every env, its {level}% interval resamples runs within "
                f"each env; P(last > baseline) is averaged over the envs; baseline "
                f"`{across['baseline']}`.", "",
                "| configuration | runs per env | normalized last eval return, IQM | mean | "
                "P(last > baseline) |", "| --- | --- | --- | --- | --- |"]
        for label, g in across["groups"].items():
            out.append(f"| `{label}` | {g['runs_per_task']} | {with_interval(g['iqm'], 3)} | "
                       f"{g['mean']:.3f} | "
                       f"{chance(g, 'p_last_above_baseline', label == across['baseline'])} |")
        out.append("")
    if report["notes"]:
        out += ["Notes:", *(f"- {note}" for note in report["notes"]), ""]
    return "\n".join(out).rstrip() + "\n"


def as_json(value):
    """``value`` with every inf and nan as None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def new_axes(panels=1):
    """A figure of ``panels`` axes side by side on the Agg canvas (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure_ = Figure(figsize=(7 * panels, 4.5), dpi=100)
    FigureCanvasAgg(figure_)
    return figure_, figure_.subplots(1, panels, squeeze=False)[0]


def line_with_band(ax, x, y, low, high, label):
    line, = ax.plot(x, y, lw=1.5, label=label)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)


def finish(ax, title, xlabel, ylabel):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def save(figure_, path):
    figure_.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        figure_.savefig(tmp)


def draw(path, report):
    """report.png: a panel per task, each group's IQM curve with its band; the target dashed."""
    tasks = [(task, entry) for task, entry in report["tasks"].items()
             if any(g["curve"] for g in entry["groups"].values())]
    figure_, axes = new_axes(max(1, len(tasks)))
    for ax, (task, entry) in zip(axes, tasks):
        targets = set()
        for label, g in entry["groups"].items():
            curve = g["curve"]
            if curve:
                line_with_band(ax, curve["env_steps"], curve["iqm"], curve["low"],
                               curve["high"], f"{label} ({curve['runs']} runs)")
            targets.update(g.get("target_return", []))
        for target in targets:
            ax.axhline(target, ls="--", lw=1, color="gray")
        finish(ax, task, "env steps", "evaluation return (IQM over runs)")
    save(figure_, path)


def draw_profiles(path, across):
    """profile.png: each group's performance profile across the normalized envs (the share of
    runs whose normalized last return exceeds tau), with its band."""
    figure_, (ax,) = new_axes()
    for label, g in across["groups"].items():
        line_with_band(ax, across["taus"], g["profile"], g["profile_low"], g["profile_high"],
                       label)
    finish(ax, f"performance profiles over {', '.join(across['tasks'])}",
           "normalized last eval return tau", "fraction of runs above tau")
    save(figure_, path)


def write_report(report, out_dir):
    """OUT_DIR/report.md, report.json and report.png, and profile.png across normalized envs
    (each written atomically); their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, name) for name in ("report.md", "report.json", "report.png")]
    atomic_write_text(paths[0], markdown(report))
    atomic_write_text(paths[1], json.dumps(as_json(report), indent=1) + "\n")
    draw(paths[2], report)
    if report.get("across_tasks"):
        paths.append(os.path.join(out_dir, "profile.png"))
        draw_profiles(paths[-1], report["across_tasks"])
    return paths


def report_runs(*paths, by=None, baseline=None, out=None, confidence=0.95, reps=2000,
                normalize=None):
    """``ddrl report`` from Python: the report of the finished runs under ``paths`` as a dict
    (inf as None), and with ``out`` its files there too. ``by``: flags to group by (a list or
    comma-separated); ``baseline``: a group's label or row number; ``normalize``: {env id:
    (low, high)} or a YAML file of them, for the table across envs."""
    if isinstance(by, str):
        by = [k for k in by.split(",") if k]
    report = make_report([os.fspath(p) for p in paths], by, baseline, confidence, reps,
                         normalize)
    if out is not None:
        write_report(report, out)
    return as_json(report)
