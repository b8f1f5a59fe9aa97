"""Where the cores go in a SAC run: the CPU time of every process of one main.py run over a
steady-state window, the machine's idle time, and what the parameter server (which computes the
updates with one learner) and the driver spend their time on, sampled with py-spy.

    .venv/bin/python benchmarks/probe.py profile-sac --out benchmarks/results/profile-lunar-sac.json
    .venv/bin/python benchmarks/probe.py profile-sac --flags "--num_workers 0" --out /tmp/profile0.json

The run: ``main.py --env_name gym_env --model_name sac --gym_id LunarLanderContinuous-v3 --seed 0
--target_return none --eval_interval 1000000 --max_time <budget> <--flags>`` (the preset
configs/sac-LunarLanderContinuous-v3.yaml applies: 2 workers, 256x256, 10k warm-up steps). Once
its metrics.csv shows --skip_updates updates (the warm-up is over and the loop is steady), for
--seconds:

- every process of the run (main.py and everything under it: Ray's GCS, raylet, agents, the
  actors, titled ray::ParameterServer, ray::RolloutWorker, ...): CPU seconds (utime + stime of
  /proc/PID/stat) over the window, as cores used;
- the machine: busy, idle and stolen time from /proc/stat;
- py-spy (``record --format raw``, running threads only, 100 Hz) on the parameter server and on
  the driver: each sample's stack is put in the first category whose frame it contains
  (CATEGORIES below), as a share of that process's CPU.

py-spy's own sampling costs a few % of a core; it is a separate process and shows up in the
machine's busy time, not in the run's processes. Needs py-spy (benchmarks/requirements.txt).
"""
import collections
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from probes import REPO, command
from probes.procfs import cpu_seconds, machine_times, title_of

#: (category, substrings of a frame "function (file:line)"); the first that matches a sample wins
CATEGORIES = [
    ("update: losses, forward and backward", ["losses_and_gradients", "step (models/"]),
    ("update: optimizer step and target averaging", ["apply (core/learning/learner.py"]),
    ("weights out (get_weights, state)", ["get_weights", "state (core/learning/parameter_server.py"]),
    ("priorities to the buffer", ["_send_priorities", "update_priorities"]),
    ("Ray: (de)serializing arguments and results", ["serializ", "pickle"]),
    ("driver: loop bookkeeping and metrics", ["book_", "metrics_row", "write_row", "log_row"]),
    ("driver: waiting on Ray (ray.wait / ray.get)", ["wait (ray/", "get (ray/", "get_objects"]),
    ("Ray: task execution and event loop", ["ray/_private", "ray/actor", "_raylet"]),
]


def py_spy():
    """py-spy on PATH or beside this interpreter (the venv's bin), or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.path.exists(beside) else None)


def run_processes(main_pid):
    from ddrl.cluster import descendants, process_table
    table = process_table()
    return {pid: title_of(pid) for pid in {main_pid} | descendants({main_pid}, table)}


def wait_for_updates(run_dir, proc, updates, timeout):
    from scaling import read_rows
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"main.py ended (code {proc.returncode}) before the window; see "
                             f"{run_dir}/stderr.log")
        rows = read_rows(run_dir)
        if rows and (rows[-1].get("updates") or 0) >= updates:
            return rows[-1]
        time.sleep(2)
    raise SystemExit(f"no {updates} updates within {timeout:.0f} s")


def classify(raw_path):
    """{category: samples} from py-spy's raw output (one 'frame;frame;... count' per line)."""
    counts = collections.Counter()
    try:
        with open(raw_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        category = next((name for name, keys in CATEGORIES if any(k in stack for k in keys)),
                        "other Python")
        counts[category] += int(n)
    return dict(counts)


def main_command(args, run_dir):
    """main.py's argv: the SAC run, long enough for the skipped updates and the window."""
    budget = args.skip_timeout + args.seconds + 60
    return [sys.executable, "main.py", "--env_name", "gym_env", "--model_name", "sac",
            "--gym_id", args.gym_id, "--seed", "0", "--target_return", "none",
            "--eval_interval", "1000000", "--max_time", str(budget), "--no-tensorboard",
            "--run_dir", run_dir, *shlex.split(args.flags)]


def profile(args, probe_argv):
    from compare import end_process_group, machine_info
    from scaling import git_commit, repo_relative
    run_dir = os.path.abspath(args.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    argv = main_command(args, run_dir)
    with open(os.path.join(run_dir, "stdout.log"), "w") as out, \
            open(os.path.join(run_dir, "stderr.log"), "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
    try:
        start_row = wait_for_updates(run_dir, proc, args.skip_updates, args.skip_timeout)
        procs = run_processes(proc.pid)
        server = [pid for pid, title in procs.items() if title == "ray::ParameterServer"]
        spies = {}
        for label, pid in [("parameter server", server[0] if server else None),
                           ("driver (main.py)", proc.pid)]:
            if pid is None:
                continue
            raw = os.path.join(run_dir, f"py-spy-{pid}.txt")
            spies[label] = (pid, raw, subprocess.Popen(
                [py_spy(), "record", "--format", "raw", "--rate", "100", "--duration",
                 str(int(args.seconds)), "--pid", str(pid), "--output", raw, "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        before = {pid: cpu_seconds(pid) for pid in procs}
        machine_before, t0 = machine_times(), time.time()
        time.sleep(args.seconds)
        after = {pid: cpu_seconds(pid) for pid in procs}
        machine_after, wall = machine_times(), time.time() - t0
        end_row = newer_row(run_dir, proc, start_row, args.skip_timeout)
        for _, _, spy in spies.values():
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
    finally:
        end_process_group(proc)

    by_title = collections.defaultdict(lambda: dict(cpu_s=0.0, processes=0))
    for pid, title in procs.items():
        if before.get(pid) is None or after.get(pid) is None:
            continue
        by_title[title]["cpu_s"] += after[pid] - before[pid]
        by_title[title]["processes"] += 1
    processes = sorted(({"title": t, "cores": v["cpu_s"] / wall, "processes": v["processes"]}
                        for t, v in by_title.items()), key=lambda r: -r["cores"])
    machine = {k: (machine_after[k] - machine_before[k]) / wall for k in machine_after}
    breakdown = {}
    for label, (pid, raw, spy) in spies.items():
        counts = classify(raw)
        total = sum(counts.values())
        cores = (after.get(pid) or 0) - (before.get(pid) or 0)
        breakdown[label] = dict(
            pid=pid, samples=total, cpu_cores=cores / wall,
            shares={k: v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
            if total else {}, py_spy_error=(spy.stderr.read().decode()[-500:]
                                            if spy.returncode else None))
    updates = (end_row.get("updates") or 0) - (start_row.get("updates") or 0)
    steps = (end_row.get("env_steps") or 0) - (start_row.get("env_steps") or 0)
    span = (end_row.get("wall_time_s") or 0) - (start_row.get("wall_time_s") or 0)
    return dict(
        command=command(probe_argv),
        run_argv=shlex.join(argv[1:]), run_dir=repo_relative(run_dir),
        started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        commit=git_commit(), machine=machine_info(), nproc=os.cpu_count(), window_s=wall,
        updates_per_s=updates / span if span > 0 else None,
        env_steps_per_s=steps / span if span > 0 else None,
        machine_cores=machine, processes=processes, breakdown=breakdown)


def newer_row(run_dir, proc, start_row, timeout):
    """The newest metrics row, once one newer than ``start_row`` is written: a busy machine may
    write none in a short window, and a rate needs two rows."""
    from scaling import read_rows
    deadline = time.time() + timeout
    while True:
        rows = read_rows(run_dir)
        row = rows[-1] if rows else start_row
        newer = (row.get("wall_time_s") or 0) > (start_row.get("wall_time_s") or 0)
        if newer or proc.poll() is not None or time.time() > deadline:
            return row
        time.sleep(0.2)


def markdown(d):
    lines = [f"{d['window_s']:.0f} s of steady state: {d['updates_per_s']:.1f} updates/s, "
             f"{d['env_steps_per_s']:.1f} env steps/s. Machine ({d['nproc']} cores): "
             f"{d['machine_cores']['busy']:.2f} cores busy, {d['machine_cores']['idle']:.2f} "
             f"idle, {d['machine_cores']['steal']:.2f} stolen.", "",
             "| process | cores used |", "| --- | ---: |"]
    for p in d["processes"]:
        if p["cores"] >= 0.005:
            n = f" (x{p['processes']})" if p["processes"] > 1 else ""
            lines.append(f"| {p['title']}{n} | {p['cores']:.2f} |")
    lines.append(f"| **all processes of the run** | {sum(p['cores'] for p in d['processes']):.2f} |")
    for label, b in d["breakdown"].items():
        lines += ["", f"{label}: {b['cpu_cores']:.2f} cores, by py-spy samples "
                      f"({b['samples']} samples)", "", "| spent on | share |", "| --- | ---: |"]
        lines += [f"| {k} | {100 * v:.0f}% |" for k, v in b["shares"].items()]
    lines += ["", f"Command: `.venv/bin/python {d['command']}`"]
    return "\n".join(lines)


def add_args(p):
    p.add_argument("--gym_id", default="LunarLanderContinuous-v3")
    p.add_argument("--flags", default="", help="more main.py flags (the preset's win otherwise)")
    p.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    p.add_argument("--skip_updates", type=int, default=2000,
                   help="updates made before the window starts (default: %(default)s)")
    p.add_argument("--skip_timeout", type=float, default=900.0)
    p.add_argument("--run_dir", default="/tmp/ddrl-profile-sac")
    p.add_argument("--out", default="benchmarks/results/profile-lunar-sac.json")
    p.add_argument("--replot", metavar="JSON", help="print the table of an earlier run")


def run(args, argv):
    if args.replot:
        with open(args.replot) as f:
            print(markdown(json.load(f)))
        return
    if py_spy() is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -r benchmarks/requirements.txt")
    from scaling import sigterm_as_interrupt
    sigterm_as_interrupt()
    data = profile(args, argv)
    data["markdown"] = markdown(data)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    print(data["markdown"] + f"\n\nWrote {args.out}")
