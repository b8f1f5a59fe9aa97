"""metrics.csv, terminal lines and summary.json."""
import csv
import json
import math
import os


def atomic_write_text(path, text):
    """Write to a temporary name, then rename: a crash never leaves half a file."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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


def write_json(path, data):
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fmt(value, spec):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


class MetricsLogger:
    """One CSV row per iteration (fixed columns, empty cells where a value is absent) and a
    short terminal line every ``log_interval`` rows."""

    def __init__(self, path, columns, log_interval=1, quiet=False, printer=print):
        self.columns = list(columns)
        self.log_interval = log_interval
        self.quiet = quiet
        self.printer = printer
        self.rows = 0
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        self.file = open(path, "a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="ignore")
        if new:
            self.writer.writeheader()

    def log(self, row):
        self.writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in self.columns})
        self.file.flush()
        self.rows += 1
        if not self.quiet and (self.rows % self.log_interval == 0 or row.get("eval_return")
                               is not None):
            self.printer(self.format_line(row))

    @staticmethod
    def format_line(row):
        parts = [f"steps {row['env_steps']:>9,d}", f"{_fmt(row.get('steps_per_s'), ',.0f')} sps",
                 f"{_fmt(row.get('wall_time_s'), '.1f')} s",
                 f"train {_fmt(row.get('train_return'), '.1f')}",
                 f"eval {_fmt(row.get('eval_return'), '.1f')}"]
        for key, label, spec in (("policy_loss", "pi", ".3f"), ("value_loss", "vf", ".3f"),
                                 ("entropy", "ent", ".3f"), ("approx_kl", "kl", ".4f"),
                                 ("policy_lag", "lag", ".1f")):
            if row.get(key) is not None:
                parts.append(f"{label} {_fmt(row[key], spec)}")
        return " | ".join(parts)

    def close(self):
        self.file.close()
