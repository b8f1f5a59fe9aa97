"""A plugin folder outside the repository, loaded with --user_dir (examples/user_plugins)."""
import os
import shutil

import pytest

from test_e2e import REPO, read_run, run_main, run_mains

pytestmark = pytest.mark.e2e

PLUGINS = os.path.join(REPO, "examples", "user_plugins")
CHOSEN = ["--env_name", "noisy_cartpole", "--model_name", "layer_norm_ppo",
          "--agent_name", "scaled_reward_agent"]


def copy_out(tmp_path):
    folder = tmp_path / "my plugins"  # a space in the path, on purpose
    shutil.copytree(PLUGINS, folder)
    return str(folder)


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """-h, --list and a training run without Ray workers, from a folder outside the repository
    with its own copy of the plugins, side by side (each on one core)."""
    where = tmp_path_factory.mktemp("outside")
    folder, run_dir = copy_out(where), str(where / "run")
    help_, listing, trained = run_mains(
        ["--user_dir", folder, *CHOSEN, "-h"],
        ["--list", "--user_dir", folder],
        ["--user_dir", folder, *CHOSEN, "--num_workers", "0", "--total_steps", "512",
         "--eval_interval", "256", "--eval_episodes", "2", "--run_dir", run_dir],
        cwd=str(where))
    return {"folder": folder, "help": help_, "list": listing, "trained": (trained, run_dir)}


def test_user_plugin_flags_show_in_help(outside):
    proc = outside["help"]
    assert proc.returncode == 0, proc.stderr
    for flag in ("--obs_noise", "--layer_norm", "--reward_scale", "--num_workers"):
        assert flag in proc.stdout
    assert "--gym_id" not in proc.stdout  # gym_env was not chosen


def test_user_plugins_train_in_ray_actors(tmp_path):
    run_dir = str(tmp_path / "run")
    # Run from outside the repository, with the env in its own actors (it carries @ray.remote).
    proc = run_main("--user_dir", copy_out(tmp_path), *CHOSEN, "--layer_norm", "--obs_noise",
                    "0.05", "--reward_scale", "0.5", "--num_workers", "1",
                    "--num_envs_per_worker", "2", "--env_placement", "actor",
                    "--total_steps", "512", "--eval_interval", "256", "--eval_episodes", "2",
                    "--num_cpus", "2", "--run_dir", run_dir, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 512
    assert summary["last_eval_return"] is not None


def test_user_plugins_train_in_process(outside):
    proc, run_dir = outside["trained"]
    assert proc.returncode == 0, proc.stderr
    assert read_run(run_dir)[0]["env_steps"] >= 512


def test_list_names_every_plugin_its_docstring_and_origin(outside):
    folder, proc = outside["folder"], outside["list"]
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
    for name in ("gym_env", "custom_env", "ppo", "sac", "default_agent", "sac_agent"):
        assert lines[name].endswith("[built-in]"), lines[name]
    for name in ("noisy_cartpole", "layer_norm_ppo", "scaled_reward_agent"):
        assert lines[name].endswith(f"[{folder}]"), lines[name]
    assert "Wraps gymnasium.make(--gym_id)" in lines["gym_env"]  # the docstring behind @ray.remote
    assert "Gaussian noise" in lines["noisy_cartpole"]
    for preset in ("ppo-CartPole-v1.yaml", "sac-LunarLanderContinuous-v3.yaml"):
        assert preset in lines


def test_a_plugin_trainer_runs_end_to_end(tmp_path, record_property):
    """examples/reinforce: a training loop registered from --user_dir (REINFORCE with a
    baseline), named by the plugin's model, trains CartPole through ddrl's rollout worker, test
    worker, metrics and checkpoints. Deterministic (its worker and test worker run in this
    process): seed 0 reaches 300 at 12,288 env steps of the 40k budget in every run; seeds 0-9
    reach it at 2,048-14,336 (the margin for a CPU whose rounding takes another trajectory)."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--user_dir", os.path.join(REPO, "examples", "reinforce"),
                    "--model_name", "reinforce_mlp", "--gym_id", "CartPole-v1",
                    "--total_steps", "40000", "--target_return", "300", "--no-tensorboard",
                    "--run_dir", run_dir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary, rows = read_run(run_dir)
    record_property("steps_to_target", summary["steps_to_target"] or -1)
    assert summary["best_eval_return"] >= 300, summary
    assert "policy_loss" in rows[0] and any(r["policy_loss"] for r in rows)
    assert os.path.isfile(os.path.join(run_dir, "checkpoints", "last.pt"))


def test_an_agent_of_the_wrong_kind_is_one_paragraph(tmp_path):
    proc = run_main("--model_name", "sac", "--gym_id", "Pendulum-v1", "--agent_name",
                    "default_agent", "--run_dir", str(tmp_path / "run"))
    assert proc.returncode == 2
    message = proc.stderr.strip().splitlines()[-1]
    assert "--agent_name default_agent" in message and "OffPolicyAgent" in message
    assert "sac_agent" in message


HALF_MODEL = """
from models import register_model
from models.base import BaseModel


@register_model("half_model")
class HalfModel(BaseModel):
    trainer = "ppo"

    def choose_actions(self, obs, deterministic=False):
        raise RuntimeError("never called: the run is refused first")

    def learning_rate(self, progress):
        return 1e-3
"""


def test_a_model_missing_methods_is_one_paragraph_naming_them(tmp_path):
    """A model plugin that leaves BaseModel's step and configure_optimizer undefined: exit 2
    before anything starts (no run directory), one paragraph naming the plugin, its file and
    each missing method with what it is for; not the method it does define."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "half_model.py").write_text(HALF_MODEL)
    run_dir = tmp_path / "run"
    proc = run_main("--user_dir", str(plugins), "--model_name", "half_model", "--num_workers",
                    "0", "--run_dir", str(run_dir))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "model plugin half_model" in message and "half_model.py" in message
    assert "step (" in message and "configure_optimizer (" in message
    assert "learning_rate" not in message and "choose_actions" not in message
    assert not run_dir.exists()


def test_env_actors_in_one_process_start_rays_own_loopback_instance(tmp_path):
    """--env_placement actor with --num_workers 0: the run starts its own Ray instance on
    127.0.0.1 before the envs' actors are made, instead of letting the first actor start Ray
    by itself, which joins any cluster it finds (RAY_ADDRESS, or /tmp/ray's record of the last
    one: a dead one hung such a run, trying the machine's outward address)."""
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, RAY_ADDRESS="127.0.0.1:9")  # nothing listens there
    done = subprocess.run([sys.executable, "main.py", "--num_workers", "0", "--env_placement",
                           "actor", "--num_envs_per_worker", "2", "--total_steps", "256",
                           "--eval_interval", "128", "--eval_episodes", "1", "--quiet",
                           "--no-tensorboard", "--target_return", "none", "--run_dir",
                           str(tmp_path / "run")], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]


ACTOR_REFUSING_ENV = '''
import time

import ray

from core.errors import ConfigError
from envs import register_env
from envs.gym_env import GymEnv


@register_env("actor_refusing_cartpole")
class ActorRefusingCartPole(GymEnv):
    """CartPole whose constructor raises ConfigError inside a Ray actor only. In the driver a
    step takes 2 ms, a slow simulator's: the stand-in that learns there while Ray starts then
    leaves the CPUs to Ray's start (on a CPU-bound machine, with CartPole at full speed, the
    stand-in learned throughout the 30-130 s that Ray's niced start took)."""

    def __init__(self, args, seed=None):
        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            raise ConfigError("--gym_id CartPole-v1: this node has no such simulator")
        super().__init__(args, seed)

    def step(self, action):
        time.sleep(0.002)
        return super().step(action)
'''


def test_bad_input_only_a_ray_worker_meets_stops_the_run_in_one_paragraph(tmp_path):
    """A ConfigError in a Ray worker's constructor (bad input this process never met: a
    simulator a node lacks, a plugin it cannot load) is the run's error, exit 2, at once: it
    was replaced like a crash, and replaced again, while an elastic start learned on alone."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "refusing.py").write_text(ACTOR_REFUSING_ENV)
    proc = run_main("--user_dir", str(tmp_path / "plugins"), "--env_name",
                    "actor_refusing_cartpole", "--num_workers", "2",
                    # no budget the driver's stand-in could finish before the workers fail
                    # (under a loaded CI it did 100k steps first): only their error ends it
                    "--total_steps", "1000000000",
                    "--target_return", "none", "--run_dir", str(tmp_path / "run"), "--quiet",
                    "--no-tensorboard")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "could not start: --gym_id CartPole-v1: this node has no such simulator")
    summary, _ = read_run(str(tmp_path / "run"))
    assert summary["stopped_because"] == "error" and summary["worker_restarts"] == 0, summary
    assert os.path.isfile(tmp_path / "run" / "checkpoints" / "last.pt")  # learned: kept
