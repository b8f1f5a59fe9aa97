"""Resolving plugin names to classes, in the driver and again inside every Ray worker.

Workers receive names and the parsed flags, never classes: each worker imports the built-in
plugin folders and the --user_dir itself, so a user's plugin works in an actor exactly as in the
driver. (Env host actors, core/sampling/env_host.py, get the env class itself: a --user_dir module
travels by value, core/registry.py.)
"""
import argparse
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from core.batched_env import Unbatched, is_batched
from core.errors import ConfigError
from core.registry import import_user_dir, registry_of, unwrap_actor_class

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class PluginSpec:
    """What a run's actors are built from: the plugin names and each component's typed config
    (core/config.py; options/options.py ``run_spec`` makes them from the command line), never
    the whole command line."""
    env_name: str
    model_name: str
    agent_name: str
    run: Any                        # the run-wide flags
    env: Any                        # the env plugin's flags + the run-wide ones
    model: Any
    agent: Any
    loop: Any                       # the training loop's flags + the run-wide ones
    user_dir: Optional[str] = None
    gpus: Any = None                # the run's GpuPlan (core/distributed/devices.py); None: none
    #: the packages of built-in plugins, imported by name in every process that loads the
    #: plugins (options/options.py names them: the library knows none of them)
    plugin_packages: Tuple[str, ...] = ()
    #: (kind, name, class) of the chosen plugins that the user's own code registered as it ran
    #: (core/registry.py registered_by_user_code): registered again in each process that loads
    #: the plugins, their classes travelling by value
    own_plugins: Tuple[Tuple[str, str, Any], ...] = ()


@dataclass
class Plugins:
    env_cls: type        # plain class: runs in the rollout worker or in an env host actor
    model_cls: type
    agent_cls: type


def load_plugins(spec) -> Plugins:
    """The plugin classes ``spec`` names (anything with env_name, model_name, agent_name and
    user_dir: a PluginSpec, or the parsed command line, whose parser imported the packages).
    The spec's ``plugin_packages`` are imported by name first, so that in a Ray worker too their
    registries are published (core/registry.py ``publish``) and their built-ins registered;
    then the --user_dir."""
    for package in getattr(spec, "plugin_packages", ()):
        importlib.import_module(package)
    if spec.user_dir:
        import_user_dir(user_dir_here(spec.user_dir))
    for kind, name, cls in getattr(spec, "own_plugins", ()):
        if name not in registry_of(kind):
            registry_of(kind).register(name)(cls)
    env = registry_of("env").get(spec.env_name)
    return Plugins(unwrap_actor_class(env), registry_of("model").get(spec.model_name),
                   registry_of("agent").get(spec.agent_name))


def user_dir_here(user_dir):
    """The --user_dir on this machine: the driver's path where it exists (one machine, or a
    disk the nodes share), else the copy that Ray's py_modules brought with the job
    (core/distributed/placement.py code_runtime_env): a folder of that name in a _ray_pkg_
    folder on sys.path. On another machine of a cluster the driver's path means nothing."""
    if os.path.isdir(os.path.expanduser(user_dir)):
        return user_dir
    name = os.path.basename(os.path.normpath(user_dir))
    for entry in sys.path:
        candidate = os.path.join(entry, name)
        if os.path.basename(entry).startswith("_ray_pkg_") and os.path.isdir(candidate):
            return candidate
    return user_dir  # import_user_dir says that it is not a folder


def make_env(plugins: Plugins, config, seed=None, evaluation=False, worker_index=None):
    """Build one env in this process from its ``config`` (the spec's ``env``). ``seed`` goes to
    __init__ when it takes one; the first reset is always seeded as well
    (core.sampling.envs.EnvGroup). ``evaluation``: the env sees ``config.evaluation`` True (the
    test worker's and --evaluate's envs), so a wrapper can score whole episodes in the env's
    own reward (envs/gym_env.py: no Atari reward clipping). ``worker_index``: the rollout
    worker slot the env steps in, given to an __init__ that takes ``worker_index`` (as RLlib's
    EnvContext.worker_index: e.g. benchmarks/plugins/slow_env.py's slower workers); None for the test
    worker's and --evaluate's envs and for envs in env actors (--env_placement actor)."""
    if evaluation:
        config = evaluation_config(config)
    if batched_by_nature(plugins.env_cls):  # a single env: the class with one env, unbatched
        return Unbatched(_construct(plugins.env_cls, config, seed, num_envs=1))
    params = inspect.signature(plugins.env_cls.__init__).parameters
    extra = {"worker_index": worker_index} if "worker_index" in params else {}
    env = _construct(plugins.env_cls, config, seed, **extra)
    if is_batched(env):  # a batch the plugin did not declare: it would be stepped as one env
        cls = plugins.env_cls
        raise ConfigError(
            f"the env plugin {cls.__qualname__} ({cls.__module__}) built "
            f"{type(env).__name__}, a batch of {env.num_envs} envs (gymnasium's VectorEnv "
            f"API), but does not say it is batched, so ddrl would step it as one env. Declare "
            f"it: take num_envs in __init__ (ddrl passes --num_envs_per_worker; README, "
            f"'Batched simulators'), or give the class a static make_batch(args, num_envs, "
            f"seed) that returns the batch; or return a single env from __init__.")
    return env


def evaluation_config(config):
    """The env ``config`` with ``evaluation`` True (the test worker's and --evaluate's envs)."""
    return (argparse.Namespace(**{**vars(config), "evaluation": True})
            if isinstance(config, argparse.Namespace) else config.replace(evaluation=True))


def batched_by_nature(env_cls):
    """Whether the env class is batched whatever its flags: its __init__ takes ``num_envs``
    (core/batched_env.py)."""
    return "num_envs" in inspect.signature(unwrap_actor_class(env_cls).__init__).parameters


def make_env_batch(plugins: Plugins, config, num_envs, seed=None):
    """A batched env of ``num_envs`` envs from the env plugin (core/batched_env.py), or None
    when the plugin steps one env at a time: its static ``make_batch(args, num_envs, seed)``'s
    answer, else the class built with ``num_envs`` when its __init__ takes it."""
    env_cls = plugins.env_cls
    make_batch = getattr(env_cls, "make_batch", None)
    if make_batch is not None:
        env = make_batch(config, num_envs=num_envs, seed=seed)
    elif batched_by_nature(env_cls):
        env = _construct(env_cls, config, seed, num_envs=num_envs)
    else:
        return None
    if env is not None and not is_batched(env):
        raise ConfigError(f"the env plugin {env_cls.__qualname__} built {type(env).__name__} "
                          f"as a batched env, but it lacks gymnasium's VectorEnv API: "
                          f"num_envs, single_observation_space, single_action_space, and "
                          f"batched reset/step (core/batched_env.py).")
    if env is not None and env.num_envs != num_envs:
        raise ConfigError(f"the env plugin {env_cls.__qualname__} was asked for {num_envs} "
                          f"envs in one batch and built {env.num_envs}.")
    return env


def _construct(factory, args, seed, signature_of=None, **extra):
    params = inspect.signature((signature_of or factory).__init__).parameters
    takes_seed = "seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    return factory(args, seed=seed, **extra) if takes_seed else factory(args, **extra)


def steps_an_env(env_cls):
    """False for an env plugin with nothing to step (``simulates = False``: envs/no_env.py):
    the run's loop then gives the spaces, and nothing is evaluated."""
    return getattr(unwrap_actor_class(env_cls), "simulates", True)


def env_label(env_cls, config):
    """What identifies the env in run directory names, logs and preset names: its optional
    ``label(config)`` (gym_env's is its gymnasium id), else None."""
    label = getattr(unwrap_actor_class(env_cls), "label", None)
    return label(config) if label is not None else None
