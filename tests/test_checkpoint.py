"""Checkpoints are data: a round trip keeps every tensor; a pickle that runs code is refused."""
import os
import pickle

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from core.learner import Learner
from models.ppo import PPOModel
from options.options import parse_args


def test_save_and_load_round_trip_model_optimizer_and_meta(tmp_path):
    torch.manual_seed(0)
    args = parse_args(["--config", "none", "--num_workers", "0"])
    model = PPOModel(args, spaces.Box(-1, 1, shape=(3,)), spaces.Box(-1, 1, shape=(2,)))
    learner = Learner(model)
    learner.apply({k: np.ones(tuple(p.shape), np.float32) for k, p in model.named_parameters()})
    path = tmp_path / "checkpoints" / "last.pt"  # the folder is created
    save_checkpoint(str(path), learner.get_weights(), learner.optimizer.state_dict(),
                    {"env_steps": 1234, "env_name": "gym_env"})

    payload, meta = load_checkpoint(str(path))
    assert payload["format_version"] == FORMAT_VERSION
    weights = learner.get_weights()
    assert set(payload["model"]) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(payload["model"][name].numpy(), value)
    assert meta == {"format_version": FORMAT_VERSION, "env_steps": 1234, "env_name": "gym_env"}
    assert [f for f in os.listdir(path.parent) if ".tmp" in f] == []

    # the optimizer state loads back into a fresh learner and continues identically
    other = Learner(PPOModel(args, spaces.Box(-1, 1, shape=(3,)), spaces.Box(-1, 1, shape=(2,))))
    other.model.set_weights({k: v.numpy() for k, v in payload["model"].items()})
    other.optimizer.load_state_dict(payload["optimizer"])
    grads = {k: np.full(tuple(p.shape), 0.5, np.float32) for k, p in model.named_parameters()}
    learner.apply(grads)
    other.apply(grads)
    for name, value in learner.get_weights().items():
        np.testing.assert_array_equal(other.get_weights()[name], value)


def test_load_without_meta_file_gives_empty_meta(tmp_path):
    path = str(tmp_path / "w.pt")
    save_checkpoint(path, {"w": np.arange(3, dtype=np.float32)})
    payload, meta = load_checkpoint(path)
    assert meta == {} and payload["model"]["w"].tolist() == [0.0, 1.0, 2.0]


class RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_runs_code_on_load_is_refused(tmp_path):
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "format_version": 1, "payload": RunsCode(marker)}, str(path))
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(str(path))
    assert not marker.exists()
    # the crafted file is real: a plain unpickling does run the code
    torch.load(str(path), weights_only=False)
    assert marker.exists()


def test_restore_refuses_a_crafted_checkpoint_and_runs_nothing(tmp_path):
    """The same crafted file given to main.py --restore (and --evaluate): a one-paragraph error
    naming it, exit 2, and the payload never ran."""
    from test_e2e import run_main
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "format_version": 2, "payload": RunsCode(marker)}, str(path))
    with open(f"{path}.json", "w") as f:
        f.write('{"format_version": 2, "config": {"num_workers": 0}}')
    for flag in ("--restore", "--evaluate"):
        proc = run_main(flag, str(path), "--total_steps", "100")
        assert proc.returncode == 2, proc.stderr
        assert "evil.pt" in proc.stderr and "not a readable ddrl checkpoint" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not marker.exists()
