"""``ddrl check`` (ddrl/check.py): the built-in envs and the examples' plugins pass; each of ten
broken envs is named with what is wrong."""
import os
import subprocess
import sys

import pytest

from ddrl.check import check_env

pytestmark = pytest.mark.contract

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKEN = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from envs import register_env


class Base:
    """CartPole, as a plain plugin; each subclass breaks one thing."""

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    def reset(self, seed=None):
        return self.env.reset(seed=seed)

    def step(self, action):
        return self.env.step(action)


@register_env("fine")
class Fine(Base):
    pass


@register_env("old_api")
class OldApi(Base):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated or truncated, info


@register_env("nan_obs")
class NanObs(Base):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return np.full_like(obs, np.nan), reward, terminated, truncated, info


@register_env("wrong_dtype")
class WrongDtype(Base):
    def reset(self, seed=None):
        obs, info = self.env.reset(seed=seed)
        return obs.astype(np.float64), info


@register_env("wrong_shape")
class WrongShape(Base):
    def reset(self, seed=None):
        obs, info = self.env.reset(seed=seed)
        return obs[:3], info


@register_env("out_of_bounds")
class OutOfBounds(Base):
    def __init__(self, args, seed=None):
        super().__init__(args, seed)
        self.observation_space = spaces.Box(-0.01, 0.01, (4,), np.float32)


@register_env("unseeded")
class Unseeded(Base):
    def reset(self, seed=None):
        return self.env.reset()


@register_env("obs_only_reset")
class ObsOnlyReset(Base):
    def reset(self, seed=None):
        return self.env.reset(seed=seed)[0]


@register_env("bad_reward")
class BadReward(Base):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, None, terminated, truncated, info


@register_env("info_list")
class InfoList(Base):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, []


@register_env("undeclared_batch")
class UndeclaredBatch(gym.vector.SyncVectorEnv):
    def __init__(self, args, seed=None):
        super().__init__([lambda: gym.make("CartPole-v1") for _ in range(2)])
'''

#: broken env -> words its problem must hold
EXPECTED = {
    "old_api": ["step() returned a 4-tuple", "split done into terminated and truncated"],
    "nan_obs": ["step() at step 0", "NaN or inf"],
    "wrong_dtype": ["reset()", "dtype float64, the space's float32"],
    "wrong_shape": ["reset()", "shape (3,), the space's (4,)"],
    "out_of_bounds": ["outside observation_space", "out of bounds"],
    "unseeded": ["reset(seed=123) twice gave different first observations"],
    "obs_only_reset": ["reset() returned a ndarray", "(observation, info dict)"],
    "bad_reward": ["the reward None", "a finite real number"],
    "info_list": ["info as list", "a dict is expected"],
    "undeclared_batch": ["a batch of 2 envs", "num_envs in __init__"],
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    folder = tmp_path_factory.mktemp("broken") / "broken_envs"
    folder.mkdir()
    (folder / "envs.py").write_text(BROKEN)
    return str(folder)


@pytest.mark.parametrize("flags", [
    ["--gym_id", "CartPole-v1"],
    ["--gym_id", "Pendulum-v1"],
    ["--gym_id", "ddrl/MaskedChoice-v0"],
    ["--gym_id", "ddrl/DictCartPole-v0"],
    ["--gym_id", "CartPole-v1", "--vectorize", "sync"],
    ["--gym_id", "ddrl/MaskedChoiceInfo-v0"],
    ["--env_name", "custom_env"],
    ["--env_name", "pettingzoo_env"],
    # (its default opponent is the learning policy itself, which only a run hands it)
    ["--env_name", "pettingzoo_aec", "--opponent", "random"],
    ["--user_dir", os.path.join(REPO, "examples", "user_plugins"), "--env_name",
     "noisy_cartpole"],
    ["--user_dir", os.path.join(REPO, "examples", "batched_sim"), "--env_name", "point_mass"],
    ["--env_name", "envpool_env", "--envpool_id", "CartPole-v1"],
    ["--env_name", "envpool_env", "--envpool_id", "Breakout-v5"],
], ids=["cartpole", "pendulum", "masked-dict", "dict", "gym_env-sync-batch", "info-mask",
        "custom_env", "pettingzoo_env", "pettingzoo_aec", "user-example", "batched-example",
        "envpool-cartpole", "envpool-breakout"])
def test_built_in_envs_and_the_example_plugin_pass(flags):
    assert check_env(flags, steps=200) == []


def test_a_fine_env_passes(broken):
    assert check_env(["--user_dir", broken, "--env_name", "fine"]) == []


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_broken_env_is_named_with_what_is_wrong(broken, name):
    problems = check_env(["--user_dir", broken, "--env_name", name])
    assert problems, f"{name}: no problem found"
    text = " | ".join(problems)
    assert all(p.startswith(f"env plugin {name}: ") for p in problems), text
    for words in EXPECTED[name]:
        assert words in text, (name, words, text)


@pytest.mark.e2e
def test_the_command_exits_0_on_a_fine_env_and_2_with_the_list_on_a_broken_one(broken):
    ddrl = os.path.join(os.path.dirname(sys.executable), "ddrl")
    fine = subprocess.run([ddrl, "check", "--gym_id", "CartPole-v1", "--steps", "50"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert fine.returncode == 0, fine.stderr[-2000:]
    assert "the env passes (50 steps" in fine.stdout
    bad = subprocess.run([ddrl, "check", "--user_dir", broken, "--env_name", "wrong_shape"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "problem" in bad.stderr and "shape (3,), the space's (4,)" in bad.stderr


#: broken env -> what the start of a run says of it (the same words as ddrl check's)
AT_START = {
    "old_api": "step() returned a 4-tuple",
    "nan_obs": "step() at step 0 returned an observation holding NaN or inf",
    "wrong_shape": "shape (3,), the space's (4,)",
    "obs_only_reset": "reset() returned a ndarray",
    "bad_reward": "step() at step 0 returned the reward None",
    "info_list": "step() returned info as list",
}


@pytest.mark.e2e
def test_a_run_tries_its_env_first_stops_on_what_would_break_it_and_warns_on_the_rest(
        broken, tmp_path):
    """The start of every run (ddrl/check.py check_at_start on the probe env): each fault that
    would break the run is one paragraph, exit 2, no traceback, before any worker starts, and
    the run directory takes the next run; a dtype or bounds mismatch is a warning line."""
    import ddrl
    from core.errors import EnvContractError
    for name, words in AT_START.items():
        with pytest.raises(EnvContractError) as raised:
            ddrl.train(user_dir=broken, env_name=name, num_workers=0, total_steps=256,
                       run_dir=str(tmp_path / name), quiet=True)
        message = str(raised.value)
        assert message.startswith(f"env plugin {name} does not keep gymnasium's contract")
        assert words in message and message.count("env plugin") == 1, message
        assert f"ddrl check --env_name {name}" in message
    run_dir = str(tmp_path / "cli")
    proc = subprocess.run([sys.executable, "main.py", "--user_dir", broken, "--env_name",
                           "wrong_shape", "--num_workers", "2", "--run_dir", run_dir],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "ddrl: error: env plugin wrong_shape does not keep")
    warned = subprocess.run([sys.executable, "main.py", "--user_dir", broken, "--env_name",
                             "wrong_dtype", "--num_workers", "0", "--total_steps", "256",
                             "--run_dir", run_dir, "--quiet"],  # the failed start's directory
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert warned.returncode == 0, warned.stderr[-2000:]
    lines = [line for line in warned.stderr.splitlines() if line.startswith("ddrl: warning")]
    assert len(lines) == 1 and "dtype float64, the space's float32" in lines[0], lines
