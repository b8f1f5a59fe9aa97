"""Experiment trackers (``--logger tensorboard,csv,wandb,mlflow``): where a run's metrics rows
go. A tracker is an observer of the run (core/run/observer.py) of phase "recorder", made by the
session with the run's flags; it may bring flags of its own (a static ``add_args(parser)``,
added only when it is chosen: ``python main.py --logger wandb -h`` shows them):

    @register_logger("my_tracker")
    class MyTracker(Logger):
        @staticmethod
        def add_args(parser): parser.add_argument("--my_tracker_url", default=None, help="...")
        def __init__(self, args): self.url = args.my_tracker_url       # check what it needs
        def on_start(self, run): ...          # run: core.run.observer.RunView
        def on_row(self, run, row): ...       # row: the metrics row, step = row["env_steps"]
        def on_end(self, run, summary): ...   # learning_curves.png and README.md are written

The terminal line and the learning-curve plot are the run's own (core/run/context.py
RowRecorder), whatever --logger says. A --user_dir brings its own tracker in a .py file or a
loggers/ subfolder.
"""
import importlib
import os

from core.errors import ConfigError
from core.registry import Registry, import_package_modules, publish
from core.run.observer import RunObserver

#: --logger's default: what every run wrote before the trackers were plugins
DEFAULT_LOGGERS = ("tensorboard", "csv")


class Logger(RunObserver):
    """The base of a tracker: a recorder (it sees each row as the callbacks left it, before the
    reporters), made with the run's flags (``args``, an argparse.Namespace)."""

    phase = "recorder"

    def __init__(self, args):
        self.args = args


def _check_logger_class(cls):
    if getattr(cls, "phase", None) != "recorder":
        raise ConfigError(f"logger class {cls.__qualname__} has phase {cls.phase!r}: a tracker "
                          f"records rows, so its phase is 'recorder' (subclass loggers.Logger).")


LOGGER_REGISTRY = publish(Registry("logger", base_class=RunObserver, check=_check_logger_class,
                                   home=__name__, flag="--logger"))
register_logger = LOGGER_REGISTRY.register


def chosen_loggers(args):
    """The names --logger lists, less tensorboard with --no-tensorboard (the older switch)."""
    names = getattr(args, "logger", None)
    names = list(DEFAULT_LOGGERS if names is None else names)
    if not getattr(args, "tensorboard", True):
        names = [n for n in names if n != "tensorboard"]
    return names


def make_loggers(args):
    """The run's trackers, one per chosen name, made with ``args``: a tracker whose package is
    missing raises its ConfigError here, before the run starts."""
    return [LOGGER_REGISTRY.get(name)(args) for name in chosen_loggers(args)]


def require(module, pip_line, name):
    """Import ``module`` for the tracker ``name``; a ConfigError naming the package and the pip
    line when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"--logger {name} needs the Python package {module!r}, which cannot "
                          f"be imported here ({exc}). Install it with `pip install {pip_line}` "
                          f"(the version requirements.txt pins), or leave {name} out of "
                          f"--logger.") from None


def run_config(run):
    """The run's flags as a tracker records them: config.yaml's (core/run/context.py
    RUN_ONLY_KEYS left out), with the run directory."""
    from core.run.context import RUN_ONLY_KEYS
    return {k: v for k, v in run.config.items() if k not in RUN_ONLY_KEYS}


def numeric_items(row):
    """The row's numbers as (column, float) pairs, bools, empty cells and text left out."""
    for key, value in row.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            yield key, float(value)
        elif getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy scalar
            value = value.item()
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield key, float(value)


import_package_modules(__name__, os.path.dirname(__file__))
