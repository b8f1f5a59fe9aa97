"""gradient_lag and policy_lag are measured from the versions that really took part
(core/algos/trainer.py): lock-step PPO reports 0 for both, and a lag injected by an agent that skips
every other weight load (tests/plugins/stale_agents.py) shows in both loops' columns. Before,
PPO's gradient_lag echoed the request's version back: 0 whatever the worker held."""
import csv
import os

import numpy as np
import pytest

from test_e2e import REPO, run_mains

pytestmark = pytest.mark.e2e

PLUGINS = os.path.join(REPO, "tests", "plugins")


def column(run_dir, name):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [float(r[name]) for r in csv.DictReader(f) if r[name] not in ("", None)]


def test_ppo_lags_are_zero_in_lock_step_and_an_injected_lag_shows(tmp_path):
    common = ["--user_dir", PLUGINS, "--num_workers", "0", "--gym_id", "CartPole-v1",
              "--total_steps", "3072", "--target_return", "none", "--eval_interval", "100000",
              "--no-tensorboard", "--quiet"]
    honest, stale = str(tmp_path / "honest"), str(tmp_path / "stale")
    results = run_mains([*common, "--run_dir", honest],
                        [*common, "--agent_name", "stale_ppo_agent", "--run_dir", stale])
    for proc in results:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert column(honest, "gradient_lag") and set(column(honest, "gradient_lag")) == {0.0}
    assert set(column(honest, "policy_lag")) == {0.0}
    # every other load skipped: about half the gradients come from weights an update old
    assert np.mean(column(stale, "gradient_lag")) > 0.2, column(stale, "gradient_lag")
    assert max(column(stale, "policy_lag")) > 0, column(stale, "policy_lag")


def test_sac_policy_lag_shows_an_injected_lag(tmp_path):
    common = ["--user_dir", PLUGINS, "--model_name", "sac", "--gym_id", "Pendulum-v1",
              "--num_workers", "0", "--total_steps", "1600", "--learning_starts", "512",
              "--start_steps", "512", "--sac_hidden_sizes", "32,32", "--log_steps", "256",
              "--weight_sync_interval", "32", "--learner_threads", "1",  # 2 runs on 2 cores
              "--eval_interval", "100000", "--target_return", "none", "--no-tensorboard",
              "--quiet"]
    honest, stale = str(tmp_path / "honest"), str(tmp_path / "stale")
    results = run_mains([*common, "--run_dir", honest],
                        [*common, "--agent_name", "stale_sac_agent", "--run_dir", stale])
    for proc in results:
        assert proc.returncode == 0, proc.stderr[-3000:]
    # one process: the parameter server computes on its own newest weights
    assert set(column(honest, "gradient_lag")) == {0.0}
    learning = slice(3, None)  # rows after the warm-up, when updates run
    honest_lag = np.mean(column(honest, "policy_lag")[learning])
    stale_lag = np.mean(column(stale, "policy_lag")[learning])
    # a skipped load acts a whole fragment (32 env steps, as many updates) with weights 32
    # updates older: every other fragment, 16 on average (measured 16.0 against 0.0)
    assert stale_lag > honest_lag + 8, (honest_lag, stale_lag)
