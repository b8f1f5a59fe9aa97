"""Callbacks: a user's code called by a training run in the driver (``ddrl.train(...,
callbacks=[...])``), on the one observer interface every watcher of a run uses
(core/run/observer.py: the hooks, their order, what a hook may return).

    import ddrl

    class LogTheGap(ddrl.Callback):
        columns = ("gap",)                              # a metrics column of its own
        def on_row(self, run, row):
            if row.get("eval_return") is not None and row.get("train_return") is not None:
                row["gap"] = row["eval_return"] - row["train_return"]   # -> metrics.csv, TensorBoard

    ddrl.train(gym_id="CartPole-v1", callbacks=[LogTheGap(), ddrl.StopOnPlateau(patience=5)])

Two are built in, and the command line uses them: ``StopAtReturn`` is --target_return,
``StopOnPlateau`` is --patience.
"""
from core.run.observer import RunObserver, RunView

#: the base class of a callback (every hook optional)
Callback = RunObserver

__all__ = ["Callback", "RunView", "StopAtReturn", "StopOnPlateau"]


class StopAtReturn(Callback):
    """Stop at the first evaluation whose mean return reaches ``threshold`` (SB3's
    StopTrainingOnRewardThreshold; --target_return): stopped_because "target_return". An
    evaluation that carries a confirmation (--confirm_episodes, core/sampling/eval_runner.py)
    counts only when the confirming episodes' mean reaches ``threshold`` too."""

    def __init__(self, threshold):
        self.threshold = float(threshold)

    def on_evaluation(self, run, evaluation):
        confirmation = evaluation.get("confirmation")
        if evaluation["eval_return"] >= self.threshold and (
                confirmation is None or (confirmation["eval_return"] is not None
                                         and confirmation["eval_return"] >= self.threshold)):
            return "target_return"

    def __repr__(self):
        return f"StopAtReturn({self.threshold:g})"


class StopOnPlateau(Callback):
    """Stop when ``patience`` evaluations in a row have not beaten the best mean return by more
    than ``min_delta`` (SB3's StopTrainingOnNoModelImprovement; --patience): stopped_because
    "patience". The best starts from the run's own best (a restored run's included)."""

    def __init__(self, patience, min_delta=0.0):
        if int(patience) < 1:
            raise ValueError(f"patience must be at least 1 evaluation, not {patience!r}")
        self.patience, self.min_delta = int(patience), float(min_delta)
        self.best, self.since_best = None, 0

    def on_start(self, run):
        self.best, self.since_best = run.best_eval_return, 0

    def on_evaluation(self, run, evaluation):
        value = evaluation["eval_return"]
        if self.best is None or value > self.best + self.min_delta:
            self.best, self.since_best = value, 0
            return None
        self.since_best += 1
        if self.since_best >= self.patience:
            return "patience"

    def __repr__(self):
        return f"StopOnPlateau(patience={self.patience}, min_delta={self.min_delta:g})"
