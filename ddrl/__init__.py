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

#: public name -> the module that defines it
_EXPORTS = {
    "train": "ddrl.api", "Run": "ddrl.api",
    "load": "ddrl.policy", "Policy": "ddrl.policy", "check_env": "ddrl.check",
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
