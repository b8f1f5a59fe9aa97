"""ddrl/session.py and core/sampling/eval_runner.py, below main.py: a restore whose trainer fails keeps
its own error; an evaluation whose test worker died is run again on a replacement."""
import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest

from core.run.checkpoint import save_checkpoint
from core.sampling.eval_runner import EvalRunner
from core.faults import Faults
from core.plugins import load_plugins
from core.errors import ConfigError
from ddrl.session import TrainingSession
from models.ppo import PPOModel
from options.options import parse_args, run_spec

pytestmark = pytest.mark.contract


def test_an_error_during_restore_keeps_its_own_message(tmp_path):
    """Only a checkpoint whose tensors do not fit is "does not fit this model"; an actor dying
    while the state is handed over (here: the trainer raising) is reported as itself."""
    args = parse_args(["--config", "none", "--num_workers", "0"])
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    model = PPOModel(args, env.observation_space, env.action_space)
    path = str(tmp_path / "step.pt")
    save_checkpoint(path, model.get_weights(), None,
                    {"model_name": "ppo", "agent_name": "default_agent", "env_steps": 10,
                     "updates": 1, "config": {}})
    args.restore = path
    session = TrainingSession(args, time.time())
    session.spec = run_spec(args)
    session.plugins = load_plugins(session.spec)
    session.spaces = env.observation_space, env.action_space

    def fails(*a, **k):
        raise RuntimeError("the parameter server died while loading")
    session.trainer = SimpleNamespace(restore=fails)
    with pytest.raises(RuntimeError, match="the parameter server died while loading"):
        session.restore()

    args.hidden_sizes = [8]  # a model the checkpoint does not fit: that is a ConfigError
    session.spec = run_spec(args)
    with pytest.raises(ConfigError, match="does not fit this model"):
        session.restore()


@pytest.mark.chaos
def test_an_evaluation_whose_test_worker_died_is_run_again_on_a_replacement(ray_session):
    """10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    2.5-2.9 s."""
    args = parse_args(["--config", "none", "--num_workers", "1", "--eval_episodes", "2",
                       "--eval_interval", "100"])
    spec = run_spec(args)
    run = SimpleNamespace(env_steps=0, target_return=None)
    faults = Faults(args, printer=lambda line: None)
    runner = EvalRunner(spec, run, faults, remote_available=lambda: True)
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    weights = PPOModel(args, env.observation_space, env.action_space).get_weights()
    assert runner.poll(lambda: (weights, 0)) is None  # nothing due at env step 0
    member = runner._worker()
    pid = ray_session.get(member.handle.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would, before the evaluation reaches it
    run.env_steps = 100
    runner.poll(lambda: (weights, 0))  # due: sent to the dead test worker
    result = runner.finish()
    assert faults.counts["worker_restarts"] == 1
    assert result["env_steps"] == 100 and len(result["returns"]) == 2
    assert np.isfinite(result["eval_return"])
    assert runner.group.members[0].generation == 1


@pytest.mark.unit
def test_a_run_directory_named_after_an_atari_id_is_one_folder(tmp_path, monkeypatch):
    from ddrl.session import default_run_dir
    monkeypatch.chdir(tmp_path)
    args = SimpleNamespace(env_name="gym_env", model_name="ppo")
    path = default_run_dir(args, "ALE/Breakout-v5")
    assert os.path.dirname(path) == "runs"
    assert os.path.basename(path).startswith("gym_env-ALE-Breakout-v5-ppo-")
