"""What every training loop shares: the clock, the stop rules, the terminal lines, the learning
curves and the summary. Where the metrics rows go besides (metrics.csv, TensorBoard, W&B,
MLflow) is the trackers' to say: loggers/, observers of phase "recorder"."""
import os
import time

from core.run.metrics import TerminalLines, write_json
from core.run.observer import RunObserver
from core.run.plots import LearningCurves

#: Flags that concern one process, not the run: left out of the configuration a run saves
#: (config.yaml, checkpoints), so that re-running or restoring it does not repeat them.
RUN_ONLY_KEYS = ("config", "restore", "list", "pause_at_steps", "evaluate", "record_video",
                 "video_episodes", "evaluation", "render_mode", "eval_seeds", "export",
                 "export_format", "export_out", "export_policy", "model_card")

class RunContext:
    def __init__(self, args, run_dir, start_time, columns, target_return, plotter=None,
                 line_metrics=()):
        self.args = args
        self.run_dir = run_dir
        self.start_time = start_time          # process start: what time-to-target is measured from
        self.target_return = target_return
        self.env_steps = 0
        self.best_eval_return = None
        self.last_eval_return = None
        self.time_to_target_s = None
        self.steps_to_target = None
        self.confirmation = None              # the confirming evaluation that agreed, or the last
        self.unconfirmed = 0                  # evaluations that reached the target, unconfirmed
        self.stopped_because = None
        self.stop_requested = None            # set by a signal: "interrupted" or "terminated"
        self.last_row_time = time.time()
        self.last_row_steps = 0
        self.columns = list(columns)          # the metrics columns; observers may add more
        os.makedirs(run_dir, exist_ok=True)
        metrics_path = os.path.join(run_dir, "metrics.csv")
        self.curves = LearningCurves(run_dir, target_return, args.plot_interval, plotter=plotter,
                                     title=os.path.basename(os.path.normpath(run_dir)),
                                     enabled=args.plots)
        self.curves.load_csv(metrics_path)  # a restored run into the same directory continues
        self.lines = TerminalLines(log_interval=args.log_interval, quiet=args.quiet,
                                   total_steps=args.total_steps, line_metrics=line_metrics)

    def elapsed(self):
        return time.time() - self.start_time

    def record_eval(self, result):
        """Book an evaluation; returns True when it is the best so far. Time and steps to
        target are those of the first evaluation that reached the target, at the moment it
        did (``reached_at_s``: before its confirmation ran), confirmed or not: the measure the
        peers' speed figures use; ``confirmation`` keeps the confirming evaluation that agreed
        (or, until one does, the last that did not)."""
        value = result["eval_return"]
        self.last_eval_return = value
        best = self.best_eval_return is None or value > self.best_eval_return
        if best:
            self.best_eval_return = value
        if self.target_return is not None and value >= self.target_return:
            if self.time_to_target_s is None:
                self.time_to_target_s = result.get("reached_at_s", self.elapsed())
                self.steps_to_target = result.get("env_steps", self.env_steps)
            confirmation = result.get("confirmation")
            if confirmation is not None and not (self.confirmation or {}).get("confirmed"):
                self.confirmation = {**confirmation,
                                     "env_steps": result.get("env_steps", self.env_steps),
                                     "evaluation_return": value}
                self.unconfirmed += not confirmation["confirmed"]
        return best

    def target_reached(self):
        """An evaluation reached the target and, where one ran, its confirmation agreed."""
        if self.time_to_target_s is None:
            return False
        return self.confirmation is None or bool(self.confirmation["confirmed"])

    def record(self, row, eval_result=None):
        """Complete and write one iteration's row (its evaluation, if any, booked with
        ``record_eval`` first)."""
        self.write(self.complete(row, eval_result))

    def complete(self, row, eval_result=None):
        """``row`` with the run's columns: env steps, wall time, steps/s and the evaluation's
        (returned; filled in place)."""
        now = time.time()
        row["env_steps"] = self.env_steps
        row["wall_time_s"] = now - self.start_time
        row["steps_per_s"] = (self.env_steps - self.last_row_steps) / max(now - self.last_row_time,
                                                                          1e-9)
        self.last_row_time, self.last_row_steps = now, self.env_steps
        if eval_result is not None:
            row["eval_return"] = eval_result["eval_return"]
            row["eval_return_std"] = eval_result["eval_return_std"]
            row["eval_success_rate"] = eval_result.get("eval_success_rate")
            # the steps of the weights evaluated: with a test worker on Ray the evaluation ends
            # some rows after the point it was due, and a curve belongs at that point
            row["eval_env_steps"] = eval_result.get("env_steps", self.env_steps)
        return row

    def add_columns(self, names):
        """Metrics columns an observer added to rows (the trackers see them in RunView.columns)."""
        self.columns += [n for n in names if n not in self.columns]

    def write(self, row):
        """What the run itself does with a row, whichever trackers record it: the terminal
        line and the learning curves."""
        self.lines.log(row)
        self.curves.add(row)
        self.curves.maybe_draw()

    def should_stop(self):
        """True when a stop rule holds (``stopped_because`` says which): a stop request (a
        signal, an observer: reaching --target_return and --patience are observers,
        ddrl/callbacks.py), --total_steps, --max_time or --pause_at_steps."""
        if self.stop_requested is not None:
            self.stopped_because = self.stop_requested
        elif self.env_steps >= self.args.total_steps:
            self.stopped_because = "total_steps"
        elif self.args.max_time is not None and self.elapsed() >= self.args.max_time:
            self.stopped_because = "max_time"
        elif self.args.pause_at_steps is not None and self.env_steps >= self.args.pause_at_steps:
            self.stopped_because = "paused"
        return self.stopped_because is not None

    def restore(self, meta):
        """Continue a checkpoint's counters: env steps, evaluation records, and the wall clock
        (time axes go on from where the run stopped, without the time it was not running)."""
        self.env_steps = self.last_row_steps = int(meta.get("env_steps", 0))
        self.best_eval_return = meta.get("best_eval_return")
        self.last_eval_return = meta.get("last_eval_return")
        self.start_time -= float(meta.get("wall_time_s", 0.0))  # restarting counts as time
        self.last_row_time = time.time()

    def summary(self, **extra):
        wall = self.elapsed()
        return {
            "env_steps": self.env_steps,
            "wall_time_s": round(wall, 3),
            "steps_per_s": round(self.env_steps / max(wall, 1e-9), 1),
            "best_eval_return": self.best_eval_return,
            "last_eval_return": self.last_eval_return,
            "stopped_because": self.stopped_because,
            "target_return": self.target_return,
            "target_reached": self.target_reached(),
            # (None where the target was not reached, or reached and not confirmed)
            "time_to_target_s": (round(self.time_to_target_s, 3) if self.target_reached()
                                 else None),
            "steps_to_target": self.steps_to_target if self.target_reached() else None,
            "target_confirmation": self.confirmation,
            "unconfirmed_evaluations": self.unconfirmed,
            **extra,
        }

    def finish(self, **extra):
        self.lines.close()
        self.curves.maybe_draw(force=True)
        self.curves.close()
        summary = self.summary(**extra)
        write_json(os.path.join(self.run_dir, "summary.json"), summary)
        return summary


class RowRecorder(RunObserver):
    """The run's own recorder (phase "recorder", core/run/observer.py): each row as the
    callbacks left it, to the terminal line and the learning curves (``RunContext.write``),
    whatever --logger says; the trackers (loggers/) record it beside."""
    phase = "recorder"

    def __init__(self, context):
        self.context = context

    def on_row(self, run, row):
        self.context.write(row)
