"""Replay buffer throughput: ddrl's core/learning/replay_buffer.py against cpprb, side by side.

    .venv/bin/python benchmarks/probe.py replay --out benchmarks/results/replay_throughput.json

LunarLanderContinuous-shaped transitions (observation 8 float32, action 2 float32, reward,
terminated, next observation), capacity 1e6. For each buffer, in one process and alternating
between the systems every repetition:

- add: blocks of 256 transitions (the prioritized buffers get the block's initial priorities, as
  explorers send them in Ape-X), one lap that fills the empty ring and a second lap that
  overwrites it. The first pays for first-touch page faults of a fresh buffer and varies with
  what the allocator hands out; the second, the steady state of a long run, is the one compared;
- sample: batches of 256 from the full buffer; the prioritized buffers then update the batch's
  priorities (cpprb with check_for_update=True, ddrl's generation check: both drop stale updates).

Reports transitions added/s and batches sampled/s, the median of the repetitions and the spread.
Everything runs in this one process on one core; no Ray.
"""
import importlib.metadata
import json
import os
import platform
import subprocess
import time

from probes import command

OBS, ACT = 8, 2
CPPRB_ENV = {"obs": {"shape": OBS}, "act": {"shape": ACT}, "rew": {},
             "next_obs": {"shape": OBS}, "done": {}}


class DdrlAdapter:
    def __init__(self, prioritized, capacity, seed):
        from core.learning.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
        if prioritized:
            self.buffer = PrioritizedReplayBuffer(capacity, (OBS,), (ACT,), epsilon=1e-6, seed=seed)
        else:
            self.buffer = ReplayBuffer(capacity, (OBS,), (ACT,), seed=seed)
        self.prioritized = prioritized

    def add(self, block, priorities):
        self.buffer.add(block, priorities if self.prioritized else None)

    def sample_and_update(self, batch_size, new_priorities):
        batch = self.buffer.sample(batch_size)
        if self.prioritized:
            self.buffer.update_priorities(batch.indices, batch.generations, new_priorities)


class CpprbAdapter:
    def __init__(self, prioritized, capacity, seed):
        import cpprb
        import numpy as np
        np.random.seed(seed)          # cpprb draws from numpy's global generator
        if prioritized:
            self.buffer = cpprb.PrioritizedReplayBuffer(capacity, CPPRB_ENV, alpha=0.6, eps=1e-6,
                                                        check_for_update=True)
        else:
            self.buffer = cpprb.ReplayBuffer(capacity, CPPRB_ENV)
        self.prioritized = prioritized

    def add(self, block, priorities):
        extra = {"priorities": priorities} if self.prioritized else {}
        self.buffer.add(obs=block.observations, act=block.actions, rew=block.rewards,
                        next_obs=block.next_observations, done=block.terminated, **extra)

    def sample_and_update(self, batch_size, new_priorities):
        if self.prioritized:
            batch = self.buffer.sample(batch_size, beta=0.4)
            self.buffer.update_priorities(batch["indexes"], new_priorities)
        else:
            self.buffer.sample(batch_size)


SYSTEMS = {"ddrl": DdrlAdapter, "cpprb": CpprbAdapter}


def random_blocks(rng, count, size):
    """A pool of blocks reused round robin, so generating data is not timed."""
    import numpy as np
    from core.learning.replay_buffer import Transitions
    return [Transitions(
        observations=rng.standard_normal((size, OBS), dtype=np.float32),
        actions=rng.uniform(-1, 1, (size, ACT)).astype(np.float32),
        rewards=rng.standard_normal(size, dtype=np.float32),
        next_observations=rng.standard_normal((size, OBS), dtype=np.float32),
        terminated=(rng.random(size) < 0.005).astype(np.float32)) for _ in range(count)]


def measure(adapter, blocks, priorities, lap_blocks, sample_batches, batch_size):
    """Transitions added/s on the first lap and on the second, then batches sampled/s."""
    rates = []
    for lap in range(2):
        start = time.perf_counter()
        for i in range(lap * lap_blocks, (lap + 1) * lap_blocks):
            adapter.add(blocks[i % len(blocks)], priorities[i % len(priorities)])
        rates.append(lap_blocks * len(blocks[0].rewards) / (time.perf_counter() - start))
    start = time.perf_counter()
    for i in range(sample_batches):
        adapter.sample_and_update(batch_size, priorities[i % len(priorities)][:batch_size])
    rates.append(sample_batches / (time.perf_counter() - start))
    return rates


def markdown(results):
    lines = ["| buffer | system | added/s, ring full | batches of 256 sampled/s | "
             "ddrl / cpprb (add, sample) | added/s, first lap |",
             "| --- | --- | ---: | ---: | --- | ---: |"]
    for kind in ("uniform", "prioritized"):
        row = {s: results[f"{s}_{kind}"] for s in SYSTEMS}
        for system, r in row.items():
            ratio = ""
            if system == "ddrl":
                ratio = (f"{r['add_per_s'] / row['cpprb']['add_per_s']:.2f}x, "
                         f"{r['sample_per_s'] / row['cpprb']['sample_per_s']:.2f}x")
            lines.append(
                f"| {kind} | {system} | {r['add_per_s']:,.0f} ({r['add_per_s_min']:,.0f}-"
                f"{r['add_per_s_max']:,.0f}) | {r['sample_per_s']:,.0f} "
                f"({r['sample_per_s_min']:,.0f}-{r['sample_per_s_max']:,.0f}) | {ratio} | "
                f"{r['first_lap_add_per_s']:,.0f} |")
    return "\n".join(lines)


def add_args(parser):
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--block_size", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--sample_batches", type=int, default=3000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)


def run(args, argv):
    import numpy as np
    from core.learning.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
    load_before = os.getloadavg()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    wall_start = time.perf_counter()

    rng = np.random.default_rng(args.seed)
    blocks = random_blocks(rng, 64, args.block_size)
    # |TD|-like priorities: positive, heavy-tailed
    priorities = [rng.exponential(1.0, args.block_size) for _ in range(64)]

    lap_blocks = -(-args.capacity // args.block_size)      # ceil: one lap fills the ring
    runs = {f"{s}_{k}": [] for k in ("uniform", "prioritized") for s in SYSTEMS}
    for repetition in range(args.repetitions):
        order = list(SYSTEMS) if repetition % 2 == 0 else list(SYSTEMS)[::-1]
        for kind in ("uniform", "prioritized"):
            for system in order:
                adapter = SYSTEMS[system](kind == "prioritized", args.capacity,
                                          args.seed + repetition)
                fill_per_s, add_per_s, sample_per_s = measure(
                    adapter, blocks, priorities, lap_blocks, args.sample_batches, args.batch_size)
                runs[f"{system}_{kind}"].append((fill_per_s, add_per_s, sample_per_s))
                print(f"rep {repetition} {system:5s} {kind:11s} first lap {fill_per_s:12,.0f}/s "
                      f"add {add_per_s:12,.0f}/s sample {sample_per_s:8,.0f}/s", flush=True)
                del adapter

    results = {}
    for name, values in runs.items():
        fill, add, sample = np.array(values).T
        results[name] = {
            "first_lap_add_per_s": float(np.median(fill)),
            "first_lap_add_per_s_runs": fill.tolist(),
            "add_per_s": float(np.median(add)), "add_per_s_min": float(add.min()),
            "add_per_s_max": float(add.max()),
            "sample_per_s": float(np.median(sample)), "sample_per_s_min": float(sample.min()),
            "sample_per_s_max": float(sample.max()),
            "add_per_s_runs": add.tolist(), "sample_per_s_runs": sample.tolist()}
    ddrl_bytes = {
        "uniform": ReplayBuffer(args.capacity, (OBS,), (ACT,)).nbytes(),
        "prioritized": PrioritizedReplayBuffer(args.capacity, (OBS,), (ACT,)).nbytes()}
    table = markdown(results)
    report = {
        "command": command(argv),
        "settings": vars(args),
        "results": results,
        "table": table,
        "ddrl_nbytes": ddrl_bytes,
        "notes": [
            "median of the repetitions, (min-max) in the table",
            "add_per_s: the second lap (the ring is full and gets overwritten); "
            "first_lap_add_per_s: filling a fresh buffer, first-touch page faults included",
            "sample for the prioritized buffers includes the priority update of the batch",
            "ddrl's prioritized buffer anneals beta from 0.4; cpprb's is given beta=0.4 (the "
            "cost does not depend on beta)",
        ],
        "load_average_before": load_before,
        "uptime_before": uptime,
        "wall_time_s": round(time.perf_counter() - wall_start, 1),
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "cpprb": importlib.metadata.version("cpprb")},
        "cpu_count": os.cpu_count(),
    }
    print(table)
    print(f"wall time {report['wall_time_s']} s, load before {load_before}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
