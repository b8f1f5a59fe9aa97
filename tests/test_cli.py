"""The ``ddrl`` command (ddrl/cli.py) as a user runs it: installed by ``make setup``
(.venv/bin/ddrl), from a directory outside the checkout. ``ddrl train`` is ``python main.py``
(the same metrics in deterministic mode), ``evaluate``, ``export`` and ``card`` work on a run
made there (``ddrl sweep`` and ``sweep resume`` from elsewhere: tests/test_sweep.py), ``-h``
works at every level, the old command flags of
main.py print their note and still work, two commands in one line are an error, and a script
outside the checkout imports ddrl and trains with a callback."""
import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest

import ddrl.cli as cli

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDRL = os.path.join(os.path.dirname(sys.executable), "ddrl")
FLAGS = ["--num_workers", "0", "--seed", "0", "--total_steps", "2048", "--eval_interval",
         "1024", "--eval_episodes", "2", "--no-tensorboard"]


def ddrl(*args, cwd, timeout=300):
    """The installed command, from ``cwd``, without the checkout on the path (as a user)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([DDRL, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def main_py(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, os.path.join(REPO, "main.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def read_rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """A directory outside the checkout with a run ``ddrl train`` made there."""
    if not os.path.exists(DDRL):
        pytest.fail(f"{DDRL} is missing: `make setup` installs the ddrl command")
    where = str(tmp_path_factory.mktemp("elsewhere"))
    proc = ddrl("train", *FLAGS, "--run_dir", "run", cwd=where)
    assert proc.returncode == 0, proc.stderr
    return where


def test_ddrl_train_is_main_py(elsewhere):
    proc = main_py(*FLAGS, "--run_dir", "by_main", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    ours, theirs = read_rows(os.path.join(elsewhere, "run")), read_rows(
        os.path.join(elsewhere, "by_main"))
    assert len(ours) == len(theirs) > 0
    timing = {"wall_time_s", "steps_per_s", "sample_time_s", "update_time_s"}
    for a, b in zip(ours, theirs):  # deterministic mode: the same numbers, the clock aside
        assert {k: v for k, v in a.items() if k not in timing} == {
            k: v for k, v in b.items() if k not in timing}


def test_evaluate_export_and_card_work_on_a_run_made_elsewhere(elsewhere):
    proc = ddrl("evaluate", "run", "--eval_episodes", "3", cwd=elsewhere)
    assert proc.returncode == 0 and "3 deterministic episodes, return" in proc.stdout, proc.stderr
    proc = ddrl("export", "run", "--out", "policy.onnx", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert os.path.getsize(os.path.join(elsewhere, "policy.onnx")) > 0
    assert json.load(open(os.path.join(elsewhere, "policy.onnx.json")))["format"] == "onnx"
    os.remove(os.path.join(elsewhere, "run", "README.md"))
    proc = ddrl("card", "run", cwd=elsewhere)
    assert proc.returncode == 0 and os.path.isfile(os.path.join(elsewhere, "run", "README.md"))
    # the card's commands are the ddrl command's (they were main.py's old flags, each of
    # which prints a note), and its first runs as written
    with open(os.path.join(elsewhere, "run", "README.md")) as f:
        card = f.read()
    commands = [line.split("#")[0].split() for line in card.splitlines()
                if line.startswith(("ddrl ", "python main.py"))]
    assert [c[:2] for c in commands] == [["ddrl", "evaluate"]] * 2 + [["ddrl", "export"]] * 2 + [
        ["ddrl", "train"]], commands
    proc = ddrl(*commands[0][1:], cwd=elsewhere)
    assert proc.returncode == 0 and "5 seeds x 2 deterministic episodes" in proc.stdout, proc.stderr
    assert proc.stderr == "", proc.stderr


def test_evaluate_passes_other_flags_to_the_runs_parser(elsewhere, capsys, monkeypatch):
    proc = ddrl("evaluate", "run", "--eval_episodes", "2", "--no-eval_deterministic",
                cwd=elsewhere)
    assert proc.returncode == 0 and "2 sampled episodes" in proc.stdout, proc.stderr
    monkeypatch.chdir(elsewhere)
    code, _, err = in_process(capsys, "evaluate", "run", "--bogus_flag", "3")
    assert code == 2 and "--bogus_flag" in err and "Traceback" not in err


def in_process(capsys, *args):
    """``ddrl ARGS`` in this process (the parsing and the exit codes, without the cost of a
    process each): (exit code, stdout, stderr)."""
    try:
        code = cli.dispatch(list(args))
    except SystemExit as exc:  # -h
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_of_runs_made_elsewhere_and_the_seeds_spec(elsewhere):
    """Two more runs beside the fixture's (seed 1, and seed 0 with another learning rate):
    `ddrl report` groups them by the flag that differs, the seed aside, and writes its files;
    configs/sweeps/seeds.yaml, named as README's command names it, is seeds 0-4 alone."""
    for name, extra in (("run_s1", ["--seed", "1"]), ("run_lr", ["--lr", "0.0005"])):
        proc = ddrl("train", *FLAGS, *extra, "--run_dir", name, cwd=elsewhere)  # last wins
        assert proc.returncode == 0, proc.stderr
    proc = ddrl("report", "run", "run_s1", "run_lr", "--out", "report", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "CartPole-v1 (gym_env): 2 configurations, 3 runs" in proc.stdout, proc.stdout
    saved = json.load(open(os.path.join(elsewhere, "report", "report.json")))
    task = saved["tasks"]["CartPole-v1 (gym_env)"]
    assert task["grouped_by"] == ["lr"]
    groups = list(task["groups"].values())
    assert [g["seeds"] for g in groups] == [[0, 1], [0]]
    assert groups[1]["flags"] == {"lr": 0.0005} and "p_last_above_baseline" in groups[1]
    assert groups[0]["curve"]["runs"] == 2
    assert os.path.getsize(os.path.join(elsewhere, "report", "report.png")) > 0
    from options.sweep_spec import load_spec
    spec = load_spec("seeds")
    assert list(spec) == ["seed"] and spec["seed"].kind == "grid"
    assert spec["seed"].values == [0, 1, 2, 3, 4]


def test_help_at_every_level(elsewhere, capsys):
    top = ddrl("-h", cwd=elsewhere)  # the installed command, once
    assert top.returncode == 0
    for name in cli.COMMANDS:
        assert f"  {name} " in top.stdout
    # train builds the chosen plugins' flags, and hides the old command flags
    train = ddrl("train", "--model_name", "sac", "--gym_id", "Pendulum-v1", "-h", cwd=elsewhere)
    assert train.returncode == 0 and "--sac_hidden_sizes" in train.stdout
    assert "usage: ddrl train" in train.stdout
    assert "--evaluate" not in train.stdout and "--num_samples" not in train.stdout
    assert "--num_samples" in in_process(capsys, "sweep", "spec.yaml", "-h")[1]
    for name, needle in (("evaluate", "--eval_episodes"), ("export", "--format"),
                         ("card", "RUN_DIR"), ("list", "--user_dir"),
                         ("cluster", "stop"), ("report", "--baseline")):
        code, out, _ = in_process(capsys, name, "-h")
        assert code == 0 and needle in out, (name, out)
    assert "ddrl sweep resume DIR" in in_process(capsys, "sweep", "-h")[1]


def test_list_names_the_plugins_and_presets(capsys):
    code, out, _ = in_process(capsys, "list")
    assert code == 0
    for needle in ("envs (--env_name):", "gym_env", "models (--model_name):", "ppo",
                   "agents (--agent_name):", "loggers (--logger):", "presets (configs/"):
        assert needle in out
    from options.options import registries
    # built-ins only: a --user_dir plugin an earlier test of this process loaded stays
    # registered (test_check's in-process checks load examples/batched_sim)
    untold = [f"{r.flag} {name}" for r in registries() for name in r.names()
              if r.entries[name].source == "built-in" and not r.entries[name].summary]
    assert not untold, f"built-in plugins without a one-line docstring: {untold}"


def test_mistakes_are_one_paragraph(elsewhere, capsys, monkeypatch):
    monkeypatch.chdir(elsewhere)
    for args, needle in ((["trian"], "Did you mean `ddrl train`?"),
                         (["--gym_id", "X"], "`ddrl train --gym_id X`"),
                         (["train", "--evaluate", "run"], "`ddrl evaluate`"),
                         (["sweep", "resume", "run"], "not a sweep directory"),
                         (["export", "nowhere"], "no such file or directory"),
                         (["evaluate", "nowhere"], "evaluate nowhere: no such file"),
                         (["evaluate", "."], "evaluate .: a directory without checkpoints"),
                         (["export", "."], "export .: a directory without checkpoints")):
        code, _, err = in_process(capsys, *args)
        assert code == 2 and needle in err, (args, err)
        assert "Traceback" not in err and err.count("\n") == 1


def test_main_py_old_command_flags_note_the_subcommand_and_still_work(elsewhere, capsys,
                                                                      monkeypatch):
    proc = main_py("--evaluate", "run", "--eval_episodes", "2", cwd=elsewhere)
    assert proc.returncode == 0 and "2 deterministic episodes" in proc.stdout
    assert proc.stderr.startswith("ddrl: note: `python main.py --evaluate` is `ddrl evaluate` "
                                  "now")
    import main
    monkeypatch.chdir(elsewhere)
    assert main.main(["--model_card", "run"]) == 0
    assert "`ddrl card`" in capsys.readouterr().err
    assert main.main(["--evaluate", "run", "--export", "run"]) == 2
    assert "--evaluate, --export: two commands in one line" in capsys.readouterr().err


def test_a_script_outside_the_checkout_trains_with_a_callback(elsewhere):
    script = os.path.join(elsewhere, "my_experiment.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent("""
            import json, sys
            import ddrl

            class Halfway(ddrl.Callback):
                def on_row(self, run, row):
                    row["progress"] = row["env_steps"] / run.config["total_steps"]
                    if row["progress"] >= 0.5:
                        return "halfway"

            run = ddrl.train(num_workers=0, seed=0, total_steps=4096, eval_interval=1024,
                             eval_episodes=2, quiet=True, run_dir="scripted",
                             callbacks=[Halfway()])
            print(json.dumps({"stopped": run.summary["stopped_because"],
                              "module": ddrl.__file__}))
        """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, script], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["stopped"] == "halfway" and said["module"].startswith(REPO)
    rows = read_rows(os.path.join(elsewhere, "scripted"))
    assert float(rows[-1]["progress"]) >= 0.5 > float(rows[-2]["progress"])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(elsewhere, "scripted", "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("ddrl/progress")] == pytest.approx(
        [float(r["progress"]) for r in rows])


def test_a_run_that_ends_before_joining_its_cluster_says_it_ran_alone(tmp_path):
    """--address where something listens but no Ray answers (a socket that never replies):
    PPO learns in this process while the join goes on (an elastic start); a run that ends
    first says it ran in this process only, also from main.py, which leaves Ray's shutdown to
    the process's end (the note was printed only when the session shut Ray down itself)."""
    import socket
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        proc = main_py("--address", address, "--num_workers", "2", "--total_steps", "512",
                       "--no-tensorboard", "--run_dir", "run", cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (f"the run ended before the cluster at --address {address} was joined: it ran in "
            f"this process only") in proc.stderr


def test_python_dash_m_ddrl_is_the_command(elsewhere):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "ddrl", "list"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("envs (--env_name):"), proc.stderr


def test_ddrl_train_with_ray_workers_from_a_project_root_with_its_own_models_package(tmp_path):
    """Ray puts the driver's working directory first on each local worker's sys.path: from a
    project root holding its own models/, every worker imported that package instead of
    ddrl's and died starting (the run stopped after three replacements). A setup hook now
    makes ddrl's top-level names resolve in ddrl first there; the project's folder is left
    alone otherwise (core/distributed/placement.py ddrl_first_hook)."""
    from core.distributed.placement import ddrl_first_hook
    assert ddrl_first_hook(str(tmp_path)) is None  # nothing to shadow: no runtime_env at all
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("# the project's own models\n")
    assert ddrl_first_hook(str(tmp_path)) is not None
    proc = ddrl("train", "--num_workers", "2", "--no-elastic_start", "--total_steps", "2048",
                "--eval_interval", "1024", "--eval_episodes", "2", "--seed", "0",
                "--no-tensorboard", "--quiet", "--run_dir", "run", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["workers"] == "2" and r["worker_restarts"] == "0" for r in rows)
