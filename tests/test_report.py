"""``ddrl report`` (ddrl/report.py): runs grouped by the flags that differ (the seed and output
flags aside, envs apart), their scores and curves against values worked out by hand, the files
and the errors; on run directories written here by hand, so no training is needed (the e2e
case on real runs is in tests/test_cli.py)."""
import json
import math
import os

import numpy as np
import pytest
import yaml

import ddrl.cli as cli
from core.errors import ConfigError
from ddrl.report import (RunRecord, aggregate_curve, group_runs, make_report, markdown,
                         summarize_group, write_report)

pytestmark = pytest.mark.unit

BASE = {"env_name": "gym_env", "gym_id": "CartPole-v1", "gym_kwargs": [], "model_name": "ppo",
        "lr": 0.001, "seed": 0, "run_dir": "x", "logger": ["csv"], "max_env_errors": 5,
        "hidden_sizes": [64, 64]}


def record(curve=((0, 0.0),), path="r", stopped="total_steps", **flags):
    curve = np.array(curve, dtype=float).reshape(-1, 2)
    summary = {"last_eval_return": float(curve[-1, 1]),
               "best_eval_return": float(curve[:, 1].max()), "stopped_because": stopped,
               "target_return": None}
    return RunRecord(path, {**BASE, **flags}, summary, curve)


def test_groups_are_the_flags_that_differ_less_the_seed_and_output_flags_envs_apart():
    runs = [record(seed=0, run_dir="a", logger=["csv"], max_env_errors=2),
            record(seed=1, run_dir="b", logger=["tensorboard"]),
            record(seed=0, lr=0.0003, run_dir="c"),
            record(seed=0, gym_id="Acrobot-v1", lr=0.5, hidden_sizes=[32])]
    grouped, keys = group_runs(runs)
    assert list(grouped) == ["CartPole-v1 (gym_env)", "Acrobot-v1 (gym_env)"]
    assert keys["CartPole-v1 (gym_env)"] == ["lr"]
    assert {label: [r.flags["run_dir"] for r in members]
            for label, members in grouped["CartPole-v1 (gym_env)"].items()} == {
        "lr=0.001": ["a", "b"], "lr=0.0003": ["c"]}
    assert list(grouped["Acrobot-v1 (gym_env)"]) == ["all runs"]  # alone on its env
    # a PettingZoo game is named by its module, and a mapping-valued flag groups as well
    games = [record(env_name="pettingzoo_env", gym_id=None, pz_env="mpe2.simple_spread_v3",
                    extra={"a": 1}),
             record(env_name="pettingzoo_env", gym_id=None, pz_env="mpe2.simple_spread_v3",
                    extra={"a": 2})]
    assert {task: list(groups) for task, groups in group_runs(games)[0].items()} == {
        "mpe2.simple_spread_v3 (pettingzoo_env)": ["extra={'a': 1}", "extra={'a': 2}"]}
    by, by_keys = group_runs(runs[:3], by=["seed"])
    assert list(by["CartPole-v1 (gym_env)"]) == ["seed=0", "seed=1"] and by_keys[
        "CartPole-v1 (gym_env)"] == ["seed"]


def test_a_plugins_own_flags_label_a_group_only_where_needed():
    """SAC against CrossQ: crossq_critic_sizes is absent from SAC's config.yaml; model_name
    alone tells the groups apart, so the labels show it alone (every differing flag stays in
    grouped_by)."""
    runs = [record(model_name="sac", seed=0), record(model_name="sac", seed=1),
            record(model_name="crossq", crossq_critic_sizes=[1024, 1024], seed=0)]
    grouped, keys = group_runs(runs)
    assert list(grouped["CartPole-v1 (gym_env)"]) == ["model_name=sac", "model_name=crossq"]
    assert keys["CartPole-v1 (gym_env)"] == ["crossq_critic_sizes", "model_name"]
    # two CrossQ sizes beside SAC: then the sizes are needed
    runs.append(record(model_name="crossq", crossq_critic_sizes=[256], seed=0))
    labels = list(group_runs(runs)[0]["CartPole-v1 (gym_env)"])
    assert labels == ["crossq_critic_sizes=None, model_name=sac",
                      "crossq_critic_sizes=1024,1024, model_name=crossq",
                      "crossq_critic_sizes=256, model_name=crossq"]


def test_the_curve_is_the_iqm_of_the_interpolated_runs_and_a_run_stopped_at_its_target_holds():
    a = record(((0, 0.0), (10, 10.0)))
    b = record(((0, 10.0), (10, 30.0)))
    curve = aggregate_curve([a, b], reps=200, confidence=0.95, points=11)
    assert curve["env_steps"] == pytest.approx(np.arange(11.0))
    # two runs: the IQM drops nothing, the mean: at step 5, (5 + 20) / 2
    assert curve["iqm"][5] == pytest.approx(12.5) and curve["iqm"][10] == pytest.approx(20.0)
    assert all(lo <= m <= hi for lo, m, hi in zip(curve["low"], curve["iqm"], curve["high"]))
    assert curve["low"][5] == pytest.approx(5.0) and curve["high"][5] == pytest.approx(20.0)
    # four runs: the IQM keeps the middle two at each point (an outlier does not pull it)
    flat = [record(((0, v), (10, v))) for v in (0.0, 1.0, 2.0, 100.0)]
    assert aggregate_curve(flat, 200, 0.95, points=3)["iqm"] == pytest.approx([1.5] * 3)
    # the grid ends where the shortest run not stopped at its target ends...
    c = record(((2, 0.0), (6, 4.0)))
    assert aggregate_curve([a, c], 200, 0.95, points=5)["env_steps"] == pytest.approx(
        [2, 3, 4, 5, 6])
    # ...and a run stopped at its target keeps its last evaluation past its end
    held = record(((0, 0.0), (4, 100.0)), stopped="target_return")
    curve = aggregate_curve([a, held], 200, 0.95, points=3)
    assert curve["env_steps"] == pytest.approx([0, 5, 10])
    assert curve["iqm"] == pytest.approx([0.0, (5 + 100) / 2, (10 + 100) / 2])


def test_group_scores_count_a_missed_target_as_never():
    runs = []
    for k, (time, steps) in enumerate([(10.0, 100), (20.0, 200), (30.0, 300), (None, None)]):
        run = record(((0, 0.0), (1, float(k))))
        run.summary.update(target_return=475, target_reached=time is not None,
                           time_to_target_s=time, steps_to_target=steps)
        runs.append(run)
    out = summarize_group(runs, reps=300, confidence=0.95)
    assert out["reached"] == 3 and out["target_return"] == [475]
    assert out["time_to_target_s"]["iqm"] == pytest.approx(25.0)  # (20 + 30) / 2: inf dropped
    assert out["steps_to_target"]["iqm"] == pytest.approx(250.0)
    assert out["last_eval_return"]["iqm"] == pytest.approx(1.5)   # 4 runs: the middle two
    lo, hi = out["last_eval_return"]["ci"]
    assert 0.0 <= lo <= 1.5 <= hi <= 3.0


def write_run(directory, flags, evals, summary=True, target=None):
    """A run directory as ``ddrl train`` leaves it: config.yaml, metrics.csv (an evaluation at
    each (env steps, return) of ``evals``) and summary.json."""
    os.makedirs(directory)
    with open(os.path.join(directory, "config.yaml"), "w") as f:
        yaml.safe_dump({**BASE, **flags}, f)
    with open(os.path.join(directory, "metrics.csv"), "w") as f:
        f.write("iteration,env_steps,wall_time_s,eval_return,eval_env_steps\n")
        f.write("1,50,0.5,,\n")  # a row without an evaluation
        for i, (steps, value) in enumerate(evals, 2):
            f.write(f"{i},{steps + 3},{i},{value},{steps}\n")
    if summary:
        reached = target is not None and max(v for _, v in evals) >= target
        with open(os.path.join(directory, "summary.json"), "w") as f:
            json.dump({"last_eval_return": evals[-1][1], "best_eval_return": max(
                v for _, v in evals), "target_return": target, "target_reached": reached,
                "time_to_target_s": 5.0 if reached else None,
                "steps_to_target": evals[-1][0] if reached else None,
                "stopped_because": "target_return" if reached else "total_steps"}, f)


@pytest.fixture
def experiment(tmp_path):
    """Two configurations of three seeds each (lr 0.001 ends at 100, 110, 120; lr 0.01 at 10,
    20, 30), a run still going, and a sweep's layout one level down."""
    for seed, end in enumerate((100, 110, 120)):
        write_run(tmp_path / "base" / f"s{seed}", {"seed": seed}, [(1000, 0), (2000, end)])
    for seed, end in enumerate((10, 20, 30)):
        write_run(tmp_path / "sweep" / "trials" / f"t{seed}", {"seed": seed, "lr": 0.01},
                  [(1000, 0), (2000, end)])
    write_run(tmp_path / "base" / "going", {"seed": 9}, [(1000, 5)], summary=False)
    return tmp_path


@pytest.mark.contract
def test_a_run_that_ended_early_counts_with_a_note(tmp_path):
    write_run(tmp_path / "a", {}, [(1000, 7)])
    path = tmp_path / "a" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "stopped_because": "interrupted",
                                "env_steps": 1234}))
    report = make_report([str(tmp_path / "a")], reps=10)
    assert report["notes"] == [f"{tmp_path / 'a'}: stopped (interrupted) at 1234 env steps"]
    assert report["tasks"]["CartPole-v1 (gym_env)"]["groups"]["all runs"]["seeds"] == [0]


@pytest.mark.contract
def test_a_report_of_two_configurations_from_folders(experiment):
    report = make_report([str(experiment / "base"), str(experiment / "sweep")], reps=500)
    task = report["tasks"]["CartPole-v1 (gym_env)"]
    assert task["grouped_by"] == ["lr"] and task["baseline"] == "lr=0.001"
    base, high_lr = task["groups"]["lr=0.001"], task["groups"]["lr=0.01"]
    assert base["seeds"] == [0, 1, 2] and high_lr["seeds"] == [0, 1, 2]
    assert base["last_eval_return"]["iqm"] == pytest.approx(110.0)
    assert high_lr["flags"] == {"lr": 0.01}
    # every run of lr=0.01 ends below every run of the baseline
    assert high_lr["p_last_above_baseline"]["p"] == 0.0
    assert high_lr["p_last_above_baseline"]["ci"] == [0.0, 0.0]
    # the curves on the evaluated weights' env steps (eval_env_steps, not the row's)
    assert base["curve"]["env_steps"][0] == 1000 and base["curve"]["env_steps"][-1] == 2000
    assert base["curve"]["iqm"][-1] == pytest.approx(110.0)
    assert any("going: no summary.json" in note for note in report["notes"])
    text = markdown(report)
    assert "## CartPole-v1 (gym_env): 2 configurations, 6 runs" in text
    assert "| `lr=0.01` | 3 | 0,1,2 | 20.0 [" in text and "| 0.00 [0.00, 0.00] |" in text
    # the second group as the baseline, by its row number
    flipped = make_report([str(experiment)], baseline="2", reps=200)
    assert flipped["tasks"]["CartPole-v1 (gym_env)"]["groups"]["lr=0.001"][
        "p_last_above_baseline"]["p"] == 1.0


@pytest.mark.contract
def test_report_files_and_a_missed_target_in_json(experiment, tmp_path):
    write_run(tmp_path / "targets" / "hit", {"gym_id": "Acrobot-v1"}, [(10, -500), (20, -90)],
              target=-100)
    write_run(tmp_path / "targets" / "miss", {"gym_id": "Acrobot-v1", "seed": 1},
              [(10, -500), (20, -300)], target=-100)
    report = make_report([str(tmp_path / "targets"), str(experiment / "base")], reps=200)
    acrobot = report["tasks"]["Acrobot-v1 (gym_env)"]["groups"]["all runs"]
    assert acrobot["reached"] == 1 and acrobot["time_to_target_s"]["iqm"] == math.inf
    paths = write_report(report, str(tmp_path / "out"))
    assert [os.path.basename(p) for p in paths] == ["report.md", "report.json", "report.png"]
    saved = json.load(open(paths[1]))  # strict JSON: inf is written as null
    assert saved["tasks"]["Acrobot-v1 (gym_env)"]["groups"]["all runs"][
        "time_to_target_s"]["iqm"] is None
    assert open(paths[0]).read() == markdown(report)
    assert os.path.getsize(paths[2]) > 0


@pytest.mark.contract
def test_report_mistakes_are_one_paragraph(experiment, capsys, monkeypatch):
    monkeypatch.chdir(experiment)
    (experiment / "empty").mkdir()
    for args, needle in ((["nowhere"], "report nowhere: no such file or directory"),
                         (["empty"], "report empty: no run directory in it"),
                         (["base", "--by", "lrr"], "lrr is not a flag of these runs"),
                         (["base", "sweep", "--baseline", "lr=1"],
                          "report --baseline 'lr=1': no such group"),
                         (["base", "--confidence", "1.5"], "--confidence 1.5"),
                         (["base", "--normalize", "b.yaml"], "--normalize b.yaml: no such file")):
        code = cli.run(cli.HANDLERS["report"], args)
        err = capsys.readouterr().err
        assert code == 2 and needle in err, (args, err)
        assert "Traceback" not in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="no finished run"):
        make_report([str(experiment / "base" / "going")])
    code = cli.run(cli.HANDLERS["report"], ["base", "sweep", "--out", "rep", "--reps", "100"])
    out = capsys.readouterr().out
    assert code == 0 and "lr=0.01" in out and "ddrl: wrote rep/report.md" in out


@pytest.mark.contract
def test_report_runs_from_python(experiment):
    import ddrl
    report = ddrl.report_runs(experiment / "base", experiment / "sweep", by="lr", reps=100)
    assert list(report["tasks"]["CartPole-v1 (gym_env)"]["groups"]) == ["lr=0.001", "lr=0.01"]


@pytest.mark.contract
def test_across_envs_normalized_as_rliable_pools_them(tmp_path):
    """Two envs x two learning rates x three seeds; CartPole normalized by [0, 500], Acrobot by
    [-500, 0]. lr 0.001's six normalized scores are 0.2, 0.22, 0.24 and 0.2, 0.4, 0.6: the IQM
    drops one from each end of the six, (0.2 + 0.22 + 0.24 + 0.4) / 4 = 0.265; every run of lr
    0.01 ends below every run of lr 0.001 on both envs."""
    ends = {("CartPole-v1", 0.001): (100, 110, 120), ("CartPole-v1", 0.01): (10, 20, 30),
            ("Acrobot-v1", 0.001): (-400, -300, -200), ("Acrobot-v1", 0.01): (-500, -490, -480)}
    for (env, lr), values in ends.items():
        for seed, end in enumerate(values):
            write_run(tmp_path / "runs" / f"{env}-{lr}-{seed}", {"gym_id": env, "lr": lr,
                                                                 "seed": seed}, [(1000, end)])
    write_run(tmp_path / "runs" / "pendulum", {"gym_id": "Pendulum-v1"}, [(1000, -200)])
    bounds = tmp_path / "bounds.yaml"
    bounds.write_text("CartPole-v1: [0, 500]\nAcrobot-v1: [-500, 0]\n")
    report = make_report([str(tmp_path / "runs")], reps=500, normalize=str(bounds))
    across = report["across_tasks"]
    assert sorted(across["tasks"]) == ["Acrobot-v1", "CartPole-v1"]
    base, high_lr = across["groups"]["lr=0.001"], across["groups"]["lr=0.01"]
    assert across["baseline"] == "lr=0.001" and base["runs_per_task"] == 3
    assert base["iqm"]["iqm"] == pytest.approx(0.265)
    assert base["mean"] == pytest.approx((0.2 + 0.22 + 0.24 + 0.2 + 0.4 + 0.6) / 6)
    assert high_lr["p_last_above_baseline"] == {"p": 0.0, "ci": [0.0, 0.0]}
    # the profile: at tau = 0.3, 2 of lr 0.001's 6 runs are above (0.4, 0.6); none of lr 0.01's
    k = int(np.argmin(np.abs(np.asarray(across["taus"]) - 0.3)))
    assert across["taus"][k] == pytest.approx(0.3)
    assert base["profile"][k] == pytest.approx(2 / 6) and high_lr["profile"][k] == 0.0
    assert any("Pendulum-v1 not in --normalize" in note for note in report["notes"])
    text = markdown(report)
    assert "## Across 2 envs, normalized" in text and "| `lr=0.001` | 3 | 0.265 [" in text
    paths = write_report(report, str(tmp_path / "out"))
    assert os.path.basename(paths[-1]) == "profile.png" and os.path.getsize(paths[-1]) > 0
    # as many runs on each env, or an error that says so
    write_run(tmp_path / "runs" / "extra", {"gym_id": "Acrobot-v1", "lr": 0.01, "seed": 3},
              [(1000, -470)])
    with pytest.raises(ConfigError, match="`lr=0.01` has 4, 3 runs on Acrobot-v1, CartPole-v1"):
        make_report([str(tmp_path / "runs")], normalize=str(bounds))
    for spec, needle in (({"Hopper-v5": [0, 1]}, "these runs are on Acrobot-v1"),
                         ({"CartPole-v1": [1, 1]}, "two different numbers"),
                         (str(tmp_path / "none.yaml"), "none.yaml: no such file")):
        with pytest.raises(ConfigError, match=needle):
            make_report([str(tmp_path / "runs" / "pendulum"), str(tmp_path / "runs")],
                        normalize=spec)
