"""The parameter server's device rounds (core/learning/device_rounds.py, --device_rounds): on
the CPU a round must compute exactly what the one-by-one updates compute, skip a NaN update in
the weights and the optimizer as they do, and read its statistics once. CUDA graphs are
captured on CUDA only (the GPU check measures them); here their refusal and their bookkeeping."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.learning import device_rounds
from core.learning.learner import Learner
from core.learning.parameter_server import ParameterServer
from core.learning.replay_buffer import ReplayBatch, Transitions
from core.plugins import load_plugins
from options.options import parse_args, run_spec

pytestmark = pytest.mark.unit

SAC = ["--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "sac",
       "--sac_hidden_sizes", "16,16", "--batch_size", "8", "--sac_precision", "fp32"]
CROSSQ = ["--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "crossq",
          "--sac_hidden_sizes", "16,16", "--crossq_critic_sizes", "16,16", "--batch_size", "8",
          "--policy_delay", "2", "--sac_precision", "fp32"]
# the truncated targets' sort and the quantile Huber loss's own gradient inside a round
TQC = [("tqc" if flag == "sac" else flag) for flag in SAC] + ["--n_quantiles", "5"]
TD3 = ["--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "td3",
       "--td3_hidden_sizes", "16,16", "--batch_size", "8", "--policy_delay", "2",
       "--td3_precision", "fp32"]
DQN = ["--env_name", "gym_env", "--gym_id", "CartPole-v1", "--model_name", "dqn",
       "--dqn_hidden_sizes", "16,16", "--batch_size", "8", "--max_grad_norm", "0.05",
       "--target_update_interval", "3"]
QR_DQN = [("qr_dqn" if flag == "dqn" else flag) for flag in DQN] + ["--n_quantiles", "5"]
NOISY_QR_DQN = QR_DQN + ["--exploration", "noisy"]  # each update's noise drawn between updates
# each update's fractions drawn from its own key (the update's number)
IQN = [("iqn" if flag == "dqn" else flag) for flag in DQN] + [
    "--num_tau_samples", "4", "--num_tau_prime_samples", "3", "--num_quantile_samples", "5",
    "--quantile_embedding_dim", "8"]
# the categorical projection's scatter inside a round, with dueling logits
C51 = [("c51" if flag == "dqn" else flag) for flag in DQN] + [
    "--n_atoms", "7", "--v_min", "-5", "--v_max", "5", "--dueling"]
SPACES = {"sac": (spaces.Box(-np.inf, np.inf, (3,), np.float32),
                  spaces.Box(-2.0, 2.0, (1,), np.float32)),
          "dqn": (spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))}


class Server(ParameterServer):
    """A parameter server in this process, without its process set-up."""

    def __init__(self, flags, kind, seed=0):
        args = parse_args(flags)
        spec = run_spec(args)
        plugins = load_plugins(spec)
        torch.manual_seed(seed)
        self.model = plugins.model_cls(spec.model, *SPACES[kind])
        self.device = "cpu"
        self.learner = Learner(self.model)
        self.agent = plugins.agent_cls(spec.agent, self.model, seed=seed)
        self.group = None
        self.configure_rounds(spec.loop)


def batches(kind, count, n=8, seed=0, nan_at=None):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        dim = 3 if kind == "sac" else 4
        obs = rng.standard_normal((n, dim)).astype(np.float32)
        if i == nan_at:
            obs[0, 0] = np.nan
        actions = (rng.uniform(-2, 2, (n, 1)).astype(np.float32) if kind == "sac"
                   else rng.integers(0, 2, n))
        discounts = None if kind == "sac" else np.full(n, 0.99, np.float32)
        t = Transitions(obs, actions, rng.standard_normal(n).astype(np.float32),
                        rng.standard_normal((n, dim)).astype(np.float32),
                        (rng.random(n) < 0.2).astype(np.float32), discounts)
        out.append(ReplayBatch(t, np.arange(n) + 10 * i, np.zeros(n, np.int64),
                               rng.uniform(0.5, 1.0, n).astype(np.float32)))
    return out


def state_of(server):
    return ({k: v.clone() for k, v in server.model.state_dict().items()},
            server.learner.optimizer.state_dict())


def assert_same_state(a, b):
    for name in a[0]:
        assert torch.equal(a[0][name], b[0][name]), name
    for key, state in a[1]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, b[1]["state"][key][name]), (key, name)


class Priorities:
    """The replay buffer's update_priorities as the server calls it (.remote)."""

    def __init__(self):
        self.calls = []
        self.update_priorities = self

    def remote(self, indices, generations, priorities):
        self.calls.append((indices.copy(), generations.copy(), priorities.copy()))


def run_calls(flags, kind, calls, nan_at=None):
    """A server that makes ``calls`` calls of 3 updates: (stats, state, priority calls,
    version). Each run draws from torch's generator seeded alike (the server's noise)."""
    server = Server(flags, kind)
    buffer = Priorities()
    stats = [server.update(batches(kind, 3, seed=call, nan_at=nan_at), buffer,
                           progress=0.1 * call) for call in range(calls)]
    return server, stats, state_of(server), buffer.calls


@pytest.mark.parametrize("flags,kind", [(SAC, "sac"), (CROSSQ, "sac"), (TQC, "sac"),
                                        (TD3, "sac"), (DQN, "dqn"), (QR_DQN, "dqn"),
                                        (NOISY_QR_DQN, "dqn"), (IQN, "dqn"), (C51, "dqn")],
                         ids=["sac", "crossq", "tqc", "td3", "dqn", "qr_dqn", "noisy-qr_dqn",
                              "iqn", "c51"])
def test_a_round_computes_what_the_updates_one_by_one_compute(flags, kind):
    # 3 calls of 3 updates: DQN's target copies (every 3), CrossQ's and TD3's delayed actors
    # (every 2; TD3's targets with them)
    one, expected, state, priorities = run_calls(flags + ["--device_rounds", "off"], kind, 3)
    rounds, got, round_state, round_priorities = run_calls(flags + ["--device_rounds", "on"],
                                                           kind, 3)
    assert not one.rounds and rounds.rounds
    for e_call, g_call in zip(expected, got):
        assert [list(s) for s in g_call] == [list(s) for s in e_call]
        for e, g in zip(e_call, g_call):
            for key in e:
                assert g[key] == pytest.approx(e[key], rel=1e-6, abs=1e-7), key
    assert_same_state(state, round_state)
    assert rounds.learner.version == one.learner.version == 9
    for (i1, g1, p1), (i2, g2, p2) in zip(priorities, round_priorities):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(g1, g2)
        np.testing.assert_allclose(p1, p2, rtol=1e-6)


def test_a_nan_update_in_a_round_is_skipped_like_one_by_one():
    """The weights and Adam's state skip it exactly (the fused optimizer's found_inf), the
    stats say why, the version counts the applied updates, no priority for the bad batch."""
    flags = DQN + ["--target_update_interval", "1000"]  # after_update: nothing to count
    one, expected, state, priorities = run_calls(flags + ["--device_rounds", "off"], "dqn", 1,
                                                 nan_at=1)
    rounds, got, round_state, round_priorities = run_calls(flags + ["--device_rounds", "on"],
                                                           "dqn", 1, nan_at=1)
    expected, got = expected[0], got[0]
    assert got[1]["skipped"] == expected[1]["skipped"] == 1.0
    assert got[1]["why"] == expected[1]["why"]
    assert [s["version"] for s in got] == [s["version"] for s in expected] == [1, 1, 2]
    assert_same_state(state, round_state)
    assert rounds.learner.version == 2
    np.testing.assert_array_equal(round_priorities[0][0], priorities[0][0])
    assert 10 not in round_priorities[0][0]  # batch 1's slots (10-17) keep their priorities


def test_an_optimizer_that_cannot_skip_on_the_device_waits_for_the_check():
    server = Server(DQN + ["--device_rounds", "on"], "dqn")
    model = server.model
    server.learner.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # not fused
    before = state_of(server)
    stats = server.update(batches("dqn", 2, nan_at=0))
    assert stats[0]["skipped"] == 1.0 and "skipped" not in stats[1]
    assert server.learner.version == 1
    after = model.state_dict()
    assert any(not torch.equal(before[0][k], after[k]) for k in after)  # the second applied
    assert all(torch.isfinite(v).all() for v in after.values())


def test_stage_copies_arrays_to_tensors_and_keeps_slots_on_the_host():
    batch = batches("sac", 1)[0]
    staged = device_rounds.stage_batch(batch, "cpu", pin=False)
    assert isinstance(staged.transitions.observations, torch.Tensor)
    assert staged.transitions.observations.dtype == torch.float32
    assert staged.transitions.discounts is None
    assert isinstance(staged.indices, np.ndarray) and isinstance(staged.weights, torch.Tensor)
    np.testing.assert_array_equal(staged.transitions.rewards.numpy(), batch.transitions.rewards)
    # a copy, not a view: arrays from Ray's object store are read-only
    staged.transitions.rewards.add_(1)
    assert not np.allclose(staged.transitions.rewards.numpy(), batch.transitions.rewards)
    nested = device_rounds.stage({"image": np.zeros((2, 3), np.uint8),
                                  "mask": np.ones((2, 2), bool)}, "cpu", pin=False)
    assert nested["image"].dtype == torch.uint8 and nested["mask"].dtype == torch.bool


def test_round_results_are_read_with_one_copy_in_order():
    results = device_rounds.RoundResults()
    results.add({"a": torch.tensor(1.5), "b": torch.tensor(-2.0)}, torch.tensor([0.25, 0.5]),
                torch.tensor(3.0), torch.tensor(True), {"epsilon": 0.1})
    results.add({"a": torch.tensor(float("nan"))}, None, torch.tensor(4.0),
                torch.tensor(False), {})
    first, second = results.read()
    assert first[0] == {"a": 1.5, "b": -2.0, "epsilon": 0.1} and first[1:3] == (3.0, True)
    np.testing.assert_array_equal(first[3], [0.25, 0.5])
    assert np.isnan(second[0]["a"]) and second[1:] == (4.0, False, None)


def test_cuda_graphs_are_refused_with_a_reason_off_cuda_and_for_unsafe_models(capsys):
    server = Server(SAC + ["--device_rounds", "on", "--cuda_graphs"], "sac")  # alone: on
    assert server.rounds and not server.use_graphs
    assert "--cuda_graphs is not used: the learner is not on a CUDA device" in (
        capsys.readouterr().err)
    quiet = Server(SAC + ["--device_rounds", "on"], "sac")  # auto: no note where it cannot
    assert quiet.rounds and not quiet.use_graphs and not capsys.readouterr().err
    crossq = Server(CROSSQ, "sac")
    assert device_rounds.graphs_note(crossq.model, "cuda:0", "on").startswith(
        "model CrossQModel does not declare its update graph-safe")
    assert device_rounds.graphs_note(server.model, "cuda:0", "auto") is None
    assert device_rounds.graphs_note(server.model, "cpu", "off") is None
    # auto: rounds on a GPU only
    assert not Server(SAC, "sac").rounds


def test_only_a_class_that_declares_it_is_graph_safe():
    """A subclass may change the update (a branch on a counter): a graph would replay the
    first call's choice for ever, so it must declare graph-safety itself."""
    from models.dqn import DQNModel
    from models.ma_sac import TeamSACModel
    from models.sac import SACModel

    class Counting(SACModel):
        pass

    class Declared(SACModel):
        update_graph_safe = True

    model = Server(SAC, "sac").model
    assert device_rounds.graph_safe(model)
    for cls, safe in ((Counting, False), (Declared, True), (TeamSACModel, False)):
        model.__class__ = cls
        assert device_rounds.graph_safe(model) is safe, cls
    assert DQNModel.__dict__["update_graph_safe"] is True


def test_update_graph_fits_only_the_shapes_it_was_captured_on():
    graph = device_rounds.UpdateGraph.__new__(device_rounds.UpdateGraph)
    graph.static_leaves = device_rounds._leaves((torch.zeros(8, 3), {"m": torch.zeros(8, 2)}))
    assert graph.fits((torch.ones(8, 3), {"m": torch.ones(8, 2)}))
    assert not graph.fits((torch.ones(7, 3), {"m": torch.ones(7, 2)}))
    assert not graph.fits((torch.ones(8, 3, dtype=torch.float64), {"m": torch.ones(8, 2)}))


@pytest.mark.parametrize("flags", [DQN, QR_DQN], ids=["dqn", "qr_dqn"])
def test_a_compiled_update_gives_the_gradients_of_the_eager_one(flags):
    """--compile_update's plumbing: the loss compiled (torch.compile's aot_eager backend here,
    which traces forward and backward as inductor does but runs them eagerly: inductor's C++
    compile takes tens of seconds), the backward pass from it, the same gradients and stats;
    a copy of the model (SAC's precision probe deep-copies it) carries no compiled code.
    QR-DQN's loss is an autograd.Function with its own backward (models/qr_dqn.py)."""
    import copy
    eager = Server(flags, "dqn")
    compiled = Server(flags, "dqn")
    compiled.model.compile_update(backend="aot_eager")
    batch = batches("dqn", 1)[0]
    for server in (eager, compiled):
        server.stats = server.model.step(batch, progress=0.5)[1]
    for (name, a), b in zip(eager.model.named_parameters(), compiled.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    for key in ("q_loss", "q_mean", "td_error_mean", "epsilon"):
        assert compiled.stats[key] == pytest.approx(eager.stats[key], rel=1e-6)
    clone = copy.deepcopy(compiled.model)
    assert clone not in device_rounds_compiled() and compiled.model in device_rounds_compiled()


def device_rounds_compiled():
    from models.base import _COMPILED_LOSSES
    return _COMPILED_LOSSES


def test_compile_update_is_refused_with_a_note_for_a_model_that_does_not_declare_it(capsys):
    crossq = Server(CROSSQ, "sac")
    assert not device_rounds.compile_if_asked(crossq.model, "on")
    assert "--compile_update is not used: model CrossQModel" in capsys.readouterr().err
    assert not device_rounds.compile_if_asked(crossq.model, "off")
    assert crossq.model not in device_rounds_compiled()
