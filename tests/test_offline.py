"""Learning from data (issue 49): the offline loop (--dataset: no rollout workers, the step clock
in updates, the dataset's normalizer in the checkpoint, an exact resume), recording a run's
experience (--record_dataset) and a saved policy's (`ddrl dataset`), and a missing dataset's
paragraph."""
import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

import ddrl
from core.data import DatasetWriter, load_dataset
from core.errors import ConfigError
from core.run.checkpoint import load_checkpoint

pytestmark = pytest.mark.e2e

QUIET = dict(quiet=True, plots=False, target_return="none")
OFFLINE = dict(gym_id="Pendulum-v1", model_name="sac", num_workers=0, sac_hidden_sizes="32,32",
               learner_threads=1, batch_size=64, eval_episodes=1, log_steps=20,
               sac_precision="fp32", **QUIET)  # (the preset's "auto" times both: not exact)


def random_pendulum_dataset(directory, episodes=4, seed=0):
    """Pendulum-v1 under uniform random actions (200-step episodes, truncated), written with
    ddrl's own writer."""
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    with DatasetWriter(str(directory), env.observation_space, env.action_space,
                       env_id="Pendulum-v1", algorithm_name="random") as writer:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                action = env.action_space.sample()
                next_obs, reward, terminated, truncated, _ = env.step(action)
                writer.add_steps(obs[None], action[None], [reward], [terminated], [truncated],
                                 next_obs[None].astype(np.float32))
                obs, done = next_obs, terminated or truncated
    return str(directory)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_pendulum_dataset(tmp_path_factory.mktemp("data") / "pendulum-random-v0")


def model_weights(run_dir, name="last.pt"):
    payload, meta = load_checkpoint(os.path.join(run_dir, "checkpoints", name))
    return payload, meta


def test_an_offline_run_counts_updates_and_keeps_the_datasets_normalizer(dataset, tmp_path,
                                                                         capsys):
    run = ddrl.train(dataset=dataset, total_steps=60, eval_interval=20, normalize_obs=True,
                     run_dir=str(tmp_path / "run"), **OFFLINE)
    summary = run.summary
    # evaluations at exact multiples of --eval_interval (updates pause there), as d3rlpy's
    # epochs end, though a call makes 4 updates and two are submitted at once
    evaluated = [int(row["env_steps"]) for row in run.metrics
                 if row.get("eval_return") is not None]
    assert evaluated == [20, 40, 60]
    assert summary["step_clock"] == "updates" and summary["evaluated"] is True
    assert "after 60 updates in" in capsys.readouterr().out  # the last line says so too
    assert summary["dataset"]["transitions"] == 800 and summary["dataset"]["episodes"] == 4
    payload, meta = model_weights(run.run_dir)
    assert int(meta["updates"]) == int(meta["env_steps"]) == 60
    # the normalizer is the dataset's: its count is the dataset's rows, never grown
    saved = payload["state"]["obs_normalizer"]
    data = load_dataset(dataset)
    assert float(saved["count"]) == len(data)
    np.testing.assert_allclose(np.asarray(saved["mean"]),
                               data.transitions.observations.astype(np.float64).mean(0),
                               rtol=1e-6)
    assert np.isfinite(summary["last_eval_return"])  # the test worker played the env
    # ddrl.load acts with the saved statistics
    policy = ddrl.load(run.run_dir)
    assert policy.obs_statistics is not None
    assert policy.action_space.contains(policy.act(np.zeros(3, np.float32)))


def test_an_offline_run_resumes_exactly(dataset, tmp_path):
    """40 + 40 updates with a restore between equal 80 in one go: the weights, the optimizer
    and the batches drawn (the buffer's sampler is in the checkpoint)."""
    straight = ddrl.train(dataset=dataset, total_steps=80, eval_interval=1000,
                          run_dir=str(tmp_path / "straight"), **OFFLINE)
    first = ddrl.train(dataset=dataset, total_steps=40, eval_interval=1000,
                       run_dir=str(tmp_path / "resumed"), **OFFLINE)
    resumed = ddrl.train(restore=first.run_dir, total_steps=80, quiet=True)
    # an env to play but no evaluation due within the budget: the summary says none ran
    assert straight.summary["evaluated"] is False, straight.summary
    a, _ = model_weights(straight.run_dir)
    b, meta = model_weights(resumed.run_dir)
    assert int(meta["updates"]) == 80
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


SHARDED = dict({k: v for k, v in OFFLINE.items() if not k.startswith("sac_")},
               model_name="iql", iql_hidden_sizes="32,32", num_learners=2,
               shard_dataset=True, normalize_obs=True,
               iql_actor_lr_schedule="constant")  # (a cosine to --total_steps: 40 != 80)


def test_a_sharded_run_merges_its_shards_and_resumes_exactly(dataset, tmp_path):
    """--shard_dataset: two learner workers hold every other row each; the driver's view is
    the whole dataset's (its rows, its normalizer's count and mean from the merged shards'
    moments), and 40 + 40 updates with a restore between equal 80 in one go (each shard's
    sampler is in the checkpoint). (--num_workers 0: in one process, deterministic.)"""
    straight = ddrl.train(dataset=dataset, total_steps=80, eval_interval=40,
                          run_dir=str(tmp_path / "straight"), **SHARDED)
    summary = straight.summary["dataset"]
    assert summary["transitions"] == 800 and summary["shards"] == [400, 400]
    payload, _ = model_weights(straight.run_dir)
    saved = payload["state"]["obs_normalizer"]
    whole = load_dataset(dataset).transitions.observations.astype(np.float64)
    assert float(saved["count"]) == len(whole)
    np.testing.assert_allclose(np.asarray(saved["mean"]), whole.mean(0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(saved["m2"]) / len(whole), whole.var(0), rtol=1e-6)
    assert len(payload["state"]["dataset_shard_samplers"]) == 2
    assert np.isfinite(straight.summary["last_eval_return"])
    first = ddrl.train(dataset=dataset, total_steps=40, eval_interval=40,
                       run_dir=str(tmp_path / "resumed"), **SHARDED)
    resumed = ddrl.train(restore=first.run_dir, total_steps=80, quiet=True)
    b, meta = model_weights(resumed.run_dir)
    assert int(meta["updates"]) == 80
    for name, tensor in payload["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_sharding_is_refused_where_it_cannot_apply_in_one_paragraph(dataset, tmp_path):
    for flags, named in ((dict(SHARDED, num_learners=1), "--num_learners 1"),
                         (dict(SHARDED, offline_ratio=0.5), "--offline_ratio below 1")):
        with pytest.raises(ConfigError) as error:
            ddrl.train(dataset=dataset, total_steps=10, run_dir=str(tmp_path / "refused"),
                       **flags)
        text = str(error.value)
        assert named in text and "--shard_dataset" in text and "\n" not in text


def test_a_missing_dataset_is_one_paragraph(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    with pytest.raises(ConfigError) as error:
        ddrl.train(dataset="nowhere/pendulum-medium-v0", total_steps=10,
                   run_dir=str(tmp_path / "run"), **OFFLINE)
    text = str(error.value)
    assert "nowhere/pendulum-medium-v0" in text and "download" in text and "\n" not in text


def test_a_dataset_without_an_env_trains_and_reports_its_losses(dataset, tmp_path):
    """--env_name none: the dataset's spaces, no test worker, the losses as the report; the
    checkpoint loads and acts (ddrl.load), and asking it for an env names what is missing. A
    loop that steps an env refuses the name in one paragraph."""
    flags = {k: v for k, v in OFFLINE.items() if k != "gym_id"}
    run = ddrl.train(env_name="none", dataset=dataset, total_steps=40, eval_interval=20,
                     run_dir=str(tmp_path / "run"), **flags)
    summary = run.summary
    assert summary["evaluated"] is False and summary["last_eval_return"] is None
    assert summary["env_steps"] == 40 and summary["step_clock"] == "updates"
    assert not any(row.get("eval_return") not in (None, "") for row in run.metrics)
    assert any(np.isfinite(float(row["critic_loss"])) for row in run.metrics
               if row.get("critic_loss") not in (None, ""))
    policy = ddrl.load(os.path.join(run.run_dir, "checkpoints", "last.pt"))
    data = load_dataset(dataset)
    assert policy.observation_space == data.observation_space
    assert policy.action_space.contains(policy.act(data.transitions.observations[0]))
    with pytest.raises(ConfigError, match="--env_name none has no env to step"):
        policy.make_env()
    for refused in (dict(model_name="ppo", **QUIET),                # a loop that steps an env
                    dict(flags, dataset=dataset, offline_ratio=0.5)):  # online beside the data
        with pytest.raises(ConfigError) as error:
            ddrl.train(env_name="none", total_steps=10, run_dir=str(tmp_path / "refused"),
                       **refused)
        text = str(error.value)
        assert "--env_name none names no env" in text and "--offline_ratio 1" in text
        assert "\n" not in text


def test_a_run_records_its_experience_and_a_saved_policy_its_rollouts(dataset, tmp_path):
    """--record_dataset: every step the worker took, whole episodes, read back by Minari and by
    --dataset; `ddrl dataset`: a saved policy's rollouts, the behaviour in the metadata."""
    import minari
    from ddrl.datasets import collect_dataset
    recorded = str(tmp_path / "replay")
    run = ddrl.train(gym_id="Pendulum-v1", model_name="sac", num_workers=0, total_steps=450,
                     learning_starts=100, start_steps=100, sac_hidden_sizes="32,32",
                     learner_threads=1, eval_interval=1000, log_steps=100,
                     record_dataset=recorded, run_dir=str(tmp_path / "run"), **QUIET)
    info = run.summary["recorded_dataset"]
    assert (info["episodes"], info["steps"]) == (2, 400)  # the third episode was running
    on_disk = minari.MinariDataset(os.path.join(recorded, "data"))
    assert on_disk.total_episodes == 2 and on_disk.total_steps == 400
    episode = next(iter(on_disk.iterate_episodes()))
    assert episode.truncations[-1] and not episode.terminations.any()
    data = load_dataset(recorded)
    assert len(data) == 400 and data.env_id == "Pendulum-v1"
    # each step's reward is Pendulum's for its observation and action (a recorded step is the
    # one the env took, its action clipped to the bounds)
    theta = np.arctan2(data.transitions.observations[:, 1], data.transitions.observations[:, 0])
    expected = -(theta ** 2 + 0.1 * data.transitions.observations[:, 2] ** 2
                 + 0.001 * data.transitions.actions[:, 0] ** 2)
    np.testing.assert_allclose(data.transitions.rewards, expected, rtol=1e-4, atol=1e-4)
    out = collect_dataset(run.run_dir, str(tmp_path / "medium"), steps=400, envs=2,
                          quiet=True)
    meta = json.load(open(os.path.join(out, "data", "metadata.json")))
    assert meta["algorithm_name"] == "ddrl sac"
    assert meta["ddrl_behaviour_policy"]["model_name"] == "sac"
    assert minari.MinariDataset(os.path.join(out, "data")).total_steps == 400


def test_an_offline_run_fine_tunes_online_in_a_new_run(dataset, tmp_path):
    """--restore of an offline run with --offline_ratio below 1: a new run directory, the
    offline weights and update count carried on, env steps from 0, half of every batch from
    the dataset (the mixed buffer: core/learning/mixed_replay.py)."""
    offline = ddrl.train(dataset=dataset, total_steps=40, eval_interval=1000,
                         run_dir=str(tmp_path / "offline"), **OFFLINE)
    online = ddrl.train(restore=offline.run_dir, offline_ratio=0.5, total_steps=300,
                        learning_starts=0, start_steps=0, log_steps=100,
                        run_dir=str(tmp_path / "online"), quiet=True)
    assert online.run_dir != offline.run_dir
    summary = online.summary
    assert "step_clock" not in summary and summary["env_steps"] >= 300
    assert summary["dataset"]["transitions"] == 800
    _, meta = model_weights(online.run_dir)
    assert int(meta["updates"]) >= 40 + 250  # the offline updates, then about one per step
    _, offline_meta = model_weights(offline.run_dir)
    assert int(offline_meta["updates"]) == 40  # the offline run is left as it was


@pytest.mark.unit
def test_a_mixed_batch_takes_its_share_from_the_dataset():
    from core.learning.mixed_replay import MixedReplayBuffer
    from core.learning.replay_buffer import Transitions

    def block(value, rows):
        return Transitions(np.full((rows, 2), value, np.float32), np.zeros((rows, 1), np.float32),
                           np.full(rows, value, np.float32), np.full((rows, 2), value, np.float32),
                           np.zeros(rows, np.float32))
    buffer = MixedReplayBuffer(50, (2,), (1,), dataset=block(7.0, 30), ratio=0.25)
    assert set(buffer.sample(16).transitions.rewards) == {7.0}  # the ring is empty: all data
    buffer.add(block(1.0, 10))
    rewards = buffer.sample(16).transitions.rewards
    assert list(rewards) == [7.0] * 4 + [1.0] * 12
    state = buffer.state_dict()
    again = MixedReplayBuffer(50, (2,), (1,), dataset=block(7.0, 30), ratio=0.25)
    again.load_state_dict(state)
    a, b = buffer.sample(16), again.sample(16)
    assert np.array_equal(a.indices, b.indices)


@pytest.mark.contract
def test_a_loop_flag_given_to_a_model_of_another_loop_names_the_loop():
    from options.options import parse_args
    with pytest.raises(ConfigError) as error:
        parse_args(["--model_name", "ppo", "--dataset", "data/x-v0"])
    text = str(error.value)
    assert "--dataset is a flag of the replay loop" in text and "iql" in text


@pytest.mark.unit
def test_reward_scale_auto_is_iqls_recipe_and_every_buffer_keeps_it():
    from types import SimpleNamespace

    from core.algos.replay_trainer import resolved_reward_scale
    from core.learning.replay_buffer import ReplayBuffer, Transitions
    data = SimpleNamespace(episode_returns=np.array([-300.0, -100.0, 200.0]), source="d")
    assert resolved_reward_scale("auto", data) == pytest.approx(1000.0 / 500.0)
    assert resolved_reward_scale(0.5) == 0.5
    with pytest.raises(ConfigError, match="no --dataset"):
        resolved_reward_scale("auto")
    buffer = ReplayBuffer(8, (1,), (1,), reward_scale=2.0)
    buffer.add(Transitions(np.zeros((3, 1), np.float32), np.zeros((3, 1), np.float32),
                           np.array([1.0, -2.0, 0.5], np.float32), np.zeros((3, 1), np.float32),
                           np.zeros(3, np.float32)))
    assert sorted(buffer.state_dict()["rewards"]) == [-4.0, 1.0, 2.0]


def test_reward_scale_auto_scales_an_offline_runs_rewards(dataset, tmp_path):
    run = ddrl.train(dataset=dataset, total_steps=20, eval_interval=1000, reward_scale="auto",
                     run_dir=str(tmp_path / "run"), **OFFLINE)
    returns = load_dataset(dataset).episode_returns
    assert run.summary["dataset"]["reward_scale"] == pytest.approx(
        1000.0 / (returns.max() - returns.min()))
