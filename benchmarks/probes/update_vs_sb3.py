"""Cost of one SAC, CrossQ or TQC update, ddrl (``--model_name sac|crossq|tqc``: the model's
``step`` and the learner's fused Adam, as the parameter server runs it) against SB3's SAC or
sb3-contrib's CrossQ or TQC ``train()`` given the same hyperparameters (``benchmarks/sb3_sac.py --algo ALGO
--hyperparams ddrl``: the preset ddrl picks for LunarLanderContinuous-v3, plus --ddrl_flags), on
LunarLanderContinuous-v3 shapes and random transitions, in fp32.

    .venv/bin/python benchmarks/probe.py update-vs-sb3 --algo sac --out benchmarks/results/sac_update_vs_sb3.json
    .venv/bin/python benchmarks/probe.py update-vs-sb3 --algo crossq --out benchmarks/results/crossq_update_cost.json
    .venv/bin/python benchmarks/probe.py update-vs-sb3 --algo tqc --out benchmarks/results/tqc_update_vs_sb3.json

Besides the time per update, each measurement profiles 20 more updates with torch's profiler
and reports the part of an update spent in matrix products (aten::mm, addmm, bmm, baddbmm; as
a share of the profiled time, applied to the unprofiled figure): the arithmetic both systems
must do, against what surrounds it (elementwise ops, autograd, the optimizer, Python).

Each measurement runs in a process of its own (torch's thread pool is set once per process), the
two systems alternating ``--repeats`` times per thread count; a figure is milliseconds per
gradient step averaged over ``--updates`` steps after 30 warm-up steps (a multiple of the policy
delay, so that actor updates weigh the same in both). sb3-contrib's figure includes its replay
sampling (a batch of 256 from a full 100k buffer), ddrl's includes building the batch's tensors
from numpy: what each does per step in its own loop.
"""
import argparse
import json
import os
import statistics
import subprocess

from probes import child
from probes.update_cost import cpu_description, ms_per_call

ENV_ID = "LunarLanderContinuous-v3"


def random_transitions(n, obs_dim, action_dim, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, obs_dim)).astype(np.float32),
            rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32),
            rng.standard_normal((n, obs_dim)).astype(np.float32),
            (rng.uniform(size=n) < 0.01).astype(np.float32))


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def timed_with_matmul_share(update, updates):
    """(ms per update over ``updates`` timed calls, share of an update's CPU time in matrix
    products over 20 profiled calls)."""
    from torch.profiler import ProfilerActivity, profile
    ms = ms_per_call(update, updates, warmup=30)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            update()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    return {"ms_per_update": ms, "matmul_share": matmul / total if total else 0.0}


def measure_ddrl(algo, flags, updates):
    import numpy as np
    import gymnasium as gym
    from core.learning.learner import Learner
    from core.learning.replay_buffer import Transitions
    from models import MODEL_REGISTRY
    from options.options import parse_args
    args = parse_args(["--env_name", "gym_env", "--model_name", algo, "--gym_id", ENV_ID,
                       "--sac_precision", "fp32"] + flags)
    env = gym.make(ENV_ID)
    model = MODEL_REGISTRY.get(algo)(args, env.observation_space, env.action_space)
    learner = Learner(model)
    data = random_transitions(100_000, 8, 2)
    rng = np.random.default_rng(1)

    def update():
        rows = rng.integers(0, len(data[0]), args.batch_size)
        with model.gradients_in_place():  # as the parameter server: no copy to numpy and back
            model.step(Transitions(*(column[rows] for column in data)))
        learner.apply_in_place()  # the fused Adam step, then after_update (counts the update)

    return timed_with_matmul_share(update, updates)


def measure_sb3(algo, flags, updates):
    import gymnasium as gym
    from stable_baselines3.common.logger import configure
    from sb3_sac import ddrl_hyperparameters
    if algo == "crossq":
        from sb3_contrib import CrossQ as Algorithm
    elif algo == "tqc":
        from sb3_contrib import TQC as Algorithm
    else:
        from stable_baselines3 import SAC as Algorithm
    kwargs, a = ddrl_hyperparameters(ENV_ID, " ".join(flags), algo=algo)
    kwargs["buffer_size"] = 100_000
    model = Algorithm(env=gym.make(ENV_ID), seed=0, device="cpu", **kwargs)
    model.set_logger(configure(None, []))
    obs, actions, rewards, next_obs, dones = random_transitions(100_000, 8, 2)
    buffer = model.replay_buffer
    buffer.observations[:, 0] = obs
    buffer.actions[:, 0] = actions
    buffer.rewards[:, 0] = rewards
    buffer.next_observations[:, 0] = next_obs
    buffer.dones[:, 0] = dones
    buffer.full, buffer.pos = True, 0
    return timed_with_matmul_share(
        lambda: model.train(gradient_steps=1, batch_size=a.batch_size), updates)


def add_args(p):
    p.add_argument("--algo", choices=["sac", "crossq", "tqc"], default="sac",
                   help="sac: ddrl's sac against SB3's SAC; crossq, tqc: ddrl's against "
                        "sb3-contrib's CrossQ, TQC (default: %(default)s)")
    p.add_argument("--out", default=None, help="write the results here as JSON")
    p.add_argument("--updates", type=int, default=60,
                   help="timed gradient steps per measurement (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3,
                   help="alternating measurements per system and thread count "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch threads to measure (default: 1 2)")
    p.add_argument("--ddrl_flags", default="",
                   help="ddrl flags for both systems, e.g. '--sac_hidden_sizes 400,300'")
    p.add_argument("--one", nargs=2, metavar=("SYSTEM", "THREADS"), help=argparse.SUPPRESS)


def run(args, argv):
    flags = args.ddrl_flags.split()
    if args.one:
        import torch
        torch.set_num_threads(int(args.one[1]))
        measure = measure_ddrl if args.one[0] == "ddrl" else measure_sb3
        print(json.dumps(measure(args.algo, flags, args.updates)))
        return
    peer = "sb3" if args.algo == "sac" else "sb3-contrib"
    load_before, rows = os.getloadavg()[0], []
    for threads in args.threads:
        runs = {"ddrl": [], peer: []}
        for _ in range(args.repeats):
            for system in runs:
                out = subprocess.run(child("update-vs-sb3", "--algo", args.algo,
                                           "--updates", str(args.updates),
                                           f"--ddrl_flags={args.ddrl_flags}", "--one",
                                           system.split("-")[0], str(threads)),
                                     capture_output=True, text=True, check=True)
                runs[system].append(json.loads(out.stdout.strip().splitlines()[-1]))
                last = runs[system][-1]
                print(f"{system:12s} threads {threads}: {last['ms_per_update']:7.1f} ms/update, "
                      f"{100 * last['matmul_share']:.0f}% in matrix products", flush=True)
        for system, results in runs.items():
            ms = [r["ms_per_update"] for r in results]
            matmul_ms = [r["ms_per_update"] * r["matmul_share"] for r in results]
            rows.append(dict(system=system, threads=threads,
                             ms_per_update=[round(m, 2) for m in ms],
                             median_ms=round(statistics.median(ms), 2),
                             median_matmul_ms=round(statistics.median(matmul_ms), 2)))
        ratio = (statistics.median(r["ms_per_update"] for r in runs["ddrl"])
                 / statistics.median(r["ms_per_update"] for r in runs[peer]))
        print(f"threads {threads}: ddrl / {peer} = {ratio:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"algo": args.algo, "load_average_before": load_before,
                       "cpu": cpu_description(), "ddrl_flags": args.ddrl_flags,
                       "updates": args.updates, "results": rows}, f, indent=1)
