"""gym_env's --gym_kwargs (envs/gym_kwargs.py): the flag's parsing and its round trip through a
saved config, the keywords reaching the id's constructor (single and native vector envs), the
errors of keys the constructor lacks, values it refuses and keys with flags of their own, and a
run whose every env (Ray workers', the test worker's, --evaluate's) was made with them."""
import json
import re

import numpy as np
import pytest

from core.errors import ConfigError
from core.registry import unwrap_actor_class
from envs import ENV_REGISTRY
from envs.gym_kwargs import as_dict, gym_kwargs_type, parse_value, split_top_level
from options.keywords import flags_to_argv
from options.options import parse_args

from test_e2e import read_run, run_main

pytestmark = pytest.mark.unit

GymEnv = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))


def make(gym_id, *flags):
    return GymEnv(parse_args(["--env_name", "gym_env", "--gym_id", gym_id, *flags]))


# -- the flag ---------------------------------------------------------------------------------
def test_values_are_json_then_yaml_scalars_then_text():
    assert parse_value("5") == 5 and parse_value("1e-3") == 0.001 and parse_value("-9.5") == -9.5
    assert parse_value("true") is True and parse_value("True") is True
    assert parse_value("False") is False
    assert parse_value("null") is None and parse_value("None") is None
    assert parse_value('"8x8"') == "8x8" and parse_value("8x8") == "8x8"
    assert parse_value("[1, 2]") == [1, 2] and parse_value('{"a": 1}') == {"a": 1}
    assert parse_value("half_cheetah.xml") == "half_cheetah.xml"


def test_pairs_split_at_commas_outside_brackets_and_quotes():
    assert split_top_level('a=1, b=[1,2], c={"x": 1, "y": 2},d="p,q"') == [
        "a=1", "b=[1,2]", 'c={"x": 1, "y": 2}', 'd="p,q"']


def test_the_flag_keeps_key_json_texts_and_round_trips_through_a_saved_config():
    text = 'enable_wind=true,wind_power=5,map_name=8x8,desc=["SF", "FG"],seed_like=None'
    items = gym_kwargs_type(text)
    assert items == ("enable_wind=true", "wind_power=5", 'map_name="8x8"',
                     'desc=["SF", "FG"]', "seed_like=null")
    assert as_dict(items) == {"enable_wind": True, "wind_power": 5, "map_name": "8x8",
                              "desc": ["SF", "FG"], "seed_like": None}
    # a preset or a restored config.yaml holds the list; options.py joins it with commas
    assert gym_kwargs_type(",".join(items)) == items
    assert gym_kwargs_type("none") == () and gym_kwargs_type("") == ()
    args = parse_args(["--env_name", "gym_env", "--gym_kwargs", "enable_wind=true"])
    assert args.gym_kwargs == ("enable_wind=true",)
    assert parse_args(["--env_name", "gym_env"]).gym_kwargs == ()


@pytest.mark.parametrize("text,why", [("x", "is not KEY=VALUE"), ("=1", "is not KEY=VALUE"),
                                       ("a b=1", "is not KEY=VALUE"),
                                       ("a=1,a=2", "'a' is given twice")])
def test_a_bad_pair_is_named(text, why):
    with pytest.raises(ConfigError, match=re.escape(why)):
        parse_args(["--env_name", "gym_env", "--gym_kwargs", text])


def test_a_python_dict_becomes_the_flags_text_and_a_non_json_value_is_refused():
    assert flags_to_argv({"gym_kwargs": {"enable_wind": True, "wind_power": 3.5,
                                         "map_name": "8x8"}}) == [
        "--gym_kwargs", 'enable_wind=true,wind_power=3.5,map_name="8x8"']
    with pytest.raises(ConfigError, match="gym_kwargs=.*must be numbers, strings"):
        flags_to_argv({"gym_kwargs": {"wind": object()}})


# -- the env ----------------------------------------------------------------------------------
@pytest.mark.contract
def test_the_keywords_reach_the_constructor():
    env = make("LunarLander-v3", "--gym_kwargs", "continuous=true,gravity=-9.5")
    assert env.action_space.shape == (2,)                 # continuous: a Box of 2
    assert env.env.unwrapped.gravity == -9.5
    assert make("LunarLander-v3").action_space.n == 4     # without: Discrete(4)
    env = make("CartPole-v1", "--gym_kwargs", "sutton_barto_reward=true")
    env.reset(seed=0)
    rewards = [env.step(0).reward for _ in range(5)]
    assert rewards == [0.0] * 5                           # Sutton and Barto's: 0 until the end


@pytest.mark.contract
def test_a_native_vector_env_gets_them_too():
    from envs.gym_vector import GymVectorEnv
    args = parse_args(["--env_name", "gym_env", "--gym_id", "CartPole-v1", "--vectorize",
                       "native", "--gym_kwargs", "sutton_barto_reward=true"])
    batch = GymVectorEnv(args, 3, None, None)
    batch.reset(seed=0)
    _, rewards, *_ = batch.step(np.zeros(3, dtype=np.int64))
    np.testing.assert_array_equal(rewards, [0.0, 0.0, 0.0])


@pytest.mark.contract
def test_a_key_the_constructor_lacks_names_the_keys_it_takes():
    with pytest.raises(ConfigError) as error:
        make("LunarLander-v3", "--gym_kwargs", "enable_wnd=true")
    assert str(error.value) == (
        "--gym_kwargs enable_wnd: LunarLander-v3's constructor takes no such keyword. It "
        "takes: continuous=False, gravity=-10.0, enable_wind=False, wind_power=15.0, "
        "turbulence_power=1.5.")


@pytest.mark.contract
def test_a_value_the_constructor_refuses_is_a_paragraph_with_its_reason():
    with pytest.raises(ConfigError) as error:
        make("LunarLander-v3", "--gym_kwargs", "gravity=5.0")
    message = str(error.value)
    assert message.startswith("--gym_kwargs gravity=5.0: LunarLander-v3 refused them "
                              "(AssertionError: gravity (current value: 5.0)"), message
    assert message.endswith("It takes: continuous=False, gravity=-10.0, enable_wind=False, "
                            "wind_power=15.0, turbulence_power=1.5."), message


@pytest.mark.contract
def test_a_key_with_a_flag_of_its_own_names_the_flag():
    with pytest.raises(ConfigError, match=r"ddrl sets max_episode_steps from a flag of its "
                                          r"own; use --max_episode_steps\.$"):
        make("CartPole-v1", "--gym_kwargs", "max_episode_steps=10")
    with pytest.raises(ConfigError, match="use --record_video or Policy.make_env"):
        make("CartPole-v1", "--gym_kwargs", "render_mode=rgb_array")


# -- a run ------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_every_env_of_a_run_is_made_with_them(tmp_path):
    """CartPole with Sutton and Barto's reward (0 a step, -1 at a fall) returns at most 0 where
    the default returns at least 1 a step: the Ray workers' training returns, the test
    worker's evaluations and --evaluate's episodes all come out <= 0. --no-elastic_start: the
    returns are those of the Ray workers, not of an in-process stand-in."""
    run_dir = str(tmp_path / "run")
    proc = run_main("--gym_id", "CartPole-v1", "--gym_kwargs", "sutton_barto_reward=true",
                    "--num_workers", "2", "--no-elastic_start", "--total_steps", "2048",
                    "--eval_interval", "1024", "--eval_episodes", "2", "--target_return",
                    "none", "--run_dir", run_dir, "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, rows = read_run(run_dir)
    train = [float(r["train_return"]) for r in rows if r["train_return"]]
    evals = [float(r["eval_return"]) for r in rows if r["eval_return"]]
    assert train and evals and max(train) <= 0 and max(evals) <= 0, (train, evals)
    with open(f"{run_dir}/checkpoints/last.pt.json") as f:
        assert json.load(f)["config"]["gym_kwargs"] == ["sutton_barto_reward=true"]
    with open(f"{run_dir}/README.md") as f:
        assert "(`CartPole-v1`, `sutton_barto_reward=true`)" in f.read()
    evaluated = run_main("--evaluate", run_dir, "--eval_episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    mean = float(re.search(r"return (-?[\d.]+) \+-", evaluated.stdout + evaluated.stderr)[1])
    assert mean <= 0, evaluated.stdout
