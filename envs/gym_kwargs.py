"""gym_env --gym_kwargs: keyword arguments for the id's constructor, as gymnasium.make takes them
(``gym.make("LunarLander-v3", enable_wind=True)``): ``--gym_kwargs enable_wind=true,wind_power=5``.

A value is JSON (``5``, ``1e-3``, ``true``, ``"8x8"``, ``[1, 2]``, ``null``), else a YAML scalar
(``True``, ``None``), else the text as it is (``map_name=8x8``); commas inside brackets or quotes
do not split pairs. The flag's value is kept as ``key=<JSON>`` texts (config.yaml, checkpoints,
the model card's commands), so it is data of its own and a restored, evaluated or exported run
makes its envs with the same arguments; from Python a dict does too
(``ddrl.train(gym_kwargs={"enable_wind": True})``). Every env of the run gets them: the rollout
workers', the test worker's, ``--evaluate``'s, ``Policy.make_env()``'s and ``--vectorize
native``'s. A key the id's constructor does not take, or a value it refuses, is a one-paragraph
error naming the keys it takes with their defaults; a key with a flag of its own
(``max_episode_steps``, and the Atari preprocessing's) is refused in favour of that flag.
"""
import argparse
import inspect
import json

import yaml

#: keys of gymnasium.make that ddrl sets from flags of its own: that flag, or why
OWN_FLAGS = {"max_episode_steps": "--max_episode_steps",
             "render_mode": "--record_video or Policy.make_env(render_mode=...): ddrl sets it "
                            "where it renders"}
#: keys ddrl may set for an Atari id (frameskip with its preprocessing only): the flag of each
ATARI_FLAGS = {"frameskip": "--frame_skip (or --no-atari_preprocessing to give it here)",
               "max_num_frames_per_episode": "--max_episode_frames",
               "repeat_action_probability": "--repeat_action_probability"}
#: gymnasium.make's own keyword arguments that are no env's
MAKE_KEYWORDS = ("disable_env_checker",)


def split_top_level(text):
    """``text`` split at the commas outside brackets and quotes."""
    parts, current, depth, quote = [], [], 0, None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def parse_value(text):
    """One value as the module docstring says: JSON, else a YAML scalar, else the text."""
    text = text.strip()
    if text == "None":
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float, type(None))) else text


def gym_kwargs_type(text):
    """--gym_kwargs KEY=VALUE[,KEY=VALUE...] as a tuple of 'key=<JSON>' texts ('' or 'none':
    none)."""
    if str(text).strip().lower() in ("", "none"):
        return ()
    pairs = {}
    for item in split_top_level(str(text)):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key.isidentifier():
            raise argparse.ArgumentTypeError(
                f"{text!r}: {item!r} is not KEY=VALUE with KEY a Python name; give the id's "
                f"keyword arguments as comma-separated pairs, e.g. enable_wind=true,"
                f"wind_power=5.0")
        if key in pairs:
            raise argparse.ArgumentTypeError(f"{text!r}: {key!r} is given twice")
        pairs[key] = parse_value(value)
    return as_texts(pairs)


def as_texts(mapping):
    """{key: value} as the flag keeps it: a tuple of 'key=<JSON>' texts."""
    return tuple(f"{key}={json.dumps(value)}" for key, value in mapping.items())


def as_dict(items):
    """--gym_kwargs' texts (the type's output) as {key: value}."""
    return {key: json.loads(value) for key, _, value in (item.partition("=")
                                                         for item in items or ())}


def accepted_keywords(gym_id, vector=False):
    """{name: default} of the id's (vector) constructor, its registered kwargs applied, and
    whether it takes any keyword (**kwargs); None when it cannot be read."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator
    try:
        spec = gym.spec(gym_id)
        entry = spec.vector_entry_point if vector else spec.entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        parameters = inspect.signature(creator).parameters.values()
    except Exception:  # noqa: BLE001 - an entry point we cannot inspect: gym.make decides
        return None
    names = {p.name: (spec.kwargs or {}).get(p.name, p.default) for p in parameters
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "num_envs"}
    any_keyword = any(p.kind == p.VAR_KEYWORD for p in parameters)
    return names, any_keyword


def describe(names):
    return ", ".join(f"{name}={'(required)' if default is inspect.Parameter.empty else default!r}"
                     for name, default in names.items() if name not in OWN_FLAGS) or "none"


def check_gym_kwargs(gym_id, kwargs, set_by_ddrl=(), vector=False):
    """Refuse (a ConfigError) a key with a flag of its own or one ddrl sets for this id
    (``set_by_ddrl``), and one the constructor of ``gym_id`` does not take."""
    from core.errors import ConfigError
    for key in kwargs:
        if key in OWN_FLAGS or key in set_by_ddrl:
            flag = OWN_FLAGS.get(key) or ATARI_FLAGS.get(key, "the flag that sets it")
            raise ConfigError(f"--gym_kwargs {key}: ddrl sets {key} from a flag of its own; "
                              f"use {flag}.")
    accepted = accepted_keywords(gym_id, vector)
    if accepted is None:
        return
    names, any_keyword = accepted
    unknown = [key for key in kwargs if key not in names and key not in MAKE_KEYWORDS]
    if unknown and not any_keyword:
        which = "vector constructor (--vectorize native)" if vector else "constructor"
        raise ConfigError(f"--gym_kwargs {', '.join(unknown)}: {gym_id}'s {which} takes no "
                          f"such keyword. It takes: {describe(names)}.")


def make_with_kwargs(gym_id, kwargs, user_kwargs, num_envs=None):
    """gym.make(gym_id, **kwargs, **user_kwargs) (gym.make_vec's vector entry point with
    ``num_envs``): ``user_kwargs`` checked first (``check_gym_kwargs``; ``kwargs`` are the
    ones ddrl sets), and a constructor refusing them (a TypeError, ValueError or assertion of
    its own) a ConfigError naming them and what it takes."""
    import gymnasium as gym
    from core.errors import ConfigError
    vector = num_envs is not None
    if user_kwargs:
        check_gym_kwargs(gym_id, user_kwargs, set_by_ddrl=kwargs, vector=vector)
    try:
        if not vector:
            return gym.make(gym_id, **kwargs, **user_kwargs)
        return gym.make_vec(gym_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                            **kwargs, **user_kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError, AssertionError) as exc:
        if not user_kwargs:
            raise
        accepted = accepted_keywords(gym_id, vector=vector)
        takes = f" It takes: {describe(accepted[0])}." if accepted else ""
        message = (str(exc).strip().splitlines() or [""])[0][:300]
        given = ",".join(as_texts(user_kwargs))
        raise ConfigError(f"--gym_kwargs {given}: {gym_id} refused them "
                          f"({type(exc).__name__}{': ' + message if message else ''})."
                          f"{takes}") from exc
