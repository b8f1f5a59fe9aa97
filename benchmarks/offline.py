"""Side by side with d3rlpy 2.8.1 on the same dataset with the same hyperparameters: ddrl's offline
models (bc, iql, cql, cql_discrete, td3_bc) against d3rlpy's BC / DiscreteBC, IQL, CQL,
DiscreteCQL and TD3PlusBC
(benchmarks/d3rlpy_offline.py, in its own venv), for each dataset x algo x seed, one run after
another (never two at once: 2 cores).

    python3 -m venv .venv-d3rlpy && .venv-d3rlpy/bin/pip install -r benchmarks/requirements-d3rlpy.txt
    .venv/bin/python benchmarks/offline.py --datasets pendulum-random=/tmp/d3-check/pendulum-random-v0:Pendulum-v1 --algos bc iql cql --seeds 0 --dry_run
    .venv/bin/python benchmarks/offline.py --datasets NAME=DIR:ENV --algos bc iql cql --seeds 0 1 2 --steps 100000 --eval_interval 5000 --eval_episodes 10

One table of settings for both systems: each algo's ``MAPPING`` pairs a ddrl flag with the
d3rlpy_offline.py flag that sets the same thing in d3rlpy; the value is what ddrl's own parser
resolves for ``main.py --model_name M --gym_id ENV --dataset DIR --config none`` (its defaults,
models/*.py) with any ``--set FLAG=VALUE`` over it, and both processes get it explicitly on
their command lines. ``REQUIRED`` lists the ddrl settings d3rlpy has one form of (a ddrl value
it cannot express is refused before anything runs). After each d3rlpy run the driver checks
that d3rlpy's resolved config (its JSON) holds the table's values; the JSON keeps both side
by side (``settings``).

The clocks: ddrl's run counts gradient updates (--total_steps, --eval_interval are updates, as
d3rlpy's n_steps and n_steps_per_epoch). With --num_workers 0 ddrl's learner makes
--updates_per_call (4) updates per call, two calls at a time, and evaluates at the first
booking at or past the next multiple: --eval_interval and --steps must be multiples of 8 so
that its evaluations fall at the same updates as d3rlpy's (the JSON's ``eval_points_equal``
checks it). Both evaluate --eval_episodes deterministic episodes with the same reset seeds
(core/seeding.py), after every --eval_interval updates and at --steps; with --eval_sampled both
sample their actions instead (an imitation of an epsilon-greedy behaviour reproduces its noise;
d3rlpy's BC has no sampler of its own, so d3rlpy_offline.py samples its logits' softmax).

Per run: the curve [(updates, wall_time_s from process start, eval return mean, std)];
``time_per_update_s``, the training alone: d3rlpy's from its fit loop per epoch (evaluation
excluded); ddrl's from its metrics.csv rows that hold no evaluation (each row's window is the
updates since the previous row: a row with an evaluation also holds the evaluation's time), so
ddrl writes a row every --log_steps (min(1000, eval_interval / 2), a multiple of 8) updates;
``time_to_final_s``, the wall time when the final evaluation (at --steps) ended. ddrl runs with
one learner thread, --logger csv (d3rlpy logs nothing to disk here), no plots, no target
(--target_return none), checkpoints only at the end.

Writes benchmarks/results/offline-<name>.json (--out; --dry_run: under /tmp) with every run,
the settings side by side, the CPU's flags, the commit, and a markdown table per dataset and
algo: the behaviour policy's mean return (ddrl's core.data.load_dataset), each system's final
eval return (mean over seeds, 95% bootstrap interval: ddrl/stats.py), whether each mean
lies in the other's interval, the median time per update and to the final return, and the
ratios ddrl / d3rlpy (the goal: <= 0.5).
"""
import argparse
import csv
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

from ddrl.stats import stratified_bootstrap_ci

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
PEER = os.path.join(REPO, "benchmarks", "d3rlpy_offline.py")
D3RLPY_PYTHON = os.path.join(REPO, ".venv-d3rlpy", "bin", "python")
RESULTS = os.path.join(REPO, "benchmarks", "results")
RUNS = os.path.join(REPO, "benchmarks", "runs")

#: ddrl model -> d3rlpy_offline.py --algo (bc on Discrete actions is d3rlpy's DiscreteBC)
D3RLPY_ALGO = {"bc": "bc", "iql": "iql", "cql": "cql", "cql_discrete": "discrete_cql",
               "td3_bc": "td3_plus_bc"}

#: per ddrl model: (ddrl flag, d3rlpy_offline.py flag). The value is ddrl's resolved one.
SHARED = [("batch_size", "batch_size"), ("normalize_obs", "normalize_obs"),
          ("reward_scale", "reward_scale")]
MAPPING = {
    "bc": SHARED + [("bc_hidden_sizes", "hidden_sizes"), ("bc_lr", "learning_rate"),
                    ("bc_beta", "beta"), ("bc_policy", "policy_type")],
    "iql": SHARED + [("iql_hidden_sizes", "hidden_sizes"), ("iql_actor_lr", "actor_learning_rate"),
                     ("iql_critic_lr", "critic_learning_rate"),
                     ("iql_actor_lr_schedule", "actor_lr_schedule"),
                     ("iql_expectile", "expectile"), ("iql_beta", "weight_temp"),
                     ("iql_max_weight", "max_weight"), ("iql_tau", "tau"),
                     ("iql_gamma", "gamma")],
    "cql": SHARED + [("sac_hidden_sizes", "hidden_sizes"), ("actor_lr", "actor_learning_rate"),
                     ("critic_lr", "critic_learning_rate"), ("alpha_lr", "temp_learning_rate"),
                     ("cql_lagrange_lr", "alpha_learning_rate"),
                     ("init_alpha", "initial_temperature"),
                     ("cql_init_lagrange", "initial_alpha"),
                     ("cql_target_gap", "alpha_threshold"), ("cql_alpha", "conservative_weight"),
                     ("cql_n_actions", "n_action_samples"), ("cql_backup", "soft_q_backup"),
                     ("tau", "tau"), ("sac_gamma", "gamma")],
    "td3_bc": SHARED + [("td3_hidden_sizes", "hidden_sizes"), ("actor_lr", "actor_learning_rate"),
                        ("critic_lr", "critic_learning_rate"), ("tau", "tau"),
                        ("td3_gamma", "gamma"), ("target_policy_noise", "target_smoothing_sigma"),
                        ("target_noise_clip", "target_smoothing_clip"),
                        ("td3_bc_alpha", "alpha"), ("policy_delay", "update_actor_interval")],
    "cql_discrete": SHARED + [("dqn_hidden_sizes", "hidden_sizes"), ("dqn_lr", "learning_rate"),
                              ("target_update_interval", "target_update_interval"),
                              ("cql_alpha", "alpha"), ("max_grad_norm", "clip_grad_norm"),
                              ("cql_gamma", "gamma")],
}

#: ddrl settings d3rlpy has only one form of: flag -> (allowed values, why)
_COMMON_REQUIRED = {
    "prioritized_replay": ((False,), "d3rlpy samples its dataset uniformly"),
    "encoder": (("auto", "mlp"), "d3rlpy_offline.py reads vector observations into an MLP"),
}
REQUIRED = {
    "bc": {"bc_policy": (("deterministic",), "d3rlpy's stochastic BC fits the squared error of "
                                             "a sampled action, ddrl's gaussian a likelihood")},
    "iql": {},
    "cql": {"cql_temp": ((1.0,), "d3rlpy's logsumexp has no temperature"),
            "cql_backup": (("mean", "soft"), "d3rlpy: soft_q_backup off (mean) or on (soft); "
                                             "ddrl's sample backup has no d3rlpy form"),
            "target_entropy": (("auto",), "d3rlpy's temperature targets -action_size"),
            "sac_lr_schedule": (("constant",), "d3rlpy's CQL learning rates are constant here"),
            "sac_precision": (("fp32", "auto"), "d3rlpy computes in fp32")},
    "td3_bc": {"td3_lr_schedule": (("constant",), "d3rlpy's TD3PlusBC learning rates are "
                                                  "constant here"),
               "td3_precision": (("fp32", "auto"), "d3rlpy computes in fp32")},
    "cql_discrete": {"double_q": ((True,), "DiscreteCQL is a double DQN"),
                     "dueling": ((False,), "DiscreteCQL's Q head is not dueling"),
                     "n_step": ((1,), "one-step transitions"),
                     "dqn_lr_schedule": (("constant",), "a constant learning rate"),
                     "tau": ((1.0,), "DiscreteCQL copies its target (hard)"),
                     "dqn_precision": (("fp32", "auto"), "d3rlpy computes in fp32")},
}


def flag_text(value):
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def bool_flag(name, value):
    return [f"--{name}" if value else f"--no-{name}"]


# -- the settings of one dataset x algo ---------------------------------------------------------
def ddrl_base_argv(model, dataset_dir, env, overrides):
    argv = ["--model_name", model, "--gym_id", env, "--dataset", dataset_dir,
            "--num_workers", "0", "--config", "none"]
    for key, value in overrides:
        argv += [f"--{key}", value] if value not in ("true", "false") else \
            bool_flag(key, value == "true")
    return argv


#: settings of one action kind only: (model, ddrl flag) -> applies with Discrete actions
ONE_KIND = {("bc", "bc_beta"): True, ("bc", "bc_policy"): False}


def resolve(model, dataset_dir, env, overrides, discrete):
    """ddrl's resolved settings (its own parser) -> the table: [(ddrl flag, value, d3rlpy flag,
    d3rlpy value, whether it applies to this dataset's action kind)], the ddrl argv that sets
    them, the d3rlpy argv that sets them. Raises SystemExit for a ddrl value d3rlpy cannot
    express."""
    from options.options import parse_args
    args = parse_args(ddrl_base_argv(model, dataset_dir, env, overrides))
    refused = []
    for flag, (allowed, why) in {**_COMMON_REQUIRED, **REQUIRED[model]}.items():
        if ONE_KIND.get((model, flag), discrete) != discrete:
            continue
        value = getattr(args, flag)
        if value not in allowed:
            refused.append(f"--{flag} {value}: {why}")
    if model == "iql" and args.iql_value_lr != args.iql_critic_lr:
        refused.append(f"--iql_value_lr {args.iql_value_lr} != --iql_critic_lr "
                       f"{args.iql_critic_lr}: d3rlpy's IQL steps Q and V with one optimizer")
    if refused:
        raise SystemExit(f"offline.py: d3rlpy cannot run {model} as ddrl would here:\n  "
                         + "\n  ".join(refused))
    rows, ddrl_argv, peer_argv = [], [], []
    for ddrl_flag, peer_flag in MAPPING[model]:
        value = getattr(args, ddrl_flag)
        if isinstance(value, bool):
            ddrl_argv += bool_flag(ddrl_flag, value)
        else:
            ddrl_argv += [f"--{ddrl_flag}", flag_text(value)]
        peer = value
        if ddrl_flag == "cql_backup":
            peer = value == "soft"
        applies = ONE_KIND.get((model, ddrl_flag), discrete) == discrete
        if not applies:  # the peer has no such setting for this action kind
            pass
        elif isinstance(peer, bool):
            peer_argv += bool_flag(peer_flag, peer)
        else:
            peer_argv += [f"--{peer_flag}", flag_text(peer)]
        rows.append({"ddrl_flag": ddrl_flag, "ddrl_value": as_json(value),
                     "d3rlpy_flag": peer_flag, "d3rlpy_value": as_json(peer),
                     "applies": applies})
    return rows, ddrl_argv, peer_argv, args


def as_json(value):
    if isinstance(value, tuple):
        return list(value)
    return value


def ddrl_log_steps(eval_interval):
    """A metrics row every this many updates: rows without an evaluation give the training
    rate; a multiple of 8 so rows fall where updates are booked."""
    return max(8, (min(1000, eval_interval // 2) // 8) * 8)


# -- the runs -----------------------------------------------------------------------------------
def run_process(argv, log_dir, timeout):
    """Run ``argv`` from the repo root, stdout/stderr to log_dir; (exit code, wall seconds from
    the launch to its exit, load average before)."""
    os.makedirs(log_dir, exist_ok=True)
    load = os.getloadavg()[0]
    start = time.time()
    with open(os.path.join(log_dir, "stdout.log"), "w") as out, \
            open(os.path.join(log_dir, "stderr.log"), "w") as err:
        try:
            code = subprocess.run(argv, cwd=REPO, stdout=out, stderr=err,
                                  timeout=timeout or None).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    with open(os.path.join(log_dir, "command.txt"), "w") as f:
        f.write(shlex.join(argv) + "\n")
    return code, time.time() - start, load


def ddrl_run(task, seed, cfg, run_dir):
    argv = [sys.executable, "main.py", *ddrl_base_argv(task["model"], task["dir"], task["env"],
                                                       cfg.overrides),
            *task["ddrl_argv"], "--learner_threads", "1", "--torch_threads", "1",
            "--seed", str(seed), "--total_steps", str(cfg.steps),
            "--eval_interval", str(cfg.eval_interval), "--eval_episodes", str(cfg.eval_episodes),
            *(["--no-eval_deterministic"] if cfg.eval_sampled else []),
            "--log_steps", str(ddrl_log_steps(cfg.eval_interval)),
            "--checkpoint_interval", str(10 * cfg.steps), "--target_return", "none",
            "--logger", "csv", "--no-plots", "--run_dir", run_dir, "--quiet"]
    code, process_s, load = run_process(argv, run_dir + "-logs", cfg.timeout)
    result = {"system": "ddrl", "seed": seed, "exit": code, "process_wall_s": process_s,
              "load_before": load, "command": shlex.join(argv[1:]), "run_dir": run_dir}
    metrics = os.path.join(run_dir, "metrics.csv")
    if code != 0 or not os.path.exists(metrics):
        return result
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    curve, prev, train_s, train_updates = [], (0, None), 0.0, 0
    for row in rows:
        updates, wall = int(float(row["env_steps"])), float(row["wall_time_s"])
        if row.get("eval_return") not in (None, ""):
            std, at = row.get("eval_return_std"), row.get("eval_env_steps")
            curve.append([int(float(at)) if at not in (None, "") else updates, wall,
                          float(row["eval_return"]),
                          float(std) if std not in (None, "") else None])
        elif row.get("updates_per_s") not in (None, "") and float(row["updates_per_s"]) > 0:
            done = int(float(row["updates"])) - prev[0]
            train_s += done / float(row["updates_per_s"])
            train_updates += done
        prev = (int(float(row["updates"])), wall)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    result["config_mismatch"] = ddrl_config_mismatch(task, run_dir)
    result.update(
        curve=curve, wall_time_s=summary.get("wall_time_s"),
        time_per_update_s=train_s / train_updates if train_updates else None,
        timed_updates=train_updates,
        final_updates=curve[-1][0] if curve else None,
        final_eval_return=curve[-1][2] if curve else None,
        final_eval_return_std=curve[-1][3] if curve else None,
        time_to_final_s=curve[-1][1] if curve else None,
        dataset=summary.get("dataset"))
    return result


def ddrl_config_mismatch(task, run_dir):
    """The table's rows whose value the ddrl run's own config.yaml does not hold."""
    import yaml
    with open(os.path.join(run_dir, "config.yaml")) as f:
        ran = yaml.safe_load(f)
    return [row for row in task["settings"]
            if not same(as_json(ran.get(row["ddrl_flag"])), row["ddrl_value"])]


def d3rlpy_run(task, seed, cfg, run_dir):
    out = os.path.join(run_dir, "result.json")
    argv = [cfg.d3rlpy_python, PEER, "--dataset", task["dir"], "--env", task["env"],
            "--algo", D3RLPY_ALGO[task["model"]], *task["peer_argv"], "--threads", "1",
            "--seed", str(seed), "--steps", str(cfg.steps),
            "--eval_interval", str(cfg.eval_interval), "--eval_episodes", str(cfg.eval_episodes),
            *(["--eval_sampled"] if cfg.eval_sampled else []), "--out", out]
    code, process_s, load = run_process(argv, run_dir, cfg.timeout)
    result = {"system": "d3rlpy", "seed": seed, "exit": code, "process_wall_s": process_s,
              "load_before": load, "command": shlex.join(argv[1:]), "run_dir": run_dir}
    if code != 0 or not os.path.exists(out):
        return result
    with open(out) as f:
        peer = json.load(f)
    for key in ("curve", "wall_time_s", "time_per_update_s", "final_updates",
                "final_eval_return", "final_eval_return_std", "time_to_final_s", "config",
                "d3rlpy_config", "d3rlpy_class", "train_time_s", "eval_time_s",
                "dataset_transitions", "versions"):
        result[key] = peer.get(key)
    result["config_mismatch"] = [
        row for row in task["settings"]
        if row["applies"] and not same(peer["config"].get(row["d3rlpy_flag"]),
                                       row["d3rlpy_value"])]
    return result


def same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    return a == b


# -- the table ----------------------------------------------------------------------------------
def interval(values):
    """(mean, lo, hi): the mean over seeds and its 95% stratified-bootstrap interval."""
    x = np.asarray(values, dtype=float)
    lo, hi = stratified_bootstrap_ci(x, lambda m: float(np.mean(m)))
    return float(np.mean(x)), float(lo), float(hi)


def summarize(tasks, runs):
    rows = []
    for task in tasks:
        row = {"dataset": task["name"], "algo": task["model"],
               "behaviour_return": task["behaviour_return"]}
        for system in ("ddrl", "d3rlpy"):
            done = [r for r in runs if r["task"] == task["key"] and r["system"] == system
                    and r.get("final_eval_return") is not None]
            row[system] = None
            if done:
                mean, lo, hi = interval([r["final_eval_return"] for r in done])
                per_update = [r["time_per_update_s"] for r in done
                              if r.get("time_per_update_s") is not None]
                row[system] = {
                    "seeds": [r["seed"] for r in done], "final_return": mean,
                    "final_return_ci95": [lo, hi],
                    "final_updates": sorted({r["final_updates"] for r in done}),
                    "time_per_update_s": float(np.median(per_update)) if per_update else None,
                    "time_to_final_s": float(np.median([r["time_to_final_s"] for r in done]))}
        a, b = row["ddrl"], row["d3rlpy"]
        if a and b:
            # with one seed an interval is a point: no verdict (None)
            row["within_each_others_interval"] = None if min(
                len(a["seeds"]), len(b["seeds"])) < 2 else bool(
                b["final_return_ci95"][0] <= a["final_return"] <= b["final_return_ci95"][1]
                and a["final_return_ci95"][0] <= b["final_return"] <= a["final_return_ci95"][1])
            row["ratio_time_per_update"] = (a["time_per_update_s"] / b["time_per_update_s"]
                                            if a["time_per_update_s"] and b["time_per_update_s"]
                                            else None)
            row["ratio_time_to_final"] = a["time_to_final_s"] / b["time_to_final_s"]
        rows.append(row)
    return rows


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def markdown(rows):
    head = ("| dataset | algo | behaviour return | ddrl final return [95% CI] | "
            "d3rlpy final return [95% CI] | within each other's | ddrl ms/update | "
            "d3rlpy ms/update | ratio | ddrl s to final | d3rlpy s to final | ratio |")
    lines = [head, "|" + " --- |" * 12]
    for row in rows:
        cells = [row["dataset"], row["algo"], fmt(row["behaviour_return"])]
        for system in ("ddrl", "d3rlpy"):
            s = row[system]
            cells.append("-" if s is None else
                         f"{s['final_return']:.1f} [{s['final_return_ci95'][0]:.1f}, "
                         f"{s['final_return_ci95'][1]:.1f}] (n={len(s['seeds'])})")
        within = row.get("within_each_others_interval")
        cells.append(("- (1 seed)" if row["ddrl"] and row["d3rlpy"] else "-") if within is None
                     else ("yes" if within else "no"))
        a, b = row["ddrl"] or {}, row["d3rlpy"] or {}
        ms = [None if s.get("time_per_update_s") is None else 1e3 * s["time_per_update_s"]
              for s in (a, b)]
        cells += [fmt(ms[0], ".2f"), fmt(ms[1], ".2f"),
                  fmt(row.get("ratio_time_per_update"), ".2f"),
                  fmt(a.get("time_to_final_s")), fmt(b.get("time_to_final_s")),
                  fmt(row.get("ratio_time_to_final"), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the machine --------------------------------------------------------------------------------
def cpu_flags():
    """What `grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u`
    prints, and the CPU's name."""
    wanted = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    found, name = set(), platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                found |= wanted & set(line.replace(":", " ").split())
    return {"cpu": name, "cores": os.cpu_count(), "cpu_flags": sorted(found)}


def git_commit():
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout
    try:
        changed = [line[3:] for line in
                   git("status", "--porcelain", "--untracked-files=no").splitlines()]
        return {"hash": git("rev-parse", "HEAD").strip() or None, "modified": changed}
    except OSError:
        return {"hash": None, "modified": []}


# -- the command line ---------------------------------------------------------------------------
def dataset_spec(text):
    """NAME=DIR:ENV -> (name, dir, env)."""
    name, sep, rest = text.partition("=")
    directory, sep2, env = rest.rpartition(":")
    if not (sep and sep2 and name and directory and env):
        raise argparse.ArgumentTypeError(f"expected NAME=DIR:ENV, got {text!r}")
    return name, os.path.abspath(os.path.expanduser(directory)), env


def override(text):
    key, sep, value = text.partition("=")
    if not (sep and key):
        raise argparse.ArgumentTypeError(f"expected FLAG=VALUE (a ddrl flag), got {text!r}")
    return key.lstrip("-"), value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--from_json", default=None, metavar="PATH",
                   help="print the table of a saved report, recomputed from its runs; runs "
                        "nothing")
    p.add_argument("--datasets", nargs="+", type=dataset_spec, default=None,
                   metavar="NAME=DIR:ENV", help="Minari dataset directories and the env each is "
                                                "evaluated on")
    p.add_argument("--algos", nargs="+", choices=sorted(D3RLPY_ALGO), default=["bc", "iql", "cql"],
                   help="ddrl model names (bc on Discrete actions is d3rlpy's DiscreteBC; "
                        "cql_discrete is DiscreteCQL)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=100_000, help="gradient updates per run")
    p.add_argument("--eval_interval", type=int, default=5_000, help="updates between evaluations")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--eval_sampled", action="store_true",
                   help="both systems evaluate with sampled actions instead of the most likely "
                        "(ddrl --no-eval_deterministic; d3rlpy_offline.py --eval_sampled): an "
                        "imitation of a noisy behaviour policy reproduces its noise")
    p.add_argument("--set", dest="overrides", action="append", type=override, default=[],
                   metavar="FLAG=VALUE", help="a ddrl flag's value for both systems (e.g. "
                                              "iql_beta=10; true/false for a switch)")
    p.add_argument("--name", default=None, help="the results' name (default: the datasets')")
    p.add_argument("--out", default=None,
                   help="the JSON (default benchmarks/results/offline-<name>.json; with "
                        "--dry_run /tmp/ddrl-offline-dry/offline-<name>.json); the markdown "
                        "table beside it (.md)")
    p.add_argument("--runs_dir", default=None,
                   help="run directories and logs (default benchmarks/runs/offline-<name>)")
    p.add_argument("--d3rlpy_python", default=D3RLPY_PYTHON,
                   help="the d3rlpy venv's python (default .venv-d3rlpy/bin/python)")
    p.add_argument("--timeout", type=float, default=0, help="seconds per run (0: none)")
    p.add_argument("--dry_run", action="store_true",
                   help="tiny budgets (200 updates, evaluations every 40, 2 episodes): checks "
                        "the paths, measures nothing")
    args = p.parse_args(argv)
    if args.from_json:
        return args
    if not args.datasets:
        p.error("--datasets is required (or --from_json)")
    if args.dry_run:
        args.steps, args.eval_interval, args.eval_episodes = 200, 40, 2
    if args.steps % args.eval_interval or args.eval_interval % 8:
        p.error(f"--eval_interval ({args.eval_interval}) must be a multiple of 8 that divides "
                f"--steps ({args.steps}): ddrl books updates 8 at a time (module docstring)")
    args.name = args.name or "-".join(name for name, _, _ in args.datasets)
    if args.out is None:
        base = "/tmp/ddrl-offline-dry" if args.dry_run else RESULTS
        args.out = os.path.join(base, f"offline-{args.name}.json")
    args.runs_dir = args.runs_dir or os.path.join(
        "/tmp/ddrl-offline-dry/runs" if args.dry_run else RUNS, f"offline-{args.name}")
    return args


def main(argv=None):
    cfg = parse_args(argv)
    if cfg.from_json:
        with open(cfg.from_json) as f:
            saved = json.load(f)
        table = rebuild(json.loads(json.dumps(saved)))["table"]
        print(table)
        return 0 if table == saved.get("table") else 1
    if not os.path.exists(cfg.d3rlpy_python):
        raise SystemExit(f"no d3rlpy venv at {cfg.d3rlpy_python}: python3 -m venv .venv-d3rlpy && "
                         f".venv-d3rlpy/bin/pip install -r benchmarks/requirements-d3rlpy.txt")
    from core.data import load_dataset
    tasks = []
    for name, directory, env in cfg.datasets:
        data = load_dataset(directory)
        discrete = type(data.action_space).__name__ == "Discrete"
        for model in cfg.algos:
            if discrete and model in ("iql", "cql", "td3_bc"):
                print(f"offline.py: {name} has Discrete actions; d3rlpy's {model.upper()} takes "
                      f"continuous ones: skipped (cql_discrete is DiscreteCQL)", flush=True)
                continue
            if not discrete and model == "cql_discrete":
                print(f"offline.py: {name} has Box actions: cql_discrete skipped", flush=True)
                continue
            settings, ddrl_argv, peer_argv, _ = resolve(model, directory, env, cfg.overrides,
                                                             discrete)
            tasks.append(dict(key=f"{name}-{model}", name=name, dir=directory, env=env,
                              model=model, settings=settings, ddrl_argv=ddrl_argv,
                              peer_argv=peer_argv,
                              behaviour_return=float(np.mean(data.episode_returns))
                              if len(data.episode_returns) else None,
                              transitions=len(data), episodes=len(data.episode_returns)))
    report = {"name": cfg.name, "steps": cfg.steps, "eval_interval": cfg.eval_interval,
              "eval_episodes": cfg.eval_episodes, "eval_sampled": cfg.eval_sampled, "seeds": cfg.seeds,
              "overrides": [f"{k}={v}" for k, v in cfg.overrides], "dry_run": cfg.dry_run,
              "machine": cpu_flags(), "commit": git_commit(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "ddrl_log_steps": ddrl_log_steps(cfg.eval_interval),
              "tasks": [{k: t[k] for k in ("key", "name", "dir", "env", "model", "settings",
                                            "behaviour_return", "transitions", "episodes")}
                        for t in tasks],
              "runs": []}
    os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)
    for i, seed in enumerate(cfg.seeds):
        for task in tasks:
            systems = ("ddrl", "d3rlpy") if i % 2 == 0 else ("d3rlpy", "ddrl")  # alternate
            for system in systems:
                run_dir = os.path.join(cfg.runs_dir, f"{task['key']}-{system}-s{seed}")
                for old in (run_dir, run_dir + "-logs"):  # this driver's own, from a run before
                    shutil.rmtree(old, ignore_errors=True)
                run = (ddrl_run if system == "ddrl" else d3rlpy_run)(task, seed, cfg, run_dir)
                run["task"] = task["key"]
                report["runs"].append(run)
                print(f"offline.py: {task['key']} {system} seed {seed}: exit {run['exit']}, "
                      f"final {fmt(run.get('final_eval_return'))} at "
                      f"{run.get('final_updates')} updates, "
                      f"{fmt(1e3 * run['time_per_update_s'] if run.get('time_per_update_s') else None, '.2f')} "
                      f"ms/update, {fmt(run.get('time_to_final_s'))} s to final", flush=True)
                if run.get("config_mismatch"):
                    print(f"offline.py: d3rlpy's config differs from the table: "
                          f"{run['config_mismatch']}", flush=True)
                write(report, cfg.out)
    rebuild(report)
    write(report, cfg.out)
    with open(os.path.splitext(cfg.out)[0] + ".md", "w") as f:
        f.write(report["table"] + "\n")
    print(report["table"])
    print(f"offline.py: {cfg.out}")
    failed = [r for r in report["runs"] if r["exit"] != 0 or r.get("config_mismatch")]
    return 1 if failed else 0


def rebuild(report):
    """The evaluation points, results and table of a report from its tasks and runs (what
    --from_json recomputes; the saved ones must come out the same)."""
    for task in report["tasks"]:
        points = {}
        for r in report["runs"]:
            if r["task"] == task["key"]:
                points.setdefault(r["system"], set()).add(tuple(p[0] for p in r.get("curve") or []))
        task["eval_points"] = {k: [list(p) for p in sorted(v)] for k, v in points.items()}
        task["eval_points_equal"] = len(set().union(*points.values())) == 1 if points else None
    report["results"] = summarize(report["tasks"], report["runs"])
    report["table"] = markdown(report["results"])
    return report


def write(report, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
