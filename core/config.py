"""Typed, frozen configs, one per component of a run, generated from the flags the component adds
(fairseq's dataclass configs the other way round: ``add_args(parser)`` stays a plugin's
interface, and its config class is made from the actions it adds, with their types and defaults).

A run's spec (core/plugins.py PluginSpec) holds five: ``run`` (the run-wide flags: seeds,
budgets, workers, evaluation, faults, your custom_options), and ``env``, ``model``, ``agent``,
``loop``, each its plugin's own flags plus the run-wide ones. A component is built with its own
config and nothing else: a flag it does not have is an AttributeError naming the component,
not a silent default. options/options.py ``run_spec`` makes them from the parsed command line.
"""
import argparse
import dataclasses
import functools
from typing import Any, Optional

#: what every env config has besides its flags: set by core.plugins.make_env (the test
#: worker's and --evaluate's envs) and ddrl.playback (--record_video)
ENV_EXTRAS = (("evaluation", bool, False), ("render_mode", Optional[str], None))


def flag_actions(add_args):
    """The argparse actions ``add_args(parser)`` adds (none for None)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    if add_args is not None:
        add_args(parser)
    return [a for a in parser._actions if a.option_strings]


def annotation(action):
    """The Python type of a flag's value, from its argparse action."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                           argparse.BooleanOptionalAction)):
        return bool
    kind = action.type
    if kind in (int, float, str):
        found = kind
    elif kind is None:
        found = str if action.default is None else type(action.default)
    else:
        found = getattr(kind, "__annotations__", {}).get("return", Any)
    if action.nargs not in (None, "?"):
        found = list
    return Optional[found] if action.default is None else found


class ConfigBase:
    """What every generated config has: a readable error for a flag it lacks."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{type(self).__name__} has no flag {name!r}: a component sees its own flags and "
            f"the run-wide ones (core/config.py). Add --{name} to its add_args, or read it "
            f"where it belongs.")

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=None)
def config_class(name, fields):
    """A frozen dataclass ``name`` with ``fields``: a tuple of (name, type, default)."""
    return dataclasses.make_dataclass(
        name, [(f, t, dataclasses.field(default=d)) for f, t, d in fields],
        bases=(ConfigBase,), frozen=True)


def make_config(name, actions, values, extras=()):
    """An instance of the config class of ``actions`` (and ``extras``: (name, type, default)),
    with the values from the mapping ``values`` (a parsed namespace's vars)."""
    fields, seen = [], set()
    for action in actions:
        if action.dest not in seen and action.dest != "help":
            seen.add(action.dest)
            default = action.default if action.default is not argparse.SUPPRESS else None
            fields.append((action.dest, annotation(action), _hashable(default)))
    fields += [extra for extra in extras if extra[0] not in seen]
    cls = config_class(name, tuple(fields))
    return cls(**{f: values[f] for f, _, _ in fields if f in values})


def _hashable(value):
    """A list default as a tuple: the field list is the class cache's key, and a mutable
    default is no dataclass default."""
    return tuple(value) if isinstance(value, list) else value


def add_args_from(config_cls):
    """An ``add_args(parser)`` generated from a dataclass of fields, each a flag ``--<name>``
    with its default, its type (int, float, str; bool becomes --name / --no-name) and the
    help text of ``field(metadata={"help": ...})``; ``metadata`` may also give ``type`` (an
    argparse type such as core.argtypes.positive_int) and ``choices``. What a plugin gets by
    declaring ``Config`` instead of writing add_args (fairseq's dataclass configs)."""
    def add_args(parser):
        for field in dataclasses.fields(config_cls):
            default = (field.default if field.default is not dataclasses.MISSING
                       else field.default_factory())
            help_text = (field.metadata.get("help", "") + " (default: %(default)s)").strip()
            if field.type is bool:
                parser.add_argument(f"--{field.name}", action=argparse.BooleanOptionalAction,
                                    default=default, help=help_text)
                continue
            kind = field.metadata.get("type", field.type if field.type in (int, float, str)
                                      else None)
            parser.add_argument(f"--{field.name}", type=kind, default=default,
                                choices=field.metadata.get("choices"), help=help_text)
    return add_args
