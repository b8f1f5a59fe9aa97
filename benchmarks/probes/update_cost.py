"""Cost of one SAC update (ddrl's models/sac.py step + the learner's fused Adam and polyak), by
network size, torch threads and --sac_precision, on LunarLanderContinuous-v3 shapes. Behind
--learner_threads, --sac_precision and the LunarLander preset's network size.

    .venv/bin/python benchmarks/probe.py update-cost --out benchmarks/results/update_cost.json

Each configuration runs in its own process (torch's thread pool is set once per process).
--precisions, --sizes and --threads narrow the grid (by default every combination, in the order
of the tables in BENCHMARKS.md).
"""
import argparse
import json
import os
import subprocess
import time

from probes import child


def measure(threads, sizes, batch_size, n, precision):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    import gymnasium as gym
    from core.learning.learner import Learner
    from core.learning.replay_buffer import Transitions
    from models.sac import SACModel
    env = gym.make("LunarLanderContinuous-v3")
    from options.options import parse_args, run_spec
    args = parse_args([
        "--config", "none", "--model_name", "sac", "--gym_id", "LunarLanderContinuous-v3",
        "--sac_hidden_sizes", ",".join(map(str, sizes)), "--actor_lr", "7.3e-4",
        "--critic_lr", "7.3e-4", "--alpha_lr", "7.3e-4", "--tau", "0.01", "--init_alpha", "1.0",
        "--target_entropy", "auto", "--sac_gamma", "0.99", "--num_gpus", "0",
        "--sac_lr_schedule", "constant", "--sac_precision", precision])
    model = SACModel(run_spec(args).model, env.observation_space, env.action_space)
    learner = Learner(model)
    rng = np.random.default_rng(0)
    batch = Transitions(rng.standard_normal((batch_size, 8)).astype(np.float32),
                        rng.uniform(-1, 1, (batch_size, 2)).astype(np.float32),
                        rng.standard_normal(batch_size).astype(np.float32),
                        rng.standard_normal((batch_size, 8)).astype(np.float32),
                        np.zeros(batch_size, np.float32))

    def update():
        gradients, _ = model.step(batch)
        learner.apply(gradients)

    return ms_per_call(update, n, warmup=20)


def ms_per_call(update, n, warmup):
    """Milliseconds per call of ``update`` over ``n`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        update()
    start = time.perf_counter()
    for _ in range(n):
        update()
    return (time.perf_counter() - start) / n * 1e3


def cpu_description():
    """The CPU's model name and the instruction sets that decide the bf16 figures."""
    import torch
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "unknown") if os.path.exists("/proc/cpuinfo") else "unknown"
    return {"model_name": model, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
            "amx": torch.cpu._is_amx_tile_supported()}


def add_args(p):
    p.add_argument("--out", default=None, help="write the results here as JSON")
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"],
                   help="--sac_precision values to measure (default: %(default)s)")
    p.add_argument("--sizes", nargs="+", default=["256,256", "400,300"],
                   help="hidden sizes to measure (default: %(default)s)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch threads to measure (default: %(default)s)")
    p.add_argument("--one", nargs=4, metavar=("THREADS", "SIZES", "BATCH", "PRECISION"),
                   help=argparse.SUPPRESS)


def run(args, argv):
    if args.one:
        threads, sizes, batch = int(args.one[0]), [int(s) for s in args.one[1].split(",")], int(args.one[2])
        print(json.dumps(measure(threads, sizes, batch, args.updates, args.one[3])))
        return
    load_before, rows = os.getloadavg()[0], []
    for precision in args.precisions:
        for sizes in args.sizes:
            for threads in args.threads:
                out = subprocess.run(child("update-cost", "--updates", str(args.updates),
                                           "--one", str(threads), sizes, "256", precision),
                                     capture_output=True, text=True, check=True).stdout
                ms = float(out.strip().splitlines()[-1])
                rows.append(dict(precision=precision, hidden_sizes=sizes, threads=threads,
                                 batch_size=256, ms_per_update=round(ms, 2),
                                 updates_per_s=round(1e3 / ms, 1)))
                print(f"{precision}  hidden {sizes:>8}  threads {threads}: {ms:6.2f} ms/update  "
                      f"{1e3 / ms:6.1f} updates/s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"load_average_before": load_before, "cpu": cpu_description(),
                   "results": rows}, f, indent=1)
