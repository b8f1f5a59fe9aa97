"""ddrl from Python, from any directory once ddrl is installed (``make setup`` installs it into
the project's .venv):

    import ddrl
    run = ddrl.train(gym_id="CartPole-v1", num_workers=0, total_steps=50_000,
                     callbacks=[ddrl.StopOnPlateau(patience=5)])
    policy = ddrl.load(run.run_dir)                # or any run directory / checkpoint file
    action = policy.act(obs)

This package is the application layer (the ``ddrl`` command, ddrl/cli.py, and what it runs:
session.py a training run's lifetime, playback.py evaluation, export.py, sweep.py, cluster.py;
api.py ``train``, policy.py ``load`` and ``Policy``, callbacks.py); the library it stands on is
core/, the plugins envs/, models/, agents/, the command line options/.

Names are imported when first used, so ``import ddrl`` is quick (no torch, no Ray) and the
``ddrl`` command starts its clock before them. The exceptions a user may catch are those of
core/errors.py: ``DdrlError`` and under it ``ConfigError`` (bad input: the paragraph the command
line prints), ``RunFailure`` (a fault past its limit) and ``EnvFailure``.
"""
import importlib
import importlib.util
import os
import sys

#: ddrl's top-level packages beside this one (the seed's layout: plugins go into envs/, models/,
#: agents/); a package of the user's with one of these names cannot be imported beside ddrl
OWN_PACKAGES = ("core", "envs", "models", "agents", "options", "loggers")


def shadowed_packages():
    """[(name, the file Python would import for it)] for each of OWN_PACKAGES that resolves
    outside ddrl's own root: a project's models/ or core/ first on sys.path (a script run from
    the project's folder) is imported instead of ddrl's."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for name in OWN_PACKAGES:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if module is None:
            spec = importlib.util.find_spec(name)
            origin = None if spec is None else spec.origin
        if origin is None or not os.path.abspath(origin).startswith(root + os.sep):
            found.append((name, origin or "a namespace package"))
    return found


def check_own_packages():
    shadowed = shadowed_packages()
    if shadowed:
        yours = ", ".join(f"'{name}' ({origin})" for name, origin in shadowed)
        raise ImportError(
            f"ddrl's top-level package{'s' if len(shadowed) > 1 else ''} {yours} resolve"
            f"{'' if len(shadowed) > 1 else 's'} to another folder first on sys.path: ddrl "
            f"keeps the seed's layout ({', '.join(OWN_PACKAGES)} at the top level), so a "
            f"package of yours named so, beside a script you run, is imported instead of "
            f"ddrl's. Rename yours (e.g. my_models), run the script from a folder without it, "
            f"or use the ddrl command with --user_dir for plugins (README, 'In a code base of "
            f"your own').")


check_own_packages()

#: public name -> the module that defines it
_EXPORTS = {
    "train": "ddrl.api", "Run": "ddrl.api",
    "load": "ddrl.policy", "Policy": "ddrl.policy", "check_env": "ddrl.check",
    "report_runs": "ddrl.report",
    "Callback": "ddrl.callbacks", "RunView": "ddrl.callbacks",
    "StopAtReturn": "ddrl.callbacks", "StopOnPlateau": "ddrl.callbacks",
    "DdrlError": "core.errors", "ConfigError": "core.errors", "RunFailure": "core.errors",
    "EnvFailure": "core.errors", "NoValidAction": "core.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ddrl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
