"""Memory (issue 31): recurrent cores, the state carried by env slots across steps, fragments and
episode starts, sequences in the loss, the gradient of the union across workers, and the
contract that keeps core free of model names."""
import copy
import os

import numpy as np
import pytest
import torch

from core import spaces
from core.learning.learner import average_gradients
from core.learning.sequences import chunk_starts, time_major, to_sequences
from core.errors import ConfigError
from core.sampling.memory import EnvMemory
from core.types import GradientRequest
from models.recurrent import RecurrentCore
from options.options import parse_args, run_spec

pytestmark = pytest.mark.contract
PLUGINS = os.path.join(os.path.dirname(__file__), "plugins")
KINDS = ("lstm", "gru")


def spec_for(*flags):
    return run_spec(parse_args(["--config", "none", "--user_dir", PLUGINS, "--env_name",
                                "spaces_env", "--num_workers", "0", "--num_envs_per_worker",
                                "3", "--recurrent", "lstm", *flags]))


def worker_for(*flags):
    from core.sampling.rollout import RolloutWorker
    return RolloutWorker(spec_for(*flags))


# -- numbers ---------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("kind", KINDS)
def test_unroll_equals_one_step_at_a_time_with_resets_at_episode_starts(kind):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 7)
    features = torch.randn(6, 3, 5)
    starts = torch.zeros(6, 3, dtype=torch.bool)
    starts[0, 1] = starts[2, 0] = starts[4, 2] = starts[5, 0] = True
    state = {k: torch.randn(3, 7, requires_grad=True) for k in core.state_names}
    out = core.unroll(features, state, starts)
    stepped, s = [], state
    for t in range(6):
        o, s = core.step(features[t], s, starts[t])
        stepped.append(o)
    assert torch.allclose(out, torch.stack(stepped), atol=1e-6)
    # gradients flow to every step and to the first state of a column that carries it
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in core.parameters())
    # by hand: a row whose episode starts at t ignores everything before t
    fresh = {k: torch.zeros(1, 7) for k in core.state_names}
    o, s1 = core.step(features[2, :1], fresh, torch.zeros(1, dtype=torch.bool))
    o, _ = core.step(features[3, :1], s1, torch.zeros(1, dtype=torch.bool))
    assert torch.allclose(out[3, 0], o[0], atol=1e-6)
    assert set(core.initial_state(4)) == set(core.state_names)
    # column 1 starts an episode at t = 0: its given state is never used; column 2 uses its own
    assert state["h"].grad[1].abs().sum() == 0 and state["h"].grad[2].abs().sum() > 0


@pytest.mark.unit
def test_segments_by_hand():
    from models.recurrent import segments_of
    starts = np.zeros((4, 2), dtype=bool)
    starts[2, 0] = starts[0, 1] = True
    seg = segments_of(starts)                      # column 0: [0, 2), [2, 4); column 1: [0, 4)
    assert seg.columns.tolist() == [0, 0, 1]
    assert seg.carries_state.tolist() == [True, False, False]
    assert seg.real.sum(0).tolist() == [2, 2, 4]
    assert seg.gather[:, 2].tolist() == [1, 3, 5, 7]   # t * N + n of column 1
    assert seg.gather[:2, 1].tolist() == [4, 6]


@pytest.mark.unit
def test_fragments_cut_into_sequences_by_hand():
    x = np.arange(5 * 2).reshape(5, 2)          # x[t, e] = 2 t + e
    seq = to_sequences(x, 2)                    # K = 3 chunks per env, the last padded
    assert seq.shape == (6, 2)
    assert seq.tolist() == [[0, 2], [4, 6], [8, 0], [1, 3], [5, 7], [9, 0]]
    assert chunk_starts(x, 2).tolist() == [0, 4, 8, 1, 5, 9]
    tree = to_sequences({"a": x}, 5)
    assert tree["a"].tolist() == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    rows = torch.as_tensor(seq[[0, 3]])         # two sequences, time-major for the model
    assert time_major(rows).tolist() == [0, 1, 2, 3]


# -- acting: the state per env slot -----------------------------------------------------------
def test_env_memory_carries_state_and_resets_at_episode_starts():
    worker = worker_for("--obs_kind", "box")
    model = worker.model
    memory = EnvMemory(model, 3)
    assert memory.active and memory.starts.all()
    obs = worker.observations
    _, extras = memory.act(model, obs)
    assert "state" not in extras and not memory.starts.any()
    first = spaces.copy(memory.state)
    memory.act(model, obs)
    assert not np.allclose(first["pi/h"], memory.state["pi/h"])  # it moved on
    memory.episodes_ended(np.array([False, True, False]))
    memory.act(model, spaces.take(obs, [1]), rows=[1])            # only slot 1 steps
    fresh = EnvMemory(model, 3)
    fresh.act(model, obs)
    assert np.allclose(memory.state["pi/h"][1], fresh.state["pi/h"][1], atol=1e-6)
    saved = memory.get_state()
    other = EnvMemory(model, 3)
    other.set_state(saved)
    assert all(np.array_equal(other.state[k], memory.state[k]) for k in memory.state)
    other.set_state({"state": saved["state"], "starts": np.ones(2, bool)})  # another size
    assert other.starts.all()
    assert not EnvMemory(type("Plain", (), {"recurrent": False})(), 2).active


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flags", [(), ("--shared_rnn",), ("--bptt_len", "3")],
                         ids=["own-critic", "shared", "bptt3"])
def test_the_loss_replays_the_acting_log_probs_and_values_across_fragments(kind, flags):
    """Episodes of 4 steps, fragments of 5: episode starts fall inside fragments and the state
    crosses fragment boundaries. The loss's log-probabilities and values on every sequence
    equal those recorded when acting, to 1e-5 (so PPO's first ratio is 1)."""
    worker = worker_for("--obs_kind", "dict", "--action_kind", "multi_discrete", "--masked",
                        "--episode_steps", "4", "--recurrent", kind, *flags)
    model = worker.agent.model
    seen = []
    policy_terms = model.policy_terms
    values = model.values

    def record_policy(features, actions, mask=None):
        log_prob, entropy = policy_terms(features, actions, mask)
        seen.append(("log_prob", log_prob.detach()))
        return log_prob, entropy

    def record_values(features):
        v = values(features)
        seen.append(("values", v.detach()))
        return v
    model.policy_terms, model.values = record_policy, record_values
    mid_sequence_starts = 0
    for fragment in range(3):
        stats = worker.collect(None, 0, 5)
        assert stats.env_steps == 15
        data = worker.agent.data
        starts = data["episode_starts"]
        mid_sequence_starts += int(starts[:, 1:].sum())
        assert fragment == 0 or not starts[:, 0].all()    # episodes cross fragment boundaries
        n = len(data["returns"])
        seen.clear()
        result = worker.agent.fetch_grads(None, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 0))
        assert result.num_samples == 15
        order = torch.as_tensor(worker.agent.order)    # the minibatch's sequences, shuffled
        weights = time_major(data["weights"][order]) > 0
        log_prob = dict(seen)["log_prob"][weights]
        old = time_major(data["old_log_probs"][order])[weights]
        assert torch.allclose(log_prob, old, atol=1e-5), (fragment, (log_prob - old).abs().max())
        v = dict(seen)["values"][weights]
        assert torch.allclose(v, time_major(data["old_values"][order])[weights], atol=1e-5)
        # the check can fail: the same values in another order of sequences differ
        assert not torch.allclose(v, time_major(data["old_values"][order.flip(0)])[weights],
                                  atol=1e-5)
        assert n == (3 * 2 if "--bptt_len" in flags else 3)
    assert mid_sequence_starts > 0                        # episodes begin inside sequences


def test_values_to_bootstrap_from_come_from_the_acting_state():
    """A time-limit truncation's final observation is valued from the state after that step;
    the fragment's last observation from the state the next step will start from."""
    worker = worker_for("--obs_kind", "box", "--episode_steps", "3")
    trajectory, _, _ = worker.sample(6)
    memory, model = trajectory.memory, worker.model
    assert len(trajectory.truncated_index) == 6 and not memory.truncated_starts.any()
    t, e = trajectory.truncated_index[0]
    # recompute the state after step t of env e by replaying its column from the fragment start
    state = spaces.take(memory.states, (0, slice(e, e + 1)))
    for step in range(t + 1):
        _, extras = model.choose_actions(spaces.take(trajectory.observations, (step, [e])),
                                         state=state,
                                         episode_starts=memory.episode_starts[step, [e]])
        state = extras["state"]
    for name in state:
        assert np.allclose(state[name][0], memory.truncated_states[name][0], atol=1e-6)
    assert memory.last_starts.all()   # 6 steps of 3-step episodes: all three just began


@pytest.mark.parametrize("kind", KINDS)
def test_two_workers_gradients_average_to_the_gradient_on_the_union(kind):
    """Each worker's gradient on its own sequences, weighted by their valid steps, averages to
    the gradient of one agent holding both workers' sequences (--grad_workers 0 adopts them)."""
    a = worker_for("--obs_kind", "box", "--episode_steps", "4", "--recurrent", kind)
    b = worker_for("--obs_kind", "box", "--episode_steps", "4", "--recurrent", kind,
                   "--seed", "1")
    weights = a.model.get_weights()
    b.model.set_weights(weights)
    stats = [a.collect(None, 0, 6), b.collect(None, 0, 6)]
    union = copy.deepcopy(a.agent)
    union.adopt_data([a.agent.export_data(), b.agent.export_data()])
    counts = [s.agent_stats["advantage_count"] for s in stats]
    mean = sum(s.agent_stats["advantage_sum"] for s in stats) / sum(counts)
    request = GradientRequest(0, 0, 1, mean, 1.3, 0.3, 0)
    whole = union.fetch_grads(weights, request)
    parts = [w.agent.fetch_grads(weights, request) for w in (a, b)]
    assert whole.num_samples == sum(p.num_samples for p in parts) == 36
    averaged = average_gradients([p.gradients for p in parts], [p.num_samples for p in parts])
    for name, grad in whole.gradients.items():
        assert np.allclose(averaged[name], grad, atol=1e-6), name
    assert any(name.startswith("rnn.") for name in whole.gradients)
    assert not all(np.allclose(parts[0].gradients[k], whole.gradients[k], atol=1e-6)
                   for k in whole.gradients)


def test_a_cut_step_weighs_nothing_and_starts_a_new_episode():
    """An env that raises mid-fragment (its step kept as an invalid cut): the cut step is
    left out of the loss (weight 0), the next observation starts afresh."""
    worker = worker_for("--obs_kind", "box", "--episode_steps", "50")
    trajectory, _, _ = worker.sample(2)
    # make env 1's second step a failure, as EnvGroup reports it, and feed it to the agent
    trajectory.valid[1, 1] = False
    worker.agent.send_trajectory(trajectory)
    weights = worker.agent.data["weights"]
    assert weights[1, 1] == 0 and weights.sum() == 5


def test_recurrent_checks_and_refusals():
    with pytest.raises(ConfigError, match="use_sde"):
        worker_for("--obs_kind", "box", "--action_kind", "box", "--use_sde")
    from agents.sac_agent import SACAgent
    worker = worker_for("--obs_kind", "box", "--action_kind", "box")
    with pytest.raises(ConfigError, match="recurrent"):
        SACAgent(worker.agent.args, worker.model)
    plain = worker_for("--recurrent", "none")
    assert not plain.model.recurrent and plain.model.initial_state(2) is None
    assert plain.sample(2)[0].memory is None


def test_worker_state_keeps_the_memory_for_exact_resume():
    worker = worker_for("--obs_kind", "box", "--episode_steps", "7")
    worker.collect(None, 0, 4)
    saved = worker.get_state()
    copy_worker = worker_for("--obs_kind", "box", "--episode_steps", "7")
    copy_worker.model.set_weights(worker.model.get_weights())
    assert copy_worker.set_state(copy.deepcopy(saved)) is True
    a, _, _ = worker.sample(4)
    torch.set_rng_state(saved["torch_rng"])  # both workers draw from this process's generator
    b, _, _ = copy_worker.sample(4)
    assert np.array_equal(a.actions, b.actions)
    assert np.allclose(a.log_probs, b.log_probs)
    for name in a.memory.states:
        assert np.array_equal(a.memory.states[name], b.memory.states[name])


# -- end to end: checkpoints, exact resume, --evaluate and videos with memory ---------------------
@pytest.mark.e2e
@pytest.mark.parametrize("kind", KINDS)
def test_a_recurrent_run_resumes_exactly_and_plays_back(tmp_path, kind):
    """A Dict observation with an action mask and an LSTM/GRU policy: straight N steps ==
    N/2, stop, --restore to N (weights bit for bit: the workers' recurrent states are in the
    checkpoint), then --evaluate and --record_video carry the state through episodes."""
    from core.run.checkpoint import load_checkpoint
    from tests.test_e2e import run_main, run_mains
    common = ("--user_dir", PLUGINS, "--env_name", "spaces_env", "--obs_kind", "dict",
              "--action_kind", "multi_discrete", "--masked", "--config", "none",
              "--num_workers", "0", "--seed", "5", "--eval_interval", "200",
              "--eval_episodes", "2", "--target_return", "none", "--episode_steps", "10",
              "--quiet", "--recurrent", kind, "--rnn_hidden_size", "16",
              "--total_steps", "640", "--checkpoint_interval", "300")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "320"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    mid, _ = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    memory = mid["state"]["workers"][0]["memory"]   # the worker's state per env slot
    names = {"pi/h", "vf/h"} | ({"pi/c", "vf/c"} if kind == "lstm" else set())
    assert set(memory["state"]) == names and memory["state"]["pi/h"].shape[1:] == (16,)
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    a, _ = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta["env_steps"] >= 640
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert any(name.startswith("rnn.") for name in a["model"])
    proc = run_main("--evaluate", os.path.join(resumed, "checkpoints", "last.pt"),
                    "--record_video", str(tmp_path / "video"), "--eval_episodes", "2",
                    "--video_episodes", "1")
    assert proc.returncode == 0, proc.stderr
    assert "2 deterministic" in proc.stdout
    assert os.listdir(tmp_path / "video") == ["episode-0.gif"]


@pytest.mark.e2e
def test_memory_with_a_dict_observation_and_a_mask_learns_what_no_memory_can(tmp_path):
    """ddrl/MemoryChoice-v0 (a cue on the first step only, a mask at every step, the choice
    after a delay) with its preset (an LSTM): the policy reaches 0.9 (measured with 2 workers:
    6-17k steps for seeds 0-4); without memory the best is chance, -0.5, and the same budget
    leaves it far below."""
    from tests.test_e2e import read_run, run_mains
    common = ("--gym_id", "ddrl/MemoryChoice-v0", "--num_workers", "0", "--seed", "0",
              "--total_steps", "40000", "--quiet", "--no-tensorboard")
    with_memory, without = str(tmp_path / "lstm"), str(tmp_path / "none")
    procs = run_mains([*common, "--run_dir", with_memory],
                      [*common, "--run_dir", without, "--recurrent", "none"])
    assert all(p.returncode == 0 for p in procs), [p.stderr[-2000:] for p in procs]
    learned, _ = read_run(with_memory)
    control, _ = read_run(without)
    assert learned["target_reached"] and learned["best_eval_return"] >= 0.9, learned
    assert learned["steps_to_target"] <= 30000, learned
    assert control["best_eval_return"] < 0.5, control


def test_a_fragment_sampled_ahead_replays_under_the_weights_that_acted():
    """--sample_ahead with memory: the fragment delivered one round late holds the log-probs of
    the weights that acted, and its sequences replay to them under those weights (not under the
    newer ones the learner asked gradients for meanwhile)."""
    from core.types import WEIGHTS_VERSION_KEY
    worker = worker_for("--obs_kind", "box", "--episode_steps", "5")
    plain = worker.model.get_weights()
    w0 = {**plain, WEIGHTS_VERSION_KEY: np.asarray(0)}
    w1 = {**{k: v + np.float32(0.05) for k, v in plain.items()}, WEIGHTS_VERSION_KEY:
          np.asarray(1)}
    worker.collect(w0, 0, 8, None, True)                 # sampled now; w0 goes on ahead
    worker.fetch_grads(w1, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 1))
    assert worker.collect(w1, 1, 8, None, True).weights_version == 0
    agent, seen = worker.agent, []
    policy_terms = agent.model.policy_terms

    def record(features, actions, mask=None):
        log_prob, entropy = policy_terms(features, actions, mask)
        seen.append(log_prob.detach())
        return log_prob, entropy
    agent.model.policy_terms = record

    def replayed(weights, version):
        seen.clear()
        agent.fetch_grads(weights, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, version))
        order = torch.as_tensor(agent.order)
        return seen[0], time_major(agent.data["old_log_probs"][order])
    log_prob, old = replayed(w0, 0)
    assert torch.allclose(log_prob, old, atol=1e-5)
    log_prob, old = replayed(w1, 1)
    assert not torch.allclose(log_prob, old, atol=1e-3)  # the control: the newer weights
    worker.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flags", [("--action_kind", "discrete"), ("--action_kind", "box"),
                                   ("--action_kind", "discrete", "--shared_rnn")],
                         ids=["discrete", "box", "shared"])
def test_acting_through_numpy_gives_the_torch_policy_and_state(kind, flags):
    """Memory on vectors acts through numpy (NumpyCore and the heads): the same next state,
    values and log-probabilities of the actions taken as the torch cores, over steps with
    episode starts in between."""
    worker = worker_for("--obs_kind", "box", "--recurrent", kind, *flags)
    model = worker.model
    assert model.numpy_memory is not None
    rng = np.random.default_rng(0)
    state, starts = model.initial_state(3), np.ones(3, dtype=bool)
    for step in range(6):
        obs = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
        actions, extras = model.choose_actions(obs, state=state, episode_starts=starts)
        batch = model.flat_obs(obs)
        with torch.no_grad():
            torch_state, torch_starts = model.state_tensors(state, starts, 3)
            actor_in, critic_in, expected = model.memory_step(model.features(batch),
                                                              torch_state, torch_starts)
            log_prob, _ = model.policy_terms(actor_in, torch.as_tensor(actions))
            values = model.values(critic_in)
        for name, value in expected.items():
            assert np.allclose(extras["state"][name], value.numpy(), atol=1e-5), name
        assert np.allclose(extras["log_probs"], log_prob.numpy(), atol=1e-5)
        assert np.allclose(extras["values"], values.numpy(), atol=1e-5)
        state, starts = extras["state"], np.array([False, step == 2, step == 4])
    # a parameter changed in place (an optimizer step) is seen at once
    with torch.no_grad():
        model.rnn.rnn.weight_hh_l0.add_(0.5)
    moved = model.choose_actions(obs, state=state, episode_starts=starts)[1]["state"]
    assert not np.allclose(moved["pi/h" if "pi/h" in moved else "h"],
                           extras["state"]["pi/h" if "pi/h" in moved else "h"], atol=1e-4)


@pytest.mark.parametrize("obs_kind", ["image", "tuple", "discrete", "box"])
def test_memory_on_every_observation_the_encoders_take(obs_kind):
    """Images (a CNN before the core), Tuples, single Discrete leaves and vectors: the loss
    replays the acting log-probabilities on sequences that cross fragments."""
    worker = worker_for("--obs_kind", obs_kind, "--episode_steps", "4")
    agent, seen = worker.agent, []
    policy_terms = agent.model.policy_terms

    def record(features, actions, mask=None):
        log_prob, entropy = policy_terms(features, actions, mask)
        seen.append(log_prob.detach())
        return log_prob, entropy
    agent.model.policy_terms = record
    for _ in range(2):
        worker.collect(None, 0, 5)
        seen.clear()
        agent.fetch_grads(None, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 0))
        order = torch.as_tensor(agent.order)
        assert torch.allclose(seen[0], time_major(agent.data["old_log_probs"][order]),
                              atol=1e-5)


def test_env_failures_cut_sequences_and_their_values_come_from_the_acting_state():
    """An env that raises (flaky_cartpole): every truncated observation has its state row, the
    cut steps weigh nothing, the step after a cut starts afresh, and the loss still replays
    the acting log-probs."""
    from core.sampling.rollout import RolloutWorker
    spec = run_spec(parse_args(["--config", "none", "--user_dir", PLUGINS, "--env_name",
                                "flaky_cartpole", "--fail_prob", "0.05", "--num_workers", "0",
                                "--num_envs_per_worker", "4", "--recurrent", "gru",
                                "--seed", "2"]))
    worker = RolloutWorker(spec)
    trajectory, _, _ = worker.sample(40)
    memory, valid = trajectory.memory, trajectory.valid
    cuts = np.argwhere(~valid)
    assert len(cuts) >= 2
    assert len(memory.truncated_starts) == len(trajectory.truncated_index)
    for t, e in cuts:
        if t + 1 < 40:
            assert memory.episode_starts[t + 1, e]
    worker.agent.send_trajectory(trajectory)
    data = worker.agent.data
    assert int(data["weights"].sum()) == int(valid.sum())
    seen = []
    policy_terms = worker.model.policy_terms
    worker.model.policy_terms = lambda f, a, m=None: (
        lambda out: seen.append(out[0].detach()) or out)(policy_terms(f, a, m))
    worker.agent.fetch_grads(None, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 0))
    order = torch.as_tensor(worker.agent.order)
    counted = time_major(data["weights"][order]) > 0
    assert torch.allclose(seen[0][counted],
                          time_major(data["old_log_probs"][order])[counted], atol=1e-5)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_final_state_is_the_one_step_by_step(kind):
    """RecurrentCore.final_state (only each column's last episode segment, packed) against
    ``step`` called along every column: starts anywhere, at the first step, or nowhere."""
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 7)
    length, count = 9, 6
    features = torch.randn(length, count, 5)
    starts = torch.zeros(length, count, dtype=torch.bool)
    starts[3, 0] = starts[7, 0] = starts[0, 1] = starts[8, 2] = starts[5, 3] = True
    state = {name: torch.randn(count, 7) for name in core.state_names}
    expected = state
    with torch.no_grad():
        for t in range(length):
            _, expected = core.step(features[t], expected, starts[t])
        got = core.final_state(features, state, starts)
    for name in core.state_names:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)
