"""Scaling benchmark: steady-state env steps/s of PPO, SAC and DQN against the number of rollout
workers, on an env whose step waits --step_ms (benchmarks/plugins/slow_env.py), as a fraction of
the env's own limit (workers x envs x 1000 / step_ms steps/s).

    .venv/bin/python benchmarks/scaling.py                      # ppo, ppo-default, sac; 1..16; ~50 min
    .venv/bin/python benchmarks/scaling.py --cluster            # the same on a 3-node loopback cluster
    .venv/bin/python benchmarks/scaling.py --systems ppo --workers 1 2 --seconds 30 --out /tmp/s.json
    .venv/bin/python benchmarks/scaling.py --address 127.0.0.1:6399 --out benchmarks/results/scaling-mine.json
    .venv/bin/python benchmarks/scaling.py --extra "--sample_ahead on" --out benchmarks/results/scaling-ahead.json
    .venv/bin/python benchmarks/scaling.py --resume             # skip the points already in the JSON
    .venv/bin/python benchmarks/scaling.py --replot benchmarks/results/scaling.json   # table + PNG only

Every point is one main.py subprocess from the repo root, run for --seconds (--max_time):

    main.py --user_dir benchmarks/plugins --env_name slow_env --step_ms 5 --config none
            --target_return none --total_steps 1000000000 --max_time S --no-tensorboard --quiet
            --seed 0 --run_dir DIR  <system flags>  --num_workers W --num_envs_per_worker E
            --env_placement P  [--address HOST:PORT]  <--extra>

Placements per system and N in --workers: ``worker``, N rollout workers x 1 env each (the env
inside the worker); ``actor``, 1 worker x N envs with --env_placement actor --envs_per_actor N
(one env actor hosting all N, stepping them concurrently); ``actor1``, the same with one actor
per env (--envs_per_actor 1: one Ray call per env and step). Later flags win, so --extra
overrides everything.

Steady state: metrics.csv has one row per PPO round (SAC: every --log_steps env steps) with the
env steps and the wall time since process start. The window starts at the first row at or after
both --warmup_frac x --seconds and the first row whose ``workers`` column reached W (Ray and all
workers up; PPO's elastic start first learns with one in-process worker), and ends at the last
row; steps/s = env steps between the window's first and last rows / wall time between them. A
point whose workers never all delivered is measured from --warmup_frac on and flagged.
With --window S the harness stops each run (SIGTERM; main.py writes its summary and exits 143)
once that window spans S seconds, so a point whose workers are slow to start still gets its whole
window; --seconds is then only the cap.

Writes --out (default benchmarks/results/scaling.json; scaling-cluster.json with --cluster or
--address) after every point: each point's command, steps/s, limit, efficiency, workers seen,
mean sample/update times, the commit, the date and the load average before it; the PNG beside it
(efficiency against N, the goals 75% at 8 and 60% at 16 dashed); prints the markdown table. Run
directories (metrics.csv, summary.json, stdout.log, stderr.log) go to <out without .json>/.

Evaluations run every 50,000 env steps (--eval_interval), so the test worker's slow episodes
take little of the two cores from what is measured. A run stops at --max_time, then waits for an
evaluation still in flight (10 episodes of the slow env: up to 25 s on CartPole), so each point
takes about --seconds + 35 s. --cluster nodes get 1 logical CPU each by default (3 nodes on a
2-core machine: the logical CPUs stay close to the real ones; rollout workers reserve shares
that fit, and --grad_workers auto counts these CPUs).
"""
import argparse
import contextlib
import csv
import datetime
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (HERE, REPO):  # compare.py beside it; core.atomic from the repository
    if path not in sys.path:
        sys.path.insert(0, path)

from compare import end_process_group, machine_info  # noqa: E402

GOALS = {8: 0.75, 16: 0.60}  # the goals: fraction of the env's limit at 8 and 16 workers

# Flags of each system; placeholders: {minibatch4} = the batch size that gives 4 minibatches per
# epoch at this point (workers x envs x --rollout_steps / 4, --rollout_steps read from the flags).
SYSTEMS = {
    "ppo": "--model_name ppo --num_envs_per_worker 1 --rollout_steps 128 --num_epochs 4 "
           "--batch_size {minibatch4}",
    "ppo-default": "--model_name ppo --num_envs_per_worker 1",  # 32 steps, batch 256, 10 epochs
    # SAC's update-to-data ratio is low on purpose: this measures sampling, not the update rate
    # (a 256x256 update is ~10 ms here; 64x64 at utd 0.02 is ~64 updates/s at 16 x 200 steps/s).
    "sac": "--model_name sac --gym_id Pendulum-v1 --num_envs_per_worker 1 "
           "--sac_hidden_sizes 64,64 --utd_ratio 0.02 --log_steps 500",
    # Ape-X DQN on the same loop (CartPole): the Ape-X preset (the epsilon ladder, 3-step
    # returns and initial priorities computed on the workers, prioritized replay, a dueling
    # double-Q learner) at SAC's row's low update rate and net size
    "dqn": "--config configs/dqn-apex.yaml --num_envs_per_worker 1 --dqn_hidden_sizes 64,64 "
           "--utd_ratio 0.02 --learning_starts 1000 --log_steps 500",
}
WINDOW_MEANS = ("sample_time_s", "update_time_s", "updates_per_s", "utd_achieved", "policy_lag",
                "sample_ahead")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="+", default=None,
                   help=f"systems to run, in this order (default: all of {list(SYSTEMS)} and any --system)")
    p.add_argument("--system", action="append", default=[], metavar="NAME=FLAGS",
                   help="add or replace a system: main.py flags, may use {minibatch4}; repeatable")
    p.add_argument("--placements", nargs="+", default=["worker", "actor"],
                   choices=["worker", "actor", "actor1"],
                   help="worker: N workers x 1 env; actor: 1 worker x N envs in one env actor "
                        "(--env_placement actor --envs_per_actor N); actor1: one env actor per env "
                        "(default: both)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                   help="the N of each point: workers (placement worker) or envs (placement actor)")
    p.add_argument("--seconds", type=float, default=60.0, help="wall time of each run, --max_time (default: 60)")
    p.add_argument("--step_ms", type=float, default=5.0, help="slow_env's step time in ms (default: 5)")
    p.add_argument("--warmup_frac", type=float, default=0.4,
                   help="the steady-state window starts at this fraction of --seconds at the earliest "
                        "(default: 0.4)")
    p.add_argument("--min_window", type=float, default=20.0,
                   help="a steady-state window shorter than this many seconds is flagged (~ in the table; "
                        "many workers take long to be all up: give such points a longer --seconds, "
                        "benchmarks/README.md) (default: 20)")
    p.add_argument("--window", type=float, default=None, metavar="S",
                   help="stop each run (SIGTERM) once its steady-state window spans S seconds; "
                        "--seconds is then only the cap. Workers slow to start (a loaded machine, "
                        "CUDA's torch to import) then shorten no window (default: off, every run "
                        "lasts --seconds)")
    p.add_argument("--extra", default="",
                   help="flags appended to every command, e.g. --extra \"--sample_ahead on\" (they win; "
                        "one flag alone: --extra=--compiled_graph)")
    p.add_argument("--seed", type=int, default=0, help="--seed of every run (default: 0)")
    p.add_argument("--address", default=None, help="run every point against this Ray cluster (HOST:PORT)")
    p.add_argument("--cluster", action="store_true",
                   help="start a loopback cluster (ddrl/cluster.py: a head and --cluster_nodes - 1 "
                        "nodes on 127.0.0.1), run every point against it, stop it at the end")
    p.add_argument("--cluster_nodes", type=int, default=3, help="nodes of --cluster, head included (default: 3)")
    p.add_argument("--cluster_cpus", type=int, default=1,
                   help="--num-cpus of each --cluster node (default: 1: three nodes on this 2-core "
                        "machine)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds before a run is killed (default: 1.5 x --seconds + 120)")
    p.add_argument("--cooldown", type=float, default=5.0, help="seconds of pause between runs (default: 5)")
    p.add_argument("--out", default=None,
                   help="results JSON (default: benchmarks/results/scaling.json, or scaling-cluster.json "
                        "with --cluster or --address); the PNG goes beside it")
    p.add_argument("--resume", action="store_true",
                   help="keep the points of --out that were measured with the same command, run the rest")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="measure nothing: print the table and redraw the PNG of an earlier results JSON")
    args = p.parse_args()
    systems = dict(SYSTEMS)
    for spec in args.system:
        name, _, flags = spec.partition("=")
        if not name or not flags:
            p.error(f"--system wants NAME=FLAGS, got {spec!r}")
        systems[name] = flags
    names = args.systems or list(systems)
    unknown = [n for n in names if n not in systems]
    if unknown:
        p.error(f"unknown systems {unknown}; known: {list(systems)}")
    args.system_flags = {n: systems[n] for n in names}
    if args.cluster and args.address:
        p.error("--cluster starts its own cluster: give --cluster or --address, not both")
    if args.out is None:
        name = "scaling-cluster.json" if args.cluster or args.address else "scaling.json"
        args.out = os.path.join(HERE, "results", name)
    return args


# -- one point ----------------------------------------------------------------------------------
def flag_value(flags, name, default):
    """The last value of ``--name`` in a flag string, or ``default``."""
    words = shlex.split(flags)
    found = [words[i + 1] for i, w in enumerate(words[:-1]) if w == name]
    return found[-1] if found else default


def point_command(args, system, placement, n, run_dir, address):
    """main.py's argv for one point, and the key that identifies the point across invocations
    (the command with the run directory and the cluster address left out)."""
    workers, envs = (n, 1) if placement == "worker" else (1, n)
    flags = args.system_flags[system]
    rollout_steps = int(flag_value(flags + " " + args.extra, "--rollout_steps", "32"))
    flags = flags.format(minibatch4=max(1, workers * envs * rollout_steps // 4))
    common = (f"--user_dir benchmarks/plugins --env_name slow_env --step_ms {args.step_ms:g} --config none "
              f"--target_return none --total_steps 1000000000 --max_time {args.seconds:g} "
              f"--no-tensorboard --quiet --seed {args.seed} --eval_interval 50000")
    point = f"--num_workers {workers} --num_envs_per_worker {envs} --env_placement " + (
        "worker" if placement == "worker" else
        f"actor --envs_per_actor {envs if placement == 'actor' else 1}")
    tail = f"{flags} {point}" + (" --address {address}" if address else "") + f" {args.extra}".rstrip()
    # a point measured in a --window is another measurement than one of --seconds (--resume)
    key = f"main.py {common} {tail}" + (f" [window {args.window:g} s]" if args.window else "")
    argv = ([sys.executable, "main.py"] + shlex.split(common) + ["--run_dir", run_dir]
            + shlex.split(tail.replace("{address}", address or "")))
    return argv, key.strip(), workers, envs


def run_process(argv, run_dir, timeout, stop_when=None):
    """Run main.py in its own process group with stdout/stderr to run_dir/*.log; SIGTERM it once
    ``stop_when()`` holds (polled twice a second), and kill the group afterwards (also on timeout
    or Ctrl-C here). Returns (returncode, timed_out, wall seconds, stopped here)."""
    with open(os.path.join(run_dir, "stdout.log"), "w") as out, \
            open(os.path.join(run_dir, "stderr.log"), "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
        t0, timed_out, stopped = time.time(), False, False
        try:
            while True:
                try:
                    proc.wait(timeout=min(0.5, max(0.01, t0 + timeout - time.time())))
                    break
                except subprocess.TimeoutExpired:
                    if time.time() - t0 >= timeout:
                        timed_out = True
                        break
                    if stop_when is not None and not stopped and stop_when():
                        proc.send_signal(signal.SIGTERM)  # main.py ends cleanly: summary, exit 143
                        stopped = True
        finally:
            end_process_group(proc)  # a finished run's leftovers too
        return proc.returncode if not timed_out else None, timed_out, time.time() - t0, stopped


def read_rows(run_dir):
    """metrics.csv as a list of dicts of floats (empty cells: None)."""
    def num(v):
        try:
            return float(v) if v not in (None, "") else None
        except ValueError:
            return None
    try:
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            return [{k: num(v) for k, v in r.items()} for r in csv.DictReader(f)]
    except OSError:
        return []


def steady_state(rows, expected_workers, seconds, warmup_frac):
    """Env steps/s between the first row at or after max(warmup_frac x seconds, the first row where
    all ``expected_workers`` delivered) and the last row; see the module docstring."""
    rows = [r for r in rows if r.get("wall_time_s") is not None and r.get("env_steps") is not None]
    t_warm = warmup_frac * seconds
    all_up = next((r["wall_time_s"] for r in rows if (r.get("workers") or 0) >= expected_workers), None)
    t_start = max(t_warm, all_up if all_up is not None else t_warm)
    window = [r for r in rows if r["wall_time_s"] >= t_start]
    out = dict(rows=len(rows), window_rows=len(window), warmup_s=t_warm, all_workers_up_s=all_up,
               all_workers_up=all_up is not None, steps_per_s=None)
    if len(window) < 2 or window[-1]["wall_time_s"] <= window[0]["wall_time_s"]:
        out["error"] = f"fewer than 2 metrics rows after {t_start:.1f} s ({len(rows)} rows in all)"
        return out
    first, last = window[0], window[-1]
    span = last["wall_time_s"] - first["wall_time_s"]
    seen = [r["workers"] for r in window[1:] if r.get("workers") is not None]
    out.update(window_start_s=first["wall_time_s"], window_end_s=last["wall_time_s"], window_s=span,
               window_env_steps=last["env_steps"] - first["env_steps"],
               steps_per_s=(last["env_steps"] - first["env_steps"]) / span,
               workers_min=min(seen) if seen else None, workers_max=max(seen) if seen else None,
               workers_mean=sum(seen) / len(seen) if seen else None)
    for key in WINDOW_MEANS:  # each row's value covers the interval since the row before
        values = [r[key] for r in window[1:] if r.get(key) is not None]
        if values:
            out[key] = sum(values) / len(values)
    return out


def window_reached(rows, expected_workers, seconds, warmup_frac, window):
    """Whether a run's steady-state window (steady_state's) spans ``window`` seconds with all
    its workers up: --window stops the run then. All up first: until then steady_state's
    window falls back to starting at the warm-up (a point whose workers never all come is
    measured so), which with a short warm-up spans the in-process stand-in's rows alone."""
    state = steady_state(rows, expected_workers, seconds, warmup_frac)
    return state["all_workers_up"] and (state.get("window_s") or 0) >= window


def measure_point(args, system, placement, n, address):
    label = f"{system}-{placement}-{n}"
    run_dir = os.path.join(os.path.splitext(args.out)[0], label)
    argv, key, workers, envs = point_command(args, system, placement, n, run_dir, address)
    subprocess.run(["rm", "-rf", run_dir], check=True)  # never read a stale metrics.csv
    os.makedirs(run_dir)
    load = os.getloadavg()
    timeout = args.timeout or 1.5 * args.seconds + 120
    print(f"[scaling] {label} (load {load[0]:.2f}): {shlex.join(argv)}", flush=True)
    def window_long_enough():
        return window_reached(read_rows(run_dir), workers, args.seconds, args.warmup_frac,
                              args.window)

    rc, timed_out, wall, stopped = run_process(argv, run_dir, timeout,
                                               window_long_enough if args.window else None)
    limit = workers * envs * 1000.0 / args.step_ms
    rec = dict(system=system, placement=placement, n=n, workers=workers, envs_per_worker=envs,
               key=key, cmd=shlex.join(argv), run_dir=repo_relative(run_dir), address=address,
               seconds=args.seconds, step_ms=args.step_ms, extra=args.extra, returncode=rc,
               timed_out=timed_out, stopped_at_window=stopped, process_wall_s=wall, load_before=list(load),
               date=datetime.datetime.now().isoformat(timespec="seconds"), commit=git_commit(),
               limit_steps_per_s=limit)
    rec.update(steady_state(read_rows(run_dir), workers, args.seconds, args.warmup_frac))
    rec["efficiency"] = rec["steps_per_s"] / limit if rec["steps_per_s"] is not None else None
    rec["short_window"] = rec.get("window_s") is not None and rec["window_s"] < args.min_window
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            rec["stopped_because"] = json.load(f).get("stopped_because")
    except (OSError, ValueError):
        rec["stopped_because"] = None
    rc_ok = rc == 0 or (stopped and rc == 128 + signal.SIGTERM)
    if not rc_ok:
        with open(os.path.join(run_dir, "stderr.log")) as f:
            rec["stderr_tail"] = f.read()[-2000:]
    print(f"    {fmt_rate(rec)}; workers seen {rec.get('workers_min')}-{rec.get('workers_max')} of {workers}"
          + ("" if rec["all_workers_up"] else " (never all up)")
          + (f"; window only {rec['window_s']:.0f} s" if rec["short_window"] else "") + (f"; rc={rc}" if not rc_ok else "")
          + (" TIMEOUT" if timed_out else "") + (f"; {rec['error']}" if rec.get("error") else ""), flush=True)
    return rec


def repo_relative(path):
    """A path inside the repo relative to its root (results stay valid in another checkout)."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def git_commit():
    """HEAD's hash, and the tracked files that differ from it (other work in the tree)."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout
    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return dict(hash=git("rev-parse", "HEAD").strip(), modified=changed)


# -- the loopback cluster -----------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_cmd(*cluster_args):
    proc = subprocess.run([sys.executable, "-m", "ddrl.cluster", *cluster_args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"ddrl.cluster {' '.join(cluster_args)} failed:\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")


@contextlib.contextmanager
def loopback_cluster(nodes, cpus):
    """A head and nodes - 1 more nodes on 127.0.0.1 (token auth on, ddrl/cluster.py), stopped on
    the way out, whatever the way."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    print(f"[cluster] starting a {nodes}-node loopback cluster at {address}, {cpus} CPUs each", flush=True)
    try:
        cluster_cmd("start", "--head", "--port", str(port), "--num-cpus", str(cpus),
                    "--include-dashboard", "false", "--ray-client-server-port", str(free_port()))
        for _ in range(nodes - 1):
            cluster_cmd("start", "--address", address, "--num-cpus", str(cpus))
        yield address
    finally:
        print(f"[cluster] stopping the cluster at {address}", flush=True)
        subprocess.run([sys.executable, "-m", "ddrl.cluster", "stop", "--address", address], cwd=REPO,
                       timeout=120)


def sigterm_as_interrupt():
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


# -- report -------------------------------------------------------------------------------------
def fmt_rate(rec):
    if rec.get("steps_per_s") is None:
        return "no steady state"
    return f"{rec['steps_per_s']:,.0f} steps/s of {rec['limit_steps_per_s']:,.0f} ({100 * rec['efficiency']:.0f}%)"


def row_label(system, placement, extra):
    shape = {"worker": "N workers x 1 env", "actor": "1 worker x N envs in one env actor",
             "actor1": "1 worker x N envs, one env actor each"}[placement]
    return f"{system}, {shape}" + (f" `{extra}`" if extra else "")


def series(points):
    """{(system, placement, extra): {n: point}} in first-seen order."""
    out = {}
    for p in points:
        out.setdefault((p["system"], p["placement"], p.get("extra", "")), {})[p["n"]] = p
    return out


def env_alone(step_ms, seconds=3.0):
    """One slow_env stepped by a bare loop in this process (random actions, no ddrl around
    it): the env's own steps/s on this machine, the overshoot of its sleeps included, which no
    platform gets past (5 ms steps: 192.6-194.9 steps/s, 96-97.5% of 200, on a 2-core AMD EPYC
    with AVX-512)."""
    sys.path.insert(0, os.path.join(HERE, "plugins"))
    import slow_env
    parser = argparse.ArgumentParser()
    slow_env.SlowEnv.add_args(parser)
    env = slow_env.SlowEnv(parser.parse_args(["--step_ms", f"{step_ms:g}"]), seed=0)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def markdown(points, step_ms, seconds, where, alone=None):
    ns = sorted({p["n"] for p in points})
    lines = [f"slow_env with a {step_ms:g} ms step ({1000 / step_ms:g} steps/s per env), {seconds:g} s per run, "
             f"{where}; steady-state env steps/s and % of the env's limit (workers x envs x "
             f"{1000 / step_ms:g}).", "",
             "| system | " + " | ".join(f"N={n}" for n in ns) + " |",
             "| --- | " + " | ".join("---:" for _ in ns) + " |"]
    for (system, placement, extra), by_n in series(points).items():
        cells = []
        for n in ns:
            p = by_n.get(n)
            if p is None:
                cells.append("")
            elif p.get("steps_per_s") is None:
                cells.append("failed")
            else:
                flag = ("" if p.get("all_workers_up", True) else "*") + ("~" if p.get("short_window") else "")
                cells.append(f"{p['steps_per_s']:,.0f} ({100 * p['efficiency']:.0f}%){flag}")
        lines.append(f"| {row_label(system, placement, extra)} | " + " | ".join(cells) + " |")
    lines += ["", "Goals: 8 workers >= 75%, 16 workers >= 60% (N workers x 1 env). "
              "* = not every worker delivered in the window; ~ = steady-state window under the --min_window."]
    if alone:
        lines += ["", f"The env alone, stepped by a bare loop in one process on this machine: "
                      f"{alone:,.1f} steps/s, {100 * alone * step_ms / 1000:.1f}% of "
                      f"{1000 / step_ms:g} (its sleeps overshoot): the ceiling of every share."]
    return "\n".join(lines)


def plot(path, points, step_ms, where):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for (system, placement, extra), by_n in series(points).items():
        pts = sorted((n, 100 * p["efficiency"]) for n, p in by_n.items() if p.get("efficiency") is not None)
        if pts:
            ax.plot(*zip(*pts), marker="o", ls="-" if placement == "worker" else ":",
                    label=row_label(system, placement, extra).replace("`", ""))
    ax.plot(list(GOALS), [100 * v for v in GOALS.values()], "k--", marker="x", label="goal (75% at 8, 60% at 16)")
    ax.axhline(100, color="0.7", lw=1)
    ax.set_xscale("log", base=2)
    ns = sorted({p["n"] for p in points} | set(GOALS))
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_ylim(0, 110)
    ax.set(xlabel="N (workers, or envs of one worker)", ylabel="% of the env's limit (N x 1000 / step_ms)",
           title=f"Scaling on slow_env ({step_ms:g} ms step), {where}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_results(args, points, where):
    alone = args.env_alone_steps_per_s  # measure_and_report measured it first
    table = markdown(points, args.step_ms, args.seconds, where, alone)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    data = dict(harness_cmd=shlex.join([sys.executable] + sys.argv), where=where, step_ms=args.step_ms,
                seconds=args.seconds, warmup_frac=args.warmup_frac, goals=GOALS, systems=args.system_flags,
                machine=machine_info(), env_alone_steps_per_s=alone, points=points,
                markdown=table)
    from core.atomic import atomic_open  # the repository's one atomic writer
    with atomic_open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    return table


def load_points(path):
    try:
        with open(path) as f:
            return json.load(f).get("points", [])
    except (OSError, ValueError):
        return []


def replot(path):
    with open(path) as f:
        data = json.load(f)
    points = data["points"]
    plot(os.path.splitext(path)[0] + ".png", points, data["step_ms"], data["where"])
    print(markdown(points, data["step_ms"], data["seconds"], data["where"],
                   data.get("env_alone_steps_per_s")))


# -- main ---------------------------------------------------------------------------------------
def run_grid(args, address, where):
    old = {p["key"]: p for p in load_points(args.out)} if args.resume else {}
    points, first = [], True
    for n in args.workers:  # systems alternate at every N, so drifts in machine load hit all alike
        for placement in args.placements:
            for system in args.system_flags:
                _, key, _, _ = point_command(args, system, placement, n, "", address)
                if key in old and old[key].get("steps_per_s") is not None:
                    print(f"[scaling] {system}-{placement}-{n}: measured before, kept ({fmt_rate(old[key])})")
                    points.append(old.pop(key))
                    continue
                if not first:
                    time.sleep(args.cooldown)
                first = False
                points.append(measure_point(args, system, placement, n, address))
                write_results(args, points + list(old.values()), where)  # an interrupted grid keeps its points
    return points + list(old.values())


def main():
    args = parse_args()
    if args.replot:
        return replot(args.replot)
    sigterm_as_interrupt()
    try:
        measure_and_report(args)
    except KeyboardInterrupt:
        print(f"\n[scaling] interrupted; the points measured so far are in {args.out} "
              f"(--resume goes on from there)", file=sys.stderr)
        return 130


def measure_and_report(args):
    args.env_alone_steps_per_s = env_alone(args.step_ms)
    print(f"[scaling] the env alone: {args.env_alone_steps_per_s:,.1f} steps/s "
          f"({100 * args.env_alone_steps_per_s * args.step_ms / 1000:.1f}% of "
          f"{1000 / args.step_ms:g})", flush=True)
    if args.cluster:
        where = f"{args.cluster_nodes}-node loopback cluster ({args.cluster_cpus} CPUs per node)"
        with loopback_cluster(args.cluster_nodes, args.cluster_cpus) as address:
            points = run_grid(args, address, where)
    else:
        where = f"Ray cluster at {args.address}" if args.address else "local Ray instance"
        points = run_grid(args, args.address, where)
    table = write_results(args, points, where)
    plot(os.path.splitext(args.out)[0] + ".png", points, args.step_ms, where)
    print("\n" + table + f"\n\nWrote {args.out} and {os.path.splitext(args.out)[0]}.png")


if __name__ == "__main__":
    sys.exit(main())
