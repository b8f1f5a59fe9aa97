"""r2d2: sequences with stored state (agents/r2d2_agent.py), their replay buffer
(core/learning/sequence_replay.py) and the recurrent Q network's loss (models/r2d2.py), against
hand-computed values and a step-by-step reference."""
import argparse

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agents.r2d2_agent import R2D2Agent, n_step_targets
from core.errors import ConfigError
from core.learning.replay_buffer import ReplayBatch
from core.learning.sequence_replay import (PrioritizedSequenceReplayBuffer, Sequences,
                                           SequenceReplayBuffer)
from core.types import FragmentMemory, Trajectory
from models.r2d2 import R2D2Model, rescale, unrescale
from models.sac import polyak_update
from options.options import parse_args

pytestmark = pytest.mark.unit

G = 0.5  # gamma: powers of a half are exact in float32


# -- the n-step targets inside a sequence ----------------------------------------------------
def targets(rewards, terminated=(), truncated=(), invalid=(), n=2):
    length = len(rewards)

    def flags(where):
        row = np.zeros((1, length), bool)
        row[0, list(where)] = True
        return row
    return n_step_targets(np.asarray([rewards], np.float32), flags(terminated),
                          flags(truncated), ~flags(invalid), n, G)


def test_two_step_targets_by_hand_with_a_termination_and_a_truncation():
    # steps 0..5; the episode terminates at 2, the next one is truncated at 4
    returns, discounts, bootstrap, learn = targets([1, 2, 4, 8, 16, 32], terminated=[2],
                                                   truncated=[4])
    np.testing.assert_array_equal(returns[0, [0, 1, 2, 5]], [1 + G * 2, 2 + G * 4, 4, 32])
    # 0, 3: two rewards, bootstrapped at t + 2; 1: the termination at 2 ends it (factor 0);
    # 2: terminal itself; 4: truncated (its final observation is not stored: not learned);
    # 3: its window reaches the truncation: not learned; 5: the sequence ends (position 6)
    np.testing.assert_array_equal(learn[0], [1, 1, 1, 0, 0, 1])
    np.testing.assert_array_equal(discounts[0, [0, 1, 2, 5]], [G ** 2, 0, 0, G])
    np.testing.assert_array_equal(bootstrap[0, [0, 1, 2, 5]], [2, 3, 3, 6])


def test_an_env_failure_ends_the_windows_before_it_and_is_not_learned_from():
    returns, discounts, bootstrap, learn = targets([1, 2, 4, 8, 16], invalid=[2], n=3)
    # 0: r0 + G r1, bootstrapped from position 2 (what the policy saw where it was cut)
    np.testing.assert_array_equal(returns[0, :2], [1 + G * 2, 2])
    np.testing.assert_array_equal(discounts[0, :2], [G ** 2, G])
    np.testing.assert_array_equal(bootstrap[0, :2], [2, 2])
    np.testing.assert_array_equal(learn[0], [1, 1, 0, 1, 1])
    # 3, 4: the sequence's end comes first
    np.testing.assert_array_equal(returns[0, 3:], [8 + G * 16, 16])
    np.testing.assert_array_equal(bootstrap[0, 3:], [5, 5])


# -- fragments -> sequences ------------------------------------------------------------------
def stream_args(burn_in=2, length=3, n=2):
    return argparse.Namespace(burn_in=burn_in, sequence_length=length, n_step=n, gamma=G)


def fragment(start, steps, envs=2, terminated=None, starts=None):
    """Steps start..start+steps-1 of ``envs`` envs: observation and state name the step
    (100 t + e), actions t, rewards 1."""
    t = np.arange(start, start + steps)[:, None]
    e = np.arange(envs)[None, :]
    obs = (100.0 * t + e).astype(np.float32)
    term = np.zeros((steps, envs), bool) if terminated is None else terminated
    return Trajectory(
        observations=obs[..., None], actions=np.repeat(t, envs, 1),
        rewards=np.ones((steps, envs), np.float32), terminated=term,
        truncated=np.zeros((steps, envs), bool), log_probs=None, values=None,
        last_observations=(100.0 * (start + steps) + e[0]).astype(np.float32)[:, None],
        truncated_index=np.zeros((0, 2), np.int64),
        truncated_observations=np.zeros((0, 1), np.float32),
        memory=FragmentMemory(
            states={"h": np.repeat(obs[..., None], 3, -1)},
            episode_starts=np.zeros((steps, envs), bool) if starts is None else starts,
            last_state={"h": np.zeros((envs, 3), np.float32)}, last_starts=np.zeros(envs, bool),
            truncated_states={"h": np.zeros((0, 3), np.float32)},
            truncated_starts=np.zeros(0, bool)))


class FakeModel:
    recurrent = True


def agent(**flags):
    return R2D2Agent(stream_args(**flags), FakeModel())


def test_a_stream_becomes_overlapping_sequences_with_the_state_at_their_start():
    seqs = agent().fragment_transitions(fragment(0, 9))
    # S = 2 + 3: sequences start every 3 steps: at 0 and 3 (the one at 6 needs steps to 10)
    assert seqs.rewards.shape == (4, 5)
    firsts = seqs.observations[:, 0, 0]
    np.testing.assert_array_equal(firsts, [0, 1, 300, 301])      # (start, env) order
    np.testing.assert_array_equal(seqs.state["h"][:, 0], firsts)  # the state before step 0
    np.testing.assert_array_equal(seqs.next_observation[:, 0], [500, 501, 800, 801])
    np.testing.assert_array_equal(seqs.learn[0], [0, 0, 1, 1, 1])  # burn-in not learned
    np.testing.assert_array_equal(seqs.burn_in, [2, 2, 2, 2])


def test_fragments_give_the_sequences_of_the_whole_stream():
    whole = agent().fragment_transitions(fragment(0, 12))
    cut = agent()
    parts = [cut.fragment_transitions(fragment(start, 4)) for start in (0, 4, 8)]
    parts = [p for p in parts if p is not None]
    joined = Sequences(*(np.concatenate(cols) if not isinstance(cols[0], dict) else
                         {k: np.concatenate([c[k] for c in cols]) for k in cols[0]}
                         for cols in zip(*parts)))
    order = np.argsort(joined.observations[:, 0, 0], kind="stable")
    expected = np.argsort(whole.observations[:, 0, 0], kind="stable")
    for name in Sequences._fields:
        a, b = getattr(joined, name), getattr(whole, name)
        if isinstance(a, dict):
            a, b = a["h"], b["h"]
        np.testing.assert_array_equal(a[order], b[expected], err_msg=name)
    # what is still open travels in checkpoints, and a restored agent goes on alike
    again = agent()
    again.set_state(cut.get_state())
    assert again.carry is not None and len(again.carry["rewards"]) == len(cut.carry["rewards"])


def test_the_agent_refuses_a_model_without_memory():
    class Plain:
        recurrent = False
    with pytest.raises(ConfigError, match="r2d2_agent replays sequences.*--model_name r2d2"):
        R2D2Agent(stream_args(), Plain())


# -- the buffer ------------------------------------------------------------------------------
def test_the_buffer_stores_sequences_and_their_state_and_round_trips_a_checkpoint():
    seqs = agent().fragment_transitions(fragment(0, 9))
    for cls in (SequenceReplayBuffer, PrioritizedSequenceReplayBuffer):
        buffer = cls(6, (1,), (), sequence_length=5, action_dtype=np.int64, seed=3)
        assert buffer.add(seqs, np.arange(1.0, 5.0) if cls is not SequenceReplayBuffer
                          else None) == 4
        batch = buffer.sample(16)
        rows = batch.indices
        np.testing.assert_array_equal(batch.transitions.observations, seqs.observations[rows])
        np.testing.assert_array_equal(batch.transitions.state["h"], seqs.state["h"][rows])
        again = cls(6, (1,), (), sequence_length=5, action_dtype=np.int64, seed=0)
        again.load_state_dict(buffer.state_dict())
        a, b = buffer.sample(8), again.sample(8)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.transitions.bootstrap, b.transitions.bootstrap)
    with pytest.raises(ValueError, match="shape"):
        buffer.add(seqs._replace(rewards=seqs.rewards[:, :4]))


# -- the model -------------------------------------------------------------------------------
OBS = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(4)


def make_model(*flags, seed=0):
    args = parse_args(["--config", "none", "--num_workers", "0", "--model_name", "r2d2",
                       "--dqn_hidden_sizes", "16", "--rnn_hidden_size", "8", *flags])
    torch.manual_seed(seed)
    model = R2D2Model(args, OBS, ACT)
    with torch.no_grad():  # a target network apart from the online one
        for buffer in model.q_target.buffers():
            buffer.add_(0.1 * torch.randn_like(buffer))
    return model


def random_sequences(count=5, length=7, burn_in=2, seed=0):
    rng = np.random.default_rng(seed)
    starts = rng.random((count, length)) < 0.2
    learn = (rng.random((count, length)) < 0.8).astype(np.float32)
    learn[:, :burn_in] = 0
    t = np.arange(length)[None, :]
    return Sequences(
        observations=rng.normal(size=(count, length, 3)).astype(np.float32),
        actions=rng.integers(0, 4, (count, length)),
        rewards=rng.normal(size=(count, length)).astype(np.float32),
        discounts=(0.9 ** rng.integers(1, 3, (count, length))
                   * (rng.random((count, length)) < 0.8)).astype(np.float32),
        bootstrap=np.minimum(t + rng.integers(1, 3, (count, length)), length),
        learn=learn, starts=starts,
        state={name: rng.normal(size=(count, 8)).astype(np.float32) for name in ("h", "c")},
        next_observation=rng.normal(size=(count, 3)).astype(np.float32),
        burn_in=np.full(count, burn_in))


def step_by_step(network, obs, starts, first):
    """Q at every position of one sequence, one step at a time from its stored state."""
    state = {k: torch.as_tensor(v) for k, v in first.items()}
    out = []
    for p in range(len(obs)):
        q, state = network.step(torch.as_tensor(obs[p:p + 1]), state,
                                torch.as_tensor(starts[p:p + 1]))
        out.append(q[0])
    return torch.stack(out)


def reference_loss(model, s, weights):
    """The loss and priorities computed sequence by sequence, step by step."""
    eta = model.args.priority_eta
    losses, priorities = [], []
    for i in range(len(s.rewards)):
        obs = np.concatenate([s.observations[i], s.next_observation[i][None]])
        starts = np.append(s.starts[i], False)

        first = {k: v[i:i + 1] for k, v in s.state.items()}
        online = step_by_step(model.q_net, obs, starts, first)
        target = step_by_step(model.q_target, obs, starts, first).detach()
        total, count, errors = 0.0, 0.0, []
        for t in range(int(s.burn_in[i]), len(s.rewards[i])):
            if not s.learn[i, t]:
                continue
            b = s.bootstrap[i, t]
            best = online[b].detach().argmax()
            y = rescale(torch.as_tensor(s.rewards[i, t]) + float(s.discounts[i, t])
                        * unrescale(target[b, best]))
            q = online[t, s.actions[i, t]]
            total = total + F.smooth_l1_loss(q, y)
            count += 1
            errors.append(float((q - y).abs().detach()))
        losses.append(weights[i] * total / max(count, 1.0))
        errors = np.array(errors) if errors else np.zeros(1)
        priorities.append(eta * errors.max() + (1 - eta) * errors.sum() / max(count, 1.0))
    return torch.stack([torch.as_tensor(x) for x in losses]).mean(), np.array(priorities)


@pytest.mark.parametrize("burn_in", [0, 2])
def test_the_loss_and_priorities_are_the_step_by_step_ones(burn_in):
    model = make_model()
    s = random_sequences(burn_in=burn_in)
    weights = np.linspace(0.5, 1.0, len(s.rewards)).astype(np.float32)
    batch = ReplayBatch(s, np.arange(5), np.zeros(5, np.int64), weights)
    loss, _, priorities = model.update_loss(*model.unpack(batch))
    expected_loss, expected_priorities = reference_loss(model, s, weights)
    torch.testing.assert_close(loss, expected_loss.float(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(priorities.detach().numpy(), expected_priorities, rtol=1e-4)
    if burn_in == 0:  # (with a burn-in the reference's gradient also flows through it)
        grads = torch.autograd.grad(loss, list(model.q_net.parameters()))
        expected = torch.autograd.grad(expected_loss, list(model.q_net.parameters()))
        for got, want in zip(grads, expected):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_burn_in_gets_no_gradient():
    model = make_model()
    s = random_sequences(burn_in=3)
    # the burn-in's observations reach the loss only through the state: no gradient
    inputs = model.unpack(s)
    obs = inputs[0].clone().requires_grad_(True)
    loss = model.update_loss(obs, *inputs[1:])[0]
    (grad,) = torch.autograd.grad(loss, obs)
    per_position = grad.reshape(8, 5, 3).abs().sum((1, 2))
    assert (per_position[:3] == 0).all() and (per_position[3:7] > 0).all(), per_position


def test_value_rescaling_inverts():
    x = torch.linspace(-300, 300, 61, dtype=torch.float64)
    torch.testing.assert_close(unrescale(rescale(x)), x, rtol=1e-9, atol=1e-9)
    assert float(rescale(torch.tensor(3.0))) == pytest.approx(1.0 + 3e-3)


def test_the_target_copy_follows_polyak_updates():
    """The target's LSTM reads the copy's own weights (torch's RNN keeps a list of them)."""
    model = make_model()
    obs = torch.randn(4, 3)
    state = {k: torch.zeros(4, 8) for k in ("h", "c")}
    starts = torch.ones(4, dtype=torch.bool)
    polyak_update(model.q_target, model.q_net, 1.0)
    with torch.no_grad():
        torch.testing.assert_close(model.q_target.step(obs, state, starts)[0],
                                   model.q_net.step(obs, state, starts)[0])


def test_acting_carries_the_state_and_resets_it_at_episode_starts():
    model = make_model("--eps_initial", "0", "--eps_final", "0")
    obs = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    fresh = model.initial_state(2)
    a1, extras = model.choose_actions(obs, state=fresh, episode_starts=np.ones(2, bool))
    moved = extras["state"]
    assert not np.allclose(moved["h"], 0)
    a2, reset = model.choose_actions(obs, state=moved, episode_starts=np.ones(2, bool))
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(reset["state"]["h"], moved["h"])  # from zeros again


def test_noisy_exploration_is_refused():
    with pytest.raises(ConfigError, match="noisy"):
        make_model("--exploration", "noisy")


# -- the loop --------------------------------------------------------------------------------
MEMORY_CHOICE = ["--model_name", "r2d2", "--gym_id", "ddrl/MemoryChoice-v0", "--burn_in", "0",
                 "--sequence_length", "12", "--utd_ratio", "0.25", "--learning_starts", "1000",
                 "--target_update_interval", "100", "--eval_interval", "2000",
                 "--no-tensorboard", "--quiet"]


@pytest.mark.contract
def test_random_warm_up_steps_record_the_states_a_policy_with_memory_went_through():
    """The replay loop's --start_steps act at random, but a fragment still holds the state of
    every step (it was left unset, and a sequence started from garbage: NaN losses)."""
    from core.sampling.rollout import RolloutWorker
    from options.options import run_spec
    spec = run_spec(parse_args(["--config", "none", "--num_workers", "0", *MEMORY_CHOICE]))
    worker = RolloutWorker(spec, 0, 0, 64)
    worker.collect(None, None, 16)
    memory = worker.agent.carry  # the stream of the fragment (too short for a sequence)
    states = memory["states"]["h"]
    assert np.isfinite(states).all() and memory["starts"][0].all()
    # the state moved on from the first observation: not the zeros of fresh episodes
    assert np.abs(states[1]).sum() > 0


@pytest.mark.e2e
def test_memory_learns_the_cue_with_ray_workers_then_evaluates_and_exports(tmp_path):
    """MemoryChoice: without memory the best is chance (-0.5); r2d2 with 2 Ray workers,
    prioritized replay and Ape-X's epsilon ladder reached 1.0 at 2,816 env steps (seed 0, AMD
    EPYC, 2 cores; 6,208 with Adam 1e-4); the budget is 14,000."""
    from test_e2e import read_run, run_main
    run_dir = str(tmp_path / "run")
    proc = run_main(*MEMORY_CHOICE, "--num_workers", "2", "--prioritized_replay",
                    "--exploration", "ladder", "--total_steps", "14000", "--run_dir", run_dir,
                    "--seed", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    assert summary["stopped_because"] == "target_return", summary
    assert not summary.get("faults"), summary
    proc = run_main("--evaluate", run_dir, "--eval_episodes", "5")
    assert proc.returncode == 0 and "return 1.00" in proc.stderr + proc.stdout, proc.stderr


@pytest.mark.e2e
def test_an_r2d2_run_resumes_exactly(tmp_path):
    """N steps straight == N/2, stop, --restore to N, bit for bit: the workers' unfinished
    streams (the agent's carry), the recorded states, the sequence buffer with its state columns
    and priorities, the acting state of every env slot."""
    import os

    from core.run.checkpoint import load_checkpoint
    from test_e2e import run_main, run_mains
    common = (*MEMORY_CHOICE, "--num_workers", "0", "--seed", "3", "--n_step", "3",
              "--prioritized_replay", "--checkpoint_buffer", "--learner_threads", "1",
              "--learning_starts", "300", "--start_steps", "300", "--total_steps", "2048",
              "--checkpoint_interval", "100000", "--target_return", "none")
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    whole, paused = run_mains([*common, "--run_dir", straight],
                              [*common, "--run_dir", resumed, "--pause_at_steps", "1000"])
    assert whole.returncode == 0, whole.stderr
    assert paused.returncode == 0, paused.stderr
    proc = run_main("--restore", resumed, "--quiet")
    assert proc.returncode == 0, proc.stderr
    a, meta_a = load_checkpoint(os.path.join(straight, "checkpoints", "last.pt"))
    b, meta_b = load_checkpoint(os.path.join(resumed, "checkpoints", "last.pt"))
    assert meta_a["env_steps"] == meta_b["env_steps"] >= 2048
    assert meta_a["updates"] == meta_b["updates"] > 0
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


def test_numpy_acting_on_vectors_is_the_torch_networks_step():
    model = make_model("--eps_initial", "0", "--eps_final", "0", "--dueling")
    assert model.numpy_memory is not None
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(6, 3)).astype(np.float32)
    state = {k: rng.normal(size=(6, 8)).astype(np.float32) for k in ("h", "c")}
    starts = np.array([True, False, False, True, False, False])
    q, next_state = model.numpy_q_values(obs, state, starts, 6)
    with torch.no_grad():
        q_torch, torch_state = model.q_net.step(
            torch.as_tensor(obs), {k: torch.as_tensor(v) for k, v in state.items()},
            torch.as_tensor(starts))
    np.testing.assert_allclose(q, q_torch.numpy(), rtol=1e-5, atol=1e-6)
    for name in state:
        np.testing.assert_allclose(next_state[name], torch_state[name].numpy(), rtol=1e-5,
                                   atol=1e-6)
