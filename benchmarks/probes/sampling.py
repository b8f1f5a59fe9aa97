"""Sampling speed through the platform: env steps/s against envs per worker x fragment length.

    .venv/bin/python benchmarks/probe.py sampling --gym_id CartPole-v1

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
them, in the same run, the raw gymnasium loop of ``probe.py raw-gym`` (random actions with 1
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
import time

from probes import REPO, command, raw_gym_sampling
from probes.procfs import cpu_seconds, machine_times
from probes.sampling_report import LABELS, markdown, plot, summarize


def platform_args(gym_id, num_workers, num_envs, rollout_steps, env_placement="worker", seed=0,
                  envs_per_actor=1):
    from options.options import parse_args
    return parse_args(["--num_workers", str(num_workers), "--num_envs_per_worker", str(num_envs),
                       "--rollout_steps", str(rollout_steps), "--gym_id", gym_id, "--config", "none",
                       "--env_placement", env_placement, "--seed", str(seed),
                       "--envs_per_actor", str(envs_per_actor)])


def spec_of(args):
    from options.options import run_spec
    return run_spec(args)


def initial_weights(args):
    """The weights every worker acts with: a freshly initialised model (PPOModel by default)."""
    from core.plugins import load_plugins, make_env
    plugins = load_plugins(spec_of(args))
    env = make_env(plugins, args, seed=args.seed)
    model = plugins.model_cls(args, env.observation_space, env.action_space)
    getattr(env, "close", lambda: None)()
    return model.get_weights()


def machine_cpu_s():
    """(busy, stolen): CPU seconds the machine's cores have run anything, and seconds the
    hypervisor gave them to someone else (/proc/stat)."""
    times = machine_times()
    return times["busy"], times["steal"]


def process_cpu_s(pids):
    """CPU seconds used so far by these processes (user + system)."""
    return sum(cpu_seconds(pid) or 0.0 for pid in pids)


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
    import ray
    from core.distributed.placement import Placement
    from core.sampling.rollout import RolloutWorker
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
    from core.sampling.rollout import RolloutWorker
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


def add_args(p):
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


def run(opts, argv):
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
    import ray
    import torch
    from compare import machine_info
    from core.distributed.placement import start_ray
    torch.set_num_threads(1)

    load = wait_for_load(opts.max_load, opts.max_wait)
    print(f"load average before: {load['loadavg_before']}", flush=True)
    started = time.time()
    result = dict(gym_id=opts.gym_id, command=".venv/bin/python " + command(argv),
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

