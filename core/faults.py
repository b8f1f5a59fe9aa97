"""What a run survives, counted and logged: one line per fault, counters in metrics.csv and
summary.json (``worker_restarts``, ``env_errors``, ``skipped_updates``, ``recoveries``;
``eval_episodes_lost`` in summary.json).

The limits (--max_worker_restarts, --max_env_errors, --max_bad_updates, --max_failures) turn a
fault that keeps coming back into ``RunFailure``: the run then stops with that one-paragraph
error, a final checkpoint of the last good weights and a summary.json that says "error".
"""
import math
import sys


from core import lazy_ray
from core.lazy_ray import ray
from core.errors import RunFailure  # (also importable from here)

COUNTERS = ("worker_restarts", "env_errors", "skipped_updates", "recoveries",
            "eval_episodes_lost")



class Faults:
    def __init__(self, args, printer=None):
        self.args = args
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.bad_updates_in_a_row = 0
        self.printer = printer or (lambda line: print(line, file=sys.stderr, flush=True))

    def log(self, what, env_steps):
        self.printer(f"ddrl: fault at env step {env_steps:,}: {what}")

    # -- the four kinds ----------------------------------------------------------------------
    def worker_restarted(self, what, env_steps):
        self.counts["worker_restarts"] += 1
        self.log(what, env_steps)
        if self.counts["worker_restarts"] > self.args.max_worker_restarts:
            raise RunFailure(f"{self.counts['worker_restarts']} actors died during this run, "
                             f"more than --max_worker_restarts {self.args.max_worker_restarts}; "
                             f"the last: {what}. Look for what kills them (memory, a crashing "
                             f"env or node) or raise the limit.")

    def env_errors(self, records, env_steps):
        """Errors a rollout worker survived (core/sampling/envs.py): the episode cut, the env rebuilt."""
        for record in records:
            self.counts["env_errors"] += 1
            worker = record.get("worker")
            where = f"env {record.get('env')}" + ("" if worker is None else f" of worker {worker}")
            self.log(f"{where} raised in {record.get('method')}: {record.get('error')}; episode "
                     f"cut, env rebuilt", env_steps)

    def eval_env_errors(self, count, env_steps):
        """Errors the test worker survived (the episode was run again, or given up)."""
        self.counts["env_errors"] += count
        self.log(f"{count} env error(s) in the test worker's evaluation; each episode hit was "
                 f"run again from its start, up to --max_env_errors times", env_steps)

    def eval_episodes_lost(self, result, env_steps):
        """Evaluation episodes the test worker gave up (each raised --max_env_errors times,
        with progress between; core/sampling/evaluator.py): one line each, and one more when
        none finished (the evaluation has no return). Never a limit: a lost episode is the
        flaky env's cost, a broken env is EnvFailure in the test worker."""
        lost = result.get("lost_episodes") or []
        where = f"the evaluation at env step {result.get('env_steps', env_steps):,}"
        for record in lost:
            self.counts["eval_episodes_lost"] += 1
            self.log(f"the test worker's env {record.get('env')} could not finish its episode "
                     f"of {where}: it raised {record.get('failures')} times, each time rebuilt "
                     f"and run again from its start (--max_env_errors); the last error: "
                     f"{record.get('error')}; left out of the mean", env_steps)
        if lost and result.get("eval_return") is None:
            self.log(f"no episode of {where} finished ({len(lost)} lost): it has no return, "
                     f"and the run goes on to the next", env_steps)

    def update_skipped(self, why, env_steps):
        """A loss or gradient with NaN or inf: the update was not applied."""
        self.counts["skipped_updates"] += 1
        self.bad_updates_in_a_row += 1
        self.log(f"update skipped: {why} ({self.bad_updates_in_a_row} in a row)", env_steps)
        if self.bad_updates_in_a_row >= self.args.max_bad_updates:
            raise RunFailure(f"{self.bad_updates_in_a_row} updates in a row had a NaN or inf "
                             f"loss or gradient ({why}), --max_bad_updates is "
                             f"{self.args.max_bad_updates}. The weights are the last good ones "
                             f"(saved in the final checkpoint); lower the learning rate, clip "
                             f"gradients (--max_grad_norm) or check the model's loss.")

    def update_applied(self):
        self.bad_updates_in_a_row = 0

    def recovered(self, what, env_steps):
        self.counts["recoveries"] += 1
        self.log(what, env_steps)
        if self.counts["recoveries"] > self.args.max_failures:
            raise RunFailure(f"{self.counts['recoveries']} failures of the replay buffer or "
                             f"parameter server, more than --max_failures "
                             f"{self.args.max_failures}; the last: {what}.")


def all_finite(stats, keys=None):
    """True when every number in ``stats`` (or its ``keys``) is finite."""
    values = [stats[k] for k in (keys or stats) if k in stats]
    return all(math.isfinite(v) for v in values
               if isinstance(v, (int, float)) and not isinstance(v, bool))


def deaths():
    """Ray's exception types that say an actor or its process is gone; () before Ray's import
    (no Ray exception exists then, and a run in one process never imports it)."""
    if not lazy_ray.imported():
        return ()
    errors = ray.exceptions
    return (errors.RayActorError, errors.WorkerCrashedError, errors.ObjectLostError,
            errors.NodeDiedError, errors.OutOfMemoryError)


def actor_died(exc):
    """True when ``exc`` says the actor called (or the process running the task) is gone: the
    fault is survivable by a replacement. An exception the code raised, even one caused by
    another actor's death (a worker whose replay buffer died), is not this actor's death."""
    # A RayTaskError is made a subclass of its cause's type: exclude it explicitly.
    return isinstance(exc, deaths()) and not isinstance(exc, ray.exceptions.RayTaskError)


def find_cause(exc, types):
    """The first exception of ``types`` in ``exc``'s chain of causes (Ray wraps an actor's
    exception in RayTaskError), or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, types):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__
        seen += 1
    return None


def death_inside(exc):
    """True when an actor's death is anywhere in ``exc``'s chain of causes."""
    return find_cause(exc, deaths()) is not None


def short_error(exc):
    """One line naming the error (Ray's own messages run to dozens of lines); for an error
    Ray wrapped (RayTaskError), the one it wraps."""
    cause = getattr(exc, "cause", None)
    if (lazy_ray.imported() and isinstance(exc, ray.exceptions.RayTaskError)
            and isinstance(cause, BaseException)):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:500] if text else ''}"
