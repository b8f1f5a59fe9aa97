"""The one-off measurements behind BENCHMARKS.md, one subcommand each (their code in
benchmarks/probes/). The side-by-side harness (compare.py), the scaling grid (scaling.py) and the
peer runs (sb3_ppo.py, sb3_sac.py) are scripts of their own.

    .venv/bin/python benchmarks/probe.py -h                 # the probes
    .venv/bin/python benchmarks/probe.py PROBE -h           # what one measures, and its flags

Run from the repository root with the project venv; the probes that compare against a peer
library need benchmarks/requirements.txt.
"""
import argparse
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

#: subcommand -> (module of benchmarks/probes/, what it measures), in the order -h lists them
PROBES = {
    "overheads": ("overheads", "per-call costs: Ray calls, ray.put, a compiled graph, fused Adam"),
    "sampling": ("sampling", "env steps/s through RolloutWorker.collect, envs x fragment length"),
    "raw-gym": ("raw_gym_sampling", "raw gymnasium stepping speed: the sampling floor"),
    "replay": ("replay_throughput", "replay buffer adds and samples against cpprb"),
    "update-cost": ("update_cost", "one SAC update by network size, torch threads, precision"),
    "update-profile": ("update_profile", "where one replay model's update goes, by operator"),
    "dqn-parts": ("dqn_parts", "one DQN-family update by Rainbow's parts, LunarLander shapes"),
    "update-vs-sb3": ("update_vs_sb3", "one SAC or CrossQ update against SB3's / sb3-contrib's"),
    "ppo-update-vs-sb3": ("ppo_vs_sb3_update", "PPO's numbers against SB3's on one Breakout rollout"),
    "profile-sac": ("profile_sac", "where the cores go in a SAC run (per process, py-spy)"),
    "atari-throughput": ("atari_throughput", "PPO frames/s on Breakout against SB3"),
    "training-windows": ("training_windows", "training returns and entropy per window of steps"),
    "sweep-time": ("sweep_time", "a sweep's wall time against its trials one after another"),
    "soak": ("soak", "RSS of every process and the object store over a long run"),
    "invalid-actions": ("invalid_actions", "a masked env's invalid actions in a ddrl run"),
    "structured-cost": ("structured_cost", "CartPole against DictCartPole: the Dict path's cost"),
    "memory-cost": ("memory_cost", "MLP against LSTM and GRU PPO on CartPole without velocities"),
    "vector-ppo": ("vector_ppo", "PPO env steps/s on a batched CartPole: ddrl, a minimal PPO, SB3"),
    "async-vs-sync": ("async_sync", "APPO's env steps/s against sync PPO's on a slow, uneven env"),
    "appo-vs-sf": ("appo_vs_sf", "ddrl's APPO against Sample Factory's on CartPole, same settings"),
    "learning-speed": ("learning_speed", "samples/s of ddrl's learning step (PPO, DQN, SAC) on a device"),
    "offline-shards": ("offline_shards", "an offline run's dataset in one buffer or sharded: updates/s, RSS"),
}


def build_parser():
    parser = argparse.ArgumentParser(prog="benchmarks/probe.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="probe", metavar="PROBE", required=True)
    for name, (module_name, summary) in PROBES.items():
        module = importlib.import_module(f"probes.{module_name}")
        sp = sub.add_parser(name, help=summary, description=module.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_args(sp)
        sp.set_defaults(probe_run=module.run)
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    run = args.probe_run
    del args.probe_run, args.probe  # the probe sees (and records) its own flags only
    return run(args, argv)


if __name__ == "__main__":
    sys.exit(main())
