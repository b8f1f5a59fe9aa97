"""The registry contract: names, duplicates, base classes, errors that help, --user_dir."""
import argparse
import os
import subprocess
import sys

import pytest

from agents import AGENT_REGISTRY
from agents.base import BaseAgent
from core.registry import Registry, import_user_dir, unwrap_actor_class
from core.errors import ConfigError
from envs import ENV_REGISTRY
from models import MODEL_REGISTRY
from models.base import BaseModel

pytestmark = pytest.mark.contract


class Plain:
    pass


class OtherPlain:
    pass


def test_registering_the_same_class_twice_under_one_name_is_fine():
    registry = Registry("thing")
    registry.register("a")(Plain)
    registry.register("a")(Plain)
    assert registry.get("a") is Plain and registry.names() == ["a"]


def test_a_different_class_under_a_taken_name_raises():
    registry = Registry("thing")
    registry.register("a")(Plain)
    with pytest.raises(ConfigError, match="already taken"):
        registry.register("a")(OtherPlain)
    assert registry.get("a") is Plain


@pytest.mark.parametrize("name", ["", "1abc", "has space", "dot.ted", "a/b", None, 3])
def test_bad_names_raise(name):
    with pytest.raises(ConfigError):
        Registry("thing").register(name)


@pytest.mark.parametrize("name", ["a", "_a", "my-env", "Env2"])
def test_good_names_register(name):
    registry = Registry("thing")
    registry.register(name)(Plain)
    assert name in registry


@pytest.mark.parametrize("registry, base", [(MODEL_REGISTRY, BaseModel),
                                            (AGENT_REGISTRY, BaseAgent)])
def test_models_and_agents_must_subclass_their_base(registry, base):
    with pytest.raises(ConfigError, match=base.__qualname__):
        registry.register("not_a_subclass_xyz")(Plain)
    assert "not_a_subclass_xyz" not in registry


def test_an_env_class_without_reset_and_step_is_refused():
    with pytest.raises(ConfigError, match="reset, step"):
        ENV_REGISTRY.register("no_methods_xyz")(Plain)
    assert "no_methods_xyz" not in ENV_REGISTRY


def test_unknown_name_lists_registered_names_and_suggests_the_closest():
    with pytest.raises(ConfigError) as info:
        ENV_REGISTRY.get("gym_envv")
    message = str(info.value)
    assert "Did you mean 'gym_env'?" in message
    for name in ("gym_env", "custom_env"):
        assert name in message
    assert "--env_name" in message


def test_unknown_name_without_a_close_one_suggests_nothing():
    with pytest.raises(ConfigError) as info:
        MODEL_REGISTRY.get("zzzzzzzz")
    assert "Did you mean" not in str(info.value) and "ppo" in str(info.value)


def test_ray_remote_env_unwraps_to_a_plain_class_runnable_in_process():
    """``@ray.remote`` on an env is optional (README): a decorated class registers, and the
    registry and the in-process path see the plain class behind it. (The built-in envs are
    plain classes, so that a run without Ray workers never imports Ray.)"""
    import ray
    from envs.gym_env import GymEnv
    assert not hasattr(GymEnv, "__ray_metadata__")
    registry = Registry("env")
    registered = registry.register("remote_gym_env")(ray.remote(GymEnv))
    assert hasattr(registered, "__ray_metadata__")
    cls = unwrap_actor_class(registry.get("remote_gym_env"))
    assert issubclass(cls, GymEnv) and not hasattr(cls, "__ray_metadata__")
    env = cls(argparse.Namespace(gym_id="CartPole-v1", max_episode_steps=None, render_mode=None,
                                 gym_kwargs=(),
                                 evaluation=False, drop_keys=(), action_mask_key="action_mask",
                                 hide_obs=(), text_keys=(), max_words=16),
              seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)
    assert len(env.step(0)) == 5
    env.close()


def test_unwrap_leaves_a_plain_class_alone():
    assert unwrap_actor_class(Plain) is Plain


# -- --user_dir -----------------------------------------------------------------------------------
PLUGIN = '''
import os
from envs import register_env

with open(os.path.join(os.path.dirname(__file__), "imports.log"), "a") as f:
    f.write("imported\\n")

@register_env("{name}")
class UserEnv:
    def reset(self, seed=None, options=None):
        return 0, {{}}

    def step(self, action):
        return 0, 0.0, True, False, {{}}
'''


@pytest.fixture
def registered_names():
    """Names a test registers into the global registries, removed afterwards."""
    names = []
    yield names
    for name in names:
        ENV_REGISTRY.entries.pop(name, None)


def test_import_user_dir_twice_registers_once(tmp_path, registered_names):
    name = f"user_env_{os.getpid()}_twice"
    registered_names.append(name)
    (tmp_path / "my_env.py").write_text(PLUGIN.format(name=name))
    import_user_dir(str(tmp_path))
    import_user_dir(str(tmp_path))
    assert (tmp_path / "imports.log").read_text() == "imported\n"
    assert name in ENV_REGISTRY
    assert ENV_REGISTRY.entries[name].source == str(tmp_path)


def test_a_user_dir_module_imported_again_under_its_own_name_is_the_same_plugin(
        tmp_path, registered_names, monkeypatch):
    """After --user_dir (or ddrl.load) imported a plugin file, the user's own `import my_env`
    runs it again as another module: the same class in the same file, so its name is not
    "already taken" (issue 46); the entry is the newer class object, still from the user dir.
    A different class under the name is still refused."""
    import importlib
    name = f"user_env_{os.getpid()}_again"
    registered_names.append(name)
    (tmp_path / "my_env_again.py").write_text(PLUGIN.format(name=name))
    import_user_dir(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("my_env_again")
    try:
        assert ENV_REGISTRY.get(name) is module.UserEnv
        assert ENV_REGISTRY.entries[name].source == str(tmp_path)
        other = type("UserEnv", (), {"reset": lambda self: None, "step": lambda self, a: None})
        with pytest.raises(ConfigError, match="already taken"):
            ENV_REGISTRY.register(name)(other)
    finally:
        sys.modules.pop("my_env_again", None)


def test_import_user_dir_reads_envs_subfolder(tmp_path, registered_names):
    name = f"user_env_{os.getpid()}_sub"
    registered_names.append(name)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "sub_env.py").write_text(PLUGIN.format(name=name))
    import_user_dir(str(tmp_path))
    assert name in ENV_REGISTRY


def test_user_dir_file_that_fails_to_import_raises_config_error_naming_the_file(tmp_path):
    bad = tmp_path / "broken_plugin.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError) as info:
        import_user_dir(str(tmp_path))
    assert str(bad) in str(info.value) and "boom" in str(info.value)
    # not half-imported: the same error again, not a silent skip
    with pytest.raises(ConfigError, match="broken_plugin"):
        import_user_dir(str(tmp_path))


def test_user_dir_that_is_not_a_folder_raises(tmp_path):
    with pytest.raises(ConfigError, match="not a folder"):
        import_user_dir(str(tmp_path / "missing"))


# -- trainers and agent contracts ----------------------------------------------------------------
def test_built_in_trainers_are_registered_and_subclass_trainer():
    from core.algos.trainer import Trainer
    from core.algos.trainers import TRAINER_REGISTRY, trainer_class
    assert trainer_class("ppo").__name__ == "PPOTrainer"
    assert trainer_class("replay").__name__ == "ReplayTrainer"
    assert {"ppo", "replay"} <= set(TRAINER_REGISTRY.names())
    for name in ("ppo", "replay"):
        cls = trainer_class(name)
        assert issubclass(cls, Trainer) and cls.metric_columns and cls.agent_kind is not None


def test_a_trainer_must_subclass_trainer():
    from core.algos.trainers import register_trainer
    with pytest.raises(ConfigError, match="Trainer"):
        register_trainer("not_a_trainer_xyz")(Plain)


def test_a_model_naming_an_unknown_trainer_gets_the_registered_ones():
    from core.algos.trainers import trainer_class

    class LostModel:
        pass

    with pytest.raises(ConfigError) as info:
        trainer_class("ppo2", LostModel)
    text = str(info.value)
    assert "LostModel" in text and "'ppo2'" in text and "ppo, replay" in text
    assert "Did you mean 'ppo'" in text and "\n" not in text


def test_an_agent_must_be_on_policy_or_off_policy():
    with pytest.raises(ConfigError, match="OnPolicyAgent.*OffPolicyAgent"):
        AGENT_REGISTRY.register("kindless_agent_xyz")(type("Kindless", (BaseAgent,), {}))
    assert "kindless_agent_xyz" not in AGENT_REGISTRY


def test_an_agent_method_that_cannot_take_the_loops_arguments_is_refused():
    from agents.base import OffPolicyAgent, OnPolicyAgent

    class OneArgGrads(OnPolicyAgent):
        def fetch_grads(self, request):  # the loop calls fetch_grads(weights, request)
            return None

    with pytest.raises(ConfigError, match=r"fetch_grads\(self, request\).*OnPolicyAgent"):
        AGENT_REGISTRY.register("one_arg_grads_xyz")(OneArgGrads)

    class NoBatch(OffPolicyAgent):
        def priorities(self):  # the loop calls priorities(transitions)
            return None

    with pytest.raises(ConfigError, match="priorities"):
        AGENT_REGISTRY.register("no_batch_xyz")(NoBatch)

    class Flexible(OffPolicyAgent):  # more parameters with defaults, or *args: fine
        def fetch_grads(self, weights, batch, weights_version=None, progress=0.0, extra=1):
            return None

        def priorities(self, *args):
            return None

    AGENT_REGISTRY.register("flexible_xyz")(Flexible)
    AGENT_REGISTRY.entries.pop("flexible_xyz")


def test_the_built_in_agents_are_of_their_loops_kind():
    from core.algos.trainers import trainer_class
    for model in ("ppo", "sac", "crossq", "td3", "td3_bc", "dqn", "qr_dqn", "iqn", "c51"):
        model_cls = MODEL_REGISTRY.get(model)
        agent_cls = AGENT_REGISTRY.get(model_cls.default_agent if hasattr(model_cls, "default_agent")
                                       else "default_agent")
        assert issubclass(agent_cls, trainer_class(model_cls.trainer).agent_kind)


def test_a_projects_own_models_package_beside_a_script_is_named_at_import_ddrl(tmp_path):
    """A research code base with a models/ (or core/, envs/, ...) package: a script run from
    its folder imports that one instead of ddrl's top-level package of the name, which failed
    deep inside ddrl ("cannot import name 'MODEL_REGISTRY' from 'models'"); `import ddrl` now
    says which and what to do. Without such a folder the same script imports ddrl."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("import ddrl\nprint(ddrl.ConfigError.__name__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert (f"ImportError: ddrl's top-level package 'models' "
            f"({tmp_path / 'models' / '__init__.py'}) resolves to another folder") in proc.stderr
    assert "Rename yours (e.g. my_models)" in proc.stderr
    os.rename(tmp_path / "models", tmp_path / "my_models")
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ConfigError\n", proc.stderr


def test_a_plugin_importing_a_package_of_its_own_named_as_ddrls_says_why(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "my_env.py").write_text("from models.net import Net\n")
    with pytest.raises(ConfigError, match=r"No module named 'models.net'\. 'models' is ddrl's "
                                          r"own top-level package here .* my_models"):
        import_user_dir(str(tmp_path / "plugins"))


def test_a_user_dir_is_found_where_rays_py_modules_put_it_on_another_machine(tmp_path):
    """On a cluster's other machine the driver's --user_dir path does not exist: Ray's
    py_modules brought the folder as _ray_pkg_<hash>/<name> on sys.path, and the worker imports
    that copy (it failed: '--user_dir ... is not a folder'). Simulated in a fresh process."""
    copy = tmp_path / "runtime_resources" / "_ray_pkg_0123abcd" / "my_plugins"
    copy.mkdir(parents=True)
    (copy / "helper.py").write_text("SCALE = 2.0\n")
    (copy / "node_env.py").write_text(
        "from envs import register_env\nfrom envs.gym_env import GymEnv\nimport helper\n\n\n"
        "@register_env('node_copy_env')\nclass NodeCopyEnv(GymEnv):\n"
        "    \"\"\"CartPole from the job's copy of the plugins.\"\"\"\n    scale = helper.SCALE\n")
    check = (f"import sys, argparse\nsys.path.insert(0, {str(copy.parent)!r})\n"
             "from core.plugins import load_plugins\n"
             "spec = argparse.Namespace(env_name='node_copy_env', model_name='ppo',\n"
             "    agent_name='default_agent', user_dir='/home/alice/proj/my_plugins',\n"
             "    plugin_packages=('envs', 'models', 'agents'))\n"
             "cls = load_plugins(spec).env_cls\nprint(cls.__name__, cls.scale)\n")
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["NodeCopyEnv", "2.0"]
    # an unrelated folder of that name elsewhere on sys.path is not taken for it
    other = tmp_path / "elsewhere" / "my_plugins"
    other.mkdir(parents=True)
    check = check.replace(str(copy.parent), str(other.parent))
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == 1 and "is not a folder" in proc.stderr, proc.stderr[-2000:]
