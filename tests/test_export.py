"""main.py --export (ddrl/export.py, models/base.py export_module): for every built-in model
kind, a tiny trained run exported as ONNX and as a torch.export program acts as ``Policy.act``
does on 1,000 observations the env gave (discrete actions equal, continuous ones within 1e-5),
a recurrent one also step by step with its state threaded through 100 steps; the sidecar says
what the file takes; plugin models that cannot be exported get one paragraph; the command line
writes the file and its sidecar."""
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch
from gymnasium import spaces

import ddrl
from ddrl.export import export_policy
from core.errors import ConfigError
from core.space_codec import space_from_json

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(REPO, "tests", "plugins")
QUIET = dict(num_workers=0, seed=0, quiet=True, tensorboard=False, eval_episodes=1)
OBSERVATIONS = 1000
RECURRENT_STEPS = 100
FORMATS = ("onnx", "pt2")


class AtariShapedFrames(gym.Env):
    """Random uint8 frames shaped as Atari's preprocessed stack (4x84x84): the Nature CNN's
    input, without the cost of an emulator. Reward for matching the first pixel mod 3."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def _frames(self):
        self.frames = self.np_random.integers(0, 256, (4, 84, 84), dtype=np.uint8)
        return self.frames

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._frames(), {}

    def step(self, action):
        reward = float(int(action) == int(self.frames[0, 0, 0]) % 3)
        self.t += 1
        return self._frames(), reward, False, self.t >= 16, {}


FRAMES_ID = "ddrl_test/AtariShapedFrames-v0"
if FRAMES_ID not in gym.registry:
    gym.register(id=FRAMES_ID, entry_point=AtariShapedFrames)

PPO_SMALL = dict(num_envs_per_worker=2, rollout_steps=64, batch_size=64, num_epochs=2)
REPLAY_SMALL = dict(total_steps=300, learning_starts=100, start_steps=100, eval_interval=300)
# case: the flags of its tiny run (seed 0, one process)
CASES = {
    "ppo-discrete-normalized": dict(gym_id="CartPole-v1", normalize_obs=True, total_steps=256,
                                    **PPO_SMALL),
    "ppo-gsde": dict(gym_id="Pendulum-v1", total_steps=256, **PPO_SMALL),  # preset: --use_sde
    "ppo-gaussian-dict-normalized": dict(gym_id="ddrl/PointReachGrid-v0", normalize_obs=True,
                                         total_steps=256, **PPO_SMALL),
    "ppo-small-cnn": dict(gym_id="ddrl/TinyGrid-v0", total_steps=256, **PPO_SMALL),
    "ppo-nature-cnn": dict(gym_id=FRAMES_ID, total_steps=128, **PPO_SMALL),
    "ppo-dict-masked": dict(gym_id="ddrl/MaskedChoice-v0", total_steps=256, **PPO_SMALL),
    "ppo-multidiscrete-masked": dict(user_dir=PLUGINS, env_name="spaces_env", obs_kind="dict",
                                     action_kind="multi_discrete", masked=True,
                                     total_steps=256, **PPO_SMALL),
    "ppo-discrete-start-obs": dict(user_dir=PLUGINS, env_name="spaces_env",
                                   obs_kind="discrete", action_kind="discrete", masked=True,
                                   total_steps=256, **PPO_SMALL),
    "ppo-multibinary": dict(gym_id="ddrl/BitMatch-v0", total_steps=256, **PPO_SMALL),
    # BabyAI's preset (the mission as word indices, an LSTM), its instruction read by a GRU
    # over words, the view as symbols whose convolutions it conditions (--film)
    "ppo-words-gru": dict(gym_id="BabyAI-GoToLocal-v0", encoder_for="image=cells,mission=gru",
                          film="image=mission",
                          total_steps=128, eval_interval=128, eval_episodes=1, **PPO_SMALL),
    "ppo-subclass": dict(gym_id="CartPole-v1", model_name="custom_model", total_steps=256,
                         **PPO_SMALL),  # models/custom_model.py: PPO's export, its networks
    "ppo-lstm": dict(gym_id="ddrl/MemoryChoice-v0", total_steps=256, **PPO_SMALL),
    "ppo-lstm-vector": dict(gym_id="ddrl/CartPoleNoVel-v1", recurrent="lstm", total_steps=256,
                            **PPO_SMALL),  # Policy.act's numpy cores (models/recurrent.py)
    "ppo-gru-shared": dict(gym_id="ddrl/MemoryChoice-v0", recurrent="gru", shared_rnn=True,
                           total_steps=256, **PPO_SMALL),
    "appo-target": dict(gym_id="CartPole-v1", model_name="appo", target_update_interval=2,
                        num_envs_per_worker=2, rollout_steps=32, batch_size=64,
                        total_steps=256),  # the target network's buffers stay behind
    "sac": dict(gym_id="Pendulum-v1", model_name="sac", sac_hidden_sizes=[64, 64],
                **REPLAY_SMALL),
    "crossq": dict(gym_id="Pendulum-v1", model_name="crossq", sac_hidden_sizes=[64, 64],
                   crossq_critic_sizes=[128, 128], **REPLAY_SMALL),
    "td3": dict(gym_id="Pendulum-v1", model_name="td3", td3_hidden_sizes=[64, 64],
                **REPLAY_SMALL),
    "dqn": dict(gym_id="CartPole-v1", model_name="dqn", **REPLAY_SMALL),
    "dqn-dueling-masked": dict(gym_id="ddrl/MaskedChoice-v0", model_name="dqn", dueling=True,
                               **REPLAY_SMALL),
    # the Q values as the quantiles' mean, masked, per-quantile dueling streams
    "qr_dqn-dueling-masked": dict(gym_id="ddrl/MaskedChoice-v0", model_name="qr_dqn",
                                  n_quantiles=8, dueling=True, **REPLAY_SMALL),
    # the Q values as the mean at the K fixed fractions: the export is a plain function
    "iqn-dueling-masked": dict(gym_id="ddrl/MaskedChoice-v0", model_name="iqn",
                               num_tau_samples=4, num_tau_prime_samples=4,
                               num_quantile_samples=6, dueling=True, **REPLAY_SMALL),
    # the Q values as the mean over the atoms of the softmax of dueling logits, masked
    "c51-dueling-masked": dict(gym_id="ddrl/MaskedChoice-v0", model_name="c51", n_atoms=11,
                               v_min=-2.0, v_max=2.0, dueling=True, **REPLAY_SMALL),
    # noisy layers: the export acts on their mean weights, as deterministic Policy.act
    "dqn-noisy": dict(gym_id="CartPole-v1", model_name="dqn", exploration="noisy",
                      **REPLAY_SMALL),
    # a recurrent Q network (LSTM) on a Dict observation with a mask; sequences of 4 + 8 steps
    "r2d2-lstm-masked": dict(gym_id="ddrl/MemoryChoice-v0", model_name="r2d2", burn_in=4,
                             sequence_length=8, **{**REPLAY_SMALL, "batch_size": 8}),
}
RECURRENT = ("ppo-lstm", "ppo-lstm-vector", "ppo-gru-shared", "ppo-words-gru",
             "r2d2-lstm-masked")
# what each case's policy must be, so that a preset or a default changing cannot quietly take
# a kind out of the tests
KINDS = {
    "ppo-discrete-normalized": lambda p: p.obs_statistics is not None and p.model.discrete,
    "ppo-gsde": lambda p: p.model.use_sde,
    "ppo-gaussian-dict-normalized": lambda p: (p.obs_statistics is not None and p.model.head is
                                               None and p.action_space.shape == (1, 2)),
    "ppo-small-cnn": lambda p: type(p.model.encoder).__name__ == "SmallCNN",
    "ppo-nature-cnn": lambda p: type(p.model.encoder).__name__ == "NatureCNN",
    "ppo-dict-masked": lambda p: p.layout.has_mask,
    "ppo-multidiscrete-masked": lambda p: (p.layout.has_mask and "onehot" in
                                           p.model.encoder.kinds and "small_cnn" in
                                           p.model.encoder.kinds),
    "ppo-discrete-start-obs": lambda p: p.observation_space["observation"].start == 3,
    "ppo-multibinary": lambda p: isinstance(p.action_space, spaces.MultiBinary),
    "ppo-words-gru": lambda p: ("gru" in p.model.encoder.kinds and p.model.encoder.film
                                and p.model.rnn.kind == "lstm"),
    "ppo-subclass": lambda p: type(p.model).__name__ == "SharedTrunkPPO",
    "r2d2-lstm-masked": lambda p: (type(p.model).__name__ == "R2D2Model" and p.layout.has_mask
                                   and p.model.q_net.core.kind == "lstm"),
    "ppo-lstm": lambda p: p.model.rnn.kind == "lstm" and p.model.critic_rnn is not None,
    "ppo-lstm-vector": lambda p: p.model.numpy_memory is not None,
    "ppo-gru-shared": lambda p: p.model.rnn.kind == "gru" and p.model.critic_rnn is None,
    "appo-target": lambda p: (type(p.model).__name__ == "APPOModel"
                              and p.model.target is not None),
    "sac": lambda p: type(p.model).__name__ == "SACModel",
    "crossq": lambda p: type(p.model).__name__ == "CrossQModel",
    "td3": lambda p: type(p.model).__name__ == "TD3Model",
    "dqn": lambda p: not p.model.q_net.dueling,
    "dqn-dueling-masked": lambda p: p.model.q_net.dueling and p.layout.has_mask,
    "qr_dqn-dueling-masked": lambda p: (type(p.model).__name__ == "QRDQNModel"
                                        and p.model.q_net.dueling and p.layout.has_mask),
    "iqn-dueling-masked": lambda p: (type(p.model).__name__ == "IQNModel"
                                     and p.model.q_net.dueling and p.layout.has_mask),
    "c51-dueling-masked": lambda p: (type(p.model).__name__ == "C51Model"
                                     and p.model.q_net.dueling and p.layout.has_mask),
    "dqn-noisy": lambda p: type(p.model.q_net.q).__name__ == "NoisyLinear",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """case -> (run directory, Policy), each trained once for the module."""
    root = tmp_path_factory.mktemp("export-runs")
    cache = {}

    def get(case):
        if case not in cache:
            run_dir = str(root / case)
            run = ddrl.train(run_dir=run_dir, **{**QUIET, **CASES[case]})
            assert run.exit_code == 0
            policy = ddrl.load(run_dir)
            assert KINDS[case](policy), f"{case}: not the kind of policy this case is for"
            cache[case] = run_dir, policy
        return cache[case]
    return get


# -- feeding the two runtimes -------------------------------------------------------------------
def stack(observations):
    """Observations as the env gives them (nested dicts/tuples) -> one batch of that shape."""
    first = observations[0]
    if isinstance(first, dict):
        return {key: stack([o[key] for o in observations]) for key in first}
    if isinstance(first, tuple):
        return tuple(stack([o[i] for o in observations]) for i in range(len(first)))
    return np.stack([np.asarray(o) for o in observations])


def feed(policy, batch):
    """The exported file's observation inputs for a batch: the leaves in layout order, as the
    env gives them (what the sidecar lists)."""
    if not policy.layout.structured:
        return [np.asarray(batch, dtype=policy.observation_space.dtype)]
    arrays = []
    for leaf in policy.layout.leaves.values():
        value = batch
        for key in leaf.keys:
            value = value[key]
        arrays.append(np.asarray(value, dtype=leaf.dtype))
    return arrays


class Runtime:
    """An exported file run as a user runs it: onnxruntime (one thread) or torch.export.load."""

    def __init__(self, path, fmt):
        self.fmt = fmt
        if fmt == "onnx":
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            self.session = onnxruntime.InferenceSession(path, options,
                                                        providers=["CPUExecutionProvider"])
            self.names = [i.name for i in self.session.get_inputs()]
        else:
            self.program = torch.export.load(path).module()

    def __call__(self, *arrays):
        """The outputs as a list of numpy arrays (action first, then the next state)."""
        if self.fmt == "onnx":
            return self.session.run(None, dict(zip(self.names, arrays)))
        with torch.no_grad():
            out = self.program(*(torch.as_tensor(np.asarray(a)) for a in arrays))
        return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def valid_random_action(space, obs, rng):
    """A uniform action among those the observation's mask allows (if any)."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    if isinstance(space, spaces.Discrete):
        allowed = np.flatnonzero(mask) if mask is not None else np.arange(space.n)
        return int(space.start + rng.choice(allowed))
    if isinstance(space, spaces.MultiDiscrete):
        parts, offset = [], 0
        for n in space.nvec:
            allowed = (np.flatnonzero(mask[offset:offset + n]) if mask is not None
                       else np.arange(n))
            parts.append(rng.choice(allowed))
            offset += n
        return np.array(parts) + space.start
    if isinstance(space, spaces.MultiBinary):
        return rng.integers(0, 2, space.shape).astype(space.dtype)
    return rng.uniform(space.low, space.high).astype(space.dtype)


def env_observations(policy, count, seed=0):
    """``count`` observations from the run's env, stepped with random valid actions."""
    env = policy.make_env(seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    seen = []
    while len(seen) < count:
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(
            valid_random_action(policy.action_space, obs, rng))
        if terminated or truncated:
            obs, _ = env.reset()
    getattr(env, "close", lambda: None)()
    return seen


def assert_same_actions(exported, reference, what):
    assert exported.shape == reference.shape and exported.dtype == reference.dtype, what
    if np.issubdtype(reference.dtype, np.floating):
        np.testing.assert_allclose(exported, reference, rtol=0, atol=1e-5, err_msg=what)
    else:
        np.testing.assert_array_equal(exported, reference, err_msg=what)


# -- the tests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", [c for c in CASES if c not in RECURRENT])
def test_an_exported_policy_acts_as_policy_act(trained, tmp_path, case, fmt):
    _, policy = trained(case)
    out = str(tmp_path / f"policy.{fmt}")
    export_policy(policy, fmt, out)
    runtime = Runtime(out, fmt)
    observations = env_observations(policy, OBSERVATIONS)
    batch = stack(observations)
    reference = policy.act(batch)
    (actions,) = runtime(*feed(policy, batch))
    assert_same_actions(actions, reference, f"{case} {fmt}: a batch of {OBSERVATIONS}")
    if isinstance(policy.action_space, spaces.Box):
        assert np.all(actions >= policy.action_space.low)
        assert np.all(actions <= policy.action_space.high)
    for obs in observations[:5]:  # batch 1: the batch dimension is dynamic down to one
        (one,) = runtime(*feed(policy, stack([obs])))
        assert_same_actions(one[0], policy.act(obs), f"{case} {fmt}: one observation")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", RECURRENT)
def test_an_exported_recurrent_policy_threads_its_state_as_policy_act(trained, tmp_path, case,
                                                                      fmt):
    _, policy = trained(case)
    out = str(tmp_path / f"policy.{fmt}")
    info = export_policy(policy, fmt, out)
    names = [spec["name"] for spec in info["state"]]
    assert names == list(policy.initial_state(1))
    runtime = Runtime(out, fmt)
    env = policy.make_env(seed=5)
    obs, _ = env.reset(seed=5)
    state, exported_state, start = None, policy.initial_state(1), True
    masked_seen = 0
    for step in range(RECURRENT_STEPS):
        if state is None:
            action, state = policy.act(obs)
        else:
            action, state = policy.act(obs, state, episode_starts=[start])
        outputs = runtime(*feed(policy, stack([obs])), *exported_state.values(),
                          np.array([start]))
        assert_same_actions(outputs[0][0], action, f"{case} {fmt}: step {step}")
        exported_state = dict(zip(names, outputs[1:]))
        for name in names:
            np.testing.assert_allclose(exported_state[name], state[name], rtol=0, atol=1e-5,
                                       err_msg=f"{case} {fmt}: state {name}, step {step}")
        if policy.layout.has_mask:
            assert obs["action_mask"][int(outputs[0][0])] == 1
            masked_seen += int(np.sum(obs["action_mask"] == 0) > 0)
        obs, _, terminated, truncated, _ = env.step(action)
        start = terminated or truncated
        if start:
            obs, _ = env.reset()
    assert masked_seen > 0 or not policy.layout.has_mask
    # a batch: 1,000 observations from random states, a random third of the rows starting
    rng = np.random.default_rng(1)
    batch = stack(env_observations(policy, OBSERVATIONS))
    states = {name: rng.normal(size=(OBSERVATIONS, *value.shape[1:])).astype(np.float32)
              for name, value in policy.initial_state(1).items()}
    starts = rng.random(OBSERVATIONS) < 1 / 3
    reference, reference_state = policy.act(batch, states, episode_starts=starts)
    outputs = runtime(*feed(policy, batch), *states.values(), starts)
    assert_same_actions(outputs[0], reference, f"{case} {fmt}: a batch")
    for name, value in zip(names, outputs[1:]):
        np.testing.assert_allclose(value, reference_state[name], rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_actions_beyond_a_box_are_clipped_and_starts_added_as_policy_act_does(trained, tmp_path,
                                                                             fmt):
    """What the env gets, through the paths a young policy seldom takes: its actions past the
    Box's bounds (the actor's head scaled up), and a Discrete space that starts at -2."""
    run_dir, _ = trained("ppo-gaussian-dict-normalized")
    policy = ddrl.load(run_dir)
    with torch.no_grad():
        policy.model.actor[-1].weight.mul_(1000.0)
    batch = stack(env_observations(policy, OBSERVATIONS))
    reference = policy.act(batch)
    assert np.mean(np.abs(reference) == 1.0) > 0.3  # many actions at the bounds
    export_policy(policy, fmt, str(tmp_path / f"box.{fmt}"))
    (actions,) = Runtime(str(tmp_path / f"box.{fmt}"), fmt)(*feed(policy, batch))
    assert_same_actions(actions, reference, f"clipped, {fmt}")

    run_dir, _ = trained("ppo-dict-masked")
    policy = ddrl.load(run_dir)
    policy.action_space = spaces.Discrete(8, start=-2)  # what the env takes; the model's: 0..7
    batch = stack(env_observations(policy, OBSERVATIONS))
    reference = policy.act(batch)
    assert reference.min() < 0
    export_policy(policy, fmt, str(tmp_path / f"start.{fmt}"))
    (actions,) = Runtime(str(tmp_path / f"start.{fmt}"), fmt)(*feed(policy, batch))
    assert_same_actions(actions, reference, f"a start of -2, {fmt}")


def test_the_sidecar_says_what_the_file_takes_and_where_it_came_from(trained, tmp_path):
    run_dir, policy = trained("ppo-lstm")
    out = str(tmp_path / "memory.onnx")
    export_policy(policy, "onnx", out)
    with open(out + ".json") as f:
        info = json.load(f)
    session = Runtime(out, "onnx").session
    assert info["format"] == "onnx" and info["file"] == "memory.onnx" and info["deterministic"]
    assert [(i["name"], i["shape"], i["dtype"]) for i in info["inputs"]] == [
        ("action_mask", ["batch", 5], "int8"), ("cue", ["batch", 4], "float32"),
        ("phase", ["batch", 2], "float32"),
        *[(f"state/{n}", ["batch", 64], "float32") for n in ("pi/h", "pi/c", "vf/h", "vf/c")],
        ("episode_starts", ["batch"], "bool")]
    assert [i["role"] for i in info["inputs"]][:4] == ["action_mask", "observation",
                                                       "observation", "state"]
    assert [(i.name, i.shape) for i in session.get_inputs()] == [
        (i["name"], i["shape"]) for i in info["inputs"]]
    assert [(o["name"], o["shape"], o["dtype"]) for o in info["outputs"]] == [
        ("action", ["batch"], "int64"),
        *[(f"next_state/{n}", ["batch", 64], "float32") for n in ("pi/h", "pi/c", "vf/h",
                                                                  "vf/c")]]
    assert [o.name for o in session.get_outputs()] == [o["name"] for o in info["outputs"]]
    assert info["recurrent"] and [s["name"] for s in info["state"]] == ["pi/h", "pi/c", "vf/h",
                                                                        "vf/c"]
    assert space_from_json(info["observation_space"]) == policy.observation_space
    assert space_from_json(info["action_space"]) == policy.action_space
    assert info["checkpoint"] == os.path.abspath(policy.path)
    assert info["checkpoint"].startswith(os.path.join(os.path.abspath(run_dir), "checkpoints"))
    assert info["checkpoint_meta"]["env_steps"] == policy.meta["env_steps"]
    assert info["checkpoint_meta"]["best_eval_return"] == policy.meta["best_eval_return"]
    assert info["config"]["recurrent"] == "lstm" and info["config"]["model_name"] == "ppo"
    assert info["normalize_obs"] is False and info["opset"] >= 18
    # the normalizer's flag and clip, from a run that normalized
    _, normalized = trained("ppo-discrete-normalized")
    info = export_policy(normalized, "pt2", str(tmp_path / "cartpole.pt2"))
    assert info["normalize_obs"] and info["obs_clip"] == normalized.args.obs_clip
    assert not info["recurrent"] and info["state"] == [] and "opset" not in info
    assert info["inputs"] == [{"name": "obs", "role": "observation", "shape": ["batch", 4],
                               "dtype": "float32"}]


PLUGIN = '''
"""Models for tests/test_export.py: plugins the exporter must refuse, each in one paragraph."""
from torch import nn

from models import register_model
from models.base import BaseModel
from models.ppo import PPOModel


@register_model("export_test_no_method")
class NoExportModule(PPOModel):
    """Written against the base contract only: no export_module of its own."""
    export_module = BaseModel.export_module


class BranchOnValues(nn.Module):
    def __init__(self, actor):
        super().__init__()
        self.actor = actor

    def forward(self, obs):
        out = self.actor(obs)
        if out.sum() > 0:  # a Python branch on a tensor's value: torch.export cannot trace it
            return out.argmax(-1)
        return out.argmin(-1)


@register_model("export_test_untraceable")
class Untraceable(PPOModel):
    def export_module(self):
        return BranchOnValues(self.actor)


@register_model("export_test_own_features")
class OwnFeatures(PPOModel):
    """Changes PPO's acting path in a method, which PPO's export module would not follow."""
    def features(self, obs):
        return super().features(obs) * 2.0
'''


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory):
    user_dir = tmp_path_factory.mktemp("export-plugins")
    (user_dir / "export_plugins.py").write_text(PLUGIN)
    runs = {}
    for name in ("export_test_no_method", "export_test_untraceable", "export_test_own_features"):
        run_dir = str(user_dir.parent / f"run-{name}")
        ddrl.train(user_dir=str(user_dir), model_name=name, gym_id="CartPole-v1",
                   total_steps=64, run_dir=run_dir, **{**QUIET, **PPO_SMALL})
        runs[name] = run_dir
    return runs


@pytest.mark.parametrize("name, says", [
    ("export_test_no_method", ["model NoExportModule cannot be exported",
                               "Implement export_module(self) in NoExportModule"]),
    ("export_test_untraceable", ["model Untraceable", "could not be traced",
                                 "Change Untraceable.export_module"]),
    ("export_test_own_features", ["model OwnFeatures overrides PPOModel.features()",
                                  "Give OwnFeatures an export_module of its own"]),
])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plugin_that_cannot_be_exported_gets_one_paragraph(plugin_runs, tmp_path, name, says,
                                                             fmt):
    policy = ddrl.load(plugin_runs[name])
    out = tmp_path / f"policy.{fmt}"
    with pytest.raises(ConfigError) as error:
        export_policy(policy, fmt, str(out))
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"--export --format {fmt}: ")
    for part in says:
        assert part in text, text
    if name == "export_test_untraceable":  # the first line of torch's own error, named
        assert "data-dependent" in text.lower() or "guard" in text.lower(), text
    assert not out.exists() and not (tmp_path / f"policy.{fmt}.json").exists()


def test_the_command_line_writes_the_file_and_its_sidecar(trained, tmp_path):
    run_dir, policy = trained("ppo-discrete-normalized")
    out = tmp_path / "exported" / "cartpole.onnx"
    proc = subprocess.run([sys.executable, "main.py", "--export", run_dir, "--format", "onnx",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.is_file() and (tmp_path / "exported" / "cartpole.onnx.json").is_file()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ddrl: wrote")]
    assert len(lines) == 1 and str(out) in lines[0] and "obs float32[batch,4]" in lines[0]
    observations = np.random.default_rng(2).normal(size=(64, 4)).astype(np.float32)
    (actions,) = Runtime(str(out), "onnx")(observations)
    np.testing.assert_array_equal(actions, policy.act(observations))


def test_the_latency_benchmark_measures_every_runtime(trained, tmp_path):
    """benchmarks/export_latency.py on a budget of a few calls (no cold starts): every runtime
    at both batch sizes, the same actions as Policy.act, the table and the JSON."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import export_latency
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))
    out = tmp_path / "latency.json"
    record = export_latency.main([
        "--cartpole_run", trained("ppo-discrete-normalized")[0],
        "--atari_run", trained("ppo-nature-cnn")[0], "--calls", "20", "--warmup", "1",
        "--cold_starts", "0", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["table"] == record["table"] and saved["threads"]["onnxruntime_intra_op"] == 1
    assert set(saved["cpu"]["flags"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_tile"}
    for result in saved["results"]:
        measured = {(row["runtime"], row["batch"]) for row in result["latency"]}
        assert measured == {(r, b) for r in export_latency.RUNTIMES for b in (1, 256)}
        for row in result["latency"]:
            assert 0 < row["median_us"] <= row["p90_us"]
            assert row["same_actions_as_policy_act"] == 1.0
    assert "| Nature CNN 4x84x84 | 256 |" in saved["table"]
