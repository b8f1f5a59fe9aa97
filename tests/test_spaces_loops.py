"""Every observation and action space through both loops (issue 30): a rollout worker's
fragments, the PPO agent's gradients (and the export/absorb of gradient workers), SAC's
transitions and replay buffer, masks in acting and in evaluation, and end to end through
main.py with checkpoints, exact resume, --evaluate and --record_video
(tests/plugins/spaces_env.py is the env of every kind)."""
import os

import numpy as np
import pytest
import torch

from core import spaces
from core.types import GradientRequest
from options.options import parse_args, run_spec
from tests.test_e2e import run_main, run_mains

PLUGINS = os.path.join(os.path.dirname(__file__), "plugins")
OBS_KINDS = ("box", "dict", "tuple", "image", "discrete")
PPO_ACTIONS = ("discrete", "multi_discrete", "multi_binary", "box", "box2x2")


def spec_for(*flags):
    return run_spec(parse_args(["--config", "none", "--user_dir", PLUGINS, "--env_name",
                                "spaces_env", "--num_workers", "0", "--num_envs_per_worker",
                                "3", *flags]))


def worker_for(*flags):
    from core.sampling.rollout import RolloutWorker
    return RolloutWorker(spec_for(*flags))


def leaves_of(x):
    return x if spaces.is_tree(x) else {"": x}


@pytest.mark.contract
@pytest.mark.parametrize("obs_kind", OBS_KINDS)
@pytest.mark.parametrize("action_kind", PPO_ACTIONS)
def test_ppo_fragment_and_gradients_for_every_space(obs_kind, action_kind):
    worker = worker_for("--obs_kind", obs_kind, "--action_kind", action_kind,
                        "--episode_steps", "4")
    layout = spaces.layout_of(worker.envs.observation_space)
    stats = worker.collect(None, 0, 6)
    assert stats.env_steps == 18 and len(stats.episode_returns) >= 3
    data = worker.agent.data
    # the carried dtypes: uint8 grids stay uint8, indices int64, bits int8, floats float32
    for path, leaf in leaves_of(data["observations"]).items():
        expected = (layout.leaves[path].dtype if layout.structured
                    else worker.envs.observation_space.dtype)
        if np.issubdtype(expected, np.floating):
            expected = np.float32
        assert leaf.dtype == torch.from_numpy(np.zeros(0, expected)).dtype, path
        assert leaf.shape[0] == 18
    space = worker.envs.action_space
    assert tuple(data["actions"].shape) == (18, *space.shape)
    assert all(space.contains(np.asarray(a, space.dtype)) or action_kind.startswith("box")
               for a in data["actions"].numpy())
    # gradients of a minibatch, finite, for every parameter that takes part
    result = worker.fetch_grads(None, GradientRequest(0, 0, 2, 0.0, 1.0, 0.0, 0))
    assert result.num_samples == 9
    assert all(np.isfinite(g).all() for g in result.gradients.values())
    # a gradient worker computes on another's exported data (--grad_workers)
    other = worker_for("--obs_kind", obs_kind, "--action_kind", action_kind, "--seed", "1",
                       "--episode_steps", "4")
    other.collect(None, 0, 6)
    assert worker.absorb([other.agent.export_data()]) == 36


@pytest.mark.contract
@pytest.mark.parametrize("obs_kind", OBS_KINDS)
@pytest.mark.parametrize("action_kind", ("box", "box2x2"))
def test_sac_transitions_replay_and_update_for_every_observation(obs_kind, action_kind):
    from core.learning.replay_buffer import ReplayBuffer
    flags = ("--model_name", "sac", "--obs_kind", obs_kind, "--action_kind", action_kind,
             "--episode_steps", "4", "--sac_hidden_sizes", "16,16")
    worker = worker_for(*flags)
    worker.collect(None, 0, 6)
    transitions = worker.agent.take_transitions()
    shapes, dtypes = spaces.carried(worker.envs.observation_space)
    buffer = ReplayBuffer(10, shapes, worker.envs.action_space.shape, dtypes)
    buffer.add(transitions)             # 18 transitions into 10 slots: the ring wraps
    assert len(buffer) == 10
    batch = buffer.sample(4)
    for path, leaf in leaves_of(batch.transitions.observations).items():
        assert leaf.dtype == (dtypes[path] if spaces.is_tree(dtypes) else dtypes), path
    restored = ReplayBuffer(10, shapes, worker.envs.action_space.shape, dtypes)
    restored.load_state_dict(buffer.state_dict())
    for a, b in zip(spaces.leaves(buffer.state_dict()["observations"]),
                    spaces.leaves(restored.state_dict()["observations"])):
        assert np.array_equal(a, b)
    gradients, stats = worker.agent.model.step(batch)
    assert all(np.isfinite(g).all() for g in gradients.values())
    actions, _ = worker.agent.model.choose_actions(batch.transitions.observations)
    assert actions.shape == (4, *worker.envs.action_space.shape)


def test_truncated_next_observations_of_a_tree_are_the_final_ones():
    """SAC's next observation at a truncation is the env's final one, leaf by leaf."""
    worker = worker_for("--model_name", "sac", "--obs_kind", "dict", "--action_kind", "box",
                        "--episode_steps", "2", "--num_envs_per_worker", "1")
    trajectory, _, _ = worker.sample(4)
    transitions = worker.agent.transitions(trajectory)
    t, e = trajectory.truncated_index[0]
    for path, leaf in transitions.next_observations.items():
        assert np.array_equal(leaf[t], trajectory.truncated_observations[path][0]), path
    # not the next episode's first observation (a random float target never repeats)
    assert not np.array_equal(transitions.next_observations["target"][t],
                              trajectory.observations["target"][t + 1, e])


test_truncated_next_observations_of_a_tree_are_the_final_ones = pytest.mark.contract(
    test_truncated_next_observations_of_a_tree_are_the_final_ones)


@pytest.mark.contract
@pytest.mark.parametrize("action_kind", ("discrete", "multi_discrete"))
def test_masked_actions_are_never_taken_in_training_nor_evaluation(action_kind):
    from core.sampling.evaluator import Evaluator
    flags = ("--obs_kind", "dict", "--action_kind", action_kind, "--masked",
             "--episode_steps", "50")
    worker = worker_for(*flags)
    worker.collect(None, 0, 200)                        # 600 sampled actions
    invalid = [env.invalid for env in worker.envs.envs]
    assert invalid == [0, 0, 0]
    data = worker.agent.data
    mask = data["observations"]["action_mask"].bool()
    actions = data["actions"].reshape(len(mask), -1)
    offsets = np.cumsum([0] + list(worker.envs.envs[0].choices[:-1]))
    for k, offset in enumerate(offsets):
        assert mask[torch.arange(len(mask)), offset + actions[:, k]].all()
    # the loss sees the mask too: log-probs of the taken actions are those of the masked policy
    model = worker.agent.model
    features = model.features(data["observations"])
    log_prob, entropy = model.policy_terms(features, data["actions"], mask)
    assert torch.allclose(log_prob, data["old_log_probs"], atol=1e-5)
    unmasked, _ = model.policy_terms(features, data["actions"], None)
    assert (unmasked < log_prob - 1e-3).all()          # masking moved probability onto them
    assert torch.isfinite(entropy).all()
    evaluator = Evaluator(spec_for(*flags, "--no-eval_deterministic"), 4)
    result = evaluator.evaluate(model.get_weights(), env_steps=5)
    assert [env.invalid for env in evaluator.envs] == [0, 0, 0, 0]
    assert len(result["returns"]) == 4


@pytest.mark.contract
def test_an_env_that_offers_no_valid_action_is_a_clear_error():
    from core.errors import NoValidAction
    worker = worker_for("--obs_kind", "box", "--action_kind", "multi_discrete", "--masked")
    worker.observations["action_mask"][1, 3:] = 0        # env 1: no choice for sub-action 2
    with pytest.raises(NoValidAction, match=r"env 1 of rollout worker 0, at step 0 of its "
                                            r"episode, offered no valid action.*MultiDiscrete"):
        worker.collect(None, 0, 2)


@pytest.mark.contract
def test_the_normalizer_takes_float_leaves_only():
    worker = worker_for("--obs_kind", "dict", "--normalize_obs")
    stats = worker.collect(None, 0, 4)
    assert sorted(stats.obs_moments) == ["target"]
    observations = worker.agent.data["observations"]
    assert observations["grid"].dtype == torch.uint8
    assert observations["heading"].dtype == torch.int64


# -- end to end ------------------------------------------------------------------------------------
E2E = ("--user_dir", PLUGINS, "--env_name", "spaces_env", "--obs_kind", "dict", "--config",
       "none", "--num_workers", "0", "--seed", "5", "--eval_interval", "200",
       "--eval_episodes", "2", "--target_return", "none", "--episode_steps", "10", "--quiet")


@pytest.mark.e2e
@pytest.mark.parametrize("loop_flags", [
    ("--action_kind", "multi_discrete", "--masked", "--normalize_obs", "--rollout_steps", "16",
     "--num_envs_per_worker", "4"),
    ("--model_name", "sac", "--action_kind", "box2x2", "--learning_starts", "64",
     "--start_steps", "64", "--batch_size", "32", "--sac_hidden_sizes", "16,16",
     "--learner_threads", "1", "--log_steps", "64", "--normalize_obs", "--checkpoint_buffer")],
    ids=["ppo", "sac"])
def test_a_structured_run_resumes_exactly_and_plays_back(tmp_path, loop_flags):
    """Straight N steps == N/2, stop, --restore to N (PPO: weights bit for bit; SAC: the replay
    buffer, uint8 leaves kept, in the checkpoint), the normalizer's moments of the float leaves
    only; then --evaluate and --record_video of what it wrote."""
    from core.run.checkpoint import load_checkpoint
    common = (*E2E, *loop_flags, "--total_steps", "640", "--checkpoint_interval", "300")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "320"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    a, _ = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta["env_steps"] >= 640
    if "--model_name" not in loop_flags:  # PPO's loop is exact; SAC's overlaps its parts
        for name in a["model"]:
            assert torch.equal(a["model"][name], b["model"][name]), name
    else:
        buffer = b["state"]["buffer"]
        assert buffer["observations"]["grid"].dtype == torch.uint8
    normalizer = b["state"]["obs_normalizer"]
    assert sorted(normalizer["leaves"]) == ["target"]
    proc = run_main("--evaluate", os.path.join(resumed, "checkpoints", "last.pt"),
                    "--record_video", str(tmp_path / "video"), "--eval_episodes", "2",
                    "--video_episodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert "2 deterministic" in proc.stdout
    assert sorted(os.listdir(tmp_path / "video")) == ["episode-0.gif", "episode-1.gif"]


@pytest.mark.contract
def test_a_dict_of_vectors_acts_through_numpy_with_the_torch_policy():
    """A structured observation whose leaves are all flattened acts through the numpy actor
    (the concatenation MultiInputEncoder computes); its log-probabilities are the policy's."""
    from models.ppo import PPOModel
    worker = worker_for("--gym_id", "ddrl/DictCartPole-v0", "--env_name", "gym_env")
    model = worker.agent.model
    assert isinstance(model, PPOModel) and model.numpy_actor is not None
    assert not model.values_with_actions          # values for a whole fragment afterwards
    obs = worker.observations
    actions, extras = model.choose_actions(obs)
    features = model.features(model.flat_obs(obs))
    log_prob, _ = model.policy_terms(features, torch.as_tensor(actions))
    assert np.allclose(extras["log_probs"], log_prob.detach().numpy(), atol=1e-5)
    assert np.allclose(extras["values"], model.values(features).detach().numpy(), atol=1e-5)


@pytest.mark.contract
@pytest.mark.parametrize("action_kind", PPO_ACTIONS)
def test_the_loss_sees_one_log_prob_per_sample_and_the_policy_that_acted(action_kind):
    """policy_terms gives [B] log-probabilities equal to those recorded when acting (a Discrete
    action broadcast against its logits as [B, 1] would give [B, B] and a wrong ratio), and
    [B] entropies, for every action space; PPO's first ratio is then exactly 1."""
    worker = worker_for("--obs_kind", "box", "--action_kind", action_kind)
    worker.collect(None, 0, 8)
    data, model = worker.agent.data, worker.agent.model
    features = model.features(data["observations"])
    log_prob, entropy = model.policy_terms(features, data["actions"])
    assert log_prob.shape == entropy.shape == (24,)
    assert torch.allclose(log_prob, data["old_log_probs"], atol=1e-5)
