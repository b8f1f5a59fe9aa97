"""metrics.csv, terminal lines and summary.json."""
import csv
import io
import json
import math
import os
import sys

from core.atomic import atomic_write_text


class TensorBoardLogger:
    """Every numeric metrics column as a TensorBoard scalar (tag "ddrl/<column>"), at step =
    env steps and the row's own wall-clock time, in the run directory's event files."""

    def __init__(self, log_dir, start_time):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(log_dir=log_dir)
        self.start_time = start_time

    def log(self, row):
        step = int(row["env_steps"])
        walltime = self.start_time + float(row.get("wall_time_s") or 0.0)
        for key, value in row.items():
            if key == "env_steps" or isinstance(value, bool) or value is None:
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(f"ddrl/{key}", value, step, walltime=walltime)

    def close(self):
        self.writer.flush()
        self.writer.close()


def read_metrics(path):
    """metrics.csv's rows as dicts, whole numbers as ints (env_steps, updates: counts), other
    numbers as floats, empty cells as None (text cells stay text); no rows when the file does
    not exist."""
    def cell(text):
        if text == "":
            return None
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return text
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{key: cell(value) for key, value in row.items()} for row in csv.DictReader(f)]


def evaluated_steps(row):
    """The env steps of the weights a metrics row's evaluation evaluated: ``eval_env_steps``
    (on Ray an evaluation may end rows after it was due), else the row's own (runs written
    before the column existed)."""
    at = row.get("eval_env_steps")
    return row["env_steps"] if at is None else at


def write_json(path, data):
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(value, spec):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


class CsvMetrics:
    """metrics.csv: one row per iteration, fixed columns (empty cells where a value is absent).
    A restored run goes on in its file; columns added later (an observer's, ``add_columns``)
    widen the header."""

    def __init__(self, path, columns):
        self.columns = list(columns)
        self.path = path
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        wanted, header = self.columns, []
        if not new:  # a restored run goes on in its file, whose columns come first
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            self.columns = list(header)
        self.file = open(path, "a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="ignore")
        if new:
            self.writer.writeheader()
        else:  # columns this run has that the file lacks (an observer's): a wider header
            self.add_columns([c for c in wanted if c not in header])

    def add_columns(self, names):
        """New columns at the end (keys an observer added to rows, core/run/observer.py): the
        file is rewritten once with the wider header, earlier rows empty there."""
        names = [n for n in names if n not in self.columns]
        if not names:
            return
        self.file.close()
        with open(self.path, newline="") as f:
            rows = list(csv.DictReader(f))
        self.columns += names
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, text.getvalue())
        self.file = open(self.path, "a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="ignore")

    def log(self, row):
        self.writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in self.columns})
        self.file.flush()

    def close(self):
        self.file.close()


class TerminalLines:
    """What a run prints while it trains. On a terminal, a progress bar (env steps of
    --total_steps, steps/s, ETA, last train and eval return) with a line kept for every
    evaluation; otherwise (a file, a pipe, CI) a plain line every ``log_interval`` rows and at
    every evaluation. Nothing with ``quiet``. A line holds the steps, speed, time and returns,
    then each of ``line_metrics`` ((column, label, format) triples: the loop's and the model's,
    Trainer.line_metrics_for) the row has a value for."""

    def __init__(self, log_interval=1, quiet=False, printer=print, total_steps=None,
                 progress_bar=None, line_metrics=()):
        self.line_metrics = tuple(line_metrics)
        self.log_interval = log_interval
        self.quiet = quiet
        self.printer = printer
        self.rows = 0
        if progress_bar is None:
            progress_bar = sys.stdout.isatty()
        self.use_bar = bool(progress_bar) and not quiet
        self.total_steps = total_steps
        self.bar = None  # made at the first row, after the run's header line is printed
        self.last_eval = None

    def log(self, row):
        self.rows += 1
        evaluated = row.get("eval_return") is not None
        if self.use_bar and self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total_steps, unit="step", unit_scale=True,
                            dynamic_ncols=True, smoothing=0.1)
            self.printer = self.bar.write
        if self.bar is not None:
            steps = min(int(row["env_steps"]), self.total_steps or int(row["env_steps"]))
            self.bar.update(max(0, steps - self.bar.n))
            if evaluated:
                self.last_eval = row["eval_return"]
                self.printer(self.format_line(row))
            self.bar.set_postfix_str(f"train {_fmt(row.get('train_return'), '.1f')} | "
                                     f"eval {_fmt(self.last_eval, '.1f')}", refresh=False)
        elif not self.quiet and (self.rows % self.log_interval == 0 or evaluated):
            self.printer(self.format_line(row))

    def format_line(self, row):
        parts = [f"steps {row['env_steps']:>9,d}", f"{_fmt(row.get('steps_per_s'), ',.0f')} sps",
                 f"{_fmt(row.get('wall_time_s'), '.1f')} s",
                 f"train {_fmt(row.get('train_return'), '.1f')}",
                 f"eval {_fmt(row.get('eval_return'), '.1f')}"]
        for key, label, spec in self.line_metrics:
            if row.get(key) is not None:
                parts.append(f"{label} {_fmt(row[key], spec)}")
        return " | ".join(parts)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class MetricsLogger:
    """metrics.csv and the terminal lines together (CsvMetrics, TerminalLines): what a run
    wrote through one object before the trackers were plugins (loggers/)."""

    def __init__(self, path, columns, log_interval=1, quiet=False, printer=print,
                 total_steps=None, progress_bar=None, line_metrics=()):
        self.csv = CsvMetrics(path, columns)
        self.terminal = TerminalLines(log_interval, quiet, printer, total_steps, progress_bar,
                                      line_metrics)

    @property
    def columns(self):
        return self.csv.columns

    def add_columns(self, names):
        self.csv.add_columns(names)

    def log(self, row):
        self.csv.log(row)
        self.terminal.log(row)

    def format_line(self, row):
        return self.terminal.format_line(row)

    def close(self):
        self.terminal.close()
        self.csv.close()
