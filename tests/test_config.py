"""Typed configs (core/config.py, options/options.py run_spec): each component gets its own
flags and the run-wide ones, frozen and typed; an actor's spec holds those configs and nothing
of the command line besides."""
import dataclasses
import typing

import pytest
from ray import cloudpickle

from core.config import annotation, flag_actions, make_config
from options.options import APP_ONLY_KEYS, parse_args, run_spec

pytestmark = pytest.mark.contract

SPEC_FIELDS = {"env_name", "model_name", "agent_name", "run", "env", "model", "agent", "loop",
               "user_dir", "gpus", "plugin_packages", "own_plugins"}


def spec_for(*flags):
    return run_spec(parse_args(["--config", "none", *flags]))


def test_the_pickled_spec_holds_only_the_components_configs():
    spec = cloudpickle.loads(cloudpickle.dumps(spec_for("--num_workers", "0")))
    assert {f.name for f in dataclasses.fields(spec)} == SPEC_FIELDS
    for part in ("run", "env", "model", "agent", "loop"):
        keys = set(getattr(spec, part).to_dict())
        assert not keys & set(APP_ONLY_KEYS), (part, keys & set(APP_ONLY_KEYS))


def test_each_component_sees_its_own_flags_and_the_run_wide_ones():
    spec = spec_for("--gym_id", "Pendulum-v1", "--lr", "0.003", "--gamma", "0.9",
                    "--rollout_steps", "8", "--seed", "5")
    assert spec.env.gym_id == "Pendulum-v1" and spec.env.evaluation is False
    assert spec.model.lr == 0.003 and spec.agent.gamma == 0.9 and spec.loop.rollout_steps == 8
    assert {spec.run.seed, spec.env.seed, spec.model.seed, spec.agent.seed, spec.loop.seed} == {5}
    with pytest.raises(AttributeError, match="ModelConfig has no flag 'gym_id'"):
        _ = spec.model.gym_id
    assert "lr" not in spec.env.to_dict() and "gym_id" not in spec.run.to_dict()
    sac = spec_for("--model_name", "sac", "--gym_id", "Pendulum-v1", "--buffer_size", "500")
    assert sac.loop.buffer_size == 500 and "rollout_steps" not in sac.loop.to_dict()


def test_configs_are_frozen_and_typed():
    spec = spec_for()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model.lr = 1.0
    assert spec.env.replace(evaluation=True).evaluation is True and spec.env.evaluation is False
    types = {f.name: f.type for f in dataclasses.fields(spec.loop)}
    assert types["num_epochs"] is int and types["elastic_start"] is bool
    assert types["grad_workers"] is not typing.Any
    assert {f.name: f.type for f in dataclasses.fields(spec.model)}["lr"] is float


def test_a_config_class_is_made_from_what_add_args_adds():
    def add_args(parser):
        parser.add_argument("--width", type=int, default=4)
        parser.add_argument("--noisy", action="store_true")
        parser.add_argument("--name", default=None)
    actions = flag_actions(add_args)
    assert [annotation(a) for a in actions] == [int, bool, typing.Optional[str]]
    config = make_config("ToyConfig", actions, {"width": 7, "noisy": True, "unrelated": 1})
    assert (config.width, config.noisy, config.name) == (7, True, None)
    assert type(config) is type(make_config("ToyConfig", actions, {}))  # one class, cached


PLUGIN = '''
from dataclasses import dataclass, field

from core.argtypes import positive_int
from models import register_model
from models.ppo import PPOModel


@register_model("declared_ppo")
class DeclaredPPO(PPOModel):
    """PPO with a flag declared as a dataclass field instead of add_args."""

    @dataclass
    class Config:
        width: int = field(default=4, metadata={"help": "a width", "type": positive_int})
        noisy: bool = field(default=False, metadata={"help": "add noise"})
'''


def test_a_plugin_may_declare_its_flags_as_a_dataclass(tmp_path, capsys):
    """fairseq's way: ``Config`` fields become flags (types, defaults, help), and the model's
    config carries them; the parent's flags stay (PPOModel's add_args is inherited)."""
    (tmp_path / "declared.py").write_text(PLUGIN)
    argv = ["--config", "none", "--user_dir", str(tmp_path), "--model_name", "declared_ppo"]
    args = parse_args(argv + ["--width", "7", "--noisy"])
    spec = run_spec(args)
    assert (spec.model.width, spec.model.noisy) == (7, True)
    assert spec.model.lr == parse_args(["--config", "none"]).lr   # PPOModel's flags stay
    import gymnasium as gym
    from core.plugins import load_plugins
    env = gym.make("CartPole-v1")
    load_plugins(spec).model_cls(spec.model, env.observation_space, env.action_space)
    assert not parse_args(argv).noisy and parse_args(argv).width == 4
    from core.errors import ConfigError
    with pytest.raises(ConfigError, match="--width"):
        parse_args(argv + ["--width", "0"])            # the field's argparse type holds
    with pytest.raises(SystemExit):
        parse_args(argv + ["-h"])
    assert "a width (default: 4)" in capsys.readouterr().out
