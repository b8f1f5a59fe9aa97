"""TensorBoard event files (--logger tensorboard, on by default; --no-tensorboard drops it)."""
import os
import time

from loggers import Logger, register_logger, require


@register_logger("tensorboard")
class TensorBoard(Logger):
    """TensorBoard event files in RUN_DIR/tensorboard, each numeric column at step = env steps.

    The scalar of column c is ddrl/<c>, at its row's wall-clock time (`tensorboard --logdir
    runs`)."""

    def __init__(self, args):
        super().__init__(args)
        require("tensorboard", "tensorboard==2.21.0", "tensorboard")
        self.writer = None

    def on_start(self, run):
        from core.run.metrics import TensorBoardLogger
        # the run's start on the wall clock (a restored run's counts its earlier time), so that
        # each point's time is its row's
        self.writer = TensorBoardLogger(os.path.join(run.run_dir, "tensorboard"),
                                        time.time() - run.wall_time_s)

    def on_row(self, run, row):
        self.writer.log(row)

    def on_end(self, run, summary):
        if self.writer is not None:
            self.writer.close()
