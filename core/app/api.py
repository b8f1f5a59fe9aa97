"""ddrl.train: a training run from Python, every flag a keyword; the command line is its shell.

    import ddrl
    run = ddrl.train(gym_id="CartPole-v1", num_workers=0, total_steps=50_000, seed=0)
    run.summary["best_eval_return"], run.metrics[-1]["env_steps"]
    policy = run.policy()                          # ddrl.load(run.run_dir)

Keywords are the command line's flags without the dashes (the chosen plugins' and the training
loop's included, a preset applied as on the command line), and they are checked by the same
parser: an unknown keyword or a bad value raises core.registry.ConfigError with the paragraph
``python main.py`` prints. Values are Python values: True / False for switches, lists for
comma-separated flags (``dqn_hidden_sizes=[256, 256]``), None to leave a flag at its default.
"""
import argparse
import json
import os
import time

from core.errors import ConfigError
from core.run.metrics import read_metrics

#: the flags that choose the parser (plugins, presets, a restored run's configuration): read
#: before the others are converted
PARSER_KEYS = ("env_name", "model_name", "agent_name", "user_dir", "config", "gym_id", "restore")


def flags_to_argv(flags, actions=None):
    """Command-line tokens for ``flags`` ({name: value}). With ``actions`` ({dest: argparse
    action}, the run's parser) switches become --name / --no-name as their action takes them;
    a name with no action is passed as --name VALUE, for the parser to reject as it would on
    the command line."""
    argv = []
    for name, value in flags.items():
        if value is None:
            continue
        action = (actions or {}).get(name)
        option = f"--{name}"
        if isinstance(value, bool):
            if isinstance(action, argparse.BooleanOptionalAction):
                argv.append(option if value else f"--no-{name}")
                continue
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
                if value == isinstance(action, argparse._StoreTrueAction):
                    argv.append(option)
                continue
        if isinstance(value, (list, tuple)):
            if action is not None and action.nargs in ("+", "*"):
                argv += [option, *map(str, value)]
            else:
                argv += [option, ",".join(map(str, value))]
            continue
        argv += [option, str(value)]
    return argv


def argv_for(flags):
    """The command line ``ddrl.train(**flags)`` stands for (module docstring)."""
    from options.options import build_parser
    first = flags_to_argv({k: v for k, v in flags.items() if k in PARSER_KEYS})
    parser, _, _ = build_parser(first)
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    return flags_to_argv(flags, actions)


class Run:
    """A finished training run: ``run_dir``, ``exit_code`` (as main.py's: 0 done, 130
    interrupted), ``summary`` (summary.json), ``metrics`` (metrics.csv's rows, numbers as
    floats, empty cells as None), ``argv`` (the equivalent command line)."""

    def __init__(self, run_dir, exit_code, argv):
        self.run_dir, self.exit_code, self.argv = run_dir, exit_code, argv
        with open(os.path.join(run_dir, "summary.json")) as f:
            self.summary = json.load(f)
        self.metrics = read_metrics(os.path.join(run_dir, "metrics.csv"))

    def policy(self, checkpoint="best"):
        """The trained policy (core/app/policy.py): "best" (checkpoints/best.pt, the best
        evaluation; else the newest), "last", or a file name in checkpoints/."""
        from core.app.policy import load
        if checkpoint == "best":
            return load(self.run_dir)
        name = checkpoint if checkpoint.endswith(".pt") else f"{checkpoint}.pt"
        return load(os.path.join(self.run_dir, "checkpoints", name))

    def __repr__(self):
        return (f"Run({self.run_dir!r}, stopped because {self.summary.get('stopped_because')}, "
                f"best eval {self.summary.get('best_eval_return')})")


def train(argv=None, **flags):
    """Train with ``flags`` (module docstring), or with a command line ``argv`` (a list of
    tokens, as main.py takes); returns the Run. Raises ConfigError for bad input, and what a
    run raises for a fault past its limit (the run directory keeps its last checkpoint)."""
    start_time = time.time()
    from core.app.session import TrainingSession
    from options.options import parse_args
    if argv is not None and flags:
        raise ConfigError("ddrl.train: give either a command line (argv) or keywords, not both.")
    argv = list(argv) if argv is not None else argv_for(flags)
    args = parse_args(argv)
    for option in ("tune", "evaluate", "record_video"):
        if getattr(args, option, None):
            raise ConfigError(f"ddrl.train: --{option} is a command of its own; run it with "
                              f"`python main.py` (ddrl.train trains one run, ddrl.load loads "
                              f"one).")
    session = TrainingSession(args, start_time)
    code = session.run()
    return Run(session.run_dir, code, argv)
