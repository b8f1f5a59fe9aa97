"""Each policy's return in a PettingZoo team run (envs/pettingzoo_env.py with --policy_map), the
team acting deterministically through ``ddrl.load``; and cross-play: one run's policy for some
agents, another run's for the rest (who learned what against whom).

    .venv/bin/python benchmarks/team_returns.py RUN_A [RUN_B ...] --episodes 200
    .venv/bin/python benchmarks/team_returns.py RUN_A --cross adversary=RUN_B --episodes 200

A policy's return is the mean over its agents of their own rewards' sum over the episode (the
env's ``return_<policy>``). Episodes use seeds 0..E-1 (the same starts for every team); the
interval is a 95% bootstrap over them. With ``--cross NAME=RUN``, policy NAME's agents act as
RUN's policy NAME does and the others as the first run's (both runs must map the same agents to
the same policies). ``--random NAME``: policy NAME's agents act uniformly at random.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ddrl
from ddrl.stats import stratified_bootstrap_ci


def columns(env):
    """{policy: the team action's columns of its agents} (the env's order: by policy)."""
    found, start = {}, 0
    for name in sorted(env.groups):
        found[name] = list(range(start, start + len(env.groups[name])))
        start += len(env.groups[name])
    return found


def play(base, others, randoms, episodes):
    env = base.make_env(seed=0)
    if env.groups is None:
        raise SystemExit("the run has no --policy_map: one policy, whose return is the team's")
    cols = columns(env)
    rng = np.random.default_rng(0)
    returns = {name: [] for name in cols}
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        done, info = False, {}
        while not done:
            action = np.array(base.act(obs))
            for name, policy in others.items():
                action[cols[name]] = np.array(policy.act(obs))[cols[name]]
            for name in randoms:
                action[cols[name]] = [rng.integers(n) for n in env.action_space.nvec[cols[name]]]
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        for name in cols:
            returns[name].append(info["episode_metrics"][f"return_{name}"])
    return {name: summary(values) for name, values in returns.items()}


def summary(values):
    values = np.asarray(values, np.float64)
    low, high = stratified_bootstrap_ci(values, np.mean, reps=10_000, seed=0)
    return {"mean": float(values.mean()), "ci95": [float(low), float(high)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories or checkpoints")
    parser.add_argument("--cross", action="append", default=[], metavar="NAME=RUN",
                        help="policy NAME acts as RUN's (with the first run for the rest)")
    parser.add_argument("--random", action="append", default=[], metavar="NAME",
                        help="policy NAME's agents act uniformly at random")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--out", default=None, help="append the results to this JSON file")
    args = parser.parse_args()
    others = {}
    for entry in args.cross:
        name, _, run = entry.partition("=")
        others[name] = ddrl.load(run)
    results = []
    for run in (args.runs[:1] if others or args.random else args.runs):
        found = play(ddrl.load(run), others, args.random, args.episodes)
        row = {"run": run, "cross": args.cross, "random": args.random,
               "episodes": args.episodes, "returns": found}
        results.append(row)
        print(json.dumps(row))
    if args.out:
        existing = []
        if os.path.exists(args.out):
            with open(args.out) as f:
                existing = json.load(f)
        with open(args.out, "w") as f:
            json.dump(existing + results, f, indent=1)


if __name__ == "__main__":
    main()
