"""Experiment trackers as plugins (loggers/, --logger): the registry and the flag's errors, each
tracker's own flags, a missing package, and tiny runs whose records are read back with each
tracker's own reader: W&B's offline run with `wandb leet inspect` (wandb-core's reader of .wandb
files), MLflow's store with MlflowClient and mlflow.search_runs, TensorBoard's and metrics.csv
apart."""
import argparse
import json
import os
import subprocess
import sys

import pytest

import ddrl
from core.errors import ConfigError
from core.run.observer import RunObserver
from options.options import parse_args

#: a tiny run: 5 rows of 128 env steps, 2 evaluations (~5 s here)
TINY = dict(num_workers=0, seed=0, quiet=True, total_steps=600, eval_interval=300,
            eval_episodes=1)
BUILT_IN = ("csv", "mlflow", "tensorboard", "wandb")


@pytest.mark.unit
def test_the_built_in_trackers_are_recorders_in_the_logger_registry():
    from core.registry import registry_of
    from loggers import LOGGER_REGISTRY, Logger, register_logger
    assert registry_of("logger") is LOGGER_REGISTRY
    assert set(BUILT_IN) <= set(LOGGER_REGISTRY.names())
    for name in BUILT_IN:
        entry = LOGGER_REGISTRY.entries[name]
        assert issubclass(entry.cls, Logger) and entry.cls.phase == "recorder"
        assert entry.source == "built-in" and entry.summary
    with pytest.raises(ConfigError, match="phase 'callback'.*'recorder'"):
        register_logger("not_a_recorder")(type("Early", (RunObserver,), {}))
    assert "not_a_recorder" not in LOGGER_REGISTRY


@pytest.mark.contract
def test_logger_flag_default_order_duplicates_and_none():
    assert parse_args([]).logger == ["tensorboard", "csv"]
    assert parse_args(["--logger", "wandb, csv,wandb"]).logger == ["wandb", "csv"]
    assert parse_args(["--logger", "none"]).logger == []


@pytest.mark.contract
def test_an_unknown_logger_is_one_paragraph_listing_the_registered_ones():
    with pytest.raises(ConfigError) as error:
        parse_args(["--logger", "csv,wandbb"])
    message = str(error.value)
    assert "\n" not in message
    assert "unknown logger 'wandbb' (--logger)" in message
    assert all(name in message.split("Registered loggers: ")[1] for name in BUILT_IN)
    assert "Did you mean 'wandb'?" in message


@pytest.mark.contract
def test_a_trackers_flags_exist_only_when_it_is_chosen(capsys):
    args = parse_args(["--logger", "wandb,mlflow", "--wandb_project", "p", "--wandb_mode",
                       "online", "--mlflow_experiment", "e"])
    assert (args.wandb_project, args.wandb_mode, args.wandb_entity) == ("p", "online", None)
    assert (args.mlflow_experiment, args.mlflow_uri) == ("e", "runs/mlruns")
    with pytest.raises(ConfigError, match="--wandb_project"):
        parse_args(["--wandb_project", "p"])      # the default trackers have no such flag
    with pytest.raises(SystemExit):
        parse_args(["--logger", "wandb", "-h"])
    shown = capsys.readouterr().out
    assert "logger 'wandb':" in shown and "--wandb_mode" in shown and "--mlflow_uri" not in shown


@pytest.mark.contract
def test_no_tensorboard_drops_it_from_the_trackers():
    from loggers import chosen_loggers
    assert chosen_loggers(parse_args(["--no-tensorboard"])) == ["csv"]
    assert chosen_loggers(parse_args(["--logger", "tensorboard,wandb", "--no-tensorboard"])) \
        == ["wandb"]
    assert chosen_loggers(parse_args(["--logger", "tensorboard"])) == ["tensorboard"]


@pytest.mark.contract
def test_a_restored_configuration_keeps_the_flags_of_trackers_not_chosen_now(tmp_path):
    """config.yaml of a run with wandb, re-run with --logger csv: its wandb_* keys are no
    unknown flags."""
    import yaml
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"logger": ["wandb"], "wandb_project": "kept"}))
    assert parse_args(["--config", str(config)]).wandb_project == "kept"
    args = parse_args(["--config", str(config), "--logger", "csv"])
    assert args.logger == ["csv"] and not hasattr(args, "wandb_project")


@pytest.mark.contract
def test_a_user_dirs_logger_is_registered_and_brings_its_flags(tmp_path):
    folder = tmp_path / "mine" / "loggers"
    folder.mkdir(parents=True)
    (folder / "rows_file.py").write_text(
        "from loggers import Logger, register_logger\n\n\n"
        "@register_logger('rows_file')\n"
        "class RowsFile(Logger):\n"
        "    '''Counts rows.'''\n"
        "    @staticmethod\n"
        "    def add_args(parser):\n"
        "        parser.add_argument('--rows_file_name', default='rows.txt')\n")
    args = parse_args(["--user_dir", str(tmp_path / "mine"), "--logger", "rows_file,csv"])
    assert args.logger == ["rows_file", "csv"] and args.rows_file_name == "rows.txt"
    from loggers import LOGGER_REGISTRY
    assert LOGGER_REGISTRY.entries["rows_file"].source == str(tmp_path / "mine")


@pytest.mark.contract
@pytest.mark.parametrize("name, package, pip_line", [("wandb", "wandb", "wandb==0.31.0"),
                                                      ("mlflow", "mlflow",
                                                       "mlflow-skinny==3.17.2")])
def test_a_tracker_whose_package_is_missing_stops_the_run_before_it_starts(
        monkeypatch, tmp_path, name, package, pip_line):
    monkeypatch.setitem(sys.modules, package, None)     # `import package` now fails
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as error:
        ddrl.train(**TINY, logger=f"csv,{name}", run_dir=str(run_dir))
    message = str(error.value)
    assert f"--logger {name} needs the Python package '{package}'" in message
    assert f"pip install {pip_line}" in message and "\n" not in message
    assert not run_dir.exists()                     # nothing started: no run directory


@pytest.mark.unit
def test_wandb_is_offline_unless_told_otherwise(monkeypatch):
    from loggers.wandb_logger import WandbLogger
    args = argparse.Namespace(wandb_mode=None)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert WandbLogger(args).mode == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert WandbLogger(args).mode == "online"
    assert WandbLogger(argparse.Namespace(wandb_mode="disabled")).mode == "disabled"


@pytest.mark.unit
def test_mlflow_store_paths_and_uris():
    from loggers.mlflow_logger import store
    uri, artifacts = store("runs/mlruns")
    folder = os.path.abspath("runs/mlruns")
    assert uri == f"sqlite:///{folder}/mlflow.db" and artifacts == f"file://{folder}/artifacts"
    assert store("sqlite:////data/m.db") == ("sqlite:////data/m.db", "file:///data/artifacts")
    assert store("http://127.0.0.1:5000") == ("http://127.0.0.1:5000", None)
    assert store("databricks") == ("databricks", None)


@pytest.mark.unit
@pytest.mark.parametrize("stopped, status", [("total_steps", "FINISHED"),
                                             ("target_return", "FINISHED"),
                                             ("error", "FAILED"), ("interrupted", "KILLED"),
                                             ("terminated", "KILLED")])
def test_an_mlflow_run_ends_with_the_status_of_how_the_run_stopped(tmp_path, stopped, status):
    from loggers.mlflow_logger import MlflowLogger

    class Client:
        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            return lambda *args, **kwargs: self.calls.append((name, args))

    tracker = MlflowLogger.__new__(MlflowLogger)
    tracker.client, tracker.run_id = Client(), "r1"
    tracker.on_end(argparse.Namespace(run_dir=str(tmp_path)), {"stopped_because": stopped})
    assert tracker.client.calls[-1] == ("set_terminated", ("r1", status))


def numeric_columns(rows):
    """{column: [(env steps, value)]} of metrics.csv's rows, empty and text cells left out."""
    columns = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float):
                columns.setdefault(key, []).append((int(row["env_steps"]), value))
    return columns


@pytest.mark.e2e
def test_wandb_offline_run_is_read_back_by_wandbs_own_reader(tmp_path, monkeypatch):
    """WANDB_MODE=offline: no network, no account; RUN_DIR/wandb/offline-run-*/run-*.wandb
    holds the config, every column at step = env steps, the curve and the card."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = ddrl.train(**TINY, logger="wandb,csv", wandb_group="seeds", plots=True,
                     run_dir=str(tmp_path / "run"))
    assert run.exit_code == 0 and run.metrics
    [folder] = [f for f in os.listdir(os.path.join(run.run_dir, "wandb"))
                if f.startswith("offline-run-")]
    [log] = [f for f in os.listdir(os.path.join(run.run_dir, "wandb", folder))
             if f.endswith(".wandb")]
    wandb_cli = os.path.join(os.path.dirname(sys.executable), "wandb")
    records = [json.loads(line) for line in subprocess.run(
        [wandb_cli, "leet", "inspect", "--json", os.path.join(run.run_dir, "wandb", folder, log)],
        capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()]
    by_type = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)
    [header] = by_type["run"]
    assert header["run"]["project"] == "ddrl" and header["run"]["run_group"] == "seeds"
    config = header["run"]["config"]["update"]
    assert config["seed"] == 0 and config["total_steps"] == 600 and config["logger"] == [
        "wandb", "csv"]
    history = {int(r["history"]["step"]["num"]): r["history"]["item"] for r in by_type["history"]}
    assert sorted(history) == [int(r["env_steps"]) for r in run.metrics]
    for column, points in numeric_columns(run.metrics).items():
        for step, value in points:
            assert history[step][column] == pytest.approx(value, rel=1e-6), (column, step)
    last = history[max(history)]
    assert last["learning_curves._type"] == "image-file"
    files = {f["path"] for r in by_type["files"] for f in r["files"]["files"]}
    assert {"README.md", "learning_curves.png", "summary.json", "config.yaml"} <= files
    assert os.path.isfile(os.path.join(run.run_dir, "wandb", folder, "files", "README.md"))
    assert by_type["exit"][0]["exit"]["exit_code"] == 0


@pytest.mark.e2e
def test_mlflow_run_is_read_back_with_every_column_and_a_restore_goes_on_in_it(
        tmp_path, monkeypatch):
    """The SQLite store of --mlflow_uri FOLDER: params, every metrics column's history at
    step = env steps, the artifacts, FINISHED; a restored run continues its MLflow run."""
    import mlflow
    from mlflow.tracking import MlflowClient
    store_dir, run_dir = tmp_path / "mlruns", str(tmp_path / "run")
    flags = dict(TINY, logger="mlflow,csv", mlflow_uri=str(store_dir),
                 mlflow_experiment="tiny", plots=True)
    first = ddrl.train(**dict(flags, pause_at_steps=300), run_dir=run_dir)
    assert first.summary["stopped_because"] == "paused"
    uri = f"sqlite:///{store_dir}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    [paused] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert paused.info.status == "FINISHED"
    run = ddrl.train(restore=run_dir, total_steps=600, quiet=True)
    assert run.summary["stopped_because"] == "total_steps"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    found = mlflow.search_runs(experiment_names=["tiny"])
    assert len(found) == 1 and found["status"][0] == "FINISHED"   # one run, continued
    run_id = found["run_id"][0]
    assert found["params.seed"][0] == "0" and found["params.logger"][0] == "['mlflow', 'csv']"
    assert found["tags.ddrl.run_dir"][0] == os.path.abspath(run_dir)
    columns = numeric_columns(run.metrics)
    assert {"eval_return", "train_return", "policy_loss", "wall_time_s"} <= set(columns)
    for column, points in columns.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, column))
        assert [s for s, _ in history] == [s for s, _ in points], column
        assert [v for _, v in history] == pytest.approx([v for _, v in points]), column
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"learning_curves.png", "README.md", "summary.json", "config.yaml"} <= artifacts
    assert client.get_run(run_id).data.tags["ddrl.stopped_because"] == "total_steps"


@pytest.mark.e2e
@pytest.mark.parametrize("logger", ["csv", "tensorboard"])
def test_one_tracker_alone_writes_only_its_own_files(tmp_path, logger):
    run = ddrl.train(**TINY, logger=logger, plots=True, run_dir=str(tmp_path / "run"))
    assert run.exit_code == 0 and run.summary["env_steps"] >= 600
    written = set(os.listdir(run.run_dir))
    # the run's own files, whatever --logger says
    assert {"summary.json", "config.yaml", "learning_curves.png", "README.md"} <= written
    if logger == "csv":
        assert "tensorboard" not in written and len(run.metrics) == 5
    else:
        assert "metrics.csv" not in written and run.metrics == []
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        events = EventAccumulator(os.path.join(run.run_dir, "tensorboard"))
        events.Reload()
        assert [e.step for e in events.Scalars("ddrl/train_return")] == [128, 256, 384, 512,
                                                                          640]
