"""--normalize_obs: moments merged across workers equal the moments of all data; what the
policy, the stored fragment and the evaluation see is the same normalization; saved and used by
--evaluate."""
import os

import numpy as np
import pytest

from core.learning.normalizer import Moments, ObsNormalizer, normalize
from core.sampling.rollout import RolloutWorker
from test_e2e import run_main
from test_sac_loop import pendulum_spec

pytestmark = pytest.mark.unit


def test_merged_moments_equal_the_moments_of_the_union():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=i, scale=i + 1, size=(n, 3)) for i, n in enumerate((5, 40, 1, 17))]
    merged = Moments(0.0, np.zeros(3), np.zeros(3))
    for part in parts:
        merged = merged.merge(Moments.of(part))
    union = np.concatenate(parts)
    assert merged.count == len(union)
    np.testing.assert_allclose(merged.mean, union.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged.m2 / merged.count, union.var(axis=0), rtol=1e-12)

    normalizer = ObsNormalizer((3,))
    np.testing.assert_array_equal(normalizer.statistics()[1], np.ones(3))  # before any data
    for part in parts:
        normalizer.update(Moments.of(part))
    restored = ObsNormalizer((3,))
    restored.load_state_dict(normalizer.state_dict())
    np.testing.assert_array_equal(restored.statistics()[0], normalizer.statistics()[0])
    x = np.array([[100.0, -100.0, 0.5]])
    mean, var = normalizer.statistics()
    expected = np.clip((x - mean) / np.sqrt(var + 1e-8), -10, 10)
    np.testing.assert_allclose(normalize(x, (mean, var)), expected, rtol=1e-6)
    assert np.abs(normalize(x, (mean, var))).max() <= 10.0


@pytest.mark.contract
def test_the_fragment_holds_what_the_policy_saw():
    """Same seed, random warm-up actions (so the trajectories are the same): the normalizing
    worker stores exactly normalize(raw observations) and reports their raw moments."""
    statistics = (np.array([0.5, -0.2, 1.0], np.float32), np.array([4.0, 0.25, 9.0], np.float32))
    common = ("--num_envs_per_worker", "2")
    plain = RolloutWorker(pendulum_spec(*common)[0], random_steps=1000)
    normalizing = RolloutWorker(pendulum_spec(*common, "--normalize_obs")[0], random_steps=1000)
    plain_stats = plain.collect(None, 0, 16)
    stats = normalizing.collect(None, 0, 16, statistics)
    raw, seen = plain.agent.take_transitions(), normalizing.agent.take_transitions()
    np.testing.assert_allclose(seen.observations, normalize(raw.observations, statistics),
                               rtol=1e-6)
    np.testing.assert_allclose(seen.next_observations,
                               normalize(raw.next_observations, statistics), rtol=1e-6)
    assert plain_stats.obs_moments is None
    assert stats.obs_moments.count == 32
    np.testing.assert_allclose(stats.obs_moments.mean, raw.observations.mean(axis=0), rtol=1e-5)


@pytest.mark.e2e
@pytest.mark.parametrize("workers", ["0", "2"])
def test_normalizer_counts_every_step_and_goes_into_checkpoints(tmp_path, workers):
    import torch
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "ppo",
                    "--config", "none", "--num_workers", workers, "--normalize_obs",
                    "--total_steps", "1024", "--eval_interval", "512", "--eval_episodes", "1",
                    "--target_return", "none", "--run_dir", run_dir, "--quiet")
    assert proc.returncode == 0, proc.stderr
    for name in ("last.pt", "best.pt"):
        payload = torch.load(os.path.join(run_dir, "checkpoints", name), weights_only=True)
        saved = payload["state"]["obs_normalizer"]
        assert saved["count"] >= 1024 if name == "last.pt" else saved["count"] > 0
        assert saved["mean"].shape == (3,)
    proc = run_main("--evaluate", run_dir, "--eval_episodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert "2 deterministic episodes" in proc.stdout
