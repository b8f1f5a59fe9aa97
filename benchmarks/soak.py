"""Soak test: bounded memory under load. One main.py run (by default SAC with 8 rollout workers
and a learner slower than they are) for --minutes, on a loopback Ray cluster this script starts;
every --interval seconds it samples the RSS of every process of the run and the object store's
used bytes. Verdict per process: RSS growth from the end of the warm-up to the end, flagged when
above --threshold (10%).

    .venv/bin/python benchmarks/soak.py                                 # 10 minutes, 8 workers, SAC
    .venv/bin/python benchmarks/soak.py --minutes 2 --interval 5 --warmup_minutes 1 --out /tmp/soak.json
    .venv/bin/python benchmarks/soak.py --flags "--model_name ppo --num_workers 8" --out benchmarks/results/soak-ppo.json
    .venv/bin/python benchmarks/soak.py --replot benchmarks/results/soak.json   # table + PNG only

The run: ``main.py <--flags> --config none --target_return none --total_steps 1000000000
--max_time <minutes x 60 + 60> --address <cluster> --run_dir <out without .json>/run`` from the repo
root. The default flags, SAC on Pendulum-v1 with 8 workers and one update per env step (held
both ways: the workers wait for the learner, which makes ~50-85 updates/s on 2 cores), and a
replay buffer small enough to be full before the warm-up ends (its own growth is not a leak;
the verdict says whether it was full, from metrics.csv's replay_size).

The cluster: ``python -m core.cluster start --head`` on a free port of 127.0.0.1 (token auth on),
plus --nodes - 1 more nodes, stopped at the end (also on Ctrl-C or an error); --address uses a
cluster already running on this machine instead. The processes of the run: main.py and its
descendants, and every process of the cluster (core.cluster.cluster_processes: GCS, raylets,
agents, and the Ray workers under the raylets, titled ray::RolloutWorker, ray::ReplayBuffer,
ray::ParameterServer, ...). RSS is VmRSS of /proc/PID/status (RssAnon and RssShmem beside it:
a worker's RSS includes the object-store pages it maps). A process is named by its title (argv[0]
of /proc/PID/cmdline; ray::X.method as ray::X; the script's name for python processes) and pid.
The object store: used bytes over the whole cluster, from a raylet's FormatGlobalMemoryInfo
reply (what ``ray memory --stats-only`` prints), asked from this process without joining as a
driver.

Verdict: for a process alive at the end of the warm-up and at the end, growth = median of the
last 3 samples / median of the first 3 samples at or after --warmup_minutes - 1; the same for
the sum over all processes and for the object store (flagged only above 1 MB of growth too).

Writes --out (default benchmarks/results/soak.json: every sample, the verdicts, the command,
commit, machine) and the PNG beside it (RSS per process and object store bytes against time),
and prints the verdict table. main.py's stdout/stderr go to <run_dir>/stdout.log, stderr.log.
"""
import argparse
import contextlib
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (REPO, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from compare import end_process_group, machine_info  # noqa: E402
from core.cluster import cluster_processes, descendants, process_table  # noqa: E402
from scaling import git_commit, loopback_cluster, read_rows, repo_relative, sigterm_as_interrupt  # noqa: E402

DEFAULT_FLAGS = ("--model_name sac --gym_id Pendulum-v1 --num_workers 8 --num_envs_per_worker 1 "
                 "--utd_ratio 1 --buffer_size 2000")
ENDS = 3  # samples whose median is taken at the end of the warm-up and at the end


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="length of the soak (default: 10)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default: 10)")
    p.add_argument("--warmup_minutes", type=float, default=2.0,
                   help="growth is measured from this point on (default: 2; at most half of --minutes)")
    p.add_argument("--threshold", type=float, default=0.10,
                   help="RSS growth above this fraction is flagged (default: 0.10)")
    p.add_argument("--flags", default=DEFAULT_FLAGS, help=f"main.py flags of the run (default: {DEFAULT_FLAGS!r})")
    p.add_argument("--extra", default="", help="flags appended to --flags (they win)")
    p.add_argument("--address", default=None,
                   help="use this Ray cluster (HOST:PORT, its head on this machine) instead of starting one")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the cluster this script starts (default: 1)")
    p.add_argument("--node_cpus", type=int, default=os.cpu_count(),
                   help="--num-cpus of each node it starts (default: this machine's cores)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "soak.json"),
                   help="results JSON; the PNG goes beside it, the run directory to <out without .json>/run")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="measure nothing: print the verdicts and redraw the PNG of an earlier results JSON")
    args = p.parse_args()
    if args.warmup_minutes > args.minutes / 2:
        print(f"[soak] --warmup_minutes {args.warmup_minutes:g} is more than half of --minutes "
              f"{args.minutes:g}: using {args.minutes / 2:g}", file=sys.stderr)
        args.warmup_minutes = args.minutes / 2
    return args


# -- sampling -----------------------------------------------------------------------------------
def title_of(pid):
    """argv[0] of the process, shortened: ray::X.method -> ray::X, a python script -> its name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    first = argv[0].split()[0] if argv[0].strip() else argv[0]
    if first.startswith("ray::"):
        return first.split(".")[0].rstrip("()")
    base = os.path.basename(first)
    if base.startswith("python"):
        script = next((os.path.basename(a) for a in argv[1:] if a.endswith(".py")), None)
        if script:
            return script
        if "-m" in argv[:-1]:
            return "python -m " + argv[argv.index("-m") + 1]
    return base


def memory_of(pid):
    """{rss, anon, shmem} in bytes from /proc/PID/status, or None when the process is gone."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssShmem:": "shmem"}
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in fields:
                    found[fields[parts[0]]] = int(parts[1]) * 1024  # kB
    except (OSError, ValueError):
        return None
    return found if "rss" in found else None


def run_pids(main_pid, port):
    """main.py, its descendants, and every process of the cluster (not this script)."""
    table = process_table()
    pids = {main_pid} | descendants({main_pid}, table) | set(cluster_processes(port, table))
    return sorted(pids - {os.getpid()})


class ObjectStore:
    """Used bytes of the cluster's object store, asked from a raylet as ``ray memory
    --stats-only`` does (no driver joins for it)."""

    def __init__(self, address):
        from core.distributed import loopback
        loopback.prepare()  # token auth on, 127.0.0.1
        from ray._private.internal_api import get_state_from_address
        self.state = get_state_from_address(address)

    def sample(self):
        from ray._private.internal_api import get_memory_info_reply
        try:
            s = get_memory_info_reply(self.state, timeout_seconds=10).store_stats
        except Exception as e:  # noqa: BLE001 - a missed sample is recorded, not fatal
            return dict(error=str(e).splitlines()[0][:200])
        return dict(used=s.object_store_bytes_used, avail=s.object_store_bytes_avail,
                    objects=s.num_local_objects, fallback=s.object_store_bytes_fallback,
                    spilled_total=s.spilled_bytes_total)


def take_sample(t, main_pid, port, store):
    procs = {}
    for pid in run_pids(main_pid, port):
        mem, title = memory_of(pid), title_of(pid)
        if mem is not None and title is not None:
            procs[str(pid)] = dict(title=title, **mem)
    return dict(t=t, processes=procs, object_store=store.sample())


# -- the run ------------------------------------------------------------------------------------
def main_argv(args, address, run_dir):
    fixed = (f"--config none --target_return none --total_steps 1000000000 "
             f"--max_time {args.minutes * 60 + 60:g} --address {address} --run_dir {run_dir}")
    return [sys.executable, "main.py"] + shlex.split(f"{args.flags} {fixed} {args.extra}")


def stop_group(proc, grace_s=120):
    """Stop main.py as Ctrl-C does (the round finishes, a checkpoint, exit 130), then end
    whatever is left of its process group."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    end_process_group(proc, grace_s=5.0)


def soak(args, address, run_dir, samples):
    """Run main.py, append a sample to ``samples`` every --interval until --minutes have passed
    since its start (or it ended), then stop it (SIGINT). Returns main.py's exit code."""
    port = int(address.rsplit(":", 1)[1])
    store = ObjectStore(address)
    argv = main_argv(args, address, run_dir)
    with open(os.path.join(run_dir, "stdout.log"), "w") as out, \
            open(os.path.join(run_dir, "stderr.log"), "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
        t0 = time.time()
        try:
            while proc.poll() is None and time.time() - t0 < args.minutes * 60:
                samples.append(take_sample(time.time() - t0, proc.pid, port, store))
                last = samples[-1]
                print(f"[soak] {last['t']:6.0f} s: {len(last['processes'])} processes, "
                      f"RSS {sum(p['rss'] for p in last['processes'].values()) / 2**20:,.0f} MB, "
                      f"object store {mb(last['object_store'].get('used'))} MB", flush=True)
                time.sleep(max(0.0, args.interval - (time.time() - t0 - last["t"])))
        finally:
            stop_group(proc)
    return proc.returncode


def mb(x):
    return "-" if x is None else f"{x / 2**20:,.1f}"


# -- verdicts -----------------------------------------------------------------------------------
def growth(series, t_warm):
    """Median of the first ENDS values at or after t_warm, median of the last ENDS values, and
    their ratio - 1; None when the series does not cover both ends."""
    after = [(t, v) for t, v in series if t >= t_warm]
    if len(after) < 2:
        return None
    k = min(ENDS, len(after) // 2)
    base = statistics.median(v for _, v in after[:k])
    end = statistics.median(v for _, v in after[-k:])
    return dict(base=base, end=end, max=max(v for _, v in after),
                growth=(end - base) / base if base else None)


def verdicts(samples, t_warm, threshold):
    """Per process (alive at the warm-up's end and at the end), the total and the object store."""
    t_end = samples[-1]["t"] if samples else 0.0
    first_after = next((s["t"] for s in samples if s["t"] >= t_warm), None)
    pids = sorted({pid for s in samples for pid in s["processes"]}, key=int)
    procs = []
    for pid in pids:
        seen = [(s["t"], s["processes"][pid]) for s in samples if pid in s["processes"]]
        titles = [p["title"] for _, p in seen if p["title"] != "ray::IDLE"] or ["ray::IDLE"]
        rec = dict(pid=int(pid), name=f"{titles[-1]} {pid}", first_s=seen[0][0], last_s=seen[-1][0])
        if seen[0][0] > (first_after if first_after is not None else t_end) or seen[-1][0] < t_end:
            rec["status"] = "started after the warm-up" if seen[-1][0] >= t_end else "ended before the end"
        else:
            rec.update(rss=growth([(t, p["rss"]) for t, p in seen], t_warm),
                       anon=growth([(t, p.get("anon", 0)) for t, p in seen], t_warm))
            g = rec["rss"] and rec["rss"]["growth"]
            rec["status"] = "no samples after the warm-up" if g is None else (
                "GROWS" if g > threshold else "flat")
        procs.append(rec)
    total = growth([(s["t"], sum(p["rss"] for p in s["processes"].values())) for s in samples], t_warm)
    store = growth([(s["t"], s["object_store"]["used"]) for s in samples
                    if "used" in s["object_store"]], t_warm)
    if store:  # a few hundred kB of weights coming and going are no leak
        store["flagged"] = bool(store["growth"] is not None and store["growth"] > threshold
                                and store["end"] - store["base"] > 2**20)
    return procs, total, store


def run_summary(run_dir, t_warm, buffer_size):
    """What the run did after the warm-up (metrics.csv): env steps/s, updates/s, and whether the
    replay buffer was full at the warm-up's end."""
    rows = [r for r in read_rows(run_dir) if r.get("wall_time_s") is not None]
    after = [r for r in rows if r["wall_time_s"] >= t_warm]
    out = dict(rows=len(rows))
    if len(after) >= 2:
        span = after[-1]["wall_time_s"] - after[0]["wall_time_s"]
        out["steps_per_s"] = (after[-1]["env_steps"] - after[0]["env_steps"]) / span if span else None
        if after[0].get("updates") is not None and after[-1].get("updates") is not None:
            out["updates_per_s"] = (after[-1]["updates"] - after[0]["updates"]) / span if span else None
        out["workers"] = after[-1].get("workers")
    if after and after[0].get("replay_size") is not None:
        out["replay_size_at_warmup_end"] = after[0]["replay_size"]
        out["buffer_size"] = buffer_size
        out["buffer_full_at_warmup_end"] = buffer_size is not None and after[0]["replay_size"] >= buffer_size
    return out


def flag_value(flags, name):
    words = shlex.split(flags)
    found = [words[i + 1] for i, w in enumerate(words[:-1]) if w == name]
    return found[-1] if found else None


def markdown(data):
    procs, total, store = data["processes"], data["total"], data["object_store"]
    pct = lambda g: "-" if not g or g.get("growth") is None else f"{100 * g['growth']:+.1f}%"  # noqa: E731
    lines = [f"Soak: {data['minutes']:g} min, a sample every {data['interval']:g} s, growth from "
             f"{data['warmup_minutes']:g} min to the end (median of {ENDS} samples at each end), "
             f"flagged above {100 * data['threshold']:.0f}%.", "",
             "| process | RSS at warm-up end (MB) | at the end (MB) | max (MB) | growth | anon growth | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for p in procs:
        r = p.get("rss")
        if r:
            lines.append(f"| {p['name']} | {mb(r['base'])} | {mb(r['end'])} | {mb(r['max'])} | {pct(r)} | "
                         f"{pct(p.get('anon'))} | {p['status']} |")
        else:
            lines.append(f"| {p['name']} | | | | | | {p['status']} ({p['first_s']:.0f}-{p['last_s']:.0f} s) |")
    if total:
        lines.append(f"| **all processes** | {mb(total['base'])} | {mb(total['end'])} | {mb(total['max'])} | "
                     f"{pct(total)} | | |")
    if store:
        lines.append(f"| **object store (used)** | {mb(store['base'])} | {mb(store['end'])} | {mb(store['max'])} | "
                     f"{pct(store)} | | {'GROWS' if store['flagged'] else 'bounded'} |")
    grows = [p["name"] for p in procs if p["status"] == "GROWS"]
    lines += ["", f"Run after the warm-up: {json.dumps(data['run'])}",
              "Verdict: " + (f"{len(grows)} process(es) grew by more than {100 * data['threshold']:.0f}%: "
                             + ", ".join(grows) if grows else "every process's RSS flat")
              + ("; object store grows." if store and store["flagged"] else "; object store bounded.")]
    return "\n".join(lines)


def plot(path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = data["samples"]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(14, 8), sharex=True, gridspec_kw=dict(height_ratios=[3, 1]))
    names = {str(p["pid"]): p["name"] for p in data["processes"]}
    colours = plt.get_cmap("tab20").colors
    for i, (pid, name) in enumerate(names.items()):
        pts = [(s["t"] / 60, s["processes"][pid]["rss"] / 2**20) for s in samples if pid in s["processes"]]
        ax.plot(*zip(*pts), lw=1, color=colours[i % 20], ls="-" if i < 20 else "--", label=name)
    t_warm = data["warmup_minutes"]
    for a in (ax, ax2):
        a.axvline(t_warm, color="k", ls="--", lw=1)
    ax.set(ylabel="RSS (MB)", title="Soak: RSS of every process of the run (warm-up ends at the dashed line)")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    pts = [(s["t"] / 60, s["object_store"]["used"] / 2**20) for s in samples if "used" in s["object_store"]]
    if pts:
        ax2.plot(*zip(*pts), color="C3")
    ax2.set(xlabel="minutes since main.py started", ylabel="object store used (MB)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")


def report(args_out, data):
    os.makedirs(os.path.dirname(os.path.abspath(args_out)), exist_ok=True)
    data["markdown"] = markdown(data)
    with open(args_out, "w") as f:
        json.dump(data, f, indent=1)
    plot(os.path.splitext(args_out)[0] + ".png", data)
    print("\n" + data["markdown"] + f"\n\nWrote {args_out} and {os.path.splitext(args_out)[0]}.png")


def replot(path):
    with open(path) as f:
        data = json.load(f)
    plot(os.path.splitext(path)[0] + ".png", data)
    print(markdown(data))


# -- main ---------------------------------------------------------------------------------------
def main():
    args = parse_args()
    if args.replot:
        return replot(args.replot)
    sigterm_as_interrupt()
    run_dir = os.path.join(os.path.splitext(args.out)[0], "run")
    subprocess.run(["rm", "-rf", run_dir], check=True)
    os.makedirs(run_dir)
    load = os.getloadavg()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    cluster = (contextlib.nullcontext(args.address) if args.address
               else loopback_cluster(args.nodes, args.node_cpus))
    samples, rc, interrupted = [], None, False
    with cluster as address:
        argv = main_argv(args, address, run_dir)
        print(f"[soak] {shlex.join(argv)}", flush=True)
        try:
            rc = soak(args, address, run_dir, samples)
        except KeyboardInterrupt:
            print("[soak] interrupted: reporting the samples taken so far", file=sys.stderr)
            interrupted = True
    if not samples:
        return 130 if interrupted else 1
    t_warm = args.warmup_minutes * 60
    procs, total, store = verdicts(samples, t_warm, args.threshold)
    buffer_size = flag_value(f"{args.flags} {args.extra}", "--buffer_size")
    data = dict(harness_cmd=shlex.join([sys.executable] + sys.argv), cmd=shlex.join(argv), returncode=rc,
                address=address if args.address else f"own {args.nodes}-node loopback cluster",
                run_dir=repo_relative(run_dir), minutes=args.minutes, interval=args.interval,
                warmup_minutes=args.warmup_minutes, threshold=args.threshold, date=started,
                load_before=list(load), commit=git_commit(), machine=machine_info(),
                run=run_summary(run_dir, t_warm, int(buffer_size) if buffer_size else None),
                processes=procs, total=total, object_store=store, samples=samples, interrupted=interrupted)
    report(args.out, data)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
