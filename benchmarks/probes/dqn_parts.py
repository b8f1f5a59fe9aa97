"""Cost of one DQN-family learner update by Rainbow's parts: plain DQN, C51, then C51 with each
of dueling heads, double-Q targets, noisy layers, prioritized replay and 3-step returns alone,
and all of them (Rainbow), on the shapes of configs/dqn-LunarLander-v3.yaml (8 observations, 4
actions, 256x256, batch 128; C51 with 51 atoms on [-200, 200] as
configs/rainbow-LunarLander-v3.yaml). The update is the parameter server's (the loss, its
backward pass, fused Adam, the target and noise bookkeeping), on random batches, one torch
thread. The replay buffer is not in it: prioritized replay's sampling from the sum-tree and its
priority updates, and n-step returns, cost the loop, not this update (their rows measure that
the update itself is unchanged). BENCHMARKS.md "Rainbow, LunarLander-v3" has
the figures.

    .venv/bin/python benchmarks/probe.py dqn-parts --out /tmp/dqn_parts.json

Each variant runs in this process one after the other; a figure is the fastest of --repeats
timed blocks of --updates updates (after 50 untimed ones), in ms per update.
"""
import json
import os
import time

C51 = ("--model_name", "c51", "--n_atoms", "51", "--v_min", "-200", "--v_max", "200",
       "--c51_adam_eps", "0.00015")
VARIANTS = {
    "dqn": (),
    "c51": C51,
    "c51 + dueling": C51 + ("--dueling",),
    "c51 + double-Q": C51 + ("--double_q",),
    "c51 + noisy": C51 + ("--exploration", "noisy"),
    "c51 + prioritized": C51 + ("--prioritized_replay", "--priority_alpha", "0.5"),
    "c51 + 3-step": C51 + ("--n_step", "3"),
    "rainbow": C51 + ("--dueling", "--double_q", "--exploration", "noisy",
                      "--prioritized_replay", "--priority_alpha", "0.5", "--n_step", "3"),
}

MODEL_PARTS = ("dueling", "double_q", "exploration")  # the model's flags; the others the loop's
LOOP_PARTS = ("prioritized_replay", "n_step")


def add_args(p):
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                   metavar="VARIANT", help=f"which to time (default: all: {', '.join(VARIANTS)})")
    p.add_argument("--updates", type=int, default=200, help="updates per timed block")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks per variant")
    p.add_argument("--out", default=None, help="write the results here as JSON")


def time_variant(flags, updates, repeats, warmup=50):
    """(fastest ms per update, the model's name and its Rainbow parts as the update saw them)."""
    from probes.learning_speed import DQNLunar, ServerUpdate, preset
    workload = DQNLunar.__new__(DQNLunar)  # DQNLunar's shapes and batches, these flags
    ServerUpdate.__init__(workload, "dqn-lunar", "cpu", 0, flags=flags)
    model, (args, _) = workload.server.model, preset("dqn-lunar", *flags)
    built = {"model": type(model).__name__, **{k: getattr(model.args, k) for k in MODEL_PARTS},
             **{k: getattr(args, k) for k in LOOP_PARTS}}
    for _ in range(warmup):
        workload.update()
    blocks = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(updates):
            workload.update()
        blocks.append((time.perf_counter() - start) / updates * 1e3)
    return min(blocks), built


def run(args, argv):
    import torch
    from probes import command, git_commit
    from probes.update_cost import cpu_description
    torch.set_num_threads(1)
    load_before, rows = os.getloadavg()[0], []
    base = None
    for name in args.variants:
        ms, built = time_variant(VARIANTS[name], args.updates, args.repeats)
        base = ms if name == "dqn" else base
        rows.append(dict(variant=name, flags=" ".join(VARIANTS[name]), ms_per_update=round(ms, 3),
                         against_dqn=round(ms / base, 2) if base else None, built=built))
        print(f"{name:18s} {ms:6.2f} ms/update" + (f"  {ms / base:4.2f}x dqn" if base else ""),
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": command(argv), "commit": git_commit(),
                       "load_average_before": load_before, "cpu": cpu_description(),
                       "torch": torch.__version__, "results": rows}, f, indent=1)
