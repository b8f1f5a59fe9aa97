"""Soak test: bounded memory under load. One main.py run (by default SAC with 8 rollout workers
and a learner slower than they are) for --minutes, on a loopback Ray cluster this probe starts;
every --interval seconds it samples the RSS of every process of the run and the object store's
used bytes. Verdict per process: RSS growth from the end of the warm-up to the end, flagged when
above --threshold (10%).

    .venv/bin/python benchmarks/probe.py soak                         # 10 minutes, 8 workers, SAC
    .venv/bin/python benchmarks/probe.py soak --minutes 2 --interval 5 --warmup_minutes 1 --out /tmp/soak.json
    .venv/bin/python benchmarks/probe.py soak --flags "--model_name ppo --num_workers 8" --out benchmarks/results/soak-ppo.json
    .venv/bin/python benchmarks/probe.py soak --replot benchmarks/results/soak.json   # table + PNG only

The run: ``main.py <--flags> --config none --target_return none --total_steps 1000000000
--max_time <minutes x 60 + 60> --address <cluster> --run_dir <out without .json>/run`` from the repo
root. The default flags, SAC on Pendulum-v1 with 8 workers and one update per env step (held
both ways: the workers wait for the learner), and a replay buffer small enough to be full before the warm-up ends (its own growth is not a leak;
the verdict says whether it was full, from metrics.csv's replay_size).

The cluster: ``python -m ddrl.cluster start --head`` on a free port of 127.0.0.1 (token auth on),
plus --nodes - 1 more nodes, stopped at the end (also on Ctrl-C or an error); --address uses a
cluster already running on this machine instead. The processes of the run: main.py and its
descendants, and every process of the cluster (ddrl.cluster.cluster_processes: GCS, raylets,
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
import contextlib
import datetime
import os
import shlex
import signal
import subprocess
import sys
import time

from probes import HERE, REPO
from probes.procfs import memory_of, title_of
from probes.soak_report import flag_value, mb, report, replot, run_summary, verdicts

DEFAULT_FLAGS = ("--model_name sac --gym_id Pendulum-v1 --num_workers 8 --num_envs_per_worker 1 "
                 "--utd_ratio 1 --buffer_size 2000")


def add_args(p):
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
    p.add_argument("--nodes", type=int, default=1, help="nodes of the cluster this probe starts (default: 1)")
    p.add_argument("--node_cpus", type=int, default=os.cpu_count(),
                   help="--num-cpus of each node it starts (default: this machine's cores)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "soak.json"),
                   help="results JSON; the PNG goes beside it, the run directory to <out without .json>/run")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="measure nothing: print the verdicts and redraw the PNG of an earlier results JSON")


def check_args(args):
    if args.warmup_minutes > args.minutes / 2:
        print(f"[soak] --warmup_minutes {args.warmup_minutes:g} is more than half of --minutes "
              f"{args.minutes:g}: using {args.minutes / 2:g}", file=sys.stderr)
        args.warmup_minutes = args.minutes / 2
    return args


# -- sampling -----------------------------------------------------------------------------------
def run_pids(main_pid, port):
    """main.py, its descendants, and every process of the cluster (not this script)."""
    from ddrl.cluster import cluster_processes, descendants, process_table
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
    from compare import end_process_group
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


# -- the probe ----------------------------------------------------------------------------------
def run(args, argv):
    args = check_args(args)
    if args.replot:
        return replot(args.replot)
    from compare import machine_info
    from scaling import git_commit, loopback_cluster, repo_relative, sigterm_as_interrupt
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
        main_py = main_argv(args, address, run_dir)
        print(f"[soak] {shlex.join(main_py)}", flush=True)
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
    data = dict(harness_cmd=shlex.join([sys.executable, "benchmarks/probe.py", *argv]),
                cmd=shlex.join(main_py), returncode=rc,
                address=address if args.address else f"own {args.nodes}-node loopback cluster",
                run_dir=repo_relative(run_dir), minutes=args.minutes, interval=args.interval,
                warmup_minutes=args.warmup_minutes, threshold=args.threshold, date=started,
                load_before=list(load), commit=git_commit(), machine=machine_info(),
                run=run_summary(run_dir, t_warm, int(buffer_size) if buffer_size else None),
                processes=procs, total=total, object_store=store, samples=samples, interrupted=interrupted)
    report(args.out, data)
    return 130 if interrupted else 0
