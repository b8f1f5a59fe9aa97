"""A run directory's model card, RUN_DIR/README.md: what was trained, on what, with which flags,
how its evaluations went (with their intervals), the learning curve, and how to load, evaluate
and export the policy. Written atomically when a run ends, and on demand:

    python main.py --model_card RUN_DIR       (ddrl/playback.py model_card_command)

Everything in it is read from the run directory (summary.json, config.yaml, metrics.csv,
checkpoints/best.pt.json, learning_curves.png), so a card rewritten later says the same, plus
what was added since (a longer run restored into the directory).
"""
import json
import math
import os
import shlex

from core.atomic import atomic_write_text
from core.errors import ConfigError
from core.run.metrics import evaluated_steps, read_metrics

CARD = "README.md"
#: the z of a two-sided 95% normal interval
Z95 = 1.959964


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _evaluations(run_dir):
    """metrics.csv's evaluation rows as (env steps of the weights evaluated, mean, std) floats
    (std NaN when absent; runs written before ``eval_env_steps`` existed: the row's steps)."""
    return [(evaluated_steps(row), row["eval_return"],
             row["eval_return_std"] if row.get("eval_return_std") is not None else math.nan)
            for row in read_metrics(os.path.join(run_dir, "metrics.csv"))
            if row.get("eval_return") is not None]


def _number(value, spec=".1f"):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if isinstance(value, float) else f"{value:,}"


def _interval(mean, std, episodes):
    """A 95% normal interval of an evaluation's mean from its episodes' spread."""
    if math.isnan(std) or episodes < 2:
        return "-"
    half = Z95 * std / math.sqrt(episodes)
    return f"[{mean - half:.1f}, {mean + half:.1f}]"


def _placement(config):
    workers, envs = config.get("num_workers"), config.get("num_envs_per_worker", "?")
    if workers == 0:
        return f"in one process (`--num_workers 0`) stepping {envs} envs"
    return f"{workers if workers is not None else '?'} rollout workers x {envs} envs"


def _confirmation_rows(summary):
    """The confirming evaluation of --confirm_episodes (core/sampling/eval_runner.py): its mean,
    95% interval and whether it agreed; nothing where none ran."""
    found = summary.get("target_confirmation")
    if not found:
        return []
    interval = found.get("interval")
    return [f"| confirmed by {found['episodes']} fresh episodes | "
            f"{'yes' if found['confirmed'] else 'no'}: mean {_number(found['eval_return'])}"
            + (f", 95% interval {interval[0]:.1f} to {interval[1]:.1f}" if interval else "")
            + f" (the evaluation at {_number(found.get('env_steps'))} env steps had "
            f"{_number(found.get('evaluation_return'))}) |"]


def render_model_card(run_dir):
    """The card's markdown for ``run_dir``."""
    import yaml
    summary = _read_json(os.path.join(run_dir, "summary.json")) or {}
    config_path = os.path.join(run_dir, "config.yaml")
    config = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = yaml.safe_load(f) or {}
    best_meta = _read_json(os.path.join(run_dir, "checkpoints", "best.pt.json"))
    evaluations = _evaluations(run_dir)
    episodes = int(config.get("eval_episodes") or 10)
    model, agent = config.get("model_name", "?"), config.get("agent_name", "?")
    env = config.get("gym_id") if config.get("env_name") == "gym_env" else config.get("env_name")
    quoted = shlex.quote(run_dir)

    lines = [f"# {model} on {env or '?'}", "",
             f"A ddrl run: model `{model}`, agent `{agent}`, env `{config.get('env_name', '?')}`"
             + (f" (`{config['gym_id']}`"
                + "".join(f", `{pair}`" for pair in config.get("gym_kwargs") or ()) + ")"
                if config.get("gym_id") else "")
             + f", seed {config.get('seed', '?')}, {_placement(config)}.", "",
             "## Training", "",
             "| | |", "| --- | --- |",
             f"| env steps | {_number(summary.get('env_steps'))} |",
             f"| wall time (s) | {_number(summary.get('wall_time_s'))} |",
             f"| stopped because | {summary.get('stopped_because', 'still running, or killed')} |",
             f"| target return | {_number(summary.get('target_return'))} |",
             f"| time to target (s) | {_number(summary.get('time_to_target_s'))} |",
             f"| env steps to target | {_number(summary.get('steps_to_target'))} |",
             *_confirmation_rows(summary),
             f"| best / last evaluation | {_number(summary.get('best_eval_return'))} / "
             f"{_number(summary.get('last_eval_return'))} |", ""]
    faults = {k: summary.get(k) for k in ("worker_restarts", "env_errors", "recoveries",
                                          "skipped_updates") if summary.get(k)}
    if faults:
        lines += ["Faults survived: " + ", ".join(f"{k} {v}" for k, v in faults.items()) + ".",
                  ""]

    lines += ["## Evaluations", ""]
    if evaluations:
        best = max(evaluations, key=lambda row: row[1])
        last = evaluations[-1]
        lines += [f"Each evaluation: {episodes} "
                  f"{'deterministic' if config.get('eval_deterministic', True) else 'sampled'} "
                  f"episodes on envs of their own. The interval is a 95% normal interval of the "
                  f"mean from those episodes' spread (one evaluation, one seed: for an interval "
                  f"across seeds run `--evaluate` with `--eval_seeds`, below).", "",
                  "| evaluation | env steps | mean return | std | 95% interval |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for name, row in (("best (checkpoints/best.pt)", best), ("last", last)):
            lines.append(f"| {name} | {_number(int(row[0]))} | {row[1]:.1f} | "
                         f"{_number(row[2])} | {_interval(row[1], row[2], episodes)} |")
        lines.append(f"| (all {len(evaluations)}) | | | | see metrics.csv |")
    else:
        lines.append("No evaluation finished.")
    if best_meta is not None:
        lines += ["", f"`checkpoints/best.pt` holds the weights of the evaluation that returned "
                      f"{_number(best_meta.get('eval_return'))} at "
                      f"{_number(best_meta.get('env_steps'))} env steps."]
    lines.append("")
    if os.path.exists(os.path.join(run_dir, "learning_curves.png")):
        lines += ["## Learning curve", "", "![learning curves](learning_curves.png)", ""]

    lines += ["## Use it", "",
              "From Python (wherever ddrl is installed):", "", "```python",
              "import ddrl", f"policy = ddrl.load({run_dir!r})   # checkpoints/best.pt",
              "env = policy.make_env()", "obs, _ = env.reset(seed=0)",
              "action = policy.act(obs)" + ("   # recurrent: action, state = policy.act(obs, "
                                            "state)" if config.get("recurrent") not in
                                            (None, "none") else ""),
              "```", "", "From the command line:", "", "```",
              f"ddrl evaluate {quoted} --eval_seeds 5        # returns over 5 seeds",
              f"ddrl evaluate {quoted} --record_video videos  # a GIF",
              f"ddrl export {quoted} --format onnx --out policy.onnx",
              f"ddrl export {quoted} --format pt2 --out policy.pt2",
              f"ddrl train --restore {quoted} --total_steps N   # train on", "```", ""]
    if config:
        lines += ["## Flags", "",
                  "The run's whole configuration (`config.yaml`; `ddrl train --config "
                  "config.yaml` trains a new run with it):", "", "```yaml",
                  yaml.safe_dump(config, sort_keys=False).rstrip(), "```", ""]
    return "\n".join(lines)


def write_model_card(run_dir):
    """Write RUN_DIR/README.md atomically; returns its path."""
    if not os.path.isdir(run_dir) or not os.path.exists(os.path.join(run_dir, "config.yaml")):
        raise ConfigError(f"--model_card {run_dir}: not a run directory (no config.yaml). "
                          f"Give the --run_dir of a training run.")
    path = os.path.join(run_dir, CARD)
    atomic_write_text(path, render_model_card(run_dir))
    return path
