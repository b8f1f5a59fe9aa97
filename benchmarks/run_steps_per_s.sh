#!/bin/bash
# One default CartPole run's own env steps/s (summary.json), appended to a file: farm-bench's
# command for A/B pairs of two checkouts (BENCHMARKS.md, "the cost of the env checks").
#   benchmarks/run_steps_per_s.sh CHECKOUT OUT_FILE
# Runs CHECKOUT's main.py with this repository's .venv: 2 Ray workers, 40,000 env steps, no
# evaluation, no plots; appends "steps_per_s wall_time_s".
set -euo pipefail
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$1"
DDRL_PLOTS=0 "$venv" main.py --gym_id CartPole-v1 --num_workers 2 --total_steps 40000 \
    --target_return none --eval_interval 1000000 --quiet --no-plots --run_dir "$dir/run" \
    > /dev/null 2>&1
"$venv" -c "import json, sys; s = json.load(open(sys.argv[1])); print(s['steps_per_s'], s['wall_time_s'])" \
    "$dir/run/summary.json" >> "$2"
