"""Training returns and policy entropy per window of env steps, ddrl's metrics.csv beside SB3's
progress.csv (benchmarks/sb3_ppo.py and sb3_dqn.py write one), for learning curves measured
apart. Models without an entropy (DQN) get the returns alone.

    .venv/bin/python benchmarks/probe.py training-windows --window 50000 \\
        ddrl=benchmarks/results/breakout-ppo/ddrl-0workers/seed0/metrics.csv \\
        sb3=/tmp/sb3-breakout-0/progress.csv [--out results.json]

A ddrl window's return is the mean over the training episodes that ended in it (metrics.csv's
per-round means weighted by their episode counts); SB3's is the mean of its per-rollout
rollout/ep_rew_mean (the Monitor's last 100 episodes) over the window. Entropy: the mean of the
per-round values (SB3: -train/entropy_loss).
"""
import csv
import json


def windows(path, width):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    sb3 = "time/total_timesteps" in rows[0]
    out = {}
    for row in rows:
        steps = int(row["time/total_timesteps" if sb3 else "env_steps"])
        bucket = out.setdefault(steps // width * width, {"returns": [], "entropy": []})
        if sb3:
            # PPO: one row per rollout, after its training; DQN (no entropy): every
            # log_interval episodes
            if row.get("train/entropy_loss", row["rollout/ep_rew_mean"]):
                bucket["returns"].append((float(row["rollout/ep_rew_mean"]), 1))
            if row.get("train/entropy_loss"):
                bucket["entropy"].append(-float(row["train/entropy_loss"]))
        else:
            if row["train_return"]:
                bucket["returns"].append((float(row["train_return"]), int(row["episodes"])))
            if row.get("entropy"):
                bucket["entropy"].append(float(row["entropy"]))
    table = {}
    for start, b in sorted(out.items()):
        count = sum(n for _, n in b["returns"])
        table[start] = {
            "train_return": sum(r * n for r, n in b["returns"]) / count if count else None,
            "entropy": sum(b["entropy"]) / len(b["entropy"]) if b["entropy"] else None}
    return table


def add_args(parser):
    parser.add_argument("runs", nargs="+", metavar="NAME=CSV")
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--out", default=None)


def run(args, argv):
    results = {}
    for run in args.runs:
        name, path = run.split("=", 1)
        results[name] = {"csv": path, "windows": windows(path, args.window)}
        table = results[name]["windows"]
        # a run with entropies prints the windows that have both; one without (DQN) the returns
        entropy = any(w["entropy"] is not None for w in table.values())
        cells = [f"{start // 1000}k {w['train_return']:.2f}"
                 + (f" / {w['entropy']:.3f}" if entropy else "")
                 for start, w in table.items()
                 if w["train_return"] is not None and (w["entropy"] is not None or not entropy)]
        print(f"{name:28s} " + " | ".join(cells))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"window": args.window, "runs": results}, f, indent=1)
