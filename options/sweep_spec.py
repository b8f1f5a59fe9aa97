"""A sweep's SPEC: which flags vary and how, checked against the run's own flags before any trial.

A SPEC is a YAML mapping from flag names (without dashes) to a distribution or a fixed value:

    lr: {loguniform: [1.0e-5, 1.0e-3]}     # log-uniform between the bounds
    clip_range: {uniform: [0.1, 0.3]}      # uniform between the bounds
    num_epochs: {randint: [3, 10]}         # an integer, both bounds included
    hidden_sizes: {choice: ["64,64", "256,256"]}
    gae_lambda: {grid: [0.9, 0.95, 0.99]}  # every value, each with --num_samples trials
    ent_coef: 0.01                         # fixed for every trial

A flag is any flag the run has: ddrl's own, the chosen env's, model's and agent's (their
``add_args``) and the training loop's. Every bound and every choice must pass the flag's own
type and choices, so a SPEC that a trial would reject fails here, as one paragraph, before Ray
starts. A trial's sampled values become command-line flags (``config_to_argv``) that follow the
sweep's fixed flags, so they win over presets and defaults exactly as typed flags do.
"""
import argparse
import math
import os

import yaml

from core.errors import ConfigError

DISTRIBUTIONS = {
    # name: (number of arguments or None for a list, what it is)
    "uniform": (2, "[low, high]: a float drawn uniformly"),
    "loguniform": (2, "[low, high]: a float drawn uniformly in log space (low > 0)"),
    "randint": (2, "[low, high]: an integer, both bounds included"),
    "choice": (None, "[a, b, ...]: one of the values"),
    "grid": (None, "[a, b, ...]: every value, in turn"),
}

# Flags of the sweep itself, never passed on to a trial (value-taking, then switches).
SWEEP_VALUE_FLAGS = ("tune", "num_samples", "max_concurrent", "search", "scheduler",
                     "grace_steps", "reduction_factor", "pbt_interval", "cpus_per_trial",
                     "run_dir", "restore", "address", "node_ip_address", "dashboard_host",
                     "num_cpus")
SWEEP_SWITCHES = ("quiet", "dashboard")
# Flags a SPEC may not vary: the sweep's own, and those that hold for the whole sweep.
NOT_SWEEPABLE = set(SWEEP_VALUE_FLAGS) | set(SWEEP_SWITCHES) | {
    "config", "user_dir", "env_name", "model_name", "agent_name", "evaluate", "record_video",
    "video_episodes", "list"}

ALLOWED = ", ".join(f"{{{name}: {what.split(':')[0]}}}" for name, (_, what) in DISTRIBUTIONS.items())


#: the sweep specs ddrl carries (configs/sweeps, in a checkout and in the installed package)
SWEEPS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "configs", "sweeps")


def spec_file(path):
    """SPEC: a file, else one of the specs ddrl carries by its name (ppo-cartpole), its file
    name or as README writes it (configs/sweeps/ppo-cartpole.yaml), from any directory."""
    if os.path.isfile(path):
        return path
    from options.options import preset_named, yaml_names
    found = preset_named(path, SWEEPS_DIR, os.path.join("configs", "sweeps"))
    if found is None:
        raise ConfigError(f"--tune {path!r}: no such file, nor one of ddrl's sweep specs "
                          f"({', '.join(yaml_names(SWEEPS_DIR))}). A SPEC is a YAML mapping of flags to "
                          f"distributions, e.g. `lr: {{loguniform: [1.0e-5, 1.0e-3]}}`.")
    return found


def load_spec(path):
    """The SPEC file as {flag: Dist or fixed value}; the format is checked, not the flags."""
    path = spec_file(path)
    with open(path) as f:
        try:
            raw = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--tune {path!r} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"--tune {path!r} must be a non-empty mapping of flag names to "
                          f"distributions, e.g. `lr: {{loguniform: [1.0e-5, 1.0e-3]}}`.")
    return {str(key).lstrip("-").replace("-", "_"): parse_entry(path, key, value)
            for key, value in raw.items()}


class Dist:
    """One flag's distribution: ``kind`` (a DISTRIBUTIONS name) and its ``values``."""

    def __init__(self, kind, values):
        self.kind, self.values = kind, list(values)

    def __repr__(self):
        return f"{{{self.kind}: {self.values}}}"

    def candidates(self):
        """Values a trial can get that must each pass the flag's type: the choices, or the
        bounds and (uniform, loguniform) a fractional value between them (a float drawn for an
        integer flag is an error now, not in a trial)."""
        if self.kind in ("uniform", "loguniform"):
            low, high = self.values
            return [low, high, low + (high - low) * 0.37]
        return list(self.values)


def parse_entry(path, key, value):
    where = f"--tune {path}: {key}"
    if not isinstance(value, dict):
        if isinstance(value, list):
            raise ConfigError(f"{where}: {value!r} is a list; write {{choice: {value}}} or "
                              f"{{grid: {value}}}. Allowed: {ALLOWED}, or one fixed value.")
        return value  # fixed for every trial
    if len(value) != 1:
        raise ConfigError(f"{where}: {value!r} must name exactly one distribution. "
                          f"Allowed: {ALLOWED}.")
    kind, args = next(iter(value.items()))
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{where}: unknown distribution {kind!r}. Allowed: {ALLOWED}.")
    count, what = DISTRIBUTIONS[kind]
    if not isinstance(args, list) or not args or (count is not None and len(args) != count):
        raise ConfigError(f"{where}: {kind} takes {what}; got {args!r}.")
    if count == 2:
        low, high = args
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args)
        if not numeric or not all(math.isfinite(v) for v in args):
            raise ConfigError(f"{where}: {kind} bounds must be finite numbers; got {args!r} "
                              f"(quote nothing: 1.0e-3, not '1e-3').")
        if kind == "randint" and not all(float(v).is_integer() for v in args):
            raise ConfigError(f"{where}: randint bounds must be integers; got {args!r}.")
        if not low < high:
            raise ConfigError(f"{where}: {kind} needs low < high; got {args!r}.")
        if kind == "loguniform" and low <= 0:
            raise ConfigError(f"{where}: loguniform needs low > 0; got {args!r}.")
        if kind == "randint":
            args = [int(low), int(high)]
    return Dist(kind, args)


def check_spec(spec, actions, path, search):
    """Every SPEC key is a flag of this run that a sweep may set, and every bound or choice
    passes that flag's type and choices. ``actions``: options.flag_actions(argv)."""
    for key, entry in spec.items():
        where = f"--tune {path}: {key}"
        if key not in actions:
            import difflib
            close = difflib.get_close_matches(key, list(actions), n=3)
            raise ConfigError(f"{where}: no such flag for this run (its env, model, agent and "
                              f"training loop included)"
                              + (f"; did you mean {', '.join(close)}?" if close else ".")
                              + " Run `python main.py <your flags> -h` to list them.")
        if key in NOT_SWEEPABLE:
            raise ConfigError(f"{where}: --{key} is set by the sweep or holds for the whole "
                              f"sweep; give it on the command line instead.")
        action = actions[key]
        if isinstance(entry, Dist) and entry.kind in ("uniform", "loguniform", "randint"):
            if action.type is None or action.nargs == 0:
                raise ConfigError(f"{where}: --{key} is not numeric; use {{choice: [...]}}.")
        for value in entry.candidates() if isinstance(entry, Dist) else [entry]:
            check_value(where, key, action, value)
        if search == "optuna" and isinstance(entry, Dist) and entry.kind == "grid":
            raise ConfigError(f"{where}: grid goes with --search random; Optuna chooses values "
                              f"itself. Use {{choice: {entry.values}}}.")


def check_value(where, key, action, value):
    """``value`` as the flag would take it on the command line, or a one-paragraph error."""
    if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: --{key} is a switch; its values are true and false, "
                              f"not {value!r}.")
        return
    text = value_text(value)
    converted = text
    if action.type is not None:
        try:
            converted = action.type(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {value!r} is not a value --{key} takes ({exc}).") \
                from None
        except ConfigError as exc:
            raise ConfigError(f"{where}: {value!r} is not a value --{key} takes ({exc}).") \
                from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: {value!r} is not one of --{key}'s choices: "
                          f"{', '.join(map(str, action.choices))}.")


def value_text(value):
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return repr(value) if isinstance(value, float) else str(value)


def config_to_argv(config, actions):
    """A trial's sampled values as command-line flags (switches as --x / --no-x)."""
    argv = []
    for key, value in sorted(config.items()):
        action = actions[key]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(f"--{key}" if value else f"--no-{key}")
        elif action.nargs == 0:  # store_true
            if value:
                argv.append(f"--{key}")
        else:
            argv += [f"--{key}", value_text(value)]
    return argv


def search_space(spec):
    """The SPEC as Ray Tune's param_space (fixed values stay as they are)."""
    from ray import tune
    space = {}
    for key, entry in spec.items():
        if not isinstance(entry, Dist):
            space[key] = entry
        elif entry.kind == "uniform":
            space[key] = tune.uniform(*entry.values)
        elif entry.kind == "loguniform":
            space[key] = tune.loguniform(*entry.values)
        elif entry.kind == "randint":
            low, high = entry.values
            space[key] = tune.randint(low, high + 1)  # Tune's upper bound is exclusive
        elif entry.kind == "choice":
            space[key] = tune.choice(entry.values)
        else:
            space[key] = tune.grid_search(entry.values)
    return space


def mutations(spec):
    """PBT's hyperparam_mutations: the SPEC's distributions (resampled when PBT explores)."""
    space = search_space({k: v for k, v in spec.items()
                          if isinstance(v, Dist) and v.kind != "grid"})
    if not space:
        raise ConfigError("--scheduler pbt needs at least one flag in the SPEC with a "
                          "distribution other than grid (PBT perturbs those).")
    return space


def flags_given(argv, keys):
    """The SPEC keys also typed on the sweep's command line (ambiguous: which one holds?)."""
    given = set()
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            if name.startswith("no_"):
                name = name[3:]
            given.add(name)
    return sorted(given & set(keys))
