"""The command line contract: names, plugin flags, errors that name the bad value, presets, -h."""
import os
import subprocess
import sys

import pytest

from core.registry import unwrap_actor_class
from core.errors import ConfigError
from envs import ENV_REGISTRY
from options.options import parse_args

pytestmark = pytest.mark.contract

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(REPO_ROOT, ".venv", "bin", "python")


def test_explicit_plugin_names_parse():
    # The seed's `choices=[REGISTRY.keys()]` made every explicit name "an invalid choice".
    args = parse_args(["--env_name", "gym_env", "--model_name", "ppo",
                       "--agent_name", "default_agent"])
    assert (args.env_name, args.model_name, args.agent_name) == ("gym_env", "ppo",
                                                                 "default_agent")


def test_the_seed_command_line_parses():
    args = parse_args("--env_name gym_env --agent_name default_agent --model_name ppo "
                      "--num_envs_per_worker 3 --num_workers 3 --gpu 0,1,2 --num_gpus 0 "
                      "--num_cpus 8 --batch_size 10".split())
    assert args.num_envs_per_worker == 3 and args.num_workers == 3
    assert args.gpu == [0, 1, 2] and args.num_gpus == 0
    assert args.num_cpus == 8 and args.batch_size == 10


def test_unknown_plugin_name_raises_config_error():
    with pytest.raises(ConfigError, match="Did you mean 'gym_env'"):
        parse_args(["--env_name", "gym_envv"])


def test_gym_env_flags_appear_with_gym_env():
    args = parse_args(["--env_name", "gym_env", "--gym_id", "Pendulum-v1"])
    assert args.gym_id == "Pendulum-v1"
    assert not hasattr(args, "custom_env_episode_steps")


def test_custom_env_flags_appear_only_with_custom_env():
    args = parse_args(["--env_name", "custom_env", "--custom_env_episode_steps", "50",
                       "--custom_env_discrete"])
    assert args.custom_env_episode_steps == 50 and args.custom_env_discrete is True
    assert not hasattr(args, "gym_id")
    with pytest.raises(ConfigError, match="custom_env_episode_steps"):
        parse_args(["--env_name", "gym_env", "--custom_env_episode_steps", "50"])
    with pytest.raises(ConfigError, match="gym_id"):
        parse_args(["--env_name", "custom_env", "--gym_id", "CartPole-v1"])


def test_trunk_width_only_with_custom_model():
    assert parse_args(["--model_name", "custom_model", "--trunk_width", "8"]).trunk_width == 8
    assert not hasattr(parse_args(["--model_name", "ppo"]), "trunk_width")
    with pytest.raises(ConfigError, match="trunk_width"):
        parse_args(["--model_name", "ppo", "--trunk_width", "8"])


def test_misspelled_flag_raises_config_error():
    with pytest.raises(ConfigError, match="--num_wrokers"):
        parse_args(["--num_wrokers", "3"])


def test_truncated_flag_is_a_misspelling_not_an_abbreviation():
    with pytest.raises(ConfigError):
        parse_args(["--num_worker", "3"])


@pytest.mark.parametrize("argv, value", [
    (["--num_workers", "-1"], "'-1'"),
    (["--num_workers", "abc"], "'abc'"),
    (["--batch_size", "0"], "'0'"),
    (["--num_envs_per_worker", "2.5"], "'2.5'"),
    (["--gpu", "a,b"], "'a,b'"),
    (["--hidden_sizes", "64,x"], "'64,x'"),
    (["--env_placement", "cloud"], "'cloud'"),
    (["--grad_workers", "-1"], "'-1'"),
    # the built-in plugins' own flags: ranges, not only types
    (["--num_epochs", "0"], "'0'"),
    (["--lr", "-0.001"], "'-0.001'"),
    (["--gamma", "1.5"], "'1.5'"),
    (["--gae_lambda", "-0.1"], "'-0.1'"),
    (["--ent_coef", "-0.01"], "'-0.01'"),
    (["--sde_sample_freq", "0"], "'0'"),
    (["--gym_id", "ALE/Pong-v5", "--frame_stack", "0"], "'0'"),
    (["--max_episode_steps", "0"], "'0'"),
    (["--model_name", "sac", "--gym_id", "Pendulum-v1", "--tau", "2"], "'2'"),
    (["--model_name", "sac", "--gym_id", "Pendulum-v1", "--critic_lr", "-0.1"], "'-0.1'"),
])
def test_bad_values_raise_config_error_naming_the_value(argv, value):
    with pytest.raises(ConfigError) as info:
        parse_args(argv)
    assert argv[-2] in str(info.value) and value in str(info.value), info.value


def test_integers_accept_scientific_notation():
    assert parse_args(["--total_steps", "1e6"]).total_steps == 1_000_000


@pytest.mark.parametrize("flag", ["--max_time", "--clip_range_vf"])
def test_positive_or_none_flags_reject_zero_and_negatives_as_positive_float_does(flag):
    import argparse
    from core.argtypes import positive_float, positive_float_or_none
    for text in ("0", "-1.5"):
        with pytest.raises(argparse.ArgumentTypeError) as expected:
            positive_float(text)
        with pytest.raises(argparse.ArgumentTypeError) as got:
            positive_float_or_none(text)
        assert str(got.value) == str(expected.value)
        with pytest.raises(ConfigError, match=f"{flag}.*'{text}'"):
            parse_args([flag, text])
    assert getattr(parse_args([flag, "2.5"]), flag[2:]) == 2.5
    assert getattr(parse_args([flag, "none"]), flag[2:]) is None


def test_unknown_gym_id_parses_and_fails_when_the_env_is_made():
    args = parse_args(["--gym_id", "NoSuchEnv-v0"])
    gym_env = unwrap_actor_class(ENV_REGISTRY.get("gym_env"))
    with pytest.raises(ConfigError, match="NoSuchEnv-v0"):
        gym_env(args)
    # a version gymnasium does not have: its own message ends with a stop, and one is enough
    with pytest.raises(ConfigError) as bad_version:
        gym_env(parse_args(["--gym_id", "CartPole-v9"]))
    message = str(bad_version.value)
    assert "provides versioned environments" in message and ".." not in message, message
    # an id nobody registered here: gymnasium's "Did you mean ...?" keeps its question mark
    # alone, and the paragraph says how an id of the user's own reaches the Ray workers
    with pytest.raises(ConfigError) as unknown:
        gym_env(parse_args(["--gym_id", "Corridor-v0"]))
    message = str(unknown.value)
    assert "?." not in message and "give it as --gym_id MODULE:Corridor-v0" in message, message


def test_main_reports_an_unknown_gym_id_as_one_line_and_exit_code_2(capsys):
    import main
    assert main.main(["--gym_id", "NoSuchEnv-v0", "--num_workers", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddrl: error:") and "NoSuchEnv-v0" in err
    assert "Traceback" not in err


# -- --config presets ------------------------------------------------------------------------------
def write(tmp_path, text):
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    return str(path)


def test_config_sets_defaults_and_the_command_line_wins(tmp_path):
    preset = write(tmp_path, "num_workers: 0\nbatch_size: 64\nhidden_sizes: [32, 16]\n"
                             "env_name: custom_env\ncustom_env_episode_steps: 30\n")
    args = parse_args(["--config", preset, "--batch_size", "128"])
    assert args.num_workers == 0
    assert args.batch_size == 128            # typed on the command line: wins
    assert args.hidden_sizes == [32, 16]     # converted by the flag's own type
    assert args.env_name == "custom_env"
    assert args.custom_env_episode_steps == 30  # a plugin flag of the plugin the preset chose
    assert parse_args(["--config", preset, "--custom_env_episode_steps", "5"]
                      ).custom_env_episode_steps == 5


def test_config_with_an_unknown_key_raises(tmp_path):
    preset = write(tmp_path, "num_workers: 1\nnum_wrokers: 2\n")
    with pytest.raises(ConfigError, match="num_wrokers"):
        parse_args(["--config", preset])


def test_config_with_a_flag_of_an_unchosen_plugin_raises(tmp_path):
    preset = write(tmp_path, "trunk_width: 8\n")
    with pytest.raises(ConfigError, match="trunk_width"):
        parse_args(["--config", preset, "--model_name", "ppo"])


def test_flags_of_a_preset_plugin_the_command_line_replaced_are_left_out_with_a_line(
        tmp_path, capsys):
    # `--config ppo-atari.yaml --env_name envpool_env` failed: the preset's gym_id is gym_env's.
    preset = write(tmp_path, "env_name: custom_env\ncustom_env_episode_steps: 30\n"
                             "batch_size: 64\n")
    args = parse_args(["--config", preset, "--env_name", "gym_env"])
    assert args.env_name == "gym_env" and args.batch_size == 64   # the common flag stays
    assert "custom_env_episode_steps" not in vars(args)
    assert "custom_env_episode_steps (env 'custom_env')" in capsys.readouterr().err
    # A key of no plugin the preset names is still a mistake.
    with pytest.raises(ConfigError, match="num_wrokers"):
        parse_args(["--config", write(tmp_path, "env_name: custom_env\nnum_wrokers: 2\n"),
                    "--env_name", "gym_env"])


def test_config_with_a_bad_value_raises_naming_it(tmp_path):
    preset = write(tmp_path, "num_workers: -1\n")
    with pytest.raises(ConfigError, match="num_workers.*'-1'"):
        parse_args(["--config", preset])


def test_a_preset_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    """README's `--config configs/sac-mujoco.yaml` from outside the checkout (or from an
    installed ddrl), or the preset's bare name: the preset ddrl carries."""
    monkeypatch.chdir(tmp_path)
    preset = os.path.join(REPO_ROOT, "configs", "sac-mujoco.yaml")
    for given in ("configs/sac-mujoco.yaml", "sac-mujoco.yaml", "sac-mujoco"):
        args = parse_args(["--config", given])
        assert args.config == preset and args.model_name == "sac", given
    # a file of the user's own wins; a path elsewhere never falls back to a preset
    os.makedirs("configs")
    with open("configs/sac-mujoco.yaml", "w") as f:
        f.write("model_name: dqn\n")
    assert parse_args(["--config", "configs/sac-mujoco.yaml"]).model_name == "dqn"
    with pytest.raises(ConfigError, match="nor a preset of ddrl's.*sac-mujoco, "):
        parse_args(["--config", str(tmp_path / "elsewhere" / "sac-mujoco.yaml")])


def test_config_that_is_missing_or_not_a_mapping_raises(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        parse_args(["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(ConfigError, match="mapping"):
        parse_args(["--config", write(tmp_path, "- a\n- b\n")])


# -- tuned presets applied without --config (configs/<model>-<gym_id>.yaml) ------------------------
def test_the_tuned_preset_applies_without_config_and_the_command_line_wins():
    args = parse_args(["--gym_id", "Pendulum-v1", "--gae_lambda", "0.5"])
    assert os.path.basename(args.config) == "ppo-Pendulum-v1.yaml"
    assert args.gamma == 0.9 and args.rollout_steps == 1024 and args.use_sde  # from the preset
    assert args.gae_lambda == 0.5                            # typed: wins over the preset's 0.95


@pytest.mark.parametrize("argv, switch", [
    (["--env_name", "pettingzoo_env", "--model_name", "ma_ppo"], "agent_ids"),
    (["--env_name", "pettingzoo_aec", "--model_name", "selfplay_ppo"], "both_seats"),
    (["--gym_id", "Pendulum-v1"], "use_sde"),
])
def test_a_switch_a_preset_turns_on_can_be_turned_off(argv, switch):
    assert vars(parse_args(argv))[switch] is True                  # the preset's
    assert vars(parse_args([*argv, f"--no-{switch}"]))[switch] is False


def test_config_none_uses_the_built_in_defaults():
    args = parse_args(["--config", "none", "--gym_id", "Pendulum-v1"])
    assert args.config is None
    assert args.gamma == 0.98 and args.rollout_steps == 32


@pytest.fixture
def bare_agent_dir(tmp_path):
    from agents import AGENT_REGISTRY
    name = f"bare_agent_{os.getpid()}"
    (tmp_path / "bare_agent.py").write_text(
        "from agents import register_agent\n"
        "from agents.base import OnPolicyAgent\n\n"
        f"@register_agent({name!r})\n"
        "class BareAgent(OnPolicyAgent):\n"
        "    \"\"\"An agent with no flags of its own.\"\"\"\n")
    yield str(tmp_path), name
    AGENT_REGISTRY.entries.pop(name, None)


def test_an_agent_without_the_presets_flags_parses_when_no_config_was_given(bare_agent_dir):
    user_dir, name = bare_agent_dir
    args = parse_args(["--user_dir", user_dir, "--agent_name", name])
    assert args.agent_name == name


def test_an_agent_without_the_presets_flags_parses_with_config_none(bare_agent_dir):
    user_dir, name = bare_agent_dir
    args = parse_args(["--config", "none", "--user_dir", user_dir, "--agent_name", name])
    assert args.agent_name == name and not hasattr(args, "gamma")


# -- -h -------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_help_lists_the_chosen_plugins_flags():
    python = VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable
    proc = subprocess.run(
        [python, "main.py", "--env_name", "custom_env", "--model_name", "custom_model", "-h"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--custom_env_episode_steps" in proc.stdout
    assert "--trunk_width" in proc.stdout
    assert "--gym_id" not in proc.stdout


def test_a_config_of_another_loop_written_before_the_ppo_flags_moved_still_parses(tmp_path):
    """rollout_steps & co. were every run's flags (no-ops for SAC) before they became the PPO
    loop's own: a SAC config.yaml of then still parses, and a PPO one keeps its values."""
    old = "rollout_steps: 64\nsample_ahead: 'off'\ngrad_workers: auto\nnum_epochs: 3\n"
    sac = parse_args(["--config", write(tmp_path, "model_name: sac\n" + old),
                      "--gym_id", "Pendulum-v1"])
    assert not hasattr(sac, "rollout_steps")
    ppo = parse_args(["--config", write(tmp_path, old)])
    assert (ppo.rollout_steps, ppo.sample_ahead, ppo.num_epochs) == (64, "off", 3)


def test_a_checked_text_flag_keeps_the_checks_own_words():
    """A flag whose type is checked_text(check): the check's paragraph reaches the user, not
    argparse's "invalid value" (--pz_kwargs lost it before)."""
    with pytest.raises(ConfigError, match="--pz_kwargs 'nope' is not JSON"):
        parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--pz_kwargs", "nope"])
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_env", "--pz_kwargs",
                       '{"N": 2}'])
    assert args.pz_kwargs == '{"N": 2}'


@pytest.mark.unit
def test_a_misspelled_flag_gets_the_closest_one_and_an_unknown_one_none():
    with pytest.raises(ConfigError) as error:
        parse_args(["--config", "none", "--num_wrokers", "0", "--clip_rnage", "0.1"])
    message = str(error.value)
    assert "--num_wrokers: did you mean --num_workers?" in message
    assert "--clip_rnage: did you mean --clip_range?" in message
    with pytest.raises(ConfigError) as error:
        parse_args(["--config", "none", "--totally_new", "3"])
    assert "did you mean" not in str(error.value) and "--totally_new" in str(error.value)


@pytest.mark.unit
def test_a_misspelled_keyword_of_the_python_api_is_named_as_a_keyword():
    from options.keywords import argv_for
    with pytest.raises(ConfigError) as error:
        argv_for({"num_wrokers": 0, "gym_id": "CartPole-v1"})
    message = str(error.value)
    assert "unknown keyword: num_wrokers (did you mean num_workers?)" in message
    assert "--num_wrokers" not in message
    assert argv_for({"num_workers": 0, "tensorboard": False}) == ["--num_workers", "0",
                                                                   "--no-tensorboard"]


@pytest.mark.unit
def test_a_presets_listing_is_its_first_sentence_whole_or_its_title():
    """`ddrl list` shows each preset's first comment sentence, over lines, never cut inside it
    (an abbreviation's full stop is none); a long one up to its first colon (issue 46)."""
    from options.options import preset_summary
    text = ("# Ape-X DQN (Horgan et al. 2018) for many workers: use it with --config, e.g.\n"
            "# on LunarLander. More notes here.\n"
            "env_name: gym_env\n# not the leading comment.\n")
    assert preset_summary(text) == ("Ape-X DQN (Horgan et al. 2018) for many workers: use it "
                                    "with --config, e.g. on LunarLander.")
    long = "# PPO on MuJoCo (a, b, ...): " + "word " * 40 + "end. Next.\n"
    assert preset_summary(long) == "PPO on MuJoCo (a, b, ...)"
    assert preset_summary("# No full stop at all\nx: 1\n") == "No full stop at all"


def test_the_start_line_names_a_preset_of_ddrls_as_configs_name(tmp_path, monkeypatch):
    from options.options import preset_label
    monkeypatch.chdir(tmp_path)  # elsewhere: it was ../../work/main/configs/... (or site-packages)
    assert preset_label(os.path.join(REPO_ROOT, "configs", "sac-mujoco.yaml")) == \
        "configs/sac-mujoco.yaml"
    (tmp_path / "mine.yaml").write_text("num_workers: 0\n")
    assert preset_label(str(tmp_path / "mine.yaml")) == "mine.yaml"
