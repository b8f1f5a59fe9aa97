"""Checkpoints are data: a round trip keeps every tensor; a pickle that runs code is refused;
the metadata travels inside the file, not in the .json copy beside it."""
import json
import os
import pickle

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.run.checkpoint import (FORMAT_VERSION, CheckpointManager, check_model_fits,
                             load_checkpoint, save_checkpoint)
from core.errors import ConfigError
from core.learning.learner import Learner
from models.ppo import PPOModel
from options.options import parse_args, restored_config

pytestmark = pytest.mark.unit


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
    assert payload["format_version"] == FORMAT_VERSION == 3
    assert "meta" not in payload  # parsed into meta, not left as a string
    weights = learner.get_weights()
    assert set(payload["model"]) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(payload["model"][name].numpy(), value)
    assert meta == {"format_version": FORMAT_VERSION, "env_steps": 1234, "env_name": "gym_env"}
    assert [f for f in os.listdir(path.parent) if ".tmp" in f] == []
    # the .json beside it is the same metadata, for people
    with open(f"{path}.json") as f:
        assert json.load(f) == meta

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


@pytest.mark.e2e
def test_restore_refuses_a_crafted_checkpoint_and_runs_nothing(tmp_path):
    """The same crafted file given to main.py --restore (and --evaluate): a one-paragraph error
    naming it, exit 2, and the payload never ran."""
    from test_e2e import run_mains
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "format_version": 2, "payload": RunsCode(marker)}, str(path))
    with open(f"{path}.json", "w") as f:
        f.write('{"format_version": 2, "config": {"num_workers": 0}}')
    for proc in run_mains(*[[flag, str(path), "--total_steps", "100"]
                            for flag in ("--restore", "--evaluate")]):
        assert proc.returncode == 2, proc.stderr
        assert "evil.pt" in proc.stderr and "not a readable ddrl checkpoint" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not marker.exists()


def save_small(path, meta, **kwargs):
    save_checkpoint(str(path), {"w": np.arange(3, dtype=np.float32)}, meta=meta, **kwargs)


def test_meta_travels_inside_the_checkpoint(tmp_path):
    path = tmp_path / "a.pt"
    save_small(path, {"env_steps": 7, "config": {"lr": 0.5}})
    raw = torch.load(str(path), map_location="cpu", weights_only=True)
    assert isinstance(raw["meta"], str)
    assert json.loads(raw["meta"])["env_steps"] == 7
    os.remove(f"{path}.json")
    _, meta = load_checkpoint(str(path))
    assert meta == {"format_version": FORMAT_VERSION, "env_steps": 7, "config": {"lr": 0.5}}


def test_another_checkpoints_sidecar_does_not_change_the_meta(tmp_path):
    """A crash between writing a file and its .json copy (or between linking last.pt and
    last.pt.json) leaves a wrong sidecar: the metadata still comes from the file itself."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    save_small(a, {"env_steps": 100, "run": "a"})
    save_small(b, {"env_steps": 200, "run": "b"})
    os.replace(f"{b}.json", f"{a}.json")
    _, meta = load_checkpoint(str(a))
    assert meta["env_steps"] == 100 and meta["run"] == "a"


def test_manager_last_pt_carries_its_own_meta(tmp_path):
    manager = CheckpointManager(str(tmp_path / "checkpoints"), keep=2)
    for steps in (10, 20):
        manager.save(steps, {"w": np.full(2, steps, np.float32)}, None, {"env_steps": steps})
    last = os.path.join(manager.directory, "last.pt")
    with open(f"{last}.json", "w") as f:  # as if a crash left last.pt.json behind
        f.write('{"env_steps": 10}')
    payload, meta = load_checkpoint(last)
    assert meta["env_steps"] == 20 and payload["model"]["w"].tolist() == [20.0, 20.0]


@pytest.mark.contract
def test_restored_config_reads_the_config_from_the_checkpoint(tmp_path):
    path = tmp_path / "a.pt"
    save_small(path, {"config": {"lr": 0.25, "gym_id": "Pendulum-v1", "restore": "x"}},
               state={"buffer": np.zeros((100, 4), np.float32)})
    os.remove(f"{path}.json")
    config = restored_config(str(path))
    assert config["lr"] == 0.25 and config["gym_id"] == "Pendulum-v1"
    assert "restore" not in config  # run-only keys are dropped, as before
    # a run directory means its checkpoints/last.pt
    run = tmp_path / "run"
    CheckpointManager(str(run / "checkpoints")).save(
        5, {"w": np.zeros(1, np.float32)}, None, {"config": {"lr": 0.75}})
    os.remove(run / "checkpoints" / "last.pt.json")
    assert restored_config(str(run))["lr"] == 0.75


@pytest.mark.contract
def test_restored_config_errors_name_the_file(tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a torch file")
    with pytest.raises(ConfigError, match="broken.pt: not a readable ddrl checkpoint"):
        restored_config(str(broken), "--evaluate")
    no_meta = tmp_path / "no_meta.pt"
    save_small(no_meta, None)
    with pytest.raises(ConfigError, match="no_meta.pt: a checkpoint without metadata"):
        restored_config(str(no_meta))


def write_format_2(path, meta):
    """A checkpoint as ddrl wrote it before format 3: no "meta" in the file, a .json beside."""
    torch.save({"model": {"w": torch.arange(3.0)}, "format_version": 2}, str(path))
    with open(f"{path}.json", "w") as f:
        json.dump({"format_version": 2, **meta}, f)


@pytest.mark.contract
def test_a_format_2_checkpoint_still_loads_with_its_sidecar(tmp_path):
    path = tmp_path / "old.pt"
    write_format_2(path, {"env_steps": 42, "config": {"lr": 0.125, "run_dir": "r"}})
    payload, meta = load_checkpoint(str(path))
    assert payload["model"]["w"].tolist() == [0.0, 1.0, 2.0]
    assert payload["format_version"] == 2
    assert meta["env_steps"] == 42 and meta["format_version"] == 2
    assert restored_config(str(path)) == {"lr": 0.125, "run_dir": "r"}
    os.remove(f"{path}.json")
    with pytest.raises(ConfigError, match="cannot read .*old.pt.json"):
        restored_config(str(path))


@pytest.mark.contract
def test_a_format_3_file_without_meta_ignores_a_stale_sidecar(tmp_path):
    path = tmp_path / "w.pt"
    save_small(path, {"env_steps": 1})
    save_small(path, None)  # the same name again, without metadata: the old copy goes
    assert not os.path.exists(f"{path}.json")
    with open(f"{path}.json", "w") as f:
        f.write('{"env_steps": 99}')
    assert load_checkpoint(str(path))[1] == {}


def test_check_model_fits(tmp_path):
    expected = {"actor.0.weight": np.zeros((64, 4), np.float32),
                "actor.0.bias": np.zeros(64, np.float32),
                "critic.weight": np.zeros((1, 64), np.float32)}
    saved = {k: torch.tensor(v) for k, v in expected.items()}
    check_model_fits(saved, expected, "a.pt")  # a match passes

    wrong = dict(saved)
    del wrong["critic.weight"]
    wrong["value.weight"] = torch.zeros(1, 64)
    wrong["actor.0.weight"] = torch.zeros(8, 4)
    with pytest.raises(ConfigError) as info:
        check_model_fits(wrong, expected, "runs/x/last.pt", "--evaluate")
    message = str(info.value)
    assert message.startswith("--evaluate runs/x/last.pt: the checkpoint does not fit this "
                              "model (")
    assert "missing: critic.weight" in message
    assert "unexpected: value.weight" in message
    assert "actor.0.weight: saved (8, 4), this model (64, 4)" in message
    assert "actor.0.bias" not in message and "\n" not in message
    assert "config.yaml" in message


def test_check_model_fits_caps_long_lists():
    expected = {f"layer{i}": np.zeros(1) for i in range(12)}
    with pytest.raises(ConfigError) as info:
        check_model_fits({}, expected, "a.pt")
    message = str(info.value)
    assert "missing: layer0, layer1, layer10, layer11, layer2 and 7 more" in message
    assert "layer9" not in message


@pytest.mark.contract
def test_evaluate_refuses_a_checkpoint_of_another_model_shape(tmp_path):
    """ddrl/playback.py uses check_model_fits: a one-paragraph error, not a traceback."""
    from ddrl.playback import evaluate_saved_model
    args = parse_args(["--config", "none", "--num_workers", "0", "--eval_episodes", "1"])
    space = spaces.Box(-1, 1, shape=(4,)), spaces.Discrete(2)
    weights = PPOModel(args, *space).get_weights()
    name = sorted(weights)[0]
    weights[name] = np.zeros((3,) + weights[name].shape, np.float32)
    path = tmp_path / "other.pt"
    save_checkpoint(str(path), weights, meta={"model_name": args.model_name,
                                              "agent_name": args.agent_name})
    args.evaluate = str(path)
    with pytest.raises(ConfigError, match=f"other.pt: the checkpoint does not fit this model "
                                          f"\\({name}: saved"):
        evaluate_saved_model(args)
