"""An evaluation's row says which weights it evaluated: with a test worker on Ray the evaluation
ends some rows after the point it was due (an offline run's evaluation due at update 200 was
written at 313), and the curves, the model card and the benchmarks put it at that point
(``eval_env_steps``), not at the row's steps."""
import csv
import types

import pytest

pytestmark = pytest.mark.unit


def context(tmp_path):
    from core.run.context import RunContext
    args = types.SimpleNamespace(plot_interval=1e9, plots=False, log_interval=1, quiet=True,
                                 total_steps=1000)
    return RunContext(args, str(tmp_path), 0.0, ["env_steps", "eval_return"], None)


def test_a_late_evaluation_is_written_at_the_steps_it_evaluated(tmp_path):
    ctx = context(tmp_path)
    ctx.env_steps = 336
    late = {"eval_return": -5.0, "eval_return_std": 1.0, "env_steps": 200}
    row = ctx.complete({}, late)
    assert row["env_steps"] == 336 and row["eval_env_steps"] == 200
    # an evaluation without its steps (a plugin's) is taken as the row's
    assert ctx.complete({}, {"eval_return": 1.0, "eval_return_std": 0.0})["eval_env_steps"] == 336
    assert "eval_env_steps" not in ctx.complete({})


def test_the_curves_put_an_evaluation_at_its_steps_and_the_rest_at_the_rows():
    from core.run.plots import series
    rows = [{"env_steps": 100, "wall_time_s": 1.0, "train_return": 3.0, "eval_return": None,
             "eval_return_std": None, "eval_env_steps": None},
            {"env_steps": 336, "wall_time_s": 2.0, "train_return": 4.0, "eval_return": -5.0,
             "eval_return_std": 1.0, "eval_env_steps": 200},
            {"env_steps": 400, "wall_time_s": 3.0, "train_return": 6.0, "eval_return": 7.0,
             "eval_return_std": 0.5}]  # written before the column existed
    assert series(rows, "env_steps", "eval_return") == ([200, 400], [-5.0, 7.0], [1.0, 0.5])
    assert series(rows, "wall_time_s", "eval_return")[0] == [2.0, 3.0]
    assert series(rows, "env_steps", "train_return")[0] == [100, 336, 400]


def test_the_model_card_reads_the_evaluated_steps(tmp_path):
    from core.run.model_card import _evaluations
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "eval_return", "eval_return_std", "eval_env_steps"])
        writer.writerows([[100, "", "", ""], [336, -5.0, 1.0, 200], [400, 7.0, "", ""]])
    points = _evaluations(str(tmp_path))
    assert [p[:2] for p in points] == [(200, -5.0), (400, 7.0)]


@pytest.mark.contract
@pytest.mark.parametrize("trainer", ["ppo", "appo", "replay", "offline"])
def test_every_built_in_loop_writes_the_column(trainer):
    from core.algos.trainers import trainer_class
    from models import MODEL_REGISTRY
    model = {"ppo": "ppo", "appo": "ppo", "replay": "sac", "offline": "iql"}[trainer]
    columns = trainer_class(trainer).metric_columns_for(MODEL_REGISTRY.get(model))
    assert list(columns).index("eval_env_steps") == list(columns).index("eval_success_rate") + 1
