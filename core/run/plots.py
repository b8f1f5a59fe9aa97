"""Learning-curve PNGs in the run directory, redrawn as the run goes.

learning_curves.png: training return (mean of the episodes finished in each metrics row) and
evaluation return (mean of --eval_episodes deterministic episodes, with its std as a band),
against env steps (left) and against wall time since process start (right); the target return
as a dashed line. Drawn with matplotlib's object API on the Agg canvas (no display needed, no
pyplot global state); matplotlib is imported at the first drawing, not at start-up.
"""
import csv
import math
import os
import time

from core.atomic import atomic_path

FILE_NAME = "learning_curves.png"


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class LearningCurves:
    def __init__(self, run_dir, target_return=None, min_interval_s=30.0, title=""):
        self.path = os.path.join(run_dir, FILE_NAME)
        self.target_return = target_return
        self.min_interval_s = min_interval_s
        self.title = title
        self.rows = []
        # The first drawing waits min_interval_s too: a short run draws once, at the end,
        # and matplotlib's import stays out of its time to target.
        self.last_draw = time.time()
        self.dirty = False

    def load_csv(self, path):
        """Start from the rows of an existing metrics.csv (a resumed run continues its curves)."""
        if os.path.exists(path):
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    self.add(row)

    def add(self, row):
        point = {key: _number(row.get(key)) for key in
                 ("env_steps", "wall_time_s", "train_return", "eval_return", "eval_return_std")}
        if point["env_steps"] is not None:
            self.rows.append(point)
            self.dirty = True

    def maybe_draw(self, force=False):
        """Redraw if something changed and the last drawing is --plot_interval old (or force)."""
        now = time.time()
        if not self.dirty or not (force or now - self.last_draw >= self.min_interval_s):
            return False
        self.draw()
        self.last_draw, self.dirty = now, False
        return True

    def series(self, x_key, y_key):
        points = [(r[x_key], r[y_key], r.get("eval_return_std")) for r in self.rows
                  if r[x_key] is not None and r[y_key] is not None]
        return ([p[0] for p in points], [p[1] for p in points], [p[2] or 0.0 for p in points])

    def draw(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        figure = Figure(figsize=(11, 4.2), dpi=100)
        FigureCanvasAgg(figure)
        for ax, (x_key, x_label) in zip(figure.subplots(1, 2),
                                        (("env_steps", "env steps"),
                                         ("wall_time_s", "wall time since start (s)"))):
            x, y, _ = self.series(x_key, "train_return")
            if x:
                ax.plot(x, y, color="tab:blue", alpha=0.6, lw=1, label="training episodes")
            x, y, std = self.series(x_key, "eval_return")
            if x:
                ax.plot(x, y, "o-", color="tab:orange", ms=3, lw=1.5, label="evaluation")
                ax.fill_between(x, [a - s for a, s in zip(y, std)],
                                [a + s for a, s in zip(y, std)], color="tab:orange", alpha=0.2)
            if self.target_return is not None:
                ax.axhline(self.target_return, color="gray", ls="--", lw=1,
                           label=f"target {self.target_return:g}")
            ax.set_xlabel(x_label)
            ax.set_ylabel("return")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower right", fontsize=8)
        figure.suptitle(self.title, fontsize=10)
        figure.tight_layout()
        with atomic_path(self.path, suffix=".png") as tmp:  # a viewer never sees half a PNG
            figure.savefig(tmp)  # the format comes from the extension


def plot_sweep(path, trials, best=None):
    """A sweep's sweep.png: every trial's evaluation return against env steps (read from its
    metrics.csv), the best trial drawn bold. ``trials``: options/sweep.py TrialRow objects."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for trial in trials:
        curve = LearningCurves(trial.run_dir)
        curve.load_csv(os.path.join(trial.run_dir, "metrics.csv"))
        x, y, _ = curve.series("env_steps", "eval_return")
        if not x:
            continue
        flags = ", ".join(f"{k}={format(v, '.3g') if isinstance(v, float) else v}"
                          for k, v in trial.flags.items())
        chosen = trial is best
        ax.plot(x, y, "o-", ms=2.5, lw=2.5 if chosen else 1, alpha=1.0 if chosen else 0.6,
                label=("best: " if chosen else "") + flags)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    ax.set_title(f"sweep: {len(trials)} trials", fontsize=10)
    figure.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        figure.savefig(tmp)
