"""metrics.csv: the run's rows as a table (--logger csv, on by default)."""
import os

from core.run.metrics import CsvMetrics
from loggers import Logger, register_logger


@register_logger("csv")
class CsvLogger(Logger):
    """metrics.csv in the run directory: one row per iteration, every metrics column.

    ddrl.train's Run.metrics, a sweep's results of a trial still running and the model card's
    evaluations read it; without it they are empty."""

    def __init__(self, args):
        super().__init__(args)
        self.table = None

    def on_start(self, run):
        # a restored run goes on in its file; columns it lacks widen its header
        self.table = CsvMetrics(os.path.join(run.run_dir, "metrics.csv"), run.columns)

    def on_row(self, run, row):
        # columns the callbacks added to this row (the session books them in run.columns)
        self.table.add_columns([c for c in run.columns if c not in self.table.columns])
        self.table.log(row)

    def on_end(self, run, summary):
        if self.table is not None:
            self.table.close()
