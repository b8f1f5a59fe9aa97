"""Which runs learn in the driver while Ray starts (``Trainer.learns_while_ray_starts``): only
those start Ray's processes niced (ddrl/session.py), and those processes keep that niceness for
the whole run (the workers Ray starts 15 above it). A run that waits for Ray starts them at the
driver's niceness (tests/test_cluster.py checks the GCS's and the raylet's in such a run)."""
import pytest

from core.algos.appo_trainer import APPOTrainer
from core.algos.ppo_trainer import PPOTrainer
from core.algos.replay_trainer import ReplayTrainer
from options.options import parse_args

pytestmark = pytest.mark.unit


def args_of(model, *flags):
    return parse_args(["--config", "none", "--model_name", model, "--num_workers", "2", *flags])


@pytest.mark.parametrize("trainer, model", [(PPOTrainer, "ppo"), (APPOTrainer, "appo")])
def test_an_elastic_start_learns_while_ray_starts_and_a_waiting_one_does_not(trainer, model):
    assert trainer.learns_while_ray_starts(args_of(model))
    assert not trainer.learns_while_ray_starts(args_of(model, "--no-elastic_start"))
    # env actors need Ray before the first worker is built
    assert not trainer.learns_while_ray_starts(args_of(model, "--env_placement", "actor"))


def test_a_compiled_graph_waits_for_every_ppo_worker():
    assert not PPOTrainer.learns_while_ray_starts(args_of("ppo", "--compiled_graph"))


def test_the_replay_loop_always_waits_for_ray():
    assert not ReplayTrainer.learns_while_ray_starts(args_of("sac"))
