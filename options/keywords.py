"""Python keywords as command-line tokens: ``ddrl.train(**flags)`` and ``ddrl.load(path,
**flags)`` are checked by the very parser ``python main.py`` uses, so that a keyword and a flag
can never mean two things."""
import argparse
import json

#: the flags that choose the parser (plugins, presets, a restored run's configuration): read
#: before the others are converted
PARSER_KEYS = ("env_name", "model_name", "agent_name", "user_dir", "config", "gym_id", "restore",
               "logger")


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
        if isinstance(value, dict):  # a KEY=VALUE flag (gym_env's --gym_kwargs): JSON values
            argv += [option, dict_text(name, value)]
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
    from options.options import build_parser  # (here: the keywords module stays light)
    first = flags_to_argv({k: v for k, v in flags.items() if k in PARSER_KEYS})
    parser, _, _ = build_parser(first)
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    unknown = [name for name in flags if name not in actions and name not in PARSER_KEYS
               and flags[name] is not None]
    if unknown:
        import difflib
        from core.errors import ConfigError
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, list(actions), n=1, cutoff=0.75)
            hints.append(f"{name}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ConfigError(
            f"unknown keyword{'s' if len(unknown) > 1 else ''}: {', '.join(hints)}. A keyword "
            f"is a flag's name without its dashes (num_workers=2 for --num_workers 2); a "
            f"plugin's own come with its env_name, model_name or agent_name.")
    return flags_to_argv(flags, actions)


def dict_text(name, mapping):
    """{key: value} as a KEY=VALUE flag's text, each value as JSON (envs/gym_kwargs.py)."""
    try:
        return ",".join(f"{key}={json.dumps(value)}" for key, value in mapping.items())
    except TypeError as exc:
        from core.errors import ConfigError
        raise ConfigError(
            f"{name}={mapping!r}: {exc}; its values must be numbers, strings, booleans, None, "
            f"lists or dicts of them (they travel to Ray workers and into checkpoints as "
            f"data). For an object an env needs, register an id of your own that builds it "
            f"(gym.register in your module, then --gym_id MODULE:ID).") from None
