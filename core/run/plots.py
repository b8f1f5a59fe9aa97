"""Learning-curve PNGs in the run directory, redrawn as the run goes.

learning_curves.png: training return (mean of the episodes finished in each metrics row) and
evaluation return (mean of --eval_episodes deterministic episodes, with its std as a band),
against env steps (left) and against wall time since process start (right); the target return
as a dashed line. Drawn with matplotlib's object API on the Agg canvas (no display needed, no
pyplot global state), in a child process of the run's (``PlotProcess``) when it has one, else
in this process at the first drawing.
"""
import json
import math
import os
import select
import sys
import time

from core.atomic import atomic_path
from core.run.metrics import evaluated_steps, read_metrics

FILE_NAME = "learning_curves.png"


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class LearningCurves:
    def __init__(self, run_dir, target_return=None, min_interval_s=30.0, title="",
                 plotter=None, enabled=True):
        """``plotter``: a PlotProcess to draw in, or None to draw in this process;
        ``enabled``: False (--no-plots) draws nothing."""
        self.enabled = enabled
        self.plotter = plotter
        self.path = os.path.join(run_dir, FILE_NAME)
        self.target_return = target_return
        self.min_interval_s = min_interval_s
        self.title = title
        self.rows = []
        # The first drawing waits min_interval_s too: a short run draws once, at the end.
        self.last_draw = time.time()
        self.dirty = False

    def load_csv(self, path):
        """Start from the rows of an existing metrics.csv (a resumed run continues its curves)."""
        for row in read_metrics(path):
            self.add(row)

    def add(self, row):
        keys = ("env_steps", "wall_time_s", "train_return", "eval_return", "eval_return_std",
                "eval_env_steps", *(key for key in row if key.startswith("return_")))
        point = {key: _number(row.get(key)) for key in keys}
        if point["env_steps"] is not None:
            self.rows.append(point)
            self.dirty = True

    def maybe_draw(self, force=False):
        """Redraw if something changed and the last drawing is --plot_interval old (or force:
        then the PNG is written when this returns)."""
        now = time.time()
        if not self.enabled or not self.dirty or not (
                force or now - self.last_draw >= self.min_interval_s):
            return False
        if not self.draw(wait=force):
            return False  # the plot process is still drawing the last one: next time
        self.last_draw, self.dirty = now, False
        return True

    def draw(self, wait=True):
        """Draw the curves: in the plot process when there is one (``wait``: until the PNG is
        written; else sent, or skipped while an earlier one is still being drawn: False),
        otherwise here."""
        if self.plotter is not None:
            done = self.plotter.draw(self.path, self.rows, self.target_return, self.title, wait)
            if done is not None:
                return done
            self.plotter = None  # it died: draw here from now on
        draw_curves(self.path, self.rows, self.target_return, self.title)
        return True

    def close(self):
        if self.plotter is not None:
            self.plotter.close()
            self.plotter = None


def series(rows, x_key, y_key):
    """(x, y, std) of the rows that have both; an evaluation's env steps are those of the
    weights it evaluated (``eval_env_steps``, where the row has it), not the row's."""
    def x_of(r):
        return evaluated_steps(r) if (x_key, y_key) == ("env_steps", "eval_return") else r[x_key]
    points = [(x_of(r), r[y_key], r.get("eval_return_std")) for r in rows
              if r[x_key] is not None and r[y_key] is not None]
    return ([p[0] for p in points], [p[1] for p in points], [p[2] or 0.0 for p in points])


def policy_return_columns(rows):
    """The columns of a run's returns per policy (models/ma_ppo.py with --policy_map:
    ``return_<policy>``), which the plot draws beside the team's."""
    return sorted(key for key in (rows[0] if rows else {}) if key.startswith("return_"))


def draw_curves(path, rows, target_return=None, title=""):
    """The learning curves of ``rows`` (train and eval return against env steps and wall time,
    and each policy's training return when the run has several) as a PNG at ``path``, written
    atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(11, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    for ax, (x_key, x_label) in zip(figure.subplots(1, 2),
                                    (("env_steps", "env steps"),
                                     ("wall_time_s", "wall time since start (s)"))):
        x, y, _ = series(rows, x_key, "train_return")
        if x:
            ax.plot(x, y, color="tab:blue", alpha=0.6, lw=1, label="training episodes")
        for key in policy_return_columns(rows):
            x, y, _ = series(rows, x_key, key)
            if x:
                ax.plot(x, y, ls="--", alpha=0.8, lw=1,
                        label=f"training, policy {key[len('return_'):]}")
        x, y, std = series(rows, x_key, "eval_return")
        if x:
            ax.plot(x, y, "o-", color="tab:orange", ms=3, lw=1.5, label="evaluation")
            ax.fill_between(x, [a - s for a, s in zip(y, std)],
                            [a + s for a, s in zip(y, std)], color="tab:orange", alpha=0.2)
        if target_return is not None:
            ax.axhline(target_return, color="gray", ls="--", lw=1,
                       label=f"target {target_return:g}")
        ax.set_xlabel(x_label)
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:  # a viewer never sees half a PNG
        figure.savefig(tmp)  # the format comes from the extension


class PlotProcess:
    """A child process that draws the learning curves, so that neither matplotlib's import
    (~0.35 s) nor a drawing (~0.1 s per redraw, more as rows grow) runs in the driver: the
    driver learns on meanwhile, and a run that reaches its target ends without them. It starts
    with the run at niceness 10 (it imports matplotlib while the run starts and yields the CPUs
    to it) and ends when its stdin closes (also when the driver dies). One JSON request per
    line, one reply line each.

    It runs in a session of its own, so that a signal to the driver's process group (Ctrl-C
    in a terminal, a scheduler's SIGTERM to the job) does not reach it: the driver stops after
    a round with a checkpoint and still asks for the last drawing. Before, the plot process
    died of the Ctrl-C, the terminal showed its KeyboardInterrupt traceback and the driver drew
    in its own process (``LearningCurves``' fall-back)."""

    def __init__(self):
        import subprocess
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "core.run.plots"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, text=True, start_new_session=True)
        self.pending = 0  # requests sent, replies not yet read

    def draw(self, path, rows, target_return, title, wait):
        """True once drawn (``wait``) or sent, False when skipped (an earlier drawing still
        runs), None when the process is gone."""
        try:
            self._collect(block=False)
            if not wait and self.pending:
                return False
            request = {"path": os.path.abspath(path), "rows": rows,
                       "target_return": target_return, "title": title}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            self.pending += 1
            return self._collect(block=True) if wait else True
        except (OSError, ValueError):  # a closed pipe: the process died
            return None

    def _collect(self, block):
        """Read the replies there are (all of them if ``block``); None if it died."""
        while self.pending and (block or select.select([self.process.stdout], [], [], 0)[0]):
            line = self.process.stdout.readline()
            if not line:
                return None
            self.pending -= 1
            if line.startswith("error"):
                print(f"ddrl: drawing the learning curves failed: {line.strip()}",
                      file=sys.stderr, flush=True)
        return True

    def close(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass


def serve():
    """The plot process's loop (``python -m core.run.plots``). It lowers its own priority
    (no preexec_fn in the parent: unsafe in a process with threads, as a sweep trial's is)."""
    os.nice(10)
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401 - import now
    from matplotlib.figure import Figure  # noqa: F401 - while the run starts
    for line in sys.stdin:
        try:
            request = json.loads(line)
            draw_curves(request["path"], request["rows"], request["target_return"],
                        request["title"])
            print("ok", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, the next may work
            print(f"error {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)


def plot_sweep(path, trials, best=None):
    """A sweep's sweep.png: every trial's evaluation return against env steps (read from its
    metrics.csv), the best trial drawn bold. ``trials``: ddrl/sweep.py TrialRow objects."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for trial in trials:
        curve = LearningCurves(trial.run_dir)
        curve.load_csv(os.path.join(trial.run_dir, "metrics.csv"))
        x, y, _ = series(curve.rows, "env_steps", "eval_return")
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


if __name__ == "__main__":
    serve()
