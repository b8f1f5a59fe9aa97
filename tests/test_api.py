"""The Python API (ddrl.train, ddrl.load, Policy.act): keywords checked as the command line
checks flags, policies rebuilt from a checkpoint alone, acting as the test worker acts (the
normalizer applied, masks obeyed, actions in the env's bounds, recurrent state threaded), and
examples/python_api.py run as a user runs it."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ddrl
from options.keywords import argv_for, flags_to_argv
from core.errors import ConfigError
from options.options import parse_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUIET = dict(num_workers=0, seed=0, quiet=True, tensorboard=False)


@pytest.mark.unit
def test_keywords_become_the_flags_their_parser_takes():
    # switches as their actions take them; lists comma-joined; None left at the default
    argv = argv_for(dict(model_name="dqn", gym_id="CartPole-v1", dueling=True, double_q=False,
                         quiet=True, tensorboard=False, dqn_hidden_sizes=[32, 32],
                         total_steps=1000, run_dir=None))
    assert argv == ["--model_name", "dqn", "--gym_id", "CartPole-v1", "--dueling",
                    "--no-double_q", "--quiet", "--no-tensorboard", "--dqn_hidden_sizes",
                    "32,32", "--total_steps", "1000"]
    args = parse_args(argv)
    assert args.dueling and not args.double_q and args.dqn_hidden_sizes == [32, 32]
    # a name the parser does not know goes through as typed, for the parser to refuse
    assert flags_to_argv({"bogus": 3, "quiet": True}) == ["--bogus", "3", "--quiet", "True"]


@pytest.mark.contract
def test_an_unknown_keyword_is_named_as_the_keyword_it_is():
    """Not as the flag it would be (issue 46: num_wrokers=0 was reported as --num_wrokers 0)."""
    with pytest.raises(ConfigError) as keywords:
        ddrl.train(gym_id="CartPole-v1", bogus_flag=3)
    assert str(keywords.value).startswith("unknown keyword: bogus_flag.")


@pytest.mark.contract
@pytest.mark.parametrize("flags, argv", [
    (dict(num_workers=-1), ["--num_workers", "-1"]),
    (dict(model_name="no_such_model"), ["--model_name", "no_such_model"]),
    (dict(model_name="dqn", exploration="sideways"), ["--model_name", "dqn", "--exploration",
                                                      "sideways"]),
])
def test_a_bad_keyword_is_the_command_lines_paragraph(flags, argv):
    with pytest.raises(ConfigError) as command_line:
        parse_args(argv)
    with pytest.raises(ConfigError) as keywords:
        ddrl.train(**flags)
    assert str(keywords.value) == str(command_line.value)


@pytest.mark.contract
def test_commands_of_their_own_are_refused_and_bad_paths_named(tmp_path):
    with pytest.raises(ConfigError, match="--tune is a command of its own"):
        ddrl.train(tune="configs/sweeps/ppo-cartpole.yaml")
    with pytest.raises(ConfigError, match="no such file or directory"):
        ddrl.load(tmp_path / "nothing-here")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable ddrl checkpoint"):
        ddrl.load(junk)


@pytest.fixture(scope="module")
def normalized_run(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("api") / "cartpole")
    return ddrl.train(gym_id="CartPole-v1", normalize_obs=True, total_steps=2048,
                      eval_interval=1024, run_dir=run_dir, **QUIET)


@pytest.mark.e2e
def test_a_run_comes_back_with_its_summary_metrics_and_policy(normalized_run, monkeypatch):
    from ddrl.policy import Policy
    from core.learning.normalizer import normalize
    run = normalized_run
    assert run.exit_code == 0 and run.summary["stopped_because"] == "total_steps"
    assert run.metrics and run.metrics[-1]["env_steps"] == run.summary["env_steps"]
    assert "--normalize_obs" in run.argv
    # the checkpoint alone rebuilds the policy: its spaces come from the metadata, not an env
    monkeypatch.setattr(Policy, "make_env", lambda *a, **k: pytest.fail("made an env"))
    policy = run.policy()
    monkeypatch.undo()
    assert policy.path.endswith(os.path.join("checkpoints", "best.pt"))
    assert policy.observation_space.shape == (4,) and policy.action_space.n == 2
    assert policy.obs_statistics is not None and not policy.recurrent
    observations = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    batch = policy.act(observations)
    assert batch.shape == (64,) and set(np.unique(batch)) <= {0, 1}
    # one observation at a time: the batch's rows; the network sees normalized observations
    assert [int(policy.act(o)) for o in observations] == batch.tolist()
    seen = normalize(observations, policy.obs_statistics, policy.args.obs_clip)
    with torch.no_grad():
        expected, _ = policy.model.choose_actions(seen, deterministic=True)
    np.testing.assert_array_equal(batch, expected)
    assert len(policy.play(episodes=2)) == 2
    # Policy.export: the file acts as the policy does (tests/test_export.py covers every model)
    import onnxruntime
    out = os.path.join(run.run_dir, "policy.onnx")
    sidecar = policy.export(out)
    assert os.path.exists(out) and os.path.exists(out + ".json") and sidecar["format"] == "onnx"
    session = onnxruntime.InferenceSession(out)
    exported = session.run(None, {session.get_inputs()[0].name: observations})[0]
    np.testing.assert_array_equal(exported, batch)
    last = run.policy("last")
    assert last.path.endswith(os.path.join("checkpoints", "last.pt"))


@pytest.mark.e2e
def test_a_recurrent_policy_threads_its_state_and_obeys_the_mask(tmp_path):
    run = ddrl.train(gym_id="ddrl/MemoryChoice-v0", total_steps=512, eval_interval=256,
                     run_dir=str(tmp_path / "lstm"), **QUIET)
    policy = run.policy()
    assert policy.recurrent
    env = policy.make_env(seed=3)
    obs, _ = env.reset(seed=3)
    state, steps, changed = None, 0, False
    done = False
    while not done:
        action, new_state = policy.act(obs, state)
        assert obs["action_mask"][action] == 1                  # masked actions never chosen
        if state is not None:
            changed |= any(not np.array_equal(new_state[k], state[k]) for k in state)
        state = new_state
        obs, _, terminated, truncated, _ = env.step(action)
        done, steps = terminated or truncated, steps + 1
    assert steps > 1 and changed
    # a batch of 3 rows; episode_starts resets row 1's state to the initial one
    batch = {key: np.stack([value] * 3) for key, value in obs.items()}
    actions, three = policy.act(batch)
    assert actions.shape == (3,) and all(v.shape[0] == 3 for v in three.values())
    _, again = policy.act(batch, three, episode_starts=[False, True, False])
    _, fresh = policy.act(batch)
    for key in again:
        np.testing.assert_allclose(again[key][1], fresh[key][1], atol=1e-6)


@pytest.mark.e2e
def test_continuous_actions_stay_in_the_envs_bounds(tmp_path):
    run = ddrl.train(gym_id="Pendulum-v1", model_name="sac", total_steps=600,
                     learning_starts=200, start_steps=200, eval_interval=300,
                     run_dir=str(tmp_path / "sac"), **QUIET)
    policy = run.policy()
    observations = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32) * 5
    actions = policy.act(observations, deterministic=False)
    assert actions.shape == (32, 1) and np.all(np.abs(actions) <= 2.0)
    assert policy.act(observations[0]).shape == (1,)


@pytest.mark.e2e
def test_the_python_api_example_trains_loads_and_plays_cartpole(tmp_path):
    """examples/python_api.py: PPO on CartPole-v1 in one process to an evaluation of 495,
    then 10 episodes played with policy.act on seeds the run never evaluated on."""
    proc = subprocess.run([sys.executable, "examples/python_api.py", "--run_dir",
                           str(tmp_path / "run")], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("played 10 episodes"))
    mean = float(line.split("mean return ")[1].split()[0])
    assert mean >= 475, proc.stdout


@pytest.mark.e2e
def test_a_run_restored_from_python_takes_its_plugins_switches(tmp_path):
    """ddrl.train(restore=...): the keywords are converted by the restored run's parser (a DQN
    switch such as double_q is known only to it)."""
    run_dir = str(tmp_path / "dqn")
    first = ddrl.train(gym_id="CartPole-v1", model_name="dqn", total_steps=600,
                       eval_interval=300, eval_episodes=1, learning_starts=100,
                       run_dir=run_dir, **QUIET)
    assert first.summary["env_steps"] >= 600
    more = ddrl.train(restore=run_dir, total_steps=1200, double_q=False, quiet=True)
    assert "--no-double_q" in more.argv and more.summary["env_steps"] >= 1200
    assert more.run_dir == run_dir


PACKAGE_ENV = '''
"""An env of the user's own package: its helper in a sibling module, as in a code base."""
from envs import register_env
from envs.gym_env import GymEnv

from {package}.helpers import noise_scale


@register_env("{name}")
class PackageCartPole(GymEnv):
    """CartPole registered by a package of the user's (not built in, not a --user_dir)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs * (1.0 + noise_scale()), reward, terminated, truncated, info
'''


def user_package(root, package, name):
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "helpers.py").write_text("def noise_scale():\n    return 0.0\n")
    (root / package / "env.py").write_text(PACKAGE_ENV.format(package=package, name=name))


@pytest.mark.contract
def test_a_plugin_the_users_code_registered_reaches_a_process_that_cannot_import_it(tmp_path):
    """ddrl.train from a script whose package registers an env: a Ray worker looked the name
    up in its own registry (built-ins and the --user_dir only) and died on 'unknown env', while
    the run went on in the driver's stand-in alone. The spec now carries the class, its package
    pickled by value: a fresh process without the package on its path builds the env."""
    import importlib
    from ray import cloudpickle
    from options.options import run_spec
    user_package(tmp_path / "src", "acme_sim_pkg", "acme_cartpole")
    sys.path.insert(0, str(tmp_path / "src"))
    try:
        importlib.import_module("acme_sim_pkg.env")
        spec = run_spec(parse_args(["--config", "none", "--env_name", "acme_cartpole"]))
    finally:
        sys.path.remove(str(tmp_path / "src"))
    assert [(kind, name) for kind, name, _ in spec.own_plugins] == [("env", "acme_cartpole")]
    from core.registry import registry_of
    assert registry_of("env").entries["acme_cartpole"].source == "registered by acme_sim_pkg.env"
    (tmp_path / "spec.pkl").write_bytes(cloudpickle.dumps(spec))
    check = ("import pickle, sys\n"
             "from core.plugins import load_plugins, make_env\n"
             "spec = pickle.load(open(sys.argv[1], 'rb'))\n"
             "env = make_env(load_plugins(spec), spec.env, seed=0)\n"
             "print(type(env).__name__, env.reset(seed=0)[0].shape)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", check, str(tmp_path / "spec.pkl")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[0] == "PackageCartPole", proc.stdout


@pytest.mark.e2e
def test_a_script_trains_a_plugin_of_its_own_package_on_ray_workers(tmp_path):
    """The same from a user's script: 2 Ray workers, --no-elastic_start (no stand-in), every
    metrics row from both."""
    user_package(tmp_path, "acme_sim_pkg2", "acme_cartpole2")
    (tmp_path / "train.py").write_text(
        "import ddrl\nimport acme_sim_pkg2.env\n"
        "run = ddrl.train(env_name='acme_cartpole2', gym_id='CartPole-v1', num_workers=2, "
        "elastic_start=False, total_steps=2048, eval_interval=1024, eval_episodes=2, "
        "seed=0, quiet=True, tensorboard=False, run_dir='run')\n"
        "print(sorted(d['role'] for d in run.summary['devices']))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unknown env" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['rollout worker 0', 'rollout worker 1']"
    import csv
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["workers"] == "2" and r["worker_restarts"] == "0" for r in rows)
    # a later process that has not imported the package is told which module registered it;
    # one that imports it loads the policy
    ddrl_command = os.path.join(os.path.dirname(sys.executable), "ddrl")
    proc = subprocess.run([ddrl_command, "evaluate", "run", "--eval_episodes", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "in module acme_sim_pkg2.env: import acme_sim_pkg2.env " \
        "before ddrl.load" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", "import acme_sim_pkg2.env, ddrl; "
                           "print(ddrl.load('run').config['env_name'])"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "acme_cartpole2", proc.stderr
