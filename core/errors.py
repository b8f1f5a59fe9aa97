"""The exceptions a user of ddrl may catch, in one place (``ddrl`` exports them all):

- ``DdrlError``: the base of the three below.
- ``ConfigError``: a user mistake (a bad name, a bad flag value, a space a model cannot take);
  the command line prints it as one paragraph and exits with code 2.
- ``RunFailure``: a fault past its limit (too many dead workers, bad updates in a row); the run
  stops with a final checkpoint and summary.json, exit code 1.
- ``EnvFailure``: one env raised --max_env_errors times in a row, so it is broken, not flaky;
  ``NoValidAction``, its kind for an action mask that leaves nothing to choose.
- ``EnvContractError``: an env plugin broke gymnasium's API (a ``ConfigError``: the plugin's
  code is wrong, not flaky, so it is never counted as an env fault).

They live at the bottom of the house so that every layer may raise them.
"""


class DdrlError(Exception):
    """What ddrl raises on purpose (its other exceptions are bugs)."""


class ConfigError(DdrlError, ValueError):
    """A user mistake (bad name, bad flag value, unsupported space): the command line prints it
    as one paragraph and exits with code 2, without a traceback."""


class EnvContractError(ConfigError):
    """An env plugin returned what gymnasium's API does not allow (a 4-tuple from step): its
    code is wrong, so the run stops at once with this paragraph, never retried as a fault."""


class RunFailure(DdrlError, RuntimeError):
    """A fault past its limit: the run stops with this message (exit 1, summary "error")."""


class EnvFailure(DdrlError, RuntimeError):
    """One env raised --max_env_errors times in a row: broken, not flaky; the run stops."""


class NoValidAction(EnvFailure):
    """An env's action mask allowed no action (for some sub-action): the env is wrong."""
