"""Callbacks and the one observer interface (core/run/observer.py, ddrl/callbacks.py): the
built-in stop rules by hand, the call order, columns a callback adds reaching metrics.csv and
TensorBoard, a callback stopping a run, and --patience on the command line."""
import csv
import os

import pytest

import ddrl
from core.run.metrics import MetricsLogger, read_metrics
from core.run.observer import RunObserver, in_call_order

QUIET = dict(num_workers=0, seed=0, quiet=True, eval_episodes=2)


class FakeRun:
    best_eval_return = None


@pytest.mark.unit
def test_stop_on_plateau_counts_evaluations_that_do_not_beat_the_best():
    rule = ddrl.StopOnPlateau(patience=2, min_delta=0.5)
    rule.on_start(FakeRun())
    said = [rule.on_evaluation(None, {"eval_return": r}) for r in (1.0, 3.0, 3.4, 2.0, 4.0, 4.2,
                                                                    4.5)]
    # 3.4 and 2.0 do not beat 3.0 by more than 0.5: the second of them stops; 4.0 would have
    # reset the count, 4.2 and 4.5 (not above 4.0 + 0.5) stop again
    assert said == [None, None, None, "patience", None, None, "patience"]
    with pytest.raises(ValueError, match="patience must be at least 1"):
        ddrl.StopOnPlateau(patience=0)


@pytest.mark.unit
def test_stop_on_plateau_starts_from_a_restored_runs_best():
    class Restored:
        best_eval_return = 10.0
    rule = ddrl.StopOnPlateau(patience=1)
    rule.on_start(Restored())
    assert rule.on_evaluation(None, {"eval_return": 9.0}) == "patience"


@pytest.mark.unit
def test_stop_at_return_is_the_target():
    rule = ddrl.StopAtReturn(200)
    assert rule.on_evaluation(None, {"eval_return": 199.9}) is None
    assert rule.on_evaluation(None, {"eval_return": 200.0}) == "target_return"


@pytest.mark.unit
def test_observers_are_called_by_phase_in_the_order_given_within_one():
    def make(name, phase):
        return type(name, (RunObserver,), {"phase": phase})()
    late, rec, a, b = (make("Late", "reporter"), make("Rec", "recorder"), make("A", "callback"),
                       make("B", "callback"))
    assert in_call_order([late, rec, a, b]) == [a, b, rec, late]
    with pytest.raises(ValueError, match="phase 'later'"):
        in_call_order([make("Odd", "later")])


@pytest.mark.unit
def test_metrics_csv_takes_new_columns_and_keeps_its_rows(tmp_path):
    path = str(tmp_path / "metrics.csv")
    logger = MetricsLogger(path, ["env_steps", "eval_return"], quiet=True)
    logger.log({"env_steps": 1, "eval_return": 2.0})
    logger.add_columns(["gap", "env_steps"])  # a known one is not added twice
    logger.log({"env_steps": 3, "eval_return": 4.0, "gap": 0.5})
    logger.close()
    with open(path) as f:
        assert next(csv.reader(f)) == ["env_steps", "eval_return", "gap"]
    assert read_metrics(path) == [{"env_steps": 1.0, "eval_return": 2.0, "gap": None},
                                  {"env_steps": 3.0, "eval_return": 4.0, "gap": 0.5}]
    # counts read back as ints (run.metrics[-1]["env_steps"] is 3, not 3.0), other numbers
    # as floats
    assert [type(r["env_steps"]) for r in read_metrics(path)] == [int, int]
    assert type(read_metrics(path)[1]["gap"]) is float
    # a restored run with one column more goes on in the same file, header widened
    again = MetricsLogger(path, ["env_steps", "eval_return", "gap", "extra"], quiet=True)
    again.log({"env_steps": 5, "extra": 7})
    again.close()
    rows = read_metrics(path)
    assert list(rows[0]) == ["env_steps", "eval_return", "gap", "extra"]
    assert [r["extra"] for r in rows] == [None, None, 7.0]


class Recording(ddrl.Callback):
    """Records the hooks it sees, adds an undeclared column, stops at the second evaluation."""

    def __init__(self):
        self.calls = []

    def on_start(self, run):
        self.calls.append(("start", run.env_steps, os.path.isdir(run.run_dir)))

    def on_evaluation(self, run, evaluation):
        self.calls.append(("evaluation", evaluation["env_steps"]))
        if sum(c[0] == "evaluation" for c in self.calls) == 2:
            return "enough"

    def on_row(self, run, row):
        self.calls.append(("row", row["env_steps"]))
        row["steps_squared"] = float(row["env_steps"]) ** 2

    def on_end(self, run, summary):
        self.calls.append(("end", summary["stopped_because"],
                           os.path.isfile(os.path.join(run.run_dir, "README.md"))))


@pytest.mark.e2e
def test_a_callback_adds_a_column_to_metrics_and_tensorboard_and_stops_the_run(tmp_path):
    recording = Recording()
    run = ddrl.train(**QUIET, total_steps=20_000, eval_interval=512, target_return="none",
                     run_dir=str(tmp_path / "run"), callbacks=[recording])
    assert run.exit_code == 0 and run.summary["stopped_because"] == "enough"
    kinds = [c[0] for c in recording.calls]
    assert kinds[0] == "start" and recording.calls[0][2] and kinds[-1] == "end"
    assert recording.calls[-1] == ("end", "enough", True)  # after the model card
    assert kinds.count("evaluation") == 2
    # an evaluation comes before the row that carries it
    first = kinds.index("evaluation")
    assert kinds[first + 1] == "row"
    assert all(r["steps_squared"] == r["env_steps"] ** 2 for r in run.metrics)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(run.run_dir, "tensorboard"))
    events.Reload()
    steps = [e.step for e in events.Scalars("ddrl/steps_squared")]
    assert steps == [int(r["env_steps"]) for r in run.metrics]


@pytest.mark.e2e
def test_patience_on_the_command_line_stops_a_run_that_no_longer_improves(tmp_path):
    # Pendulum evaluated every 200 steps with a tiny budget of learning: returns wander, and
    # with patience 1 the first evaluation not above the best so far ends the run
    run = ddrl.train(**QUIET, gym_id="Pendulum-v1", config="none", eval_interval=200,
                     total_steps=50_000, patience=1, run_dir=str(tmp_path / "run"))
    assert run.summary["stopped_because"] == "patience"
    evals = [r["eval_return"] for r in run.metrics if r["eval_return"] is not None]
    assert evals[-1] <= max(evals[:-1]) and all(b > a for a, b in zip(evals[:-2], evals[1:-1]))
