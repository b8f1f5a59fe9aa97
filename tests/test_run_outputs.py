"""What a run leaves in its directory besides metrics.csv: TensorBoard event files (read back
with tensorboard's own reader) and the learning-curve PNG."""
import csv
import os

import numpy as np
import pytest

from options.options import run_spec

from test_e2e import run_mains

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A CartPole run with TensorBoard on, and one with --no-tensorboard beside it (each
    computes on one core)."""
    run_dir, untracked = (str(tmp_path_factory.mktemp("outputs") / name)
                          for name in ("run", "no_tensorboard"))
    return run_dir, untracked, run_mains(
        ["--num_workers", "0", "--total_steps", "3000", "--eval_interval", "1000",
         "--eval_episodes", "2", "--target_return", "none", "--run_dir", run_dir, "--quiet",
         "--plots"],
        ["--num_workers", "0", "--total_steps", "500", "--eval_interval", "500",
         "--eval_episodes", "1", "--run_dir", untracked, "--quiet", "--no-tensorboard",
         "--plots"])


@pytest.fixture(scope="module")
def cartpole_run(runs):
    run_dir, _, (proc, _) = runs
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return run_dir, rows


def test_tensorboard_reads_back_the_metrics(cartpole_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run_dir, rows = cartpole_run
    events = EventAccumulator(os.path.join(run_dir, "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"ddrl/eval_return", "ddrl/train_return", "ddrl/policy_loss",
            "ddrl/steps_per_s"} <= tags
    evals = [(int(r["env_steps"]), float(r["eval_return"])) for r in rows if r["eval_return"]]
    assert len(evals) >= 2
    read = [(e.step, e.value) for e in events.Scalars("ddrl/eval_return")]
    assert [s for s, _ in read] == [s for s, _ in evals]
    assert [v for _, v in read] == pytest.approx([v for _, v in evals], rel=1e-6)
    losses = events.Scalars("ddrl/policy_loss")
    assert len(losses) == len(rows)


def test_learning_curves_png_is_an_image_of_both_axes(cartpole_run):
    from matplotlib import image
    run_dir, _ = cartpole_run
    picture = image.imread(os.path.join(run_dir, "learning_curves.png"))
    assert picture.shape[:2] == (420, 1100)
    # The curves are drawn, in both panels: pixels of the evaluation (tab:orange) and
    # training (tab:blue at alpha 0.6 on white) colours left and right of the middle.
    rgb = picture[..., :3]
    blue_on_white = tuple(0.6 * c + 0.4 for c in (0.122, 0.467, 0.706))
    for colour in ((1.0, 0.498, 0.055), blue_on_white):
        close = (abs(rgb - colour) < 0.03).all(axis=-1)
        assert close[:, :550].sum() > 100 and close[:, 550:].sum() > 100, colour


def test_a_run_leaves_a_model_card_and_main_rewrites_it(cartpole_run, tmp_path):
    """RUN_DIR/README.md: what was trained with which flags, its evaluations with intervals,
    the curve, how to load and export it; `--model_card RUN_DIR` rewrites it on demand."""
    run_dir, rows = cartpole_run
    card_path = os.path.join(run_dir, "README.md")
    with open(card_path) as f:
        card = f.read()
    evaluations = [r for r in rows if r["eval_return"]]
    best = max(evaluations, key=lambda r: float(r["eval_return"]))
    assert card.startswith("# ppo on CartPole-v1")
    assert f"| {float(best['eval_return']):.1f} |" in card and "95% interval" in card
    assert f"(all {len(evaluations)})" in card
    assert "![learning curves](learning_curves.png)" in card
    assert f"ddrl.load({run_dir!r})" in card and "ddrl export" in card and "--eval_seeds" in card
    assert "```yaml\nenv_name: gym_env" in card and "total_steps: 3000" in card
    os.remove(card_path)
    rewrite, missing = run_mains(["--model_card", run_dir],
                                 ["--model_card", str(tmp_path / "no-run")])
    assert rewrite.returncode == 0, rewrite.stderr
    with open(card_path) as f:
        assert f.read() == card               # read from the run directory alone
    assert missing.returncode == 2 and "not a run directory" in missing.stderr


def test_no_tensorboard_writes_no_event_files(runs):
    _, run_dir, (_, proc) = runs
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists(os.path.join(run_dir, "tensorboard"))
    assert os.path.exists(os.path.join(run_dir, "learning_curves.png"))


def log_rows(logger):
    for steps, eval_return in ((40, None), (80, 5.0), (120, None)):
        logger.log({"env_steps": steps, "steps_per_s": 10.0, "wall_time_s": steps / 10,
                    "train_return": 1.0, "eval_return": eval_return})
    logger.close()


@pytest.mark.contract
def test_progress_bar_on_a_terminal_plain_lines_otherwise_nothing_when_quiet(tmp_path, capsys):
    from core.run.metrics import MetricsLogger
    columns = ["env_steps", "steps_per_s", "wall_time_s", "train_return", "eval_return"]

    log_rows(MetricsLogger(str(tmp_path / "a.csv"), columns, total_steps=100,
                           progress_bar=True))
    out, err = capsys.readouterr()
    assert "100/100" in err and "eval 5.0" in err        # the bar: capped at the total
    assert "steps        80" in out + err and "steps        40" not in out + err

    log_rows(MetricsLogger(str(tmp_path / "b.csv"), columns, total_steps=100,
                           progress_bar=False, log_interval=2))
    out, err = capsys.readouterr()
    assert "100/100" not in err
    assert [line.split("|")[0].split()[1] for line in out.splitlines()] == ["80"]

    log_rows(MetricsLogger(str(tmp_path / "c.csv"), columns, total_steps=100,
                           progress_bar=True, quiet=True))
    assert capsys.readouterr() == ("", "")


@pytest.mark.unit
def test_the_bootstrap_interval_of_a_mean():
    from ddrl.stats import bootstrap_interval
    assert bootstrap_interval([5.0, 5.0, 5.0]) == (5.0, 5.0)
    low, high = bootstrap_interval([0.0, 10.0])
    # resamples of two values: means 0, 5 or 10 with chances 1/4, 1/2, 1/4
    assert low == 0.0 and high == 10.0
    values = np.random.default_rng(0).normal(100.0, 10.0, size=50)
    low, high = bootstrap_interval(values)
    assert low < values.mean() < high and high - low < 4 * 10.0 * 1.96 / np.sqrt(50)
    assert bootstrap_interval(values) == (low, high)   # seeded: the same figures each time


@pytest.mark.contract
def test_a_terminal_line_shows_the_loops_and_the_models_own_columns():
    """Core names no model's statistics: the loop and the model say what their lines show."""
    from core.algos.trainers import trainer_class
    from core.run.metrics import MetricsLogger
    from models import MODEL_REGISTRY
    row = {"env_steps": 80, "steps_per_s": 10.0, "wall_time_s": 8.0, "train_return": 1.0,
           "eval_return": 5.0, "q_loss": 0.25, "epsilon": 0.5, "entropy": 1.5,
           "approx_kl": 0.01, "critic_loss": 2.0, "policy_lag": 1.0}

    def line(trainer, model):
        metrics = trainer_class(trainer).line_metrics_for(MODEL_REGISTRY.get(model))
        return MetricsLogger(os.devnull, ["env_steps"], line_metrics=metrics).format_line(row)

    dqn, sac, ppo = line("replay", "dqn"), line("replay", "sac"), line("ppo", "ppo")
    assert "q loss 0.250 | eps 0.500 | lag 1.0" in dqn and "ent" not in dqn and "kl" not in dqn
    assert "q loss 2.000 | ent 1.500" in sac and "| eps" not in sac
    assert "ent 1.500 | kl 0.0100" in ppo and "q loss" not in ppo and "| eps" not in ppo


def test_evaluate_prints_returns_and_record_video_writes_a_gif(cartpole_run, tmp_path):
    from PIL import Image
    run_dir, _ = cartpole_run
    videos = str(tmp_path / "videos")
    proc, misplaced, seeds = run_mains(
        ["--evaluate", run_dir, "--eval_episodes", "3", "--record_video", videos],
        ["--record_video", str(tmp_path / "elsewhere"), "--num_workers", "0"],
        ["--evaluate", run_dir, "--eval_episodes", "2", "--eval_seeds", "3"])
    assert proc.returncode == 0, proc.stderr
    assert "best.pt" in proc.stdout and "3 deterministic episodes, return" in proc.stdout
    assert seeds.returncode == 0, seeds.stderr
    # --eval_seeds: one line per seed, then the mean of their means with its interval
    means = [float(line.split("return ")[1].split()[0]) for line in seeds.stdout.splitlines()
             if line.startswith("ddrl: seed ")]
    assert len(means) == 3
    summary = seeds.stdout.splitlines()[-1]
    assert "3 seeds x 2 deterministic episodes" in summary and "95% interval [" in summary
    assert float(summary.split("mean return ")[1].split(",")[0]) == pytest.approx(
        np.mean(means), abs=0.01)
    with Image.open(os.path.join(videos, "episode-0.gif")) as gif:
        assert gif.n_frames > 5 and gif.size == (600, 400)  # CartPole's rgb_array frames

    assert misplaced.returncode == 2 and "--evaluate" in misplaced.stderr


@pytest.mark.contract
def test_a_sampled_evaluation_is_seeded_and_leaves_the_training_generators_alone():
    """--no-eval_deterministic: actions drawn as in training, the same draws for the same
    env-step count (a restored run evaluates alike), torch's global generator untouched (the
    test worker shares the learner's process with --num_workers 0)."""
    import torch
    from core.sampling.evaluator import Evaluator
    from options.options import parse_args

    def evaluator(*flags):
        args = parse_args(["--config", "none", "--num_workers", "0", "--seed", "3", *flags])
        return Evaluator(run_spec(args), 4)

    sampled = evaluator("--no-eval_deterministic")
    weights = sampled.model.get_weights()
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    first = sampled.evaluate(weights, env_steps=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert sampled.evaluate(weights, env_steps=7)["returns"] == first["returns"]
    assert sampled.evaluate(weights, env_steps=8)["returns"] != first["returns"]
    # The untrained policy's argmax pushes the cart one way: short episodes, other returns.
    argmax = evaluator().evaluate(weights, env_steps=7)
    assert argmax["returns"] != first["returns"]


class CoinEnv:
    """One step; reward 1 and info["is_success"] True on heads, drawn at reset from the reset
    seed, so an evaluation's success rate is its mean return whatever the policy does."""

    def __new__(cls, **kwargs):
        import gymnasium as gym
        import numpy as np

        class Coin(gym.Env):
            observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, seed=None, options=None):
                super().reset(seed=seed)
                self.heads = bool(self.np_random.random() < 0.5)
                return np.zeros(2, np.float32), {}

            def step(self, action):
                return (np.zeros(2, np.float32), float(self.heads), True, False,
                        {"is_success": self.heads})
        return Coin()


@pytest.mark.contract
def test_an_evaluation_reports_the_success_rate_of_envs_that_say_is_success():
    """eval_success_rate: the share of episodes whose last info said is_success (goal envs,
    as SB3's success_rate), None for envs that never say it (CartPole)."""
    import gymnasium as gym
    from core.sampling.evaluator import Evaluator
    from options.options import parse_args

    if "ddrl-test/Coin-v0" not in gym.registry:
        gym.register("ddrl-test/Coin-v0", entry_point=CoinEnv)

    def evaluation(gym_id):
        args = parse_args(["--config", "none", "--num_workers", "0", "--seed", "5",
                           "--gym_id", gym_id, "--model_name", "dqn",
                           "--agent_name", "dqn_agent"])
        evaluator = Evaluator(run_spec(args), 16)
        return evaluator.evaluate(evaluator.model.get_weights(), env_steps=100)

    coin = evaluation("ddrl-test/Coin-v0")
    heads = sum(coin["returns"])
    assert 0 < heads < 16     # both sides drawn: the rate is not a constant
    assert coin["eval_success_rate"] == pytest.approx(heads / 16)
    assert evaluation("CartPole-v1")["eval_success_rate"] is None


@pytest.mark.contract
def test_evaluations_over_seeds_report_the_success_rate_of_each_and_its_interval(capsys):
    """ddrl evaluate --eval_seeds N on an env that says is_success (BabyAI): each seed's line
    gives its success rate, and a last line their mean with a bootstrap interval."""
    import gymnasium as gym
    from core.sampling.evaluator import Evaluator
    from ddrl.playback import evaluate_over_seeds
    from ddrl.stats import bootstrap_interval
    from options.options import parse_args

    if "ddrl-test/Coin-v0" not in gym.registry:
        gym.register("ddrl-test/Coin-v0", entry_point=CoinEnv)
    args = parse_args(["--config", "none", "--num_workers", "0", "--seed", "5", "--gym_id",
                       "ddrl-test/Coin-v0", "--model_name", "dqn", "--agent_name", "dqn_agent",
                       "--eval_seeds", "3", "--eval_episodes", "16"])
    spec = run_spec(args)
    evaluator = Evaluator(spec, 16)
    weights = evaluator.model.get_weights()
    first = evaluator.evaluate(weights, env_steps=100)
    out = evaluate_over_seeds(args, spec, weights, None, {"env_steps": 100}, "coin.pt", first)
    rates = out["seed_success_rates"]
    assert len(rates) == 3 and rates[0] == first["eval_success_rate"]
    assert out["success_rate"] == pytest.approx(np.mean(rates))
    assert out["success_ci95"] == bootstrap_interval(rates)
    lines = capsys.readouterr().out.splitlines()
    assert [line.endswith(f"success rate {r:.2f}") for line, r in zip(lines, rates)] == [True] * 3
    assert lines[-1].startswith(f"ddrl: success rate {np.mean(rates):.2f}, 95% interval [")


@pytest.mark.e2e
def test_a_run_that_fails_at_its_start_leaves_a_directory_to_start_again_in(tmp_path):
    """A new run that fails after writing config.yaml (the model refuses a flag when the loop
    builds it): summary.json says stopped_because error, failed_at_start and the error's line;
    --restore of that directory says there is nothing to continue and how to start again; the
    same --run_dir then takes a new run (the old files replaced)."""
    import json
    from test_e2e import run_main
    run_dir = str(tmp_path / "run")
    common = ("--model_name", "appo", "--num_workers", "0", "--total_steps", "256",
              "--batch_size", "128", "--eval_interval", "256", "--eval_episodes", "1",
              "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    failed = run_main(*common, "--value_norm")
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-2000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stopped_because"] == "error" and summary["failed_at_start"] is True
    assert "--value_norm" in summary["error"] and summary["env_steps"] == 0
    restore = run_main("--restore", run_dir)
    assert restore.returncode == 2
    message = restore.stderr.strip().splitlines()[-1]
    assert "failed at its start" in message and f"--run_dir {run_dir}" in message
    again = run_main(*common)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "failed at its start" in again.stderr
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["stopped_because"] == "total_steps" and "failed_at_start" not in summary
    assert os.path.isfile(os.path.join(run_dir, "checkpoints", "last.pt"))
    # (DDRL_PLOTS=0, as tests/conftest.py sets it: --no-plots by default, no curves)
    assert not os.path.exists(os.path.join(run_dir, "learning_curves.png"))


@pytest.mark.unit
@pytest.mark.parametrize("value, plots", [(None, True), ("1", True), ("0", False),
                                          ("off", False), ("No", False)])
def test_plots_are_on_unless_ddrl_plots_says_otherwise(monkeypatch, value, plots):
    from options.options import parse_args
    if value is None:
        monkeypatch.delenv("DDRL_PLOTS", raising=False)
    else:
        monkeypatch.setenv("DDRL_PLOTS", value)
    assert parse_args(["--config", "none"]).plots is plots
    assert parse_args(["--config", "none", "--plots"]).plots is True
    assert parse_args(["--config", "none", "--no-plots"]).plots is False
