"""Sampling speed through the platform: env steps/s against envs per worker x fragment length.

    .venv/bin/python benchmarks/sampling.py --gym_id CartPole-v1

Every measurement calls ``core.sampling.rollout.RolloutWorker.collect``, the call the PPO trainer makes: one
batched PPOModel forward pass per step over all the worker's envs (actions, log-probs, values), the
envs stepped with auto-reset, then the agent's GAE over the fragment. Every round passes a new weights
version, so each collect also loads the weights, as in training. Configurations:

- ``local``: one RolloutWorker in this process (what ``--num_workers 0`` runs), called directly;
- ``ray-1``, ``ray-2``: 1 and 2 RolloutWorker Ray actors (num_cpus=1 each), collect called on all of
  them in parallel and one ray.get on the list;
- ``ray-1-env-actors``: 1 Ray worker with ``--env_placement actor`` (every env its own actor) and
  ``--actor_envs`` envs, beside ``ray-1`` with the same number of envs and ``--env_placement worker``;
- ``ray-1-env-host``: the same with ``--envs_per_actor`` = ``--actor_envs`` (one env actor hosting
  all the worker's envs, stepping them in one call).

Each cell (configuration, envs per worker E, fragment T) does one warm-up collect, then timed rounds
until ``--seconds`` of wall time and at least ``--min_rounds`` rounds; steps/s = env steps of all
workers / wall time of the timed rounds. Cells with E*T above ``--max_steps_per_round`` are skipped.
Actors are killed between configurations, so only the measured ones run. Ray is started once, before
the first pass (so the local cells run with an idle Ray beside them). The whole sequence runs
``--passes`` times, configurations alternating, and the tables give the median over the passes. Beside
them, in the same run, the raw gymnasium loop of benchmarks/raw_gym_sampling.py (random actions with 1
env, and a batched 64x64 policy over N envs) at the start of every pass and once at the end.

Contention check: the load average counts our own processes, so every cell also records the cores
used by the measured processes, by all other processes (Ray's daemons included) and stolen by the
hypervisor (/proc/stat), while it was timed.

Writes ``<out>.json`` (every cell of every pass, the medians, the raw loop, machine, load averages, the
exact command) and ``<out>.png`` (steps/s against env steps per collect per worker, log-log, median
with [min, max] bars, raw loop as reference lines), and prints markdown tables for BENCHMARKS.md.
``--replot <out>.json`` redraws the PNG and tables of an earlier run without measuring.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (REPO, HERE):  # the repo's packages, and the sibling benchmark scripts
    if path not in sys.path:
        sys.path.insert(0, path)

import ray  # noqa: E402
import torch  # noqa: E402

import raw_gym_sampling  # noqa: E402
from compare import machine_info  # noqa: E402
from core.distributed.placement import Placement, start_ray  # noqa: E402
from core.plugins import PluginSpec, load_plugins, make_env  # noqa: E402
from core.sampling.rollout import RolloutWorker  # noqa: E402
from options.options import parse_args  # noqa: E402

LABELS = {
    "local": "local worker in the driver (`--num_workers 0`)",
    "ray-1": "1 Ray worker",
    "ray-2": "2 Ray workers (steps of both)",
    "ray-1-env-actors": "1 Ray worker, `--env_placement actor`",
    "ray-1-env-host": "1 Ray worker, `--env_placement actor --envs_per_actor E`",
}


def platform_args(gym_id, num_workers, num_envs, rollout_steps, env_placement="worker", seed=0,
                  envs_per_actor=1):
    return parse_args(["--num_workers", str(num_workers), "--num_envs_per_worker", str(num_envs),
                       "--rollout_steps", str(rollout_steps), "--gym_id", gym_id, "--config", "none",
                       "--env_placement", env_placement, "--seed", str(seed),
                       "--envs_per_actor", str(envs_per_actor)])


def spec_of(args):
    return PluginSpec(args.env_name, args.model_name, args.agent_name, args, None)


def initial_weights(args):
    """The weights every worker acts with: a freshly initialised model (PPOModel by default)."""
    plugins = load_plugins(spec_of(args))
    env = make_env(plugins, args, seed=args.seed)
    model = plugins.model_cls(args, env.observation_space, env.action_space)
    getattr(env, "close", lambda: None)()
    return model.get_weights()


def machine_cpu_s():
    """(busy, stolen): CPU seconds the machine's cores have run anything (user, nice, system,
    irq, softirq), and seconds the hypervisor gave them to someone else (steal), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]] + [0] * 8
    tick = os.sysconf("SC_CLK_TCK")
    return sum(fields[i] for i in (0, 1, 2, 5, 6)) / tick, fields[7] / tick


def process_cpu_s(pids):
    """CPU seconds used so far by these processes (user + system)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


class Version:
    """A new weights version for every round: each collect loads the weights, as in training."""

    def __init__(self):
        self.value = 0

    def next(self):
        self.value += 1
        return self.value


def measure(placement, workers, weights, num_steps, version, seconds, min_rounds, pids):
    """One warm-up round, then timed rounds: collect on every worker in parallel, one get."""
    def one_round():
        refs = [w.collect.remote(weights, version.next(), num_steps) for w in workers]
        return placement.get(refs)

    one_round()
    load1 = os.getloadavg()[0]
    round_s, inside_s, steps = [], [], 0
    (busy0, steal0), ours0 = machine_cpu_s(), process_cpu_s(pids)
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        stats = one_round()
        round_s.append(time.perf_counter() - t0)
        steps += sum(s.env_steps for s in stats)
        inside_s.append(max(s.sample_time_s for s in stats))  # the slowest worker's own time
        elapsed = time.perf_counter() - start
        if len(round_s) >= min_rounds and elapsed >= seconds:
            break
    (busy, steal), ours = machine_cpu_s(), process_cpu_s(pids) - ours0
    busy, steal = busy - busy0, steal - steal0
    per_round = steps / len(round_s)
    rates = sorted(per_round / r for r in round_s)
    return dict(rounds=len(round_s), env_steps=steps, elapsed_s=elapsed, steps_per_s=steps / elapsed,
                round_steps_per_s=dict(median=statistics.median(rates), min=rates[0], max=rates[-1]),
                # time inside collect (slowest worker) against the round's wall time: the rest is
                # the call itself (Ray task submission, argument and result transfer, ray.get)
                collect_s_mean=statistics.fmean(inside_s), round_s_mean=statistics.fmean(round_s),
                overhead_ms_per_round=1e3 * (statistics.fmean(round_s) - statistics.fmean(inside_s)),
                load1_at_start=load1,
                # cores kept busy while timing: by the measured processes (driver, workers, env
                # actors), and by everything else (Ray's daemons, and other users' work: the
                # contention check, since the load average counts our own processes too)
                cores_used_by_measured=ours / elapsed,
                cores_used_by_others=max(0.0, busy - ours) / elapsed,
                cores_stolen=steal / elapsed)  # taken by the hypervisor (this is a VM)


def run_config(name, opts, num_workers, num_envs, env_placement, steps_grid, weights, version, cells,
               envs_per_actor=1):
    """Spawn the workers of one configuration, measure every fragment length, kill them."""
    local = num_workers == 0
    placement = Placement(local=local)
    args = platform_args(opts.gym_id, num_workers, num_envs, steps_grid[0], env_placement, opts.seed,
                         envs_per_actor)
    spec = spec_of(args)
    t0 = time.perf_counter()
    workers = [placement.spawn(RolloutWorker, spec, i, num_cpus=1) for i in range(max(1, num_workers))]
    placement.get([w.spaces.remote() for w in workers])  # constructed and reset
    spawn_s = time.perf_counter() - t0
    shared = placement.share(weights)
    pids = [os.getpid()]
    if not local:
        pids += ray.get([w.__ray_call__.remote(lambda self: os.getpid()) for w in workers])
        if env_placement == "actor":
            pids += sum(ray.get([w.__ray_call__.remote(lambda self: ray.get(
                [h.__ray_call__.remote(lambda host: os.getpid()) for h in self.envs.hosts]))
                for w in workers]), [])
    print(f"[{name}] {num_envs} envs/worker, placement {env_placement}: ready in {spawn_s:.2f} s",
          flush=True)
    for steps in steps_grid:
        cell = dict(config=name, label=LABELS[name], num_workers=num_workers,
                    workers=len(workers), env_placement=env_placement,
                    num_envs_per_worker=num_envs, rollout_steps=steps,
                    steps_per_round_per_worker=num_envs * steps, spawn_s=spawn_s)
        if num_envs * steps > opts.max_steps_per_round:
            cell["skipped"] = f"E*T = {num_envs * steps} > --max_steps_per_round"
            cells.append(cell)
            continue
        cell.update(measure(placement, workers, shared, steps, version, opts.seconds,
                            opts.min_rounds, pids))
        print(f"    T={steps:>5}: {cell['steps_per_s']:>10,.0f} steps/s  ({cell['rounds']} rounds, "
              f"call overhead {cell['overhead_ms_per_round']:.2f} ms/round, cores used "
              f"{cell['cores_used_by_measured']:.2f}, by others "
              f"{cell['cores_used_by_others']:.2f}, stolen {cell['cores_stolen']:.2f})", flush=True)
        cells.append(cell)
    if not local:
        placement.get([w.close.remote() for w in workers])  # env actors go first
        for w in workers:
            ray.kill(w)
        time.sleep(opts.settle)  # let the killed processes exit before the next configuration
    else:
        for w in workers:
            w.obj.close()


def call_overhead(opts, weights, seconds):
    """Cost of one collect of 1 step with 1 env in this process, with a new weights version every
    call (weights loaded, as in training) and with the same version (load skipped)."""
    args = platform_args(opts.gym_id, 0, 1, 1, seed=opts.seed)
    worker = RolloutWorker(spec_of(args), 0)
    out = {}
    for key, new in (("new_weights_every_call_us", True), ("same_weights_us", False)):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(100):
                calls += 1
                worker.collect(weights, 1_000_000 + calls if new else 1, 1)
        out[key] = 1e6 * (time.perf_counter() - start) / calls
    worker.close()
    print(f"[local collect of 1 step, 1 env] {out['new_weights_every_call_us']:.0f} us with new "
          f"weights, {out['same_weights_us']:.0f} us without loading them", flush=True)
    return out


def raw_loop(opts):
    (busy0, steal0), ours0 = machine_cpu_s(), process_cpu_s([os.getpid()])
    start = time.perf_counter()
    out = dict(random_actions_1env=raw_gym_sampling.random_actions(opts.gym_id, opts.raw_seconds,
                                                                   opts.seed),
               policy={})
    for n in opts.num_envs:
        out["policy"][str(n)] = raw_gym_sampling.policy_actions(opts.gym_id, n, opts.raw_seconds,
                                                                opts.seed)
    elapsed = time.perf_counter() - start
    busy, steal = machine_cpu_s()
    out["cores_used_by_others"] = max(0.0, busy - busy0
                                      - (process_cpu_s([os.getpid()]) - ours0)) / elapsed
    out["cores_stolen"] = (steal - steal0) / elapsed
    print(f"[raw gymnasium loop] random 1 env {out['random_actions_1env']:,.0f} steps/s; policy "
          + ", ".join(f"{n} envs {v:,.0f}" for n, v in out["policy"].items())
          + f" (cores used by others {out['cores_used_by_others']:.2f}, stolen "
            f"{out['cores_stolen']:.2f})", flush=True)
    return out


def wait_for_load(limit, max_wait):
    """Wait (up to max_wait s) for the 1-minute load average to drop to ``limit``."""
    start = time.time()
    load = os.getloadavg()
    while load[0] > limit and time.time() - start < max_wait:
        print(f"load average {load[0]:.2f} > {limit}: waiting ({time.time() - start:.0f} s)",
              flush=True)
        time.sleep(15)
        load = os.getloadavg()
    return dict(loadavg_before=list(load), waited_s=time.time() - start)


def kfmt(x):
    if x is None:
        return "—"
    return f"{x / 1e3:,.1f}k" if x >= 1e3 else f"{x:,.0f}"


def spread(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def summarize(result):
    """Median and spread over the passes: every platform cell, and every raw-loop case."""
    groups = {}
    for c in result["cells"]:
        if "steps_per_s" in c:
            key = (c["config"], c["env_placement"], c["num_envs_per_worker"], c["rollout_steps"])
            groups.setdefault(key, []).append(c)
    cells = []
    for (cfg, placement, e, t), cs in groups.items():
        cells.append(dict(config=cfg, env_placement=placement, num_envs_per_worker=e,
                          rollout_steps=t, steps_per_round_per_worker=e * t,
                          steps_per_s=spread([c["steps_per_s"] for c in cs]),
                          overhead_ms_per_round=statistics.median(
                              c["overhead_ms_per_round"] for c in cs),
                          cores_used_by_others_max=max(c["cores_used_by_others"] for c in cs),
                          cores_stolen_max=max(c["cores_stolen"] for c in cs)))
    raws = result["raw"]
    raw = dict(random_actions_1env=spread([r["random_actions_1env"] for r in raws]),
               policy={n: spread([r["policy"][n] for r in raws]) for n in raws[0]["policy"]})
    return dict(cells=cells, raw=raw)


def find(summary, cfg, e, t):
    placement = "actor" if cfg.startswith("ray-1-env-") else "worker"
    return next((c for c in summary["cells"] if (c["config"], c["env_placement"],
                 c["num_envs_per_worker"], c["rollout_steps"]) == (cfg, placement, e, t)), None)


def median_of(cell):
    return cell["steps_per_s"]["median"] if cell else None


def markdown(result, opts):
    summary = result["summary"]
    passes = opts.passes
    cols = [(e, t) for e in opts.num_envs for t in opts.rollout_steps]
    lines = [f"Env steps/s sampled through the platform on {opts.gym_id}, PPO policy inference and "
             f"GAE included, median of {passes} passes. Columns are envs per worker × fragment "
             f"length (steps per env per collect). — means not measured (E×T above "
             f"{opts.max_steps_per_round:,}).", "",
             "| configuration | " + " | ".join(f"{e}×{t}" for e, t in cols) + " |",
             "| --- |" + " ---: |" * len(cols)]
    for cfg in [c for c in ("local", "ray-1", "ray-2") if c in result["configs"]]:
        lines.append(f"| {LABELS[cfg]} | "
                     + " | ".join(kfmt(median_of(find(summary, cfg, e, t))) for e, t in cols) + " |")
    raw = summary["raw"]
    lines.append("| raw gymnasium loop, batched 64×64 policy (no fragments) | " + " | ".join(
        kfmt(raw["policy"][str(e)]["median"]) if str(e) in raw["policy"] else "—"
        for e, _t in cols) + " |")
    if opts.actor_envs and "ray-1-env-actors" in result["configs"]:
        e, ts = opts.actor_envs, opts.actor_rollout_steps
        lines += ["", f"Env placement, 1 Ray worker with {e} envs:", "",
                  "| env placement | " + " | ".join(f"{e}×{t}" for t in ts) + " |",
                  "| --- |" + " ---: |" * len(ts)]
        for cfg, label in (("ray-1", "`worker` (envs inside the worker, the default)"),
                           ("ray-1-env-actors", "`actor` (one actor per env)"),
                           ("ray-1-env-host", f"`actor --envs_per_actor {e}` (one actor hosting all)")):
            if cfg not in result["configs"]:
                continue
            lines.append(f"| {label} | "
                         + " | ".join(kfmt(median_of(find(summary, cfg, e, t))) for t in ts) + " |")
    rnd = raw["random_actions_1env"]
    lines += ["", f"Raw gymnasium loop in the same run ({len(result['raw'])} times, median [min, max]): "
                  f"random actions with 1 env {kfmt(rnd['median'])} [{kfmt(rnd['min'])}, "
                  f"{kfmt(rnd['max'])}]; batched policy "
                  + ", ".join(f"{n} env{'s' if int(n) > 1 else ''} {kfmt(v['median'])} "
                              f"[{kfmt(v['min'])}, {kfmt(v['max'])}]"
                              for n, v in raw["policy"].items()) + " steps/s."]
    oh = result.get("local_collect_1step_1env")
    if oh:
        lines += ["", f"One local collect of 1 step with 1 env takes "
                      f"{oh['new_weights_every_call_us']:,.0f} us when it loads new weights (as every "
                      f"round here and every training iteration does), and "
                      f"{oh['same_weights_us']:,.0f} us when it does not."]
    load = result["load"]
    others = [c["cores_used_by_others_max"] for c in summary["cells"]]
    stolen = [c["cores_stolen_max"] for c in summary["cells"]]
    lines += ["", f"Load average (1 min) before: {load['loadavg_before'][0]:.2f}, after: "
                  f"{load['loadavg_after'][0]:.2f}, on {result['machine']['nproc']} cores. While "
                  f"timing, other processes (Ray's daemons included) used at most "
                  f"{max(others):.2f} cores (median cell {statistics.median(others):.2f}), and the "
                  f"hypervisor stole at most {max(stolen):.2f}." if others else "",
              "", f"Command: `{result['command']}`"]
    return "\n".join(lines)


def plot(path, result, opts):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12.5, 6.5))
    colours = {"local": "C0", "ray-1": "C1", "ray-2": "C2", "ray-1-env-actors": "C3",
               "ray-1-env-host": "C4"}
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v"]
    cells = result["summary"]["cells"]
    keys = sorted({(c["config"], c["num_envs_per_worker"]) for c in cells},
                  key=lambda k: (list(colours).index(k[0]), k[1]))
    envs_seen = sorted({k[1] for k in keys})
    for cfg, e in keys:
        pts = sorted((c["steps_per_round_per_worker"], c["steps_per_s"]) for c in cells
                     if (c["config"], c["num_envs_per_worker"]) == (cfg, e))
        x = [p[0] for p in pts]
        y = [p[1]["median"] for p in pts]
        err = [[p[1]["median"] - p[1]["min"] for p in pts], [p[1]["max"] - p[1]["median"] for p in pts]]
        i = envs_seen.index(e)
        ax.errorbar(x, y, yerr=err, color=colours.get(cfg, "k"), ls=styles[i % len(styles)],
                    marker=markers[i % len(markers)], capsize=2, lw=1.3,
                    label=f"{cfg}, {e} env{'s' if e > 1 else ''}/worker")
    raw = result["summary"]["raw"]
    ax.axhline(raw["random_actions_1env"]["median"], color="k", lw=1.2, ls=(0, (6, 2)),
               label="raw loop, random actions, 1 env")
    greys = ["0.25", "0.45", "0.65", "0.8"]
    for j, (n, v) in enumerate(raw["policy"].items()):
        ax.axhline(v["median"], color=greys[j % len(greys)], lw=1, ls=(0, (2, 2)),
                   label=f"raw loop, batched policy, {n} env{'s' if int(n) > 1 else ''}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="env steps per collect per worker (envs per worker × fragment length)",
           ylabel="env steps/s (all workers together)",
           title=f"{opts.gym_id}: sampling through ddrl (PPO policy + GAE) against the raw gymnasium "
                 f"loop\nmedian [min, max] of {opts.passes} passes; {result['machine']['nproc']} cores, "
                 f"load before {result['load']['loadavg_before'][0]:.2f}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gym_id", default="CartPole-v1")
    p.add_argument("--num_envs", type=int, nargs="+", default=[1, 10, 100],
                   help="envs per worker (default: %(default)s)")
    p.add_argument("--rollout_steps", type=int, nargs="+", default=[1, 10, 100, 1000],
                   help="fragment lengths, steps per env per collect (default: %(default)s)")
    p.add_argument("--configs", nargs="+", default=["local", "ray-1", "ray-2"],
                   choices=["local", "ray-1", "ray-2"])
    p.add_argument("--actor_envs", type=int, default=4,
                   help="envs of the env-placement comparison, 1 Ray worker (0: skip it)")
    p.add_argument("--actor_rollout_steps", type=int, nargs="+", default=[1, 10, 100, 1000])
    p.add_argument("--max_steps_per_round", type=int, default=100_000,
                   help="skip cells whose envs x fragment is above this (default: %(default)s)")
    p.add_argument("--passes", type=int, default=3,
                   help="times the whole sequence runs, alternating configurations; the tables "
                        "give the median (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=0.5, help="timed wall time per cell and pass")
    p.add_argument("--min_rounds", type=int, default=2, help="timed rounds per cell, at least")
    p.add_argument("--raw_seconds", type=float, default=1.0, help="wall time per raw-loop case")
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds to wait after killing a configuration's actors")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_load", type=float, default=1.0,
                   help="wait for the 1-minute load average to drop to this before starting")
    p.add_argument("--max_wait", type=float, default=300, help="seconds to wait for it, at most")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "sampling"),
                   help="output path without extension (default: benchmarks/results/sampling)")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="measure nothing: redraw the PNG and the tables of an earlier result")
    opts = p.parse_args()
    if opts.replot:
        with open(opts.replot) as f:
            result = json.load(f)
        saved = argparse.Namespace(**result["options"])
        result["markdown"] = markdown(result, saved)
        plot(os.path.splitext(opts.replot)[0] + ".png", result, saved)
        with open(opts.replot, "w") as f:  # the tables as they are drawn now
            json.dump(result, f, indent=1)
        print(result["markdown"])
        return
    command = " ".join([".venv/bin/python", os.path.relpath(os.path.abspath(sys.argv[0]), REPO)]
                       + sys.argv[1:])
    torch.set_num_threads(1)

    load = wait_for_load(opts.max_load, opts.max_wait)
    print(f"load average before: {load['loadavg_before']}", flush=True)
    started = time.time()
    result = dict(gym_id=opts.gym_id, command=command,
                  started_at=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                  machine=machine_info(), load=load, options=vars(opts),
                  protocol=dict(
                      what="env steps/s through RolloutWorker.collect: PPOModel batched forward "
                           "pass per step, envs stepped with auto-reset, agent GAE per fragment; "
                           "new weights version every round (weights loaded every collect)",
                      warmup_rounds=1, min_rounds=opts.min_rounds, seconds_per_cell=opts.seconds,
                      passes=opts.passes,
                      order="Ray started once; then per pass: raw loop, local, ray-1, ray-2, env "
                            "placement (ray-1 worker, ray-1 actor); raw loop once more at the end. "
                            "Tables: median over the passes"),
                  configs=list(opts.configs), raw=[], cells=[])
    weights = initial_weights(platform_args(opts.gym_id, 0, 1, 1, seed=opts.seed))
    version = Version()
    result["local_collect_1step_1env"] = call_overhead(opts, weights, 1.0)
    ray_configs = [c for c in opts.configs if c != "local"]
    use_ray = bool(ray_configs or opts.actor_envs)
    if use_ray:
        t0 = time.perf_counter()
        start_ray(platform_args(opts.gym_id, 1, 1, 1, seed=opts.seed))
        result["ray_init_s"] = time.perf_counter() - t0
    if opts.actor_envs:
        result["configs"] += ["ray-1-env-actors", "ray-1-env-host"]
    for n in range(opts.passes):
        print(f"=== pass {n + 1}/{opts.passes}", flush=True)
        result["raw"].append(dict(raw_loop(opts), passes_done=n))
        first = len(result["cells"])
        if "local" in opts.configs:
            for e in opts.num_envs:
                run_config("local", opts, 0, e, "worker", opts.rollout_steps, weights, version,
                           result["cells"])
        for cfg in ray_configs:
            for e in opts.num_envs:
                run_config(cfg, opts, int(cfg.split("-")[1]), e, "worker", opts.rollout_steps,
                           weights, version, result["cells"])
        if opts.actor_envs:
            if opts.actor_envs not in opts.num_envs or "ray-1" not in ray_configs:
                run_config("ray-1", opts, 1, opts.actor_envs, "worker", opts.actor_rollout_steps,
                           weights, version, result["cells"])
            run_config("ray-1-env-actors", opts, 1, opts.actor_envs, "actor",
                       opts.actor_rollout_steps, weights, version, result["cells"])
            run_config("ray-1-env-host", opts, 1, opts.actor_envs, "actor",
                       opts.actor_rollout_steps, weights, version, result["cells"],
                       envs_per_actor=opts.actor_envs)
        for c in result["cells"][first:]:
            c["pass"] = n
    result["raw"].append(dict(raw_loop(opts), passes_done=opts.passes))
    if use_ray:
        ray.shutdown()
    result["load"]["loadavg_after"] = list(os.getloadavg())
    result["wall_s"] = time.time() - started
    result["summary"] = summarize(result)
    result["markdown"] = markdown(result, opts)

    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    with open(opts.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(opts.out + ".png", result, opts)
    print("\n" + result["markdown"] + f"\n\nWrote {opts.out}.json and {opts.out}.png "
          f"({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
