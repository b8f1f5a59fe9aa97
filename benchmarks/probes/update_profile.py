"""Where one off-policy update's time goes: torch's profiler over the parameter server's update
(the loss, its backward pass, the optimizer step, the targets' bookkeeping) of any replay model
with Box observations, on an env's shapes and random batches, one torch thread. The operators
are grouped: matrix products (aten::addmm, mm, bmm, baddbmm: the arithmetic a faster library
cannot remove), the optimizer (torch's fused Adam and its step), and everything else (the
activations, copies, reductions and dispatch between them).

    .venv/bin/python benchmarks/probe.py update-profile --model_name td3_bc --gym_id HalfCheetah-v5 \\
        --out /tmp/update-profile.json --flags --normalize_obs

--flags, last, go to ddrl's parser after ``--model_name M --gym_id ENV --config none`` (the model's
own defaults: pass a preset with ``--flags --config PATH``). The timed figure (ms per update,
without the profiler) is the fastest of --repeats blocks of --updates updates after 50 untimed
ones; the profile is one more block of --updates updates under torch.profiler, whose own
overhead makes its total a little larger: read its shares, not its milliseconds.
"""
import json
import time

from probes import command, git_commit

MATRIX_PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm")
OPTIMIZER = ("aten::_fused_adam_", "Optimizer.step#Adam.step")


OWN_FLAGS = ("--model_name", "--gym_id", "--updates", "--repeats", "--top", "--out")


def add_args(p):
    p.add_argument("--model_name", default="td3_bc", help="a replay model (default: %(default)s)")
    p.add_argument("--gym_id", default="Pendulum-v1",
                   help="the env whose spaces shape the batches (default: %(default)s)")
    p.add_argument("--flags", nargs="...", default=[],
                   help="more ddrl flags: the rest of the command line (e.g. --normalize_obs)")
    p.add_argument("--updates", type=int, default=200, help="updates per block")
    p.add_argument("--repeats", type=int, default=3, help="timed blocks")
    p.add_argument("--top", type=int, default=12, help="operators listed (default: 12)")
    p.add_argument("--out", default=None, help="write the results here as JSON")


def random_batches(observation_space, action_space, batch_size, rng, count=4):
    """``count`` replay batches of uniform observations in [-2, 2] (or the space's bounds),
    actions in the action Box, Gaussian rewards, 1% terminal."""
    import numpy as np
    from core.learning.replay_buffer import ReplayBatch, Transitions
    low = np.maximum(observation_space.low, -2.0)
    high = np.minimum(observation_space.high, 2.0)
    n = batch_size

    def obs():
        return rng.uniform(low, high, (n, *observation_space.shape)).astype(np.float32)

    return [ReplayBatch(Transitions(obs(), rng.uniform(action_space.low, action_space.high,
                                                       (n, *action_space.shape)).astype(np.float32),
                                    rng.standard_normal(n).astype(np.float32), obs(),
                                    (rng.random(n) < 0.01).astype(np.float32)),
                        np.arange(n), np.zeros(n, np.int64), np.ones(n, np.float32))
            for _ in range(count)]


def group_of(name):
    if name in MATRIX_PRODUCTS:
        return "matrix products"
    if name in OPTIMIZER:
        return "optimizer"
    return "other"


def run(args, argv):
    import gymnasium as gym
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile
    from options.options import parse_args, run_spec
    from probes.learning_speed import local_server
    from probes.update_cost import cpu_description
    own = [flag for flag in args.flags if flag.split("=")[0] in OWN_FLAGS]
    if own:
        raise SystemExit(f"update-profile: {', '.join(own)} after --flags would go to ddrl: "
                         f"--flags takes the rest of the command line, so put the probe's own "
                         f"flags ({', '.join(OWN_FLAGS)}) before it")
    torch.set_num_threads(1)
    ddrl_args = parse_args(["--model_name", args.model_name, "--gym_id", args.gym_id,
                            "--config", "none", "--num_workers", "0", "--num_gpus", "0",
                            *args.flags])
    env = gym.make(args.gym_id)
    server = local_server(run_spec(ddrl_args), env.observation_space, env.action_space,
                          "cpu", seed=0)
    batches = random_batches(env.observation_space, env.action_space, ddrl_args.batch_size,
                             np.random.default_rng(0))
    calls = 0

    def block(n):
        nonlocal calls
        for _ in range(n):
            server.update([batches[calls % len(batches)]], None, 0.0)
            calls += 1

    block(50)
    blocks = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        block(args.updates)
        blocks.append((time.perf_counter() - start) / args.updates * 1e3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        block(args.updates)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total_us = sum(e.self_cpu_time_total for e in events)
    groups = {}
    for e in events:
        groups[group_of(e.key)] = groups.get(group_of(e.key), 0.0) + e.self_cpu_time_total
    per_update = {k: round(v / args.updates / 1e3, 3) for k, v in sorted(groups.items())}
    top = [{"operator": e.key, "group": group_of(e.key),
            "calls_per_update": round(e.count / args.updates, 2),
            "ms_per_update": round(e.self_cpu_time_total / args.updates / 1e3, 3),
            "share": round(e.self_cpu_time_total / total_us, 3)}
           for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]]
    result = {"command": command(argv), "commit": git_commit(), "cpu": cpu_description(),
              "model": type(server.model).__name__, "gym_id": args.gym_id,
              "batch_size": ddrl_args.batch_size, "threads": 1,
              "ms_per_update": round(min(blocks), 3), "blocks_ms": [round(b, 3) for b in blocks],
              "profiled_ms_per_update": round(total_us / args.updates / 1e3, 3),
              "profiled_ms_per_update_by_group": per_update,
              "share_by_group": {k: round(v / total_us, 3) for k, v in sorted(groups.items())},
              "top_operators": top}
    print(f"{result['model']} on {args.gym_id}'s shapes, batch {ddrl_args.batch_size}, 1 thread: "
          f"{result['ms_per_update']:.2f} ms/update (profiled {result['profiled_ms_per_update']:.2f})")
    for name, ms in per_update.items():
        print(f"  {name:16s} {ms:7.3f} ms/update  {result['share_by_group'][name]:6.1%}")
    for row in top:
        print(f"    {row['operator']:32s} {row['calls_per_update']:6.2f} calls "
              f"{row['ms_per_update']:7.3f} ms  {row['share']:6.1%}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
