"""Who watches a training run from the driver: one interface (Sample Factory's AlgoObserver, SB3's
callbacks) for the run's stop rules, a user's callbacks (``ddrl.train(callbacks=[...])``), a
sweep's reporter (ddrl/sweep.py) and the experiment trackers. Light to import: no torch, no Ray.

The session (ddrl/session.py) calls, in the driver, for each observer in turn:

- ``on_start(run)`` once, when the run directory, the trainer and any restore are ready;
- ``on_evaluation(run, evaluation)`` for each finished evaluation (a dict: ``eval_return``,
  ``eval_return_std``, ``eval_success_rate``, ``env_steps``, ``returns``, ...), then
- ``on_row(run, row)`` for each metrics row, complete (``env_steps``, ``wall_time_s``, the
  evaluation's columns) but not yet written: an observer may add keys, which become columns of
  metrics.csv, TensorBoard and the trackers (declare them in ``columns`` to have them in the
  CSV's header from the first row; others are added when first seen);
- ``on_end(run, summary)`` once, after summary.json, the learning-curve plot and the model card
  are written, however the run ended.

``on_evaluation`` and ``on_row`` may return a truthy value to stop the run after this row: a
string names the reason (summary.json's ``stopped_because``), ``True`` means "callback". The
run then ends as after any stop rule: a final checkpoint, summary.json, exit code 0.

Observers are called in the order of their ``phase``, and in the order given within one:
``"callback"`` (the default: the stop rules, then a user's callbacks; they may add columns and
stop the run), ``"recorder"`` (they write the row where it goes: metrics.csv, TensorBoard, the
trackers), ``"reporter"`` (they see the row once it is written: a sweep's reporter, which may
report to a scheduler that ends the trial's process at once).
"""

#: the phases, in the order they are called
PHASES = ("callback", "recorder", "reporter")


class RunObserver:
    """Watches a run (the module's docstring); every hook is optional."""

    #: metrics columns this observer adds to rows (metrics.csv's header has them from the start)
    columns = ()
    #: when it is called (the module's docstring): "callback", "recorder" or "reporter"
    phase = "callback"

    def on_start(self, run):
        """``run``: a RunView."""

    def on_evaluation(self, run, evaluation):
        """A finished evaluation; return a reason (or True) to stop the run."""

    def on_row(self, run, row):
        """A metrics row before it is written: add keys to add columns; return a reason (or
        True) to stop the run."""

    def on_end(self, run, summary):
        """The run is over; ``summary`` is summary.json's content."""


def in_call_order(observers):
    """``observers`` ordered by phase, stably (the module's docstring); an unknown phase is a
    ValueError naming it."""
    for observer in observers:
        if getattr(observer, "phase", "callback") not in PHASES:
            raise ValueError(f"observer {observer!r} has phase {observer.phase!r}; phases are "
                             f"{', '.join(PHASES)}")
    return sorted(observers, key=lambda o: PHASES.index(getattr(o, "phase", "callback")))


class RunView:
    """What an observer sees of the run: its directory, flags and counters (read-only), and two
    actions, ``stop`` and ``save_checkpoint``."""

    def __init__(self, context, config, save_checkpoint):
        """``context``: the run's core.run.context.RunContext; ``config``: the run's flags as a
        dict; ``save_checkpoint(reason)``: writes a checkpoint now, returns its path."""
        self._context = context
        self.config = dict(config)
        self._save_checkpoint = save_checkpoint

    @property
    def run_dir(self):
        return self._context.run_dir

    @property
    def env_steps(self):
        return self._context.env_steps

    @property
    def columns(self):
        """The run's metrics columns so far, in order: the loop's, those observers declare,
        then those they added to rows (what metrics.csv's header holds)."""
        return tuple(self._context.columns)

    @property
    def wall_time_s(self):
        """Seconds since the process started (a restored run counts its earlier time)."""
        return self._context.elapsed()

    @property
    def best_eval_return(self):
        return self._context.best_eval_return

    @property
    def last_eval_return(self):
        return self._context.last_eval_return

    @property
    def target_return(self):
        return self._context.target_return

    @property
    def time_to_target_s(self):
        """When an evaluation first reached --target_return (None: not yet, or no target),
        confirmed or not (--confirm_episodes: summary.json's says whether one was)."""
        return self._context.time_to_target_s

    @property
    def stop_requested(self):
        """The reason a stop was asked for (a signal, an observer), or None."""
        return self._context.stop_requested

    def stop(self, reason="callback"):
        """Stop the run after the current row (as returning ``reason`` from a hook does)."""
        if self._context.stop_requested is None:
            self._context.stop_requested = str(reason)

    def save_checkpoint(self, reason="callback"):
        """Write a checkpoint of the run now (between iterations); returns its path."""
        return self._save_checkpoint(reason)
