"""Elastic PPO rounds: whichever workers deliver a fragment take part, and the averaged gradient
is the gradient of one process on the union of the delivered data, whether every worker
computes on its own fragment or a few gradient workers on the pooled fragments of all
(--grad_workers)."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.faults import Faults
from core.distributed.placement import LocalHandle
from core.plugins import load_plugins
from core.algos.ppo_trainer import PPOTrainer, advantage_moments
from core.sampling.rollout import RolloutWorker
from core.sampling.worker_group import WorkerGroup
from core.types import GradientRequest
from models.ppo import PPOBatch
from options.options import parse_args, run_spec

pytestmark = pytest.mark.contract


def make_trainer(*flags):
    args = parse_args(["--config", "none", "--num_workers", "0", "--num_epochs", "1",
                       "--num_envs_per_worker", "4", "--rollout_steps", "32", "--batch_size",
                       "256", "--seed", "3", *flags])
    spec = run_spec(args)
    plugins = load_plugins(spec)
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    run = SimpleNamespace(env_steps=0, stop_requested=None, quiet=True,
                          elapsed=lambda: 0.0, cpus_per_actor=lambda n: 1.0)
    faults = Faults(args, printer=lambda line: None)
    trainer = PPOTrainer(args, spec, plugins, (env.observation_space, env.action_space), run,
                         faults)
    # Three in-process workers with distinct seeds stand in for three actors.
    trainer.group = WorkerGroup("rollout worker",
                                lambda slot, generation, local, node=None: LocalHandle(
                                    RolloutWorker(spec, slot)), faults)
    for slot in range(3):
        trainer.group.add(slot, local=True)
    return trainer


def union_gradient(model, agents, mean, std):
    """The PPO gradient of one model on the concatenation of the agents' data (one minibatch:
    the whole of it), advantages normalized with the round's moments. A recurrent model's data
    are sequences: one agent adopts them all and computes on the one minibatch of every
    sequence (tests/test_recurrent.py checks that gradient against the workers' average)."""
    if "states" in agents[0].data:
        from agents.default_agent import DefaultAgent
        union = DefaultAgent(model.args, model, seed=0)
        union.adopt_data([a.data for a in agents])
        return union.fetch_grads(None, GradientRequest(0, 0, 1, mean, std, 0.0, 0)).gradients
    data = {k: torch.cat([a.data[k] for a in agents]) for k in agents[0].data}
    batch = PPOBatch(data["observations"], data["actions"], data["old_log_probs"],
                     (data["advantages"] - mean) / (std + 1e-8), data["returns"],
                     data["old_values"])
    gradients, _ = model.step(batch, 0.0)
    return gradients


def own_data(members):
    """Every worker's agent data of the fragment it sampled (before any pooling)."""
    return {m: dict(m.handle.obj.agent.data) for m in members}


def capture_applied(learner):
    """Every gradient ``learner`` applies, as numpy by parameter name: the averaged ones given
    to ``apply`` and the learner's own left in .grad for ``apply_in_place`` (--grad_workers 0)."""
    applied = []
    apply, apply_in_place = learner.apply, learner.apply_in_place

    def by_apply(gradients, progress=0.0):
        applied.append({k: v.copy() for k, v in gradients.items()})
        return apply(gradients, progress)

    def in_place(progress=0.0):
        applied.append({k: p.grad.detach().numpy().copy()
                        for k, p in learner.parameters.items() if p.grad is not None})
        return apply_in_place(progress)
    learner.apply, learner.apply_in_place = by_apply, in_place
    return applied


@pytest.mark.parametrize("grad_workers", ["3", "1", "2", "0"])
@pytest.mark.parametrize("missing", [2, 0])
@pytest.mark.parametrize("memory", [(), ("--recurrent", "lstm"), ("--recurrent", "gru")],
                         ids=["mlp", "lstm", "gru"])
def test_a_missing_worker_leaves_the_union_of_the_delivered_data(missing, grad_workers, memory):
    trainer = make_trainer("--grad_workers", grad_workers, *memory)
    members = sorted(trainer.group.members, key=lambda m: m.slot)
    weights = trainer.learner.get_weights()
    delivered = trainer.collect_fragments(members, weights)
    assert len(delivered) == 3
    data = own_data(members)
    lost = members[missing]
    del delivered[lost]            # its fragment never arrived: it takes no part in the round
    pooled = trainer.pool
    groups = []
    trainer.pool = lambda delivered: groups.append(pooled(delivered)) or groups[-1]

    applied = capture_applied(trainer.learner)
    reference_model = trainer.model.__class__(trainer.args, trainer.model.observation_space,
                                              trainer.model.action_space)
    reference_model.set_weights(weights)

    trainer.update(delivered, weights, progress=0.0)

    assert len(applied) == 1  # 256 delivered samples, batch 256, 1 epoch: one step
    # who computed: every worker that delivered, or the planned gradient workers among them
    computing = sorted(m.slot for m in groups[0])
    if grad_workers == "3":
        assert computing == sorted(m.slot for m in delivered)
    elif grad_workers == "0":  # the learner computes on everyone's data, in this process
        assert computing == [trainer.learner_gradients.slot]
        assert sorted(m.slot for m in groups[0][trainer.learner_gradients]) == sorted(
            m.slot for m in delivered)
    else:
        assert len(computing) == min(int(grad_workers), 2) and lost.slot not in computing
        assert sorted(m.slot for g in groups[0].values() for m in g) == sorted(
            m.slot for m in delivered)
    agents = [SimpleNamespace(data=data[m]) for m in members if m is not lost]
    mean, std = advantage_moments(list(delivered.values()))
    expected = union_gradient(reference_model, agents, mean, std)
    for name, value in expected.items():
        np.testing.assert_allclose(applied[0][name], value, rtol=1e-4, atol=1e-6)

    # The control that makes the test able to fail: with the lost worker's data in the union,
    # the gradient is a different one.
    everyone = [SimpleNamespace(data=data[m]) for m in members]
    with_lost = union_gradient(reference_model, everyone, mean, std)
    assert any(not np.allclose(applied[0][k], v, rtol=1e-3, atol=1e-5)
               for k, v in with_lost.items())


def test_a_worker_that_dies_mid_round_leaves_the_later_steps():
    """Two epochs of two minibatches (384 samples, batch 256); the third worker's gradient
    calls fail from the second epoch on: it leaves the round, the other two finish it."""
    trainer = make_trainer("--num_epochs", "2", "--grad_workers", "3")
    members = sorted(trainer.group.members, key=lambda m: m.slot)
    weights = trainer.learner.get_weights()
    delivered = trainer.collect_fragments(members, weights)
    gradients = trainer.gradients
    seen = []

    def flaky(weights, request, members_now):
        members_now = [m for m in members_now if m.slot != 2 or request.epoch == 0]
        seen.append(sorted(m.slot for m in members_now))
        return gradients(weights, request, members_now)

    trainer.gradients = flaky
    stats, grad_norms, _, _ = trainer.update(delivered, weights, progress=0.0)
    assert seen == [[0, 1, 2], [0, 1, 2], [0, 1], [0, 1]]
    assert len(grad_norms) == 4 and trainer.learner.version == 4


def test_a_gradient_worker_that_dies_mid_round_takes_its_groups_data_along():
    """Two gradient workers for three rollout workers: worker 2's fragment is pooled with one
    of them. When that gradient worker stops answering in the second epoch, the round goes on
    with the other one's data alone; the steps are not lost."""
    trainer = make_trainer("--num_epochs", "2", "--grad_workers", "2")
    members = sorted(trainer.group.members, key=lambda m: m.slot)
    delivered = trainer.collect_fragments(members, trainer.learner.get_weights())
    groups = trainer.pool(delivered)
    assert sorted(len(g) for g in groups.values()) == [1, 2]
    victim = next(leader for leader, group in groups.items() if len(group) == 2)
    trainer.pool = lambda delivered: groups
    gradients = trainer.gradients
    seen = []

    def flaky(weights, request, members_now):
        members_now = [m for m in members_now if m is not victim or request.epoch == 0]
        seen.append(sorted(m.slot for m in members_now))
        return gradients(weights, request, members_now)

    trainer.gradients = flaky
    _, grad_norms, _, _ = trainer.update(delivered, trainer.learner.get_weights(), 0.0)
    survivor = next(m for m in groups if m is not victim)
    assert seen == [[0, 1], [0, 1], [survivor.slot], [survivor.slot]]
    assert len(grad_norms) == 4


def test_the_learner_computing_makes_no_gradient_calls_and_takes_every_step():
    """--grad_workers 0, two epochs of two minibatches: every step is computed in this process
    on the pooled data (no worker is asked for a gradient), the weights version advances by
    one per step and no step lags."""
    trainer = make_trainer("--num_epochs", "2", "--grad_workers", "0")
    members = sorted(trainer.group.members, key=lambda m: m.slot)
    delivered = trainer.collect_fragments(members, trainer.learner.get_weights())
    asked = []
    submit = trainer.group.submit
    trainer.group.submit = lambda member, method, *a: asked.append(method) or submit(
        member, method, *a)
    _, grad_norms, gradient_lags, _ = trainer.update(delivered, None, progress=0.0)
    assert "fetch_grads" not in asked and "absorb" not in asked
    assert len(grad_norms) == 4 and trainer.learner.version == 4
    assert gradient_lags == [0, 0, 0, 0]
    assert len(trainer.learner_gradients.agent.data["returns"]) == 384


def test_grad_workers_0_needs_an_agent_that_adopts_data(monkeypatch):
    from agents.base import OnPolicyAgent
    from agents.default_agent import DefaultAgent
    monkeypatch.setattr(DefaultAgent, "adopt_data", OnPolicyAgent.adopt_data)
    from core.errors import ConfigError
    with pytest.raises(ConfigError, match="--grad_workers 0.*DefaultAgent.*adopt_data"):
        make_trainer("--grad_workers", "0")


@pytest.mark.parametrize("grad_workers, steps", [("3", 4), ("1", 12), ("0", 12)])
def test_sequences_cap_the_minibatches_at_what_each_gradient_worker_holds(grad_workers, steps):
    """A recurrent model learns on sequences (4 per worker: 4 envs, whole fragments). Batch 8
    of 384 samples asks for 48 minibatches; each gradient worker splits its own sequences, so
    there are as many minibatches as the fewest any of them holds: 4 with three gradient
    workers, 12 when one (or the learner) holds all. Every step is applied, none empty."""
    trainer = make_trainer("--grad_workers", grad_workers, "--recurrent", "lstm",
                           "--batch_size", "8")
    members = sorted(trainer.group.members, key=lambda m: m.slot)
    weights = trainer.learner.get_weights()
    delivered = trainer.collect_fragments(members, weights)
    assert all(d.agent_stats["sequences"] == 4 for d in delivered.values())
    applied = capture_applied(trainer.learner)
    stats, *_ = trainer.update(delivered, weights, progress=0.0)
    assert len(applied) == steps and len(stats) >= steps
    assert trainer.faults.counts["skipped_updates"] == 0
