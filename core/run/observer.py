"""The interface of who watches a run from outside (a sweep's reporter, core/app/sweep.py),
apart from core/app/session.py so that importing it costs nothing (no torch, no Ray)."""


class RunObserver:
    """Told of every metrics row after it is recorded and its periodic checkpoint, if due, is
    written; may ask the run to stop (``session.context.stop_requested``)."""

    def on_row(self, session, row):
        """``session``: the core.app.session.TrainingSession; ``row``: the metrics row."""
