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
import json
import os
import time

from core.errors import ConfigError
from options.keywords import argv_for
from core.run.metrics import read_metrics

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
        """The trained policy (ddrl/policy.py): "best" (checkpoints/best.pt, the best
        evaluation; else the newest), "last", or a file name in checkpoints/."""
        from ddrl.policy import load
        if checkpoint == "best":
            return load(self.run_dir)
        name = checkpoint if checkpoint.endswith(".pt") else f"{checkpoint}.pt"
        return load(os.path.join(self.run_dir, "checkpoints", name))

    def __repr__(self):
        return (f"Run({self.run_dir!r}, stopped because {self.summary.get('stopped_because')}, "
                f"best eval {self.summary.get('best_eval_return')})")


def train(argv=None, callbacks=(), **flags):
    """Train with ``flags`` (module docstring), or with a command line ``argv`` (a list of
    tokens, as main.py takes); returns the Run. ``callbacks``: ddrl.Callback objects
    (ddrl/callbacks.py) called in this process with each evaluation and metrics row; one may
    add columns and stop the run. Raises ConfigError for bad input, and what a run raises for
    a fault past its limit (the run directory keeps its last checkpoint)."""
    start_time = time.time()
    from ddrl.session import TrainingSession
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
    session = TrainingSession(args, start_time, observers=list(callbacks))
    code = session.run()
    return Run(session.run_dir, code, argv)
