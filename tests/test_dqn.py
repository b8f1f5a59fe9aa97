"""DQN (issue 32) against hand-computed values: n-step transitions across fragment ends,
terminations, truncations and env-failure cuts (agents/n_step.py); the double-Q target and the
weighted Huber loss; target-network updates; the epsilon ladder and the linear schedule;
masked acting; initial priorities; the agent's carried windows in checkpoints."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agents.dqn_agent import DQNAgent
from agents.n_step import n_step_transitions
from core.learning.replay_buffer import ReplayBatch, Transitions
from core.errors import ConfigError
from core.types import Trajectory
from models.dqn import DQNModel, ladder_epsilons, linear_epsilon
from options.options import parse_args

pytestmark = pytest.mark.unit

G = 0.5  # gamma: powers of a half are exact in float32


def trajectory(rewards, terminated=None, truncated=None, valid=None, obs=None, last=None,
               finals=None):
    """A fragment [T, E] whose observation at (t, e) is the scalar obs[t, e] (default
    100 t + e, so a transition's observation names its step), actions t."""
    rewards = np.asarray(rewards, np.float32)
    steps, envs = rewards.shape
    obs = (100.0 * np.arange(steps)[:, None] + np.arange(envs)[None, :] if obs is None
           else np.asarray(obs, np.float32))
    terminated = np.zeros_like(rewards, bool) if terminated is None else np.asarray(terminated)
    truncated = np.zeros_like(rewards, bool) if truncated is None else np.asarray(truncated)
    finals = finals or {}
    index = np.array(sorted(finals), dtype=np.int64).reshape(-1, 2)
    return Trajectory(
        observations=obs[..., None].astype(np.float32),
        actions=np.repeat(np.arange(steps)[:, None], envs, 1),
        rewards=rewards, terminated=terminated, truncated=truncated, log_probs=None,
        values=None,
        last_observations=(np.asarray(last, np.float32).reshape(envs, 1) if last is not None
                           else np.full((envs, 1), 100.0 * steps, np.float32)
                           + np.arange(envs, dtype=np.float32)[:, None]),
        truncated_index=index,
        truncated_observations=np.array([[finals[tuple(k)]] for k in index],
                                        np.float32).reshape(-1, 1),
        valid=None if valid is None else np.asarray(valid, bool))


def rows(transitions):
    """{first observation: (return, next observation, terminated, discount)}."""
    return {float(o[0]): (float(r), float(n[0]), float(d), float(g))
            for o, r, n, d, g in zip(transitions.observations, transitions.rewards,
                                     transitions.next_observations, transitions.terminated,
                                     transitions.discounts)}


# -- n-step transitions ----------------------------------------------------------------------
def test_one_step_transitions_are_the_plain_ones():
    t, carry = n_step_transitions(trajectory([[1.0], [2.0], [3.0]]), 1, G)
    assert carry is None
    assert rows(t) == {0.0: (1.0, 100.0, 0.0, G), 100.0: (2.0, 200.0, 0.0, G),
                       200.0: (3.0, 300.0, 0.0, G)}


def test_three_step_returns_across_a_fragment_end():
    first, carry = n_step_transitions(trajectory([[1.0], [2.0], [4.0], [8.0], [16.0]]), 3, G)
    # starts 0, 1, 2 close in this fragment; 3 and 4 wait for the next one
    assert rows(first) == {0.0: (1 + 1 + 1, 300.0, 0.0, G ** 3),
                           100.0: (2 + 2 + 2, 400.0, 0.0, G ** 3),
                           200.0: (4 + 4 + 4, 500.0, 0.0, G ** 3)}   # the last observation
    obs = 500.0 + 100.0 * np.arange(3)[:, None]
    second, carry = n_step_transitions(
        trajectory([[32.0], [64.0], [128.0]], obs=obs, last=[800.0]), 3, G, carry)
    assert rows(second) == {300.0: (8 + 8 + 8, 600.0, 0.0, G ** 3),
                            400.0: (16 + 16 + 16, 700.0, 0.0, G ** 3),
                            500.0: (32 + 32 + 32, 800.0, 0.0, G ** 3)}
    assert len(carry.rewards) == 2 and not carry.settled.any()


def test_a_termination_cuts_the_return_and_a_truncation_bootstraps_from_its_final_observation():
    # env 0 terminates at step 1; env 1 is truncated at step 1 (final observation -7)
    traj = trajectory([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0], [8.0, 8.0]],
                      terminated=[[0, 0], [1, 0], [0, 0], [0, 0]],
                      truncated=[[0, 0], [0, 1], [0, 0], [0, 0]], finals={(1, 1): -7.0})
    got = rows(n_step_transitions(traj, 3, G)[0])
    assert got[0.0][0] == 1 + 1 and got[0.0][2:] == (1.0, G ** 2)        # terminated
    assert got[100.0][0] == 2 and got[100.0][2:] == (1.0, G)
    assert got[1.0] == (1 + 1, -7.0, 0.0, G ** 2)                        # truncated
    assert got[101.0] == (2, -7.0, 0.0, G)
    assert 200.0 not in got and 300.0 not in got  # windows still open: carried


def test_an_env_failure_at_a_fragment_start_ends_the_carried_windows_before_the_cut():
    _, carry = n_step_transitions(trajectory([[1.0], [2.0], [4.0]]), 3, G)
    # the env raised at step 0 of the next fragment: a cut (reward 0, truncated, invalid),
    # its final observation the one the policy saw (300)
    obs = 300.0 + 100.0 * np.arange(3)[:, None]
    second, _ = n_step_transitions(
        trajectory([[0.0], [16.0], [32.0]], obs=obs, truncated=[[1], [0], [0]],
                   valid=[[0], [1], [1]], finals={(0, 0): 300.0}, last=[600.0]), 3, G, carry)
    got = rows(second)
    assert got[100.0] == (2 + 2, 300.0, 0.0, G ** 2)   # ends before the cut: 2 steps
    assert got[200.0] == (4, 300.0, 0.0, G)
    assert 300.0 not in got                           # no transition starts at a cut
    assert 400.0 not in got and 500.0 not in got   # open: carried to the next fragment


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_cutting_a_run_into_fragments_gives_the_same_transitions(n):
    """Random rewards, terminations and truncations over 4 envs: the transitions of one long
    fragment and of the same steps in fragments of 1, 3 and 7 steps are the same set."""
    rng = np.random.default_rng(n)
    steps, envs = 24, 4
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.1
    truncated = ~terminated & (rng.random((steps, envs)) < 0.1)
    finals = {(t, e): -1000.0 - 100 * t - e for t, e in zip(*np.nonzero(truncated))}
    whole = rows(n_step_transitions(trajectory(rewards, terminated, truncated,
                                               finals=finals), n, G)[0])
    obs = 100.0 * np.arange(steps)[:, None] + np.arange(envs)[None, :]
    for size in (1, 3, 7):
        got, carry = {}, None
        for start in range(0, steps, size):
            end = min(steps, start + size)
            part = {(t - start, e): v for (t, e), v in finals.items() if start <= t < end}
            last = obs[end] if end < steps else 100.0 * steps + np.arange(envs)
            t, carry = n_step_transitions(
                trajectory(rewards[start:end], terminated[start:end], truncated[start:end],
                           obs=obs[start:end], last=last, finals=part), n, G, carry)
            got.update(rows(t))
        assert got.keys() == whole.keys()
        for key in whole:
            assert got[key] == pytest.approx(whole[key], rel=1e-6)


def test_structured_observations_travel_leaf_by_leaf():
    traj = trajectory([[1.0], [2.0], [4.0]])
    traj.observations = {"a": traj.observations, "b": np.arange(3, dtype=np.uint8)[:, None,
                                                                                   None]}
    traj.last_observations = {"a": traj.last_observations, "b": np.full((1, 1), 3, np.uint8)}
    traj.truncated_observations = {"a": np.zeros((0, 1), np.float32),
                                   "b": np.zeros((0, 1), np.uint8)}
    t, _ = n_step_transitions(traj, 2, G)
    assert t.next_observations["b"].dtype == np.uint8
    np.testing.assert_array_equal(t.next_observations["b"][:, 0], [2, 3])
    np.testing.assert_array_equal(t.next_observations["a"][:, 0], [200.0, 300.0])


# -- the model ---------------------------------------------------------------------------------
OBS = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(4)


def make_args(*flags):
    return parse_args(["--config", "none", "--num_workers", "0", "--model_name", "dqn",
                       "--dqn_hidden_sizes", "16,16", *flags])


def make_model(*flags, seed=0, obs_space=OBS):
    torch.manual_seed(seed)
    model = DQNModel(make_args(*flags), obs_space, ACT)
    with torch.no_grad():  # a target network apart from the online one
        for buffer in model.q_target.buffers():
            buffer.add_(0.1 * torch.randn_like(buffer))
    return model


def batch_of(n=8, seed=0, terminated=None):
    rng = np.random.default_rng(seed)
    return ReplayBatch(
        Transitions(observations=rng.normal(size=(n, 3)).astype(np.float32),
                    actions=rng.integers(0, 4, n), rewards=rng.normal(size=n).astype(np.float32),
                    next_observations=rng.normal(size=(n, 3)).astype(np.float32),
                    terminated=(rng.random(n) < 0.3).astype(np.float32)
                    if terminated is None else terminated,
                    discounts=(0.99 ** rng.integers(1, 4, n)).astype(np.float32)),
        indices=np.arange(n), generations=np.zeros(n, np.int64),
        weights=rng.uniform(0.2, 1.0, n).astype(np.float32))


@pytest.mark.parametrize("double_q", [True, False])
def test_the_target_is_the_double_q_target_by_hand(double_q):
    model = make_model(*(() if double_q else ("--no-double_q",)))
    t = batch_of().transitions
    with torch.no_grad():
        s2 = torch.as_tensor(t.next_observations)
        online, target = model.q_net(s2).numpy(), model.q_target(s2).numpy()
    chooser = online if double_q else target
    best = target[np.arange(8), chooser.argmax(1)]
    expected = t.rewards + t.discounts * (1 - t.terminated) * best
    _, _, r, s2t, term, disc, _ = model.unpack(t)
    np.testing.assert_allclose(model.targets(r, s2t, term, disc).numpy(), expected, rtol=1e-6)
    # the two rules differ on this batch (else the test would not tell them apart)
    assert not np.array_equal(online.argmax(1), target.argmax(1))


def test_the_loss_is_the_weighted_huber_loss_and_its_gradient():
    model = make_model()
    batch = batch_of()
    _, stats = model.step(batch)
    got = {name: p.grad.clone() for name, p in model.q_net.named_parameters()}
    t = batch.transitions
    obs, actions, r, s2, term, disc, w = model.unpack(batch)
    y = model.targets(r, s2, term, disc)
    q = model.q_net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
    loss = (w * F.smooth_l1_loss(q, y, reduction="none")).mean()
    grads = torch.autograd.grad(loss, list(model.q_net.parameters()))
    assert stats["q_loss"] == pytest.approx(loss.item(), rel=1e-6)
    for g_got, g in zip(got.values(), grads):
        torch.testing.assert_close(g_got, g)
    np.testing.assert_allclose(stats["td_errors"], (q - y).abs().detach().numpy(), rtol=1e-6)
    assert len(t.rewards) == len(stats["td_errors"])


def test_a_bf16_update_gives_the_fp32_gradients_to_bf16_precision():
    """--dqn_precision bf16: the Q network's products in bfloat16 under autocast, the Huber
    loss and its statistics in float32: float32 gradients pointing where fp32's do. Not to
    bf16's ~3 digits: a TD error is a small difference of two Q values each rounded to bf16,
    so the gradient's error relative to its size is larger (0.5-9% over seeds 0-4 of this
    batch; the bound below is twice the worst)."""
    fp32, bf16 = make_model("--dqn_precision", "fp32"), make_model("--dqn_precision", "bf16")
    batch = batch_of(64)
    expected, expected_stats = fp32.step(batch)
    got, stats = bf16.step(batch)
    assert bf16.update_precision("cpu") == "bf16" and fp32.update_precision("cpu") == "fp32"
    assert all(got[name].dtype == np.float32 for name in expected)
    a = np.concatenate([g.ravel() for g in expected.values()])
    b = np.concatenate([got[name].ravel() for name in expected])
    assert np.linalg.norm(b - a) <= 0.2 * np.linalg.norm(a)
    assert a @ b >= 0.99 * np.linalg.norm(a) * np.linalg.norm(b)
    assert stats["q_loss"] == pytest.approx(expected_stats["q_loss"], rel=0.03)
    assert stats["td_errors"].dtype == np.float32


def test_a_terminated_transition_bootstraps_nothing():
    model = make_model()
    t = batch_of(terminated=np.ones(8, np.float32)).transitions
    _, _, r, s2, term, disc, _ = model.unpack(t)
    np.testing.assert_allclose(model.targets(r, s2, term, disc).numpy(), t.rewards)


def test_the_dueling_head_is_value_plus_centred_advantage():
    model = make_model("--dueling")
    x = torch.randn(5, 3)
    latent = model.q_net.trunk(model.q_net.encoder(x))
    a = model.q_net.advantage(latent)
    expected = model.q_net.value(latent) + a - a.mean(-1, keepdim=True)
    torch.testing.assert_close(model.q_net(x), expected)
    # acting through numpy gives the same values
    np.testing.assert_allclose(model.q_values(x.numpy()), expected.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tau, interval", [(1.0, 3), (0.25, 1)])
def test_the_target_network_moves_every_interval_by_tau(tau, interval):
    model = make_model("--tau", str(tau), "--target_update_interval", str(interval))
    online = {n: p.detach().clone() for n, p in model.q_net.named_parameters()}
    for version in range(3):
        before = {n: b.clone() for n, b in model.q_target.named_buffers()}
        model.weights_version = version   # the learner's count before this update
        model.after_update()
        due = (version + 1) % interval == 0
        for name, value in model.q_target.named_buffers():
            expected = before[name] + tau * (online[name] - before[name]) if due else before[name]
            torch.testing.assert_close(value, expected)


def test_the_ape_x_ladder_and_the_linear_schedule_by_hand():
    np.testing.assert_allclose(ladder_epsilons([0, 1, 2, 3], 4, 0.4, 7.0),
                               [0.4, 0.4 ** (1 + 7 / 3), 0.4 ** (1 + 14 / 3), 0.4 ** 8])
    assert ladder_epsilons([0], 1, 0.4, 7.0)[0] == 0.4
    assert linear_epsilon(0.05, 1.0, 0.05, 0.1) == pytest.approx(0.525)
    assert linear_epsilon(0.5, 1.0, 0.05, 0.1) == pytest.approx(0.05)
    model = make_model("--exploration", "ladder")
    model.assign_env_slots([4, 5], 8)          # worker 2 of 4, 2 envs each
    model.begin_fragment(2, 0.3)
    np.testing.assert_allclose(model.epsilons, [0.4 ** (1 + 7 * 4 / 7), 0.4 ** (1 + 7 * 5 / 7)])
    # the metrics column: the schedule's value now, or the ladder's mean over the run's slots
    assert make_model().exploration_now(0.05) == pytest.approx(0.525)
    ladder = make_model("--exploration", "ladder", "--num_workers", "4",
                        "--num_envs_per_worker", "2")
    assert ladder.exploration_now(0.3) == pytest.approx(
        np.mean([0.4 ** (1 + 7 * i / 7) for i in range(8)]))


def test_epsilon_greedy_acting_and_masks():
    model = make_model("--eps_initial", "0", "--eps_final", "0")
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    actions, extras = model.choose_actions(obs)
    np.testing.assert_array_equal(actions, model.q_values(obs).argmax(1))
    assert extras == {} and actions.dtype == np.int64
    # epsilon 1 on a masked Dict observation: uniform over the allowed actions only
    space = spaces.Dict({"obs": OBS, "action_mask": spaces.MultiBinary(4)})
    masked = make_model("--eps_initial", "1", "--eps_final", "1", obs_space=space)
    mask = np.zeros((4000, 4), np.int8)
    mask[:, [1, 3]] = 1
    mask[::2, 1] = 0      # every other row allows action 3 alone
    batch = {"obs": np.zeros((4000, 3), np.float32), "action_mask": mask}
    chosen, _ = masked.choose_actions(batch)
    assert mask[np.arange(4000), chosen].all()
    odd = chosen[1::2]
    assert 0.45 < (odd == 1).mean() < 0.55
    greedy, _ = masked.choose_actions(batch, deterministic=True)   # --eval_eps 0
    assert mask[np.arange(4000), greedy].all()


def test_a_discrete_action_space_only():
    with pytest.raises(ConfigError, match="Discrete actions"):
        DQNModel.check_spaces(OBS, spaces.Box(-1, 1, (2,)))


# -- the agent ---------------------------------------------------------------------------------
def make_agent(*flags, model=None):
    args = make_args("--n_step", "3", "--gamma", str(G), *flags)
    return DQNAgent(args, model or make_model())


def test_initial_priorities_are_the_td_errors_by_hand():
    agent = make_agent()
    t = batch_of().transitions
    model = agent.model
    obs, actions, r, s2, term, disc, _ = model.unpack(t)
    with torch.no_grad():
        q = model.q_net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
    expected = (q - model.targets(r, s2, term, disc)).abs().numpy()
    np.testing.assert_allclose(agent.priorities(t), expected, rtol=1e-6)


def test_the_agents_open_windows_survive_a_checkpoint_and_are_dropped_on_fresh_episodes():
    a, b = make_agent(), make_agent()
    a.send_trajectory(trajectory([[1.0], [2.0], [4.0]]))
    a.take_transitions()
    b.set_state(a.get_state())   # a checkpoint between fragments
    nxt = trajectory([[8.0], [16.0]], obs=300.0 + 100.0 * np.arange(2)[:, None], last=[500.0])
    a.send_trajectory(nxt)
    b.send_trajectory(nxt)
    assert rows(a.take_transitions()) == rows(b.take_transitions())
    b.episodes_restarted()
    b.send_trajectory(nxt)
    assert 100.0 not in rows(b.take_transitions())   # no window from before the restart


def test_dqn_picks_its_agent_and_stores_discounts():
    args = parse_args(["--model_name", "dqn", "--gym_id", "CartPole-v1"])
    assert args.agent_name == "dqn_agent"
    assert DQNAgent.transition_discounts


def test_a_discrete_space_with_a_start_gets_its_own_numbers_once():
    """The model acts and learns in indices from 0; the env's numbering (start 5) is added
    once, by to_env_action, as for every model (it was added twice: actions 10-13)."""
    from core.sampling.envs import to_env_action
    space = spaces.Discrete(4, start=5)
    torch.manual_seed(0)
    model = DQNModel(make_args("--eps_initial", "1", "--eps_final", "1"), OBS, space)
    obs = np.random.default_rng(0).normal(size=(256, 3)).astype(np.float32)
    actions, _ = model.choose_actions(obs)
    assert set(np.unique(actions)) == {0, 1, 2, 3}
    assert set(np.unique(to_env_action(space, actions))) == {5, 6, 7, 8}
    greedy, _ = model.choose_actions(obs, deterministic=True)
    with torch.no_grad():
        expected = model.q_net(torch.as_tensor(obs)).argmax(-1).numpy()
    np.testing.assert_array_equal(greedy, expected)
    # the loss reads stored actions as the indices they are
    batch = batch_of(8)
    batch = batch._replace(transitions=batch.transitions._replace(
        actions=np.arange(8) % 4))
    _, unpacked, *_ = model.unpack(batch)
    assert unpacked.tolist() == (np.arange(8) % 4).tolist()
