"""The cost of the structured path: CartPole-v1 (a Box observation) against ddrl/DictCartPole-v0
(the same env, its observation a Dict {"cart": [x, x_dot], "pole": [theta, theta_dot]}),
env steps per second.

    .venv/bin/python benchmarks/probe.py structured-cost --out benchmarks/results/structured-cost.json
    .venv/bin/python benchmarks/probe.py structured-cost --passes 1 --seconds 0.5 --run_repeats 0   # a quick check

Both ids train the same network (64x64 tanh actor and critic on 4 inputs: the Dict's two leaves
are flattened and concatenated by MultiInputEncoder, no parameters of its own). Per pass, the two
ids alternating (their order swapped every pass), in this process, one torch thread:

- ``raw_env``: 8 gymnasium envs stepped in a Python loop with a fixed action pattern and
  auto-reset, no policy: what the env (and the Dict wrapper) costs;
- ``policy_call``: the model's ``choose_actions`` on a batch of 8 observations as the rollout
  worker asks for them (with the values when they come with the actions): microseconds per
  call. A Box observation, and a structured one whose leaves are all flattened, take the numpy
  fast path (models/numpy_mlp.py); the rest the torch path;
- ``worker``: ``RolloutWorker.collect`` with 8 envs x ``--rollout_steps`` (the call the PPO
  trainer makes: the batched policy every step, the envs, the agent's GAE; a new weights
  version every collect), timed over ``--seconds`` after one warm-up collect.

The same for DictCartPole with the torch path forced (``TORCH``: the model's numpy actor off,
the values computed with every action as on a shared encoder): the path every structured
observation with a one-hot or CNN leaf, or an action mask, takes (MiniGrid, MaskedChoice), and
the one DictCartPole took before commit 6830702 gave all-flattened observations the numpy
actor.

Then ``--run_repeats`` times per id, alternating: the default training run (main.py with
configs/ppo-CartPole-v1.yaml given to both, so the DictCartPole run has exactly CartPole's
preset: 2 Ray workers x 4 envs x 32 steps, 10 epochs), ``--target_return none --total_steps
--run_steps``, evaluations pushed past the end (``--eval_interval`` = the budget) so that the
rate is the training loop's: env steps/s over the steady window (metrics.csv rows from 20% of
the budget to the last) and over the whole run (summary.json's steps_per_s, start-up included).
The seed of repeat k is k for both ids.

Medians [min, max] over passes / repeats; writes ``--out`` (every measurement, the medians, the
markdown table, machine, commit, date) and prints the table.
"""
import datetime
import json
import os
import statistics
import time

from probes import REPO, command, git_commit

IDS = ("CartPole-v1", "ddrl/DictCartPole-v0")
TORCH = "ddrl/DictCartPole-v0, torch path"
NUM_ENVS = 8


def add_args(p):
    p.add_argument("--passes", type=int, default=5, help="in-process passes (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="timed wall time per in-process measurement (default: %(default)s)")
    p.add_argument("--rollout_steps", type=int, default=32,
                   help="steps per env per collect (default: %(default)s, the default run's)")
    p.add_argument("--run_repeats", type=int, default=3,
                   help="training runs per id (0: none) (default: %(default)s)")
    p.add_argument("--run_steps", type=int, default=50_000,
                   help="env steps of each training run (default: %(default)s)")
    p.add_argument("--run_dir", default=os.path.join(REPO, "benchmarks", "results",
                                                     "structured-cost"),
                   help="where the training runs' directories go (default: %(default)s, "
                        "git-ignored)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the result JSON here")


def stats(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values)) \
        if values else None


def raw_env(gym_id, seconds, seed):
    """8 envs in a Python loop, actions 0,1,0,1,... per env, auto-reset: steps/s."""
    import gymnasium as gym
    envs = [gym.make(gym_id) for _ in range(NUM_ENVS)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            action = steps // NUM_ENVS % 2
            for env in envs:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
            steps += NUM_ENVS
    rate = steps / (time.perf_counter() - start)
    for env in envs:
        env.close()
    return rate


def make_worker(gym_id, rollout_steps, seed, torch_path=False):
    from options.options import parse_args, run_spec
    from core.sampling.rollout import RolloutWorker
    args = parse_args(["--config", os.path.join(REPO, "configs", "ppo-CartPole-v1.yaml"),
                       "--gym_id", gym_id, "--num_workers", "0", "--num_envs_per_worker",
                       str(NUM_ENVS), "--rollout_steps", str(rollout_steps), "--seed", str(seed)])
    worker = RolloutWorker(run_spec(args), 0)
    if torch_path:  # act through torch, values with every action (see the docstring)
        worker.model.numpy_actor = None
        worker.model.values_with_actions = True
        worker.values_later = False
    return worker


def policy_call(worker, seconds):
    """Microseconds per choose_actions on the worker's current batch of observations."""
    from core import spaces
    model = worker.model
    obs = spaces.tree_map(lambda a, dtype: a.astype(dtype), worker.observations,
                          worker.carried_dtypes)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            model.choose_actions(obs, values=not worker.values_later)  # as the worker asks
        calls += 100
    return 1e6 * (time.perf_counter() - start) / calls, model.numpy_actor is not None


def collect_rate(worker, seconds, rollout_steps):
    weights = worker.model.get_weights()
    version = 1
    worker.collect(weights, version, rollout_steps)  # warm-up
    steps, start = 0, time.perf_counter()
    while True:
        version += 1
        steps += worker.collect(weights, version, rollout_steps).env_steps
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def training_run(gym_id, seed, opts):
    """One default training run in a process of its own (compare.py's runner): its rates."""
    import csv
    import sys
    from compare import run_one
    run_dir = os.path.join(opts.run_dir, gym_id.replace("/", "-"), f"seed{seed}")
    cmd = (f"{sys.executable} main.py --config configs/ppo-CartPole-v1.yaml --gym_id {gym_id} "
           f"--seed {seed} --target_return none --total_steps {opts.run_steps} "
           f"--eval_interval {opts.run_steps} --run_dir {run_dir}")
    rec = run_one(cmd, run_dir, timeout=600)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = [(int(r["env_steps"]), float(r["wall_time_s"])) for r in csv.DictReader(f)]
    first = next(r for r in rows if r[0] >= 0.2 * opts.run_steps)
    last = rows[-1]
    s = rec["summary"] or {}
    return dict(gym_id=gym_id, seed=seed, cmd=cmd.replace(sys.executable, ".venv/bin/python"),
                returncode=rec["returncode"], load_before=rec["load_before"],
                env_steps=s.get("env_steps"), whole_run_steps_per_s=s.get("steps_per_s"),
                steady_steps_per_s=(last[0] - first[0]) / (last[1] - first[1]),
                steady_window=[first, last], process_wall_s=rec["process_wall_s"])


def cell(d, nd=0):
    return f"{d['median']:,.{nd}f} [{d['min']:,.{nd}f}, {d['max']:,.{nd}f}]" if d else "—"


def markdown(summary, opts):
    lines = ["| measure | CartPole-v1 | ddrl/DictCartPole-v0 | Dict / Box "
             "| DictCartPole, torch path forced | torch / Box |",
             "| --- | --- | --- | --- | --- | --- |"]
    labels = [("raw_env", f"raw env loop, {NUM_ENVS} envs, no policy (steps/s)", 0),
              ("policy_call_us", f"one policy call on {NUM_ENVS} observations (us)", 1),
              ("worker", f"rollout worker, {NUM_ENVS} envs x {opts['rollout_steps']} steps "
                         f"(steps/s)", 0),
              ("steady_steps_per_s", "default training run, steady window (steps/s)", 0),
              ("whole_run_steps_per_s", "default training run, whole run (steps/s)", 0)]
    for key, label, nd in labels:
        box, dct = summary[IDS[0]].get(key), summary[IDS[1]].get(key)
        forced = summary.get(TORCH, {}).get(key)
        if not box or not dct:
            continue
        ratios = [f"{d['median'] / box['median']:.2f}" if d else "—" for d in (dct, forced)]
        lines.append(f"| {label} | {cell(box, nd)} | {cell(dct, nd)} | {ratios[0]} "
                     f"| {cell(forced, nd)} | {ratios[1]} |")
    return "\n".join(lines)


def run(args, argv):
    import torch
    from compare import machine_info
    torch.set_num_threads(1)
    result = dict(command=".venv/bin/python " + command(argv), options=vars(args),
                  date=datetime.date.today().isoformat(), commit=git_commit(),
                  machine=machine_info(), load_before=list(os.getloadavg()),
                  passes=[], runs=[])
    variants = IDS + (TORCH,)
    for n in range(args.passes):
        order = variants if n % 2 == 0 else variants[::-1]
        for label in order:
            gym_id = IDS[1] if label == TORCH else label
            raw = raw_env(gym_id, args.seconds, args.seed)
            worker = make_worker(gym_id, args.rollout_steps, args.seed, label == TORCH)
            call_us, numpy_path = policy_call(worker, args.seconds)
            rate = collect_rate(worker, args.seconds, args.rollout_steps)
            worker.close()
            result["passes"].append(dict(pass_=n, gym_id=label, raw_env=raw,
                                         policy_call_us=call_us, numpy_path=numpy_path,
                                         worker=rate))
            print(f"pass {n + 1}/{args.passes} {label:34s} raw {raw:>9,.0f} steps/s | policy "
                  f"call {call_us:6.1f} us ({'numpy' if numpy_path else 'torch'}) | worker "
                  f"{rate:>8,.0f} steps/s", flush=True)
    for k in range(args.run_repeats):
        order = IDS if k % 2 == 0 else IDS[::-1]
        for gym_id in order:
            rec = training_run(gym_id, args.seed + k, args)
            result["runs"].append(rec)
            print(f"run {k + 1}/{args.run_repeats} {gym_id:22s} steady "
                  f"{rec['steady_steps_per_s']:>7,.0f} steps/s, whole run "
                  f"{rec['whole_run_steps_per_s'] or 0:>7,.0f} steps/s (rc {rec['returncode']})",
                  flush=True)
    summary = {}
    for gym_id in variants:
        mine = [p for p in result["passes"] if p["gym_id"] == gym_id]
        runs = [r for r in result["runs"] if r["gym_id"] == gym_id and r["returncode"] == 0]
        summary[gym_id] = {key: stats([p[key] for p in mine])
                           for key in ("raw_env", "policy_call_us", "worker")}
        for key in ("steady_steps_per_s", "whole_run_steps_per_s"):
            summary[gym_id][key] = stats([r[key] for r in runs if r[key]])
    result["summary"] = summary
    result["load_after"] = list(os.getloadavg())
    result["markdown"] = markdown(summary, vars(args))
    print("\n" + result["markdown"])
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"Wrote {args.out}")
