"""What --confirm_episodes buys: the same runs stopped at the first evaluation that reaches the
target (--confirm_episodes 0) and only once the confirming episodes agree (the default, 50),
each stopped checkpoint then played for --check_episodes on starts neither saw (--evaluate with
another seed). A stop on a lucky 10-episode mean shows as a check well below the target.

    python benchmarks/confirmation.py --seeds 0 1 2 3 4 --out benchmarks/results/memorychoice-confirm.json

Default: the LSTM preset of ddrl/MemoryChoice-v0 (target 0.9: nine choices in ten right on
average; a mean of 10 episodes reaches it with every one right). Prints a markdown table.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK_SEED = 424_242  # --evaluate's seed: its starts are none of the runs' own


def run(argv, timeout):
    proc = subprocess.run([sys.executable, "main.py", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "DDRL_PLOTS": "0"})
    if proc.returncode not in (0, 3):  # 3: stopped at --max_time
        raise RuntimeError(f"main.py {' '.join(argv)} exited {proc.returncode}:\n"
                           f"{proc.stderr[-2000:]}")
    return proc.stdout


def check(run_dir, episodes):
    """The stopped checkpoint's mean return over ``episodes`` fresh deterministic episodes."""
    out = run(["--evaluate", os.path.join(run_dir, "checkpoints", "last.pt"), "--eval_episodes",
               str(episodes), "--seed", str(CHECK_SEED), "--num_workers", "0"], timeout=600)
    found = re.search(r"episodes, return (-?[\d.]+) \+- ([\d.]+)", out)
    return float(found.group(1)), float(found.group(2))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--confirm", type=int, nargs="+", default=[0, 50],
                   help="--confirm_episodes values to run (default: 0 50)")
    p.add_argument("--check_episodes", type=int, default=100)
    p.add_argument("--flags", default="--gym_id ddrl/MemoryChoice-v0",
                   help="main.py's flags besides --seed (default: the MemoryChoice preset)")
    p.add_argument("--out", default=None, help="results JSON")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for confirm in args.confirm:
                run_dir = os.path.join(tmp, f"s{seed}-c{confirm}")
                run([*args.flags.split(), "--seed", str(seed), "--confirm_episodes",
                     str(confirm), "--run_dir", run_dir, "--quiet"], timeout=1800)
                with open(os.path.join(run_dir, "summary.json")) as f:
                    summary = json.load(f)
                mean, std = check(run_dir, args.check_episodes)
                found = summary.get("target_confirmation") or {}
                rows.append({"seed": seed, "confirm_episodes": confirm,
                             "stopped_because": summary["stopped_because"],
                             "env_steps": summary["env_steps"],
                             "wall_time_s": summary["wall_time_s"],
                             "time_to_target_s": summary["time_to_target_s"],
                             "steps_to_target": summary["steps_to_target"],
                             "last_eval_return": summary["last_eval_return"],
                             "confirmation": found or None,
                             "unconfirmed_evaluations": summary["unconfirmed_evaluations"],
                             "check_return": mean, "check_return_std": std})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n| --confirm_episodes | seed | stopped | env steps | last eval (10) | confirming "
          f"mean [95%] | unconfirmed | check ({args.check_episodes} fresh) |")
    print("| ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |")
    for r in rows:
        c = r["confirmation"] or {}
        cell = (f"{c['eval_return']:.2f} [{c['interval'][0]:.2f}, {c['interval'][1]:.2f}]"
                if c.get("interval") else "-")
        print(f"| {r['confirm_episodes']} | {r['seed']} | {r['stopped_because']} | "
              f"{r['env_steps']:,} | {r['last_eval_return']:.2f} | {cell} | "
              f"{r['unconfirmed_evaluations']} | {r['check_return']:.2f} +- "
              f"{r['check_return_std']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"flags": args.flags, "check_episodes": args.check_episodes,
                       "check_seed": CHECK_SEED, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
