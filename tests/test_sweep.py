"""Sweeps (ddrl/sweep.py, options/sweep_spec.py): the SPEC's format and its check against the
run's flags (contract), then main.py --tune end to end in subprocesses on tiny CartPole budgets:
a 2-trial ASHA sweep with a hopeless trial (lr 0) and its outputs, and a sweep interrupted with
Ctrl-C and continued with --restore."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from core.errors import ConfigError
from ddrl.sweep import trial_base_argv
from options.sweep_spec import Dist, check_spec, config_to_argv, flags_given, load_spec
from options.options import flag_actions, parse_args

pytestmark = pytest.mark.contract

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--gym_id", "CartPole-v1", "--num_workers", "0"]


def write_spec(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def checked(tmp_path, text, argv=BASE, search="random"):
    path = write_spec(tmp_path, text)
    spec = load_spec(path)
    check_spec(spec, flag_actions(argv), path, search)
    return spec


# -- SPEC format and validation -----------------------------------------------------------------
def test_spec_distributions_and_fixed_values(tmp_path):
    spec = checked(tmp_path, """
lr: {loguniform: [1.0e-5, 1.0e-3]}
clip_range: {uniform: [0.1, 0.3]}
num_epochs: {randint: [3, 10]}
hidden_sizes: {choice: ["64,64", "256,256"]}
gae_lambda: {grid: [0.9, 0.95]}
ent_coef: 0.01
""")
    assert spec["lr"].kind == "loguniform" and spec["lr"].values == [1e-5, 1e-3]
    assert spec["num_epochs"].kind == "randint" and spec["num_epochs"].values == [3, 10]
    assert spec["hidden_sizes"].values == ["64,64", "256,256"]
    assert spec["ent_coef"] == 0.01


@pytest.mark.parametrize("text, words", [
    ("lrr: {uniform: [0.1, 0.2]}", ["lrr", "no such flag", "did you mean lr"]),
    ("lr: {normal: [0.1, 0.2]}", ["unknown distribution 'normal'", "loguniform"]),
    ("lr: {uniform: [0.1]}", ["uniform takes [low, high]"]),
    ("lr: {uniform: [0.3, 0.1]}", ["low < high"]),
    ("lr: {loguniform: [0, 0.1]}", ["loguniform needs low > 0"]),
    ("lr: {uniform: ['1e-3', 0.1]}", ["finite numbers"]),
    ("lr: [0.1, 0.2]", ["is a list", "{choice:"]),
    ("rollout_steps: {randint: [0, 3]}", ["rollout_steps", "0", "must be >= 1"]),
    ("num_epochs: {randint: [1.5, 3]}", ["randint bounds must be integers"]),
    ("lr_schedule: {choice: [constant, cosine]}", ["'cosine'", "choices", "linear"]),
    ("hidden_sizes: {uniform: [1, 2]}", ["hidden_sizes", "not a value"]),
    ("rollout_steps: {uniform: [16, 64]}", ["rollout_steps", "not an integer"]),
    ("tensorboard: {choice: [true, 3]}", ["switch", "true and false"]),
    ("run_dir: {choice: [a, b]}", ["--run_dir", "command line"]),
    ("num_samples: {choice: [1, 2]}", ["--num_samples", "command line"]),
])
def test_bad_spec_is_one_paragraph_naming_the_value(tmp_path, text, words):
    with pytest.raises(ConfigError) as info:
        checked(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_spec_checks_plugin_flags_of_the_chosen_model(tmp_path):
    # SAC's flags exist only with --model_name sac: the SPEC is checked against this run's.
    sac = ["--model_name", "sac", "--gym_id", "Pendulum-v1", "--num_workers", "0"]
    checked(tmp_path, "tau: {uniform: [0.001, 0.02]}", argv=sac)
    with pytest.raises(ConfigError, match="tau"):
        checked(tmp_path, "tau: {uniform: [0.001, 0.02]}")


def test_grid_needs_random_search(tmp_path):
    with pytest.raises(ConfigError, match="grid goes with --search random"):
        checked(tmp_path, "lr: {grid: [0.001, 0.01]}", search="optuna")


def test_a_sweep_spec_ddrl_carries_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("configs/sweeps/ppo-cartpole.yaml", "ppo-cartpole.yaml", "ppo-cartpole"):
        assert "lr" in load_spec(given), given
    with pytest.raises(ConfigError, match="nor one of ddrl's sweep specs .*ppo-cartpole"):
        load_spec("ppo-cartpol")


def test_the_final_table_names_ddrl_report_when_the_spec_varies_the_seed(tmp_path):
    from ddrl.sweep import Sweep
    sweep = Sweep.__new__(Sweep)  # the table alone: no Ray, no trial
    sweep.sweep_dir, sweep.spec = str(tmp_path), load_spec("seeds")
    assert f"across seeds: ddrl report {tmp_path / 'trials'}" in sweep.final_table([], None)
    sweep.spec = load_spec("ppo-cartpole")
    assert "across seeds" not in sweep.final_table([], None)


def test_not_a_mapping_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="non-empty mapping"):
        load_spec(write_spec(tmp_path, "- lr\n"))
    with pytest.raises(ConfigError, match="no such file"):
        load_spec(str(tmp_path / "missing.yaml"))


def test_trial_flags_from_sampled_values():
    actions = flag_actions(BASE)
    argv = config_to_argv({"lr": 0.00025, "tensorboard": False, "hidden_sizes": [64, 64],
                           "num_epochs": 4}, actions)
    assert argv == ["--hidden_sizes", "64,64", "--lr", "0.00025", "--num_epochs", "4",
                    "--no-tensorboard"]
    args = parse_args(BASE + argv)  # what a trial parses
    assert args.lr == 0.00025 and args.tensorboard is False and args.num_epochs == 4


def test_search_space_randint_includes_its_upper_bound():
    pytest.importorskip("ray.tune")
    from options.sweep_spec import search_space
    space = search_space({"num_epochs": Dist("randint", [3, 4]), "ent_coef": 0.01})
    assert space["ent_coef"] == 0.01
    draws = {space["num_epochs"].sample() for _ in range(200)}
    assert draws == {3, 4}


def test_sweep_flags_stay_out_of_trials():
    argv = ["--gym_id", "CartPole-v1", "--tune", "s.yaml", "--num_samples", "4",
            "--run_dir=/tmp/x", "--scheduler", "asha", "--quiet", "--lr_schedule", "constant",
            "--address", "127.0.0.1:6379", "--max_concurrent", "2"]
    assert trial_base_argv(argv) == ["--gym_id", "CartPole-v1", "--lr_schedule", "constant"]
    assert flags_given(["--lr", "1", "--no-tensorboard"], ["lr", "tensorboard", "seed"]) == [
        "lr", "tensorboard"]


def test_trials_get_absolute_paths(tmp_path, monkeypatch):
    """Trials run in Tune's own working directory: a relative --config or --user_dir given to
    the sweep must still name the same file there."""
    monkeypatch.chdir(tmp_path)
    argv = ["--config", "configs/a.yaml", "--user_dir=plugins", "--tune", "s.yaml",
            "--config", "none"]
    assert trial_base_argv(argv) == ["--config", str(tmp_path / "configs" / "a.yaml"),
                                     f"--user_dir={tmp_path / 'plugins'}", "--config", "none"]


def run_main(*flags, timeout=300):
    return subprocess.run([sys.executable, os.path.join(REPO, "main.py"), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_bad_spec_fails_before_any_trial(tmp_path):
    spec = write_spec(tmp_path, "lr: {uniform: [0.1, 0.2]}\nclip_rnage: {uniform: [0.1, 0.2]}\n")
    out = run_main(*BASE, "--tune", spec, "--run_dir", str(tmp_path / "sweep"))
    assert out.returncode == 2, out.stderr
    assert "clip_rnage" in out.stderr and "did you mean clip_range" in out.stderr
    assert not (tmp_path / "sweep").exists()  # nothing started
    lr_only = write_spec(tmp_path, "lr: {uniform: [0.1, 0.2]}\n", name="lr.yaml")
    both = run_main(*BASE, "--lr", "0.01", "--tune", lr_only, "--run_dir", str(tmp_path / "s2"))
    assert both.returncode == 2 and "one place only" in both.stderr, both.stderr
    assert not (tmp_path / "s2").exists()


# -- end to end -----------------------------------------------------------------------------------
TINY = BASE + ["--eval_interval", "1024", "--eval_episodes", "3", "--target_return", "none",
               "--no-tensorboard"]


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def asha_sweep(tmp_path_factory):
    """Two trials one after another: lr 1e-3 first, then lr 0 (never learns). ASHA (rungs at
    4096 and 8192 env steps, 1 in 2 goes on) must stop the second at its first rung."""
    tmp = tmp_path_factory.mktemp("asha")
    spec = write_spec(tmp, "lr: {grid: [0.001, 0.0]}\n")
    sweep_dir = tmp / "sweep"
    out = run_main(*TINY, "--total_steps", "12288", "--tune", spec, "--num_samples", "1",
                   "--max_concurrent", "1", "--scheduler", "asha", "--grace_steps", "4096",
                   "--reduction_factor", "2", "--run_dir", str(sweep_dir))
    return out, sweep_dir


@pytest.mark.e2e
def test_asha_sweep_runs_both_trials_and_writes_its_outputs(asha_sweep):
    out, sweep_dir = asha_sweep
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = read_csv(sweep_dir / "sweep.csv")
    assert len(rows) == 2
    assert {float(r["lr"]) for r in rows} == {0.001, 0.0}
    for row in rows:  # a trial ASHA stopped has its metrics and checkpoint, not a summary
        assert os.path.isfile(os.path.join(row["run_dir"], "metrics.csv"))
        assert os.path.isfile(os.path.join(row["run_dir"], "checkpoints", "last.pt"))
    assert (sweep_dir / "sweep.png").stat().st_size > 0
    assert "[sweep]" in out.stdout  # the live lines
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert best["lr"] == 0.001 and "tune" not in best and "run_dir" not in best
    args = parse_args(["--config", str(sweep_dir / "best.yaml")])  # a preset main.py takes
    assert args.lr == 0.001 and args.num_workers == 0 and args.gym_id == "CartPole-v1"


@pytest.mark.e2e
def test_asha_stops_the_hopeless_trial_early(asha_sweep):
    out, sweep_dir = asha_sweep
    rows = {float(r["lr"]): r for r in read_csv(sweep_dir / "sweep.csv")}
    good, hopeless = rows[0.001], rows[0.0]
    assert int(good["env_steps"]) >= 12288, good
    assert good["stopped_because"] == "total_steps"
    assert int(hopeless["env_steps"]) < 8192, hopeless
    assert hopeless["stopped_because"] == "stopped_by_scheduler"
    assert float(good["best_eval_return"]) > float(hopeless["best_eval_return"])


@pytest.mark.e2e
def test_interrupted_sweep_continues_with_resume(tmp_path):
    """With the installed command, from a directory outside the checkout (relative paths):
    `ddrl sweep SPEC`, Ctrl-C, `ddrl sweep resume DIR`."""
    write_spec(tmp_path, "lr: {grid: [0.001, 0.0005]}\n")
    sweep_dir = tmp_path / "sweep"
    total = 6144  # the Ctrl-C lands at the first checkpoint, ~2,048 steps in: a round to spare
    ddrl = os.path.join(os.path.dirname(sys.executable), "ddrl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([ddrl, "sweep", "spec.yaml", *TINY, "--total_steps", str(total),
                             "--num_samples", "1", "--max_concurrent", "1", "--scheduler",
                             "fifo", "--run_dir", "sweep"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 180
        first = None
        while time.time() < deadline and first is None:  # the first trial's first checkpoint
            for path in sweep_dir.glob("trials/*/checkpoints/last.pt"):
                first = path.parent.parent
            time.sleep(0.2)
        assert first is not None, "no trial wrote a checkpoint"
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output[-3000:]
    assert f"ddrl sweep resume {sweep_dir}" in output
    steps_before = json.loads((first / "checkpoints" / "last.pt.json").read_text())["env_steps"]
    assert steps_before < total

    out = subprocess.run([ddrl, "sweep", "resume", "sweep"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = read_csv(sweep_dir / "sweep.csv")
    assert len(rows) == 2 and all(r["stopped_because"] == "total_steps" for r in rows), rows
    # The interrupted trial went on from its checkpoint, not from step 0: its first row is
    # in metrics.csv once.
    steps = [int(r["env_steps"]) for r in read_csv(first / "metrics.csv")]
    assert steps.count(steps[0]) == 1 and max(steps) >= total
    assert (sweep_dir / "best.yaml").exists()
