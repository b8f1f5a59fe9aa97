"""Weights & Biases (--logger wandb): offline by default, into the run directory; `wandb sync`
uploads it later from any machine with a network."""
import glob
import os
import shutil

from loggers import Logger, register_logger, require, run_config

#: a run's exit code by how it stopped (main.py's): W&B marks a run with a non-zero one failed
EXIT_CODES = {"interrupted": 130, "terminated": 143, "error": 1}
#: the run directory's files a finished W&B run keeps (in its files/, uploaded by `wandb sync`)
RUN_FILES = ("learning_curves.png", "README.md", "summary.json", "config.yaml")


def previous_run_id(run_dir):
    """The id of the W&B run an earlier process of this run wrote in RUN_DIR/wandb (a
    directory named offline-run-<time>-<id> or run-<time>-<id>), or None."""
    found = sorted(glob.glob(os.path.join(run_dir, "wandb", "*run-*-*")))
    found = [os.path.basename(f) for f in found if os.path.isdir(f)]
    return found[-1].rsplit("-", 1)[-1] if found else None


@register_logger("wandb")
class WandbLogger(Logger):
    """Weights & Biases, offline by default, in RUN_DIR/wandb (`wandb sync` uploads it).

    The run's flags as its config, every metrics column at step = env steps, the learning
    curves as an image, and learning_curves.png, README.md (the model card), summary.json and
    config.yaml among its files; its exit code says how the run stopped."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--wandb_project", default="ddrl",
                            help="W&B project (default: %(default)s)")
        parser.add_argument("--wandb_entity", default=None,
                            help="W&B entity, a user or team (default: your default entity)")
        parser.add_argument("--wandb_group", default=None,
                            help="W&B group, e.g. one for the seeds of one configuration "
                                 "(default: none)")
        parser.add_argument("--wandb_mode", choices=("offline", "online", "disabled"),
                            default=None,
                            help="offline: write RUN_DIR/wandb only, upload later with `wandb "
                                 "sync RUN_DIR/wandb/offline-run-*` (no network, no account "
                                 "needed while training); online: stream to W&B as the run "
                                 "goes; disabled: nothing (default: $WANDB_MODE when set, else "
                                 "offline)")

    def __init__(self, args):
        super().__init__(args)
        self.wandb = require("wandb", "wandb==0.31.0", "wandb")
        self.mode = args.wandb_mode or os.environ.get("WANDB_MODE") or "offline"
        self.run = None

    def on_start(self, run):
        args, wandb = self.args, self.wandb
        # W&B takes ddrl's agents/ package for OpenAI's Agents SDK and advertises Weave
        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
        resumed = previous_run_id(run.run_dir) if getattr(args, "restore", None) else None
        self.run = wandb.init(
            project=args.wandb_project, entity=args.wandb_entity, group=args.wandb_group,
            name=os.path.basename(os.path.normpath(run.run_dir)), dir=run.run_dir,
            mode=self.mode, config=run_config(run), job_type="train",
            id=resumed, resume="allow" if resumed else None,
            # several runs in one process (a sweep's trials in threads) each keep their own;
            # the terminal is ddrl's (its progress bar), not captured into the run
            reinit="create_new",
            settings=wandb.Settings(console="off", quiet=True, silent=bool(args.quiet)))

    def on_row(self, run, row):
        # every column the row has a value for (text included: W&B keeps it)
        data = {k: v for k, v in row.items() if v is not None and not isinstance(v, bool)}
        self.run.log(data, step=int(row["env_steps"]))

    def on_end(self, run, summary):
        if self.run is None:
            return
        try:
            png = os.path.join(run.run_dir, "learning_curves.png")
            if os.path.isfile(png):  # the media panel; at the last row's step
                self.run.log({"learning_curves": self.wandb.Image(png)},
                             step=int(summary.get("env_steps") or 0))
            # copies in the run's own files/ (not links into RUN_DIR: the offline directory
            # is then whole wherever it is synced from)
            for name in RUN_FILES:
                path = os.path.join(run.run_dir, name)
                if os.path.isfile(path):
                    shutil.copyfile(path, os.path.join(self.run.dir, name))
                    self.run.save(os.path.join(self.run.dir, name), base_path=self.run.dir,
                                  policy="now")
            self.run.summary.update({k: v for k, v in summary.items()
                                     if isinstance(v, (int, float, str, bool)) or v is None})
        finally:
            self.run.finish(exit_code=EXIT_CODES.get(summary.get("stopped_because"), 0))
            self.run = None
