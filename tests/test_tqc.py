"""TQC: the truncated target atoms and the critic loss by hand, the actor's value (the mean of
every atom), |TD errors|, flags and errors; a run learns Pendulum, and one on Ray workers with
two learner workers and prioritized replay evaluates and exports."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.errors import ConfigError
from models.qr_dqn import quantile_fractions
from models.tqc import QuantileCritics, TQCModel
from options.options import parse_args
from test_crossq import random_batch  # Pendulum-shaped transitions, unit weights
from test_e2e import read_run, run_main

pytestmark = pytest.mark.unit

OBS = spaces.Box(-5.0, 5.0, shape=(3,), dtype=np.float32)
ACT = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)


def make_args(*flags):
    return parse_args(["--config", "none", "--num_workers", "0", "--gym_id", "Pendulum-v1",
                       "--model_name", "tqc", "--sac_hidden_sizes", "16,16", *flags])


def make_model(*flags, seed=0):
    torch.manual_seed(seed)
    return TQCModel(make_args(*flags), OBS, ACT)


class Fixed(torch.nn.Module):
    """Critics that give ``atoms`` [B, C, M] whatever they are asked."""

    def __init__(self, atoms):
        super().__init__()
        self.atoms = atoms

    def forward(self, obs, actions):
        return self.atoms


def fixed_next(model, atoms, log_prob, monkeypatch):
    """The target critics give ``atoms`` [B, C, M] and the actor ``log_prob`` at s'."""
    monkeypatch.setattr(model, "critic_target", Fixed(atoms))
    monkeypatch.setattr(model, "sample", lambda obs, deterministic=False: (
        torch.zeros(len(obs), 1), log_prob))


def test_the_defaults_are_sb3_contribs():
    args = parse_args(["--gym_id", "Pendulum-v1", "--model_name", "tqc", "--config", "none"])
    assert (args.n_quantiles, args.n_critics, args.top_quantiles_to_drop) == (25, 2, 2)
    assert args.sac_hidden_sizes == [256, 256] and args.agent_name == "sac_agent"
    assert (args.actor_lr, args.tau, args.sac_gamma) == (3e-4, 0.005, 0.99)


def test_the_critics_give_each_atom_of_each_critic():
    model = make_model("--n_critics", "3", "--n_quantiles", "5")
    assert isinstance(model.critic, QuantileCritics) and len(model.critic.nets) == 3
    obs, actions = torch.zeros(4, 3), torch.zeros(4, 1)
    assert model.critic(obs, actions).shape == (4, 3, 5)
    assert model.critic_target(obs, actions).shape == (4, 3, 5)
    # the target critics are buffers (no gradient, no optimizer state) that start equal
    assert not list(model.critic_target.parameters())
    torch.testing.assert_close(model.critic_target(obs, actions), model.critic(obs, actions))
    assert model.atom_fractions.tolist() == [quantile_fractions(5).tolist() * 3]


def test_the_targets_pool_sort_and_drop_the_top_atoms_of_each_critic(monkeypatch):
    """2 critics x 3 atoms, 1 dropped per critic: of the 6 pooled atoms the 4 smallest stay.
    Row 0: atoms {5, 1, 3} and {0, 4, 2} -> 0, 1, 2, 3; minus alpha (1) x log pi (-0.5): 0.5,
    1.5, 2.5, 3.5; r 1 + 0.9 x those. Row 1 terminated: r (-2) alone, in every target atom."""
    model = make_model("--n_quantiles", "3", "--top_quantiles_to_drop", "1", "--sac_gamma",
                       "0.9")
    atoms = torch.tensor([[[5.0, 1.0, 3.0], [0.0, 4.0, 2.0]],
                          [[9.0, 9.0, 9.0], [9.0, 9.0, 9.0]]])
    fixed_next(model, atoms, torch.tensor([-0.5, -0.5]), monkeypatch)
    targets = model.critic_targets(torch.tensor([1.0, -2.0]), torch.zeros(2, 3),
                                   torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(targets, torch.tensor([[1.45, 2.35, 3.25, 4.15],
                                                      [-2.0, -2.0, -2.0, -2.0]]))
    # no truncation: all six atoms stay
    model.args.top_quantiles_to_drop = 0
    assert model.critic_targets(torch.tensor([1.0, -2.0]), torch.zeros(2, 3),
                                torch.tensor([0.0, 1.0])).shape == (2, 6)


def test_the_critic_loss_averages_every_pair_of_atom_and_target_atom(monkeypatch):
    """One critic of 2 atoms at tau 0.25, 0.75 giving (0, 1), target atoms (0.5, 3) (the QR-DQN
    test's pairs: their sum over atoms, mean over targets 0.90625), so the mean over atoms and
    targets is 0.453125; with importance weights 1 and 0.5 on two such rows the loss is their
    weighted mean. TD error: |mean atom 0.5 - mean target 1.75| = 1.25."""
    model = make_model("--n_critics", "1", "--n_quantiles", "2", "--top_quantiles_to_drop", "0")
    monkeypatch.setattr(model, "critic", Fixed(torch.tensor([[[0.0, 1.0]]] * 2)))
    loss, td_errors, q = model.critic_loss_and_td_errors(
        torch.zeros(2, 3), torch.zeros(2, 1), torch.tensor([[0.5, 3.0]] * 2),
        torch.tensor([1.0, 0.5]))
    assert loss.item() == pytest.approx(0.453125 * 1.5 / 2)
    assert td_errors.tolist() == [1.25, 1.25] and q.tolist() == [0.5, 0.5]


def test_the_actor_values_its_actions_by_the_mean_of_every_atom():
    model = make_model()
    assert model.policy_value(torch.tensor([[[1.0, 2.0], [3.0, 10.0]]])).tolist() == [4.0]


def test_one_step_learns_every_network_and_reports_sacs_columns():
    model = make_model()
    grads, stats = model.step(random_batch(32))
    names = {n for n, _ in model.named_parameters()}
    assert names <= set(grads) and "log_alpha" in grads
    assert stats["critic_loss"] > 0 and np.isfinite(stats["q_mean"])
    assert set(TQCModel.update_metrics) <= set(stats)
    # the actor's loss reaches the critics only as constants: a step on the actor's and the
    # temperature's losses alone leaves the critics without gradients
    model.zero_grad()
    actor_loss, alpha_loss, _ = model.actor_and_alpha_losses(torch.randn(8, 3), model.alpha)
    (actor_loss + alpha_loss).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.critic.parameters())
    assert any(p.grad is not None and p.grad.any() for p in model.actor.parameters())


def test_td_errors_compare_the_mean_atom_with_the_mean_target_atom(monkeypatch):
    model = make_model()
    batch = random_batch(16)
    obs, actions, rewards, next_obs, terminated, _ = model.unpack(batch)
    torch.manual_seed(1)
    got = model.td_errors(batch)
    torch.manual_seed(1)  # the same next actions
    target = model.critic_targets(rewards, next_obs, terminated)
    expected = (model.critic(obs, actions).mean(dim=(1, 2)) - target.mean(1)).abs()
    np.testing.assert_allclose(got, expected.detach().numpy(), rtol=1e-6)


def test_dropping_every_atom_is_refused_in_one_paragraph():
    with pytest.raises(ConfigError) as err:
        make_model("--n_quantiles", "4", "--top_quantiles_to_drop", "4")
    text = str(err.value)
    assert "--top_quantiles_to_drop 4" in text and "--n_quantiles 4" in text
    assert "below --n_quantiles" in text and "\n" not in text


@pytest.mark.e2e
def test_tqc_learns_pendulum_in_one_process(tmp_path):
    """Deterministic (--num_workers 0, seed 0), small nets and SAC's fault test's fast rates:
    over 2,048 steps seeds 0-4 ended at -247, -182, -61, -571 and -566 (best -57 to -571) from
    first evaluations of -1,275 to -1,603 (random play: -1,200 to -1,800)."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "tqc",
                    "--config", "none", "--num_workers", "0", "--learner_threads", "1",
                    "--seed", "0", "--sac_hidden_sizes", "64,64", "--batch_size", "128",
                    "--actor_lr", "3e-3", "--critic_lr", "3e-3", "--alpha_lr", "3e-3",
                    "--tau", "0.05", "--learning_starts", "256", "--start_steps", "256",
                    "--total_steps", "2000", "--eval_interval", "250", "--eval_episodes", "2",
                    "--log_steps", "250", "--target_return", "none", "--run_dir", run_dir,
                    "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    evals = [float(r["eval_return"]) for r in rows if r["eval_return"]]
    assert summary["last_eval_return"] >= -800, evals
    assert max(evals) >= evals[0] + 500, evals


@pytest.mark.e2e
def test_ray_workers_and_two_learners_with_priorities_then_it_exports(tmp_path):
    """The loop's plumbing with TQC's critics: Ray workers, the batch split over two learner
    workers, prioritized replay fed TQC's |TD errors|; then ONNX export acts as Policy.act."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--env_name", "gym_env", "--gym_id", "Pendulum-v1", "--model_name", "tqc",
                    "--config", "none", "--num_workers", "1", "--num_learners", "2",
                    "--prioritized_replay", "--num_cpus", "2", "--sac_hidden_sizes", "32,32",
                    "--n_quantiles", "5", "--total_steps", "768", "--learning_starts", "256",
                    "--start_steps", "256", "--eval_interval", "512", "--eval_episodes", "1",
                    "--log_steps", "256", "--target_return", "none", "--run_dir", run_dir,
                    "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 768 and summary["last_eval_return"] is not None
    assert int(rows[-1]["updates"]) > 0 and float(rows[-1]["td_error_mean"]) > 0
    roles = [d["role"] for d in summary["devices"]]
    assert roles == ["parameter server", "learner worker 0", "learner worker 1"]
    onnx = str(tmp_path / "policy.onnx")
    proc = run_main("--export", run_dir, "--format", "onnx", "--out", onnx, timeout=240)
    assert proc.returncode == 0, proc.stderr
    import onnxruntime

    import ddrl
    policy = ddrl.load(run_dir)
    observations = np.random.default_rng(3).uniform(-1, 1, size=(64, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(onnx)
    (actions,) = session.run(None, {session.get_inputs()[0].name: observations})
    np.testing.assert_allclose(actions, policy.act(observations), rtol=1e-5, atol=1e-6)
