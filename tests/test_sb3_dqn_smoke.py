"""Smoke tests of benchmarks/sb3_dqn.py, the DQN peer (Stable-Baselines3's DQN): the unit
translations between SB3's DQN settings and ddrl's flags (checked against values worked out by
hand from the script's docstring), the DQN suites of compare.py giving ddrl and SB3 the same
settings, and runs of a few hundred steps with RL-Zoo's and with ddrl's settings that write
summary.json with ddrl's keys and eval.csv. The peer libraries are optional
(benchmarks/requirements.txt; CI has none): the module skips without stable_baselines3."""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys

import pytest

pytest.importorskip("stable_baselines3", reason="stable_baselines3 is not installed (benchmarks/requirements.txt)")

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import compare  # noqa: E402  (benchmarks/ on the path first)
import sb3_dqn  # noqa: E402

# what compare.py reads from every system's summary.json (its docstring)
DDRL_KEYS = {"env_steps", "wall_time_s", "best_eval_return", "last_eval_return", "stopped_because",
             "target_reached", "time_to_target_s", "steps_to_target", "system"}
DQN_SUITES = {"cartpole-dqn": "CartPole-v1", "lunar-dqn": "LunarLander-v3",
              "breakout-dqn": "ALE/Breakout-v5", "cartpole-qrdqn": "CartPole-v1"}
SUITE_ALGO = {"cartpole-qrdqn": "qrdqn"}  # the others: dqn


def ddrl_args(*flags):
    return sb3_dqn.ddrl_flag_parser().parse_args(list(flags))


@pytest.mark.unit
def test_sb3_cadence_in_ddrl_units():
    """SB3: G updates after every T vec-env steps (G -1: T x n), the target copied every
    max(I // n, 1) vec-env steps, between bursts."""
    units = sb3_dqn.sb3_in_ddrl_units
    # RL-Zoo's CartPole: T 256, G 128, I 10 <= T: one copy before every burst
    assert units(256, 128, 10, 1) == dict(utd_ratio=0.5, updates_per_burst=128, target_update_interval=128)
    # LunarLander: T 4, G -1 (= 4), I 250: a copy every 62.5 bursts of 4
    assert units(4, -1, 250, 1) == dict(utd_ratio=1.0, updates_per_burst=4, target_update_interval=250)
    # Atari: T 4, G 1, I 1000: every 250 bursts of 1
    assert units(4, 1, 1000, 1) == dict(utd_ratio=0.25, updates_per_burst=1, target_update_interval=250)
    # 4 envs: T 8 vec steps = 32 env steps; G -1 = 32; I 100 env steps = every 25 vec steps
    assert units(8, -1, 100, 4) == dict(utd_ratio=1.0, updates_per_burst=32, target_update_interval=100)
    # I below n envs: every vec step
    assert units(1, 1, 2, 4)["target_update_interval"] == 1


@pytest.mark.unit
def test_rl_zoo_entries_as_ddrl_flags():
    """RL-Zoo's dqn.yml entries (at 22e3ff2) in ddrl's flags, worked out by hand."""
    common = {"--dqn_lr_schedule": "constant", "--no-dueling": None, "--no-double_q": None,
              "--tau": 1.0, "--max_grad_norm": 10, "--exploration": "linear",
              "--eps_initial": 1.0, "--eval_eps": 0.0, "--gamma": 0.99, "--n_step": 1,
              "--num_envs_per_worker": 1}
    cartpole = sb3_dqn.zoo_as_ddrl("CartPole-v1", 100_000)
    assert cartpole == {**common, "--dqn_hidden_sizes": "256,256", "--dqn_lr": 2.3e-3,
                        "--target_update_interval": 128, "--eps_final": 0.04,
                        "--eps_fraction": pytest.approx(0.08),  # 0.16 x 5e4 of 1e5 steps
                        "--buffer_size": 100_000, "--learning_starts": 1000,
                        "--start_steps": 1000, "--utd_ratio": 0.5, "--batch_size": 64}
    assert sb3_dqn.zoo_as_ddrl("CartPole-v1")["--eps_fraction"] == pytest.approx(0.16)
    lunar = sb3_dqn.zoo_as_ddrl("LunarLander-v3", 200_000)
    assert lunar == {**common, "--dqn_hidden_sizes": "256,256", "--dqn_lr": 6.3e-4,
                     "--target_update_interval": 250, "--eps_final": 0.1,
                     "--eps_fraction": pytest.approx(0.06),  # 0.12 x 1e5 of 2e5 steps
                     "--buffer_size": 50_000, "--learning_starts": 0, "--start_steps": 0,
                     "--utd_ratio": 1.0, "--batch_size": 128}
    breakout = sb3_dqn.zoo_as_ddrl("ALE/Breakout-v5", 250_000)
    assert breakout == {**common, "--dqn_hidden_sizes": "none", "--encoder": "nature_cnn",
                        "--cnn_features": 512, "--dqn_lr": 1e-4,
                        "--target_update_interval": 250, "--eps_final": 0.01,
                        "--eps_fraction": pytest.approx(0.1), "--buffer_size": 100_000,
                        "--learning_starts": 2500, "--start_steps": 2500, "--utd_ratio": 0.25,
                        "--batch_size": 32}
    with pytest.raises(ValueError, match="after ddrl's --total_steps 5000"):
        sb3_dqn.zoo_as_ddrl("CartPole-v1", 5000)  # the decay ends at 8,000: ddrl cannot pace it


@pytest.mark.unit
def test_ddrl_flags_to_sb3():
    """ddrl's flags -> SB3's DQN arguments, worked out by hand."""
    a = ddrl_args("--num_workers", "0", "--num_envs_per_worker", "1", "--no-double_q",
                  "--dqn_hidden_sizes", "256,256", "--dqn_lr", "0.0023", "--utd_ratio", "0.5",
                  "--target_update_interval", "128", "--batch_size", "64", "--eps_final", "0.04",
                  "--eps_fraction", "0.08", "--total_steps", "100000", "--n_step", "3")
    kwargs, n_envs = sb3_dqn.ddrl_to_sb3(a)
    assert n_envs == 1
    # ddrl's fragment: 64 steps of its one env, then 32 updates (utd 0.5); 128 updates between
    # target copies = 256 env steps, a copy before every fourth burst
    assert (kwargs["train_freq"], kwargs["gradient_steps"], kwargs["target_update_interval"]) == (64, 32, 256)
    assert kwargs["exploration_fraction"] == pytest.approx(0.08)
    assert (kwargs["exploration_initial_eps"], kwargs["exploration_final_eps"]) == (1.0, 0.04)
    assert (kwargs["learning_rate"], kwargs["batch_size"], kwargs["n_steps"]) == (0.0023, 64, 3)
    assert (kwargs["buffer_size"], kwargs["learning_starts"], kwargs["tau"], kwargs["gamma"],
            kwargs["max_grad_norm"]) == (1_000_000, 1000, 1.0, 0.99, 10.0)
    assert kwargs["policy"] == "MlpPolicy" and kwargs["policy_kwargs"] == dict(net_arch=[256, 256])
    # a run of 2x ddrl's total_steps: SB3's fraction is of the longer run, the same env step
    assert sb3_dqn.ddrl_to_sb3(a, max_steps=200_000)[0]["exploration_fraction"] == pytest.approx(0.04)
    # RL-Zoo's own cadence on request: the same ratio and target interval in updates
    zoo_cadence, _ = sb3_dqn.ddrl_to_sb3(a, train_freq=256)
    assert (zoo_cadence["train_freq"], zoo_cadence["gradient_steps"]) == (256, 128)
    assert zoo_cadence["target_update_interval"] == 256

    # 2 workers x 2 envs at utd 2: 32 steps per env per fragment, 4 envs, 256 updates a burst
    b = ddrl_args("--num_workers", "2", "--num_envs_per_worker", "2", "--no-double_q",
                  "--utd_ratio", "2", "--target_update_interval", "512", "--tau", "0.5",
                  "--dqn_lr_schedule", "linear", "--dqn_lr", "0.001", "--total_steps", "1000",
                  "--eps_fraction", "0", "--eps_final", "0.02", "--dqn_hidden_sizes", "none")
    notes = []
    kwargs, n_envs = sb3_dqn.ddrl_to_sb3(b, max_steps=2000, notes=notes)
    assert n_envs == 4 and (kwargs["train_freq"], kwargs["gradient_steps"]) == (32, 256)
    assert kwargs["target_update_interval"] == 256 and kwargs["tau"] == 0.5 and notes == []
    assert kwargs["policy_kwargs"] == dict(net_arch=[])
    # --eps_fraction 0: the final epsilon from the start
    assert kwargs["exploration_initial_eps"] == kwargs["exploration_final_eps"] == 0.02
    lr = kwargs["learning_rate"]  # to 0 at ddrl's 1000 steps of a 2000-step run, then 0
    assert [lr(p) for p in (1.0, 0.75, 0.5, 0.0)] == pytest.approx([1e-3, 5e-4, 0.0, 0.0])
    # a target interval that is not whole bursts: the average, said
    c = ddrl_args("--num_workers", "0", "--num_envs_per_worker", "1", "--no-double_q",
                  "--target_update_interval", "250")
    kwargs, _ = sb3_dqn.ddrl_to_sb3(c, notes=notes)
    assert (kwargs["gradient_steps"], kwargs["target_update_interval"]) == (64, 250)
    assert notes and "every 250 updates on average" in notes[0]
    # Atari: the Nature CNN of --cnn_features, then the MLP
    d = ddrl_args("--num_workers", "0", "--num_envs_per_worker", "1", "--no-double_q",
                  "--dqn_hidden_sizes", "none", "--cnn_features", "256", "--utd_ratio", "0.25")
    kwargs, _ = sb3_dqn.ddrl_to_sb3(d, image=True)
    assert kwargs["policy"] == "CnnPolicy" and kwargs["gradient_steps"] == 16
    assert kwargs["policy_kwargs"] == dict(net_arch=[], features_extractor_kwargs=dict(features_dim=256))


@pytest.mark.unit
@pytest.mark.parametrize("flags, why", [
    ([], "--double_q"),
    (["--no-double_q", "--dueling"], "--dueling"),
    (["--no-double_q", "--exploration", "ladder"], "ladder"),
    (["--no-double_q", "--prioritized_replay"], "--prioritized_replay"),
    (["--no-double_q", "--eval_eps", "0.05"], "--eval_eps"),
    (["--no-double_q", "--learning_starts", "500"], "differ"),
    (["--no-double_q", "--encoder", "small_cnn"], "--encoder small_cnn"),
    (["--no-double_q", "--utd_ratio", "0.3"], "not a whole number"),
    (["--no-double_q", "--target_update_interval", "10"], "at most once per 64 updates"),
])
def test_what_sb3_cannot_express_is_refused(flags, why):
    a = ddrl_args("--num_workers", "0", "--num_envs_per_worker", "1", *flags)
    with pytest.raises(SystemExit, match=why):
        sb3_dqn.ddrl_to_sb3(a)


def suite_rows(suite):
    cfg = compare.SUITES[suite]
    return {name: shlex.split(template.format(python="python", seed=0, run_dir="/tmp/run",
                                              target=cfg["target"], max_steps=cfg["max_steps"]))
            for name, template in cfg["systems"].items()}


@pytest.mark.unit
@pytest.mark.parametrize("suite", sorted(DQN_SUITES))
def test_dqn_suites_give_ddrl_and_sb3_the_same_settings(suite):
    """Every ddrl row holds RL-Zoo's entry in ddrl's flags (zoo_as_ddrl over the suite's
    steps), the sb3 row with ddrl's settings the very flags of ddrl's one-process row, the
    sb3-zoo row RL-Zoo's entry over the same budget; all evaluate on one schedule."""
    env, cfg, rows = DQN_SUITES[suite], compare.SUITES[suite], suite_rows(suite)
    algo = SUITE_ALGO.get(suite, "dqn")
    parser = sb3_dqn.ddrl_flag_parser(algo)
    zoo = parser.parse_args(shlex.split(sb3_dqn.as_command_line(
        sb3_dqn.zoo_as_ddrl(env, cfg["max_steps"], algo=algo)))
        + ["--total_steps", str(cfg["max_steps"])])
    evaluation = {}
    sb3_ddrl = "sb3" if suite == "breakout-dqn" else "sb3-ddrl"
    assert set(rows) >= {"ddrl-0workers", sb3_ddrl} and cfg["peer"] in rows
    for name, argv in rows.items():
        if os.path.basename(argv[1]) == "main.py":
            flags, rest = parser.parse_known_args(argv[2:])
            assert argv[argv.index("--gym_id") + 1] == env
            assert argv[argv.index("--model_name") + 1] == sb3_dqn.DDRL_MODEL[algo], name
            assert {**vars(flags), "num_workers": 0} == {**vars(zoo), "num_workers": 0}, name
            extra = argparse.ArgumentParser()
            extra.add_argument("--eval_interval", type=int)
            extra.add_argument("--eval_episodes", type=int, default=10)
            e, _ = extra.parse_known_args(rest)
            evaluation[name] = (e.eval_interval, e.eval_episodes)
        else:
            args = sb3_dqn.parse_args(argv[2:])
            assert args.env == env and args.algo == algo, name
            if args.hyperparams == "ddrl":
                ddrl_row = parser.parse_known_args(rows["ddrl-0workers"][2:])[0]
                assert sb3_dqn.ddrl_flags(args, algo) == vars(ddrl_row), name
            else:
                assert args.max_steps == cfg["max_steps"] and args.total_steps is None, name
            entry = sb3_dqn.zoo_entry(env, algo)
            evaluation[name] = (args.eval_freq or entry["eval_freq"],
                                args.eval_episodes or entry.get("eval_episodes", 10))
    assert len(set(evaluation.values())) == 1, evaluation


@pytest.mark.unit
def test_qrdqn_settings_both_ways():
    """RL-Zoo's qrdqn.yml CartPole entry is its DQN entry with 10 quantiles; QRDQN clips no
    gradients (None: ddrl's 0) and takes Adam's epsilon 0.01 / batch itself (ddrl's default,
    so nothing is passed unless --qr_adam_eps is)."""
    zoo = sb3_dqn.zoo_as_ddrl("CartPole-v1", 100_000, algo="qrdqn")
    dqn = sb3_dqn.zoo_as_ddrl("CartPole-v1", 100_000)
    assert zoo["--n_quantiles"] == 10 and zoo["--max_grad_norm"] == 0.0
    assert {k: v for k, v in zoo.items() if k not in ("--n_quantiles", "--max_grad_norm")} == {
        k: v for k, v in dqn.items() if k != "--max_grad_norm"}
    parser = sb3_dqn.ddrl_flag_parser("qrdqn")
    a = parser.parse_args(["--no-double_q", "--n_quantiles", "7"])
    assert a.max_grad_norm == 0.0  # qr_dqn's default
    kwargs, _ = sb3_dqn.ddrl_to_sb3(a, algo="qrdqn")
    assert kwargs["max_grad_norm"] is None
    assert kwargs["policy_kwargs"] == dict(net_arch=[64, 64], n_quantiles=7)
    kwargs, _ = sb3_dqn.ddrl_to_sb3(parser.parse_args(["--no-double_q", "--qr_adam_eps", "1e-4"]),
                                    algo="qrdqn")
    assert kwargs["policy_kwargs"]["optimizer_kwargs"] == dict(eps=1e-4)
    # dqn's parser has no quantiles and clips at 10, as ddrl's dqn
    assert not hasattr(ddrl_args(), "n_quantiles") and ddrl_args().max_grad_norm == 10.0


@pytest.mark.contract
@pytest.mark.parametrize("suite", sorted(DQN_SUITES))
def test_the_sb3_rows_flags_are_ddrls(suite, capsys):
    """--verify_ddrl on each DQN suite's SB3-with-ddrl's-settings row: ddrl's parser (main.py
    --model_name dqn) knows every flag, gives it the same value, and has the same defaults."""
    pytest.importorskip("models.dqn", reason="ddrl's dqn model (models/dqn.py) is not there yet")
    for name, argv in suite_rows(suite).items():
        if argv[1].endswith("sb3_dqn.py") and "ddrl" in argv:
            sb3_dqn.verify_ddrl(sb3_dqn.parse_args(argv[2:] + ["--verify_ddrl"]))
            assert "every flag and default equals ddrl's" in capsys.readouterr().out, name


@pytest.mark.parametrize("hyperparams, extra, updates", [
    # RL-Zoo's CartPole cadence: 128 updates after every 256 steps past the 1000-step warm-up
    # (at 1024, 1280, 1536)
    ("zoo", [], 384),
    # sb3-contrib's QRDQN with RL-Zoo's qrdqn.yml entry: the same cadence
    ("zoo", ["--algo", "qrdqn"], 384),
    # ddrl's: 2 envs x 32 steps (a 64-step fragment over 2 envs) then 32 updates (utd 0.5), from
    # step 512 past the 500-step warm-up to 1536: 17 bursts
    ("ddrl", ["--num_workers", "0", "--num_envs_per_worker", "2", "--no-double_q",
              "--dqn_hidden_sizes", "32,32", "--utd_ratio", "0.5", "--target_update_interval", "64",
              "--batch_size", "32", "--learning_starts", "500", "--start_steps", "500",
              "--n_step", "3", "--dqn_lr_schedule", "linear", "--total_steps", "1500"], 544),
])
def test_sb3_dqn_runs(tmp_path, hyperparams, extra, updates):
    # (a target out of reach: stop at --max_steps, after three evaluations)
    argv = [sys.executable, "benchmarks/sb3_dqn.py", "--env", "CartPole-v1", "--hyperparams",
            hyperparams, "--seed", "0", "--max_steps", "1500", "--eval_freq", "500",
            "--eval_episodes", "2", "--target_return", "1e9", "--out_dir", str(tmp_path), *extra]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert DDRL_KEYS <= set(summary), sorted(DDRL_KEYS - set(summary))
    assert summary["env_steps"] == 1536 and summary["updates"] == updates
    assert summary["stopped_because"] == "total_steps" and summary["target_reached"] is False
    assert summary["time_to_target_s"] is None and summary["steps_to_target"] is None
    algo = "qrdqn" if "qrdqn" in extra else "dqn"
    assert summary["wall_time_s"] > 0 and summary["system"] == f"sb3-{algo}-{hyperparams}"
    settings = summary["settings"]
    assert settings["in_ddrl_units"]["utd_ratio"] == 0.5
    if algo == "qrdqn":
        assert settings["algo"] == "qrdqn"
        # (QRDQN adds its Adam's epsilon, 0.01 / batch, to the entry's policy_kwargs)
        assert settings["dqn"]["policy_kwargs"] == dict(
            net_arch=[256, 256], n_quantiles=10, optimizer_class="Adam",
            optimizer_kwargs=dict(eps=0.01 / 64))
    if hyperparams == "ddrl":
        assert settings["n_envs"] == 2 and settings["dqn"]["n_steps"] == 3
        assert settings["in_ddrl_units"]["target_update_interval"] == 64
        assert settings["dqn"]["learning_rate"] == "linear from 0.0001 to 0 at 1500 env steps"
    else:
        assert settings["in_ddrl_units"]["target_update_interval"] == 128
        assert settings["ddrl_flags"] is None and "no ddrl equal" in settings["notes"][0]
    with open(tmp_path / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [500, 1000, 1500]
    assert summary["last_eval_return"] == pytest.approx(float(rows[-1]["eval_return"]))
    assert os.path.exists(tmp_path / "progress.csv")
