"""MLflow (--logger mlflow): a local store by default (runs/mlruns: an SQLite database with the
artifacts beside it), or any tracking URI."""
import math
import os
import pathlib
import re
import time

from loggers import Logger, numeric_items, register_logger, require, run_config

#: MLflow's run status by how the run stopped (summary.json's stopped_because); else FINISHED
STATUS = {"error": "FAILED", "interrupted": "KILLED", "terminated": "KILLED"}
#: the run directory's files a finished MLflow run keeps as artifacts
ARTIFACTS = ("learning_curves.png", "README.md", "summary.json", "config.yaml")
#: the tag that names the run directory: a restored run (--restore) goes on in its MLflow run
RUN_DIR_TAG = "ddrl.run_dir"
#: MLflow takes at most this many params in one call (mlflow/utils/validation.py)
PARAMS_PER_BATCH = 100


def store(uri):
    """(tracking URI, artifact location of a new experiment) for --mlflow_uri. A path is a
    folder holding an SQLite store (mlflow.db) and the artifacts (artifacts/): MLflow 3 keeps
    its plain-file store in maintenance mode and refuses it unless MLFLOW_ALLOW_FILE_STORE=true.
    A URI (sqlite:///..., file:..., http(s)://... of a tracking server, databricks) is used as
    it is; an SQLite file's new experiments keep their artifacts in artifacts/ beside it."""
    if uri == "databricks" or re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", uri):
        if uri.startswith("sqlite:///"):
            database = os.path.abspath(uri[len("sqlite:///"):])
            return uri, pathlib.Path(os.path.dirname(database), "artifacts").as_uri()
        return uri, None
    folder = os.path.abspath(os.path.expanduser(uri))
    return (f"sqlite:///{os.path.join(folder, 'mlflow.db')}",
            pathlib.Path(folder, "artifacts").as_uri())


def max_param_length():
    """The longest param value MLflow takes (6,000 characters in MLflow 3; 500 before 2.6)."""
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
        return int(MAX_PARAM_VAL_LENGTH)
    except (ImportError, AttributeError, ValueError):
        return 500


@register_logger("mlflow")
class MlflowLogger(Logger):
    """MLflow, into a local SQLite store by default (runs/mlruns) or a tracking server.

    The run's flags as params, every metrics column at step = env steps, learning_curves.png,
    README.md (the model card), summary.json and config.yaml as artifacts; the status says how
    the run stopped (FINISHED, FAILED, KILLED)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--mlflow_uri", default="runs/mlruns",
                            help="where runs go: a folder (an SQLite store mlflow.db and the "
                                 "artifacts in artifacts/; read it with `mlflow ui "
                                 "--backend-store-uri sqlite:///FOLDER/mlflow.db`), or a "
                                 "tracking URI: sqlite:///FILE.db, http://HOST:PORT of a "
                                 "tracking server, ... (default: %(default)s)")
        parser.add_argument("--mlflow_experiment", default="ddrl",
                            help="MLflow experiment, made when it does not exist "
                                 "(default: %(default)s)")

    def __init__(self, args):
        super().__init__(args)
        require("mlflow", "mlflow-skinny==3.17.2", "mlflow")
        self.uri, self.artifact_location = store(args.mlflow_uri)
        self.client = None
        self.run_id = None

    def on_start(self, run):
        from mlflow.tracking import MlflowClient
        if self.uri.startswith("sqlite:///"):  # SQLite makes the file, not its folder
            os.makedirs(os.path.dirname(os.path.abspath(self.uri[len("sqlite:///"):])),
                        exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.experiment_id(self.args.mlflow_experiment)
        run_dir = os.path.abspath(run.run_dir)
        earlier = self.earlier_run(experiment, run_dir) if self.args.restore else None
        if earlier is None:
            self.run_id = self.client.create_run(
                experiment, run_name=os.path.basename(run_dir),
                tags={RUN_DIR_TAG: run_dir, "mlflow.source.name": "ddrl"}).info.run_id
            logged = {}
        else:  # a restored run goes on in its MLflow run: its steps continue
            self.run_id = earlier.info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            logged = earlier.data.params   # (MLflow refuses to change a param's value)
        self.log_params({k: v for k, v in run_config(run).items() if k not in logged})

    def experiment_id(self, name):
        from mlflow.exceptions import MlflowException
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=self.artifact_location)
        except MlflowException:  # made meanwhile by another process (a sweep's trial)
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def earlier_run(self, experiment, run_dir):
        """The MLflow run an earlier process of this run directory wrote, or None."""
        if "'" in run_dir:  # (MLflow's filter strings have no escape for it)
            return None
        found = self.client.search_runs([experiment], f"tags.`{RUN_DIR_TAG}` = '{run_dir}'",
                                        max_results=1, order_by=["attributes.start_time DESC"])
        return found[0] if found else None

    def log_params(self, config):
        from mlflow.entities import Param
        # MLflow caps a param's value (max_param_length): a longer one (a long --policy_map)
        # is cut there, ending in "..."; config.yaml, an artifact of the run, has it whole.
        limit = max_param_length()
        params = []
        for key, value in sorted(config.items()):
            text = str(value)
            params.append(Param(key, text if len(text) <= limit else text[:limit - 3] + "..."))
        for first in range(0, len(params), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[first:first + PARAMS_PER_BATCH])

    def on_row(self, run, row):
        from mlflow.entities import Metric
        step, now = int(row["env_steps"]), int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in numeric_items(row)
                   if math.isfinite(value)]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def on_end(self, run, summary):
        if self.run_id is None:
            return
        stopped = summary.get("stopped_because")
        try:
            for name in ARTIFACTS:
                path = os.path.join(run.run_dir, name)
                if os.path.isfile(path):
                    self.client.log_artifact(self.run_id, path)
            if stopped is not None:
                self.client.set_tag(self.run_id, "ddrl.stopped_because", str(stopped))
        finally:
            self.client.set_terminated(self.run_id, STATUS.get(stopped, "FINISHED"))
            self.run_id = None
