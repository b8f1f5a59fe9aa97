"""The two-pass command line (after fairseq/options.py).

Pass 1 (parse_known_args, no -h): --user_dir and --config, so plugins are imported and the
preset applies before anything else. Pass 2 (parse_known_args): the common flags, to learn the
chosen --env_name, --model_name, --agent_name. Then every chosen class adds its own flags
(``add_args``) in its own argument group, -h is added, and a strict parse rejects misspellings.
"""
import argparse
import json
import os
import sys

import yaml

# The flag types live in core/argtypes.py; importing them here keeps
# ``from options.options import positive_int`` (and the like) working for existing plugins.
from core.argtypes import (  # noqa: F401 - re-exported for plugins, see above
    auto_or_nonnegative_int, auto_or_positive_int, gpu_list, non_negative_float,
    non_negative_int, positive_float, positive_float_or_none, positive_int, positive_int_or_none,
    target_return, unit_interval, unit_interval_or_none)
from core.plugins import env_label, user_dir_here
from core.registry import (import_user_dir, registered_by_user_code, registry_of, ship_by_value,
                           unwrap_actor_class)
from core.errors import ConfigError
from options.custom_options import get_custom_args


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one short paragraph, not the whole usage block, and a
    truncated flag (--num_worker) is a misspelling, not an abbreviation."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("prog", "python main.py")  # (not argv[0]: pytest, ddrl)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise ConfigError(f"{message}{self.suggestions(message)}. Run `{self.prog} -h` (with "
                          f"your --env_name, --model_name, --agent_name) to see every flag.")

    def suggestions(self, message):
        """' (did you mean --num_workers?)' for misspelled flags in argparse's message."""
        import difflib
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = list(self._option_string_actions)
        hints = []
        for token in message.split(":", 1)[1].split():
            if token.startswith("--"):
                flag = token.split("=")[0]
                other_loop = loop_of_flag(flag)  # (a flag that exists wins over a look-alike)
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
                if other_loop:
                    hints.append(other_loop)
                elif close:
                    hints.append(f"{flag}: did you mean {close[0]}?")
        return f" ({'; '.join(hints)})" if hints else ""


def loop_of_flag(flag):
    """'--dataset is a flag of the replay loop, which drives --model_name bc, ...' when a
    built-in training loop other than the run's defines ``flag`` (the models that name it),
    else None: a flag given with a model whose loop has none (--dataset with ppo)."""
    from core.algos.trainers import TRAINER_REGISTRY, trainer_class
    from models import MODEL_REGISTRY
    trainer_class("replay")  # (imports the built-in loops, which register themselves)
    loops = []
    for name in TRAINER_REGISTRY.names():
        parser = argparse.ArgumentParser(add_help=False)
        trainer_class(name).add_args(parser)
        if flag in parser._option_string_actions:
            models = sorted(m for m in MODEL_REGISTRY.names()
                            if getattr(MODEL_REGISTRY.get(m), "trainer", None) == name)
            if models:
                loops.append(f"the {name} loop, which drives --model_name {', '.join(models)}")
    if not loops:
        return None
    return f"{flag} is a flag of " + "; and of ".join(loops)


def app_only(action):
    """Mark a flag only the application reads (the command, the run's outputs, Ray's start,
    sweeps): it goes into no component's config (core/config.py), so it is never pickled into
    an actor. ``APP_ONLY_KEYS`` is made from these marks."""
    action.app_only = True
    return action


def logger_names(text):
    """--logger: comma-separated names of registered trackers (loggers/), in order, each once;
    'none' for none. An unknown name lists the registered ones."""
    import importlib
    from core.registry import registry_of, unknown_name_message
    importlib.import_module("loggers")  # publishes the registry (a --user_dir's are in by now)
    registry = registry_of("logger")
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if [n.lower() for n in names] == ["none"]:
        return []
    for name in names:
        if name not in registry:
            raise argparse.ArgumentTypeError(unknown_name_message(
                "logger", name, registry.names(), flag="--logger").rstrip("."))
    return list(dict.fromkeys(names))


def logger_flags(names):
    """The dests of the flags the trackers ``names`` add (their ``add_args``)."""
    from core.registry import registry_of
    parser = argparse.ArgumentParser(add_help=False)
    for name in names:
        add_args = getattr(registry_of("logger").get(name), "add_args", None)
        if add_args is not None:
            add_args(parser)
    return {a.dest for a in parser._actions if a.option_strings}


def add_common_args(parser):
    group = parser.add_argument_group("plugins")
    group.add_argument("--env_name", default="gym_env",
                       help="registered env wrapper (default: %(default)s; see envs/)")
    group.add_argument("--model_name", default="ppo",
                       help="registered model (default: %(default)s; see models/)")
    group.add_argument("--agent_name", default=None,
                       help="registered agent (default: the model's own, default_agent for "
                            "ppo and sac_agent for sac; see agents/)")
    app_only(group.add_argument("--user_dir", default=None,
                                help="folder of your own plugins (.py files, or envs/ models/ agents/ "
                                     "subfolders), imported before the flags are read"))
    app_only(group.add_argument("--config", default=None,
                                help="YAML preset of flag defaults; flags typed on the command line win. "
                                     "Without it, configs/<model>-<gym_id>.yaml is used when it exists "
                                     "(the tuned preset); 'none' uses the built-in defaults only"))

    group = parser.add_argument_group("workers and resources")
    group.add_argument("--num_workers", type=non_negative_int, default=2,
                       help="rollout workers, each a Ray actor; 0 runs everything in this "
                            "process without Ray (default: %(default)s)")
    group.add_argument("--num_envs_per_worker", type=positive_int, default=4,
                       help="envs each worker steps together, with one batched forward pass "
                            "per step (default: %(default)s)")
    group.add_argument("--batch_size", type=positive_int, default=256,
                       help="minibatch size, summed over all workers (default: %(default)s)")
    group.add_argument("--env_placement", choices=["worker", "actor"], default="worker",
                       help="'worker': envs run inside their rollout worker (fast for cheap "
                            "envs); 'actor': every env is its own Ray actor (for heavy "
                            "simulators) (default: %(default)s)")
    group.add_argument("--envs_per_actor", type=positive_int, default=1,
                       help="with --env_placement actor: envs per env actor, stepped together "
                            "in one call and concurrently in threads there (envs that wait on "
                            "a simulator overlap their waits); fewer actors, fewer calls per "
                            "step. 1 gives every env a process of its own, for heavy "
                            "simulators that compute (default: %(default)s)")
    app_only(group.add_argument("--num_cpus", type=positive_int, default=None,
                                help="CPUs Ray may use (default: all of this machine's)"))
    group.add_argument("--num_gpus", type=non_negative_int, default=0,
                       help="GPUs Ray may use (default: %(default)s)")
    app_only(group.add_argument("--gpu", type=gpu_list, default=[],
                                help="comma-separated GPU ids made visible (CUDA_VISIBLE_DEVICES); "
                                     "with --num_gpus 0 unused, and the run says so"))
    group.add_argument("--normalize_obs", action=argparse.BooleanOptionalAction, default=False,
                       help="normalize observations by their running mean and variance, "
                            "merged across workers, the same in rollout, learning and "
                            "evaluation, saved in checkpoints")
    group.add_argument("--obs_clip", type=positive_float, default=10.0,
                       help="with --normalize_obs, clip normalized observations to "
                            "[-obs_clip, obs_clip] (default: %(default)s)")
    group.add_argument("--record_dataset", default=None, metavar="DIR",
                       help="write every step the rollout workers take (the warm-up's random "
                            "ones too) as a Minari dataset in DIR (a new directory): each "
                            "worker records a shard, merged into DIR when the run ends "
                            "(core/sampling/recording.py); the off-policy loop's whole "
                            "experience, D4RL's 'replay' sets. Episodes still running at the "
                            "end, and those an env failure cut, are left out")
    group.add_argument("--torch_threads", type=positive_int, default=1,
                       help="torch threads per process: driver and every actor "
                            "(default: %(default)s; more is slower on small machines)")
    app_only(group.add_argument("--address", default=None,
                                help="join an existing Ray cluster at HOST:PORT (its head's GCS, e.g. "
                                     "127.0.0.1:6399 from `python -m ddrl.cluster start --head --port "
                                     "6399`) instead of starting a local one; the code and --user_dir "
                                     "travel with the job (README, 'Scaling out')"))
    app_only(group.add_argument("--node_ip_address", default="127.0.0.1",
                                help="this machine's address in Ray: a local instance listens on it "
                                     "only, a driver joining --address is reached on it (default: "
                                     "%(default)s; give the machine's cluster-network address to join "
                                     "a cluster of several machines)"))
    app_only(group.add_argument("--dashboard", action="store_true",
                                help="start the Ray dashboard (needs ray[default])"))
    app_only(group.add_argument("--dashboard_host", default="127.0.0.1",
                                help="address the dashboard listens on (default: %(default)s)"))
    group.add_argument("--ray_task_events", action="store_true",
                       help="let Ray record the events of ddrl's actor calls in the GCS (the "
                            "dashboard's task views, `ray list tasks`). Off by default: at "
                            "ddrl's tens of calls per second the GCS grows steadily until "
                            "Ray's cap of 100,000 tasks (BENCHMARKS.md, 'Memory under load')")

    group = parser.add_argument_group("faults (what a run survives; README, 'Faults')")
    group.add_argument("--max_worker_restarts", type=non_negative_int, default=1000,
                       help="replacements for actors that died (rollout workers, the test "
                            "worker, SAC learner workers) over the whole run, as RLlib's "
                            "max_num_env_runner_restarts; past it the run stops with an error "
                            "(default: %(default)s)")
    group.add_argument("--max_env_errors", type=positive_int, default=5,
                       help="exceptions in a row from one env (in step or reset) before the run "
                            "stops with an error; fewer are survived: the episode is cut, the "
                            "env rebuilt and reset (default: %(default)s)")
    group.add_argument("--max_failures", type=non_negative_int, default=3,
                       help="times a SAC run restores itself in place from its newest "
                            "checkpoint when the replay buffer or the parameter server dies "
                            "(default: %(default)s)")
    group.add_argument("--max_bad_updates", type=positive_int, default=10,
                       help="updates in a row whose loss or gradient is NaN or inf (each one is "
                            "skipped) before the run stops with an error (default: %(default)s)")
    group.add_argument("--worker_timeout", type=positive_float, default=300.0,
                       help="seconds a rollout worker may take for one call (a fragment or a "
                            "gradient) before it is taken for hung, replaced and its work "
                            "dropped (default: %(default)s)")

    group = parser.add_argument_group("sweeps (Ray Tune; README, 'Sweeps')")
    app_only(group.add_argument("--tune", default=None, metavar="SPEC.yaml",
                                help="run a sweep: SPEC maps flags to distributions ({loguniform: [lo, hi]}, "
                                     "{uniform: ...}, {randint: ...}, {choice: [...]}, {grid: [...]}); the "
                                     "other flags on the line hold for every trial; each trial is a whole "
                                     "run in RUN_DIR/trials/<id>"))
    app_only(group.add_argument("--num_samples", type=positive_int, default=8,
                                help="trials to sample from SPEC (with grid: per grid point) "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--max_concurrent", type=auto_or_positive_int, default="auto",
                                help="trials at once; auto: the cluster's CPUs / CPUs per trial "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--search", choices=["random", "optuna"], default="random",
                                help="how trials are chosen: random samples, or Optuna's TPE learning "
                                     "from the finished ones (default: %(default)s)"))
    app_only(group.add_argument("--scheduler", choices=["fifo", "asha", "pbt"], default="asha",
                                help="fifo: every trial to the end; asha: stop trials whose eval return "
                                     "trails at a rung of env steps; pbt: population-based training, "
                                     "trials copy better ones' checkpoints and perturb SPEC's flags "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--grace_steps", type=auto_or_positive_int, default="auto",
                                help="ASHA: env steps every trial gets before it can be stopped; auto: "
                                     "max(eval_interval, total_steps / 8) (default: %(default)s)"))
    app_only(group.add_argument("--reduction_factor", type=positive_int, default=3,
                                help="ASHA: 1 in this many trials goes on at each rung (default: "
                                     "%(default)s)"))
    app_only(group.add_argument("--pbt_interval", type=auto_or_positive_int, default="auto",
                                help="PBT: env steps between exploit/explore steps; auto: total_steps / 8 "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--cpus_per_trial", type=positive_float, default=None,
                                help="CPUs reserved for each trial's own process (default: 1); each of "
                                     "its rollout workers reserves 1 more"))

    group = parser.add_argument_group("run length and evaluation")
    group.add_argument("--seed", type=non_negative_int, default=0,
                       help="random seed; worker i and its envs derive distinct seeds from it "
                            "(default: %(default)s)")
    group.add_argument("--total_steps", type=positive_int, default=1_000_000,
                       help="stop after this many env steps (default: %(default)s)")
    group.add_argument("--target_return", type=target_return, default="auto",
                       help="stop when the evaluation mean return reaches this; 'auto' "
                            "(default): the env's reward_threshold if it has one, e.g. 475 for "
                            "CartPole-v1; 'none': never stop early. An evaluation that reaches "
                            "it is confirmed before the run stops: see --confirm_episodes")
    group.add_argument("--confirm_episodes", type=non_negative_int, default=50,
                       help="when an evaluation reaches --target_return, play this many more "
                            "episodes of the same weights on fresh starts; the run stops (and "
                            "summary.json claims the target) only when their mean reaches it "
                            "too; time to target still counts from the evaluation that reached "
                            "it; 0: stop at the first evaluation that reaches it, unconfirmed "
                            "(default: %(default)s)")
    app_only(group.add_argument("--patience", type=positive_int, default=None, metavar="N",
                                help="stop when N evaluations in a row have not beaten the best mean "
                                     "return (stopped_because 'patience'; default: never)"))
    app_only(group.add_argument("--max_time", type=positive_float_or_none, default=None,
                                help="stop after this many seconds of wall time (default: no limit)"))
    group.add_argument("--eval_interval", type=positive_int, default=2000,
                       help="evaluate every this many env steps (default: %(default)s)")
    group.add_argument("--eval_episodes", type=positive_int, default=10,
                       help="episodes per evaluation, on envs of their own "
                            "(default: %(default)s)")
    group.add_argument("--eval_deterministic", action=argparse.BooleanOptionalAction,
                       default=True,
                       help="evaluate with the policy's most likely action; "
                            "--no-eval_deterministic samples actions as in training (seeded "
                            "per evaluation; on Atari an argmax policy can stall or repeat one "
                            "failing move where the sampled one scores) (default: %(default)s)")
    app_only(group.add_argument("--run_dir", default=None,
                                help="where metrics.csv, summary.json and checkpoints go "
                                     "(default: runs/<env>-<model>-<time>)"))
    app_only(group.add_argument("--list", action="store_true",
                                help="print the registered envs, models and agents (with --user_dir: "
                                     "also its plugins) and the presets, then exit"))
    app_only(group.add_argument("--restore", default=None, metavar="PATH",
                                help="continue from a checkpoint: a .pt file, or a run directory (its "
                                     "checkpoints/last.pt). The run goes on with that run's "
                                     "configuration (flags given here win) in its directory: weights, "
                                     "optimizer, counters, schedules, RNGs and metrics.csv continue"))
    app_only(group.add_argument("--evaluate", default=None, metavar="PATH",
                                help="do not train: run --eval_episodes episodes (as "
                                     "--eval_deterministic says) with a saved model (a .pt file, or a run directory: its best.pt) and "
                                     "print the mean and spread of their returns"))
    app_only(group.add_argument("--eval_seeds", type=positive_int, default=1,
                                help="with --evaluate: that many evaluations of --eval_episodes "
                                     "episodes, the first with the run's own test envs, the others "
                                     "with seeds drawn from --seed; prints each "
                                     "one's mean and their mean with a 95%% bootstrap interval "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--model_card", default=None, metavar="RUN_DIR",
                                help="do not train: (re)write RUN_DIR/README.md, the run's model card "
                                     "(what was trained, on what, with which flags, its evaluations, "
                                     "how to load and export it); a run writes one when it ends"))
    app_only(group.add_argument("--export", default=None, metavar="PATH",
                                help="do not train: write the acting path of a saved model (a .pt "
                                     "file, or a run directory: its best.pt) to --out as one "
                                     "self-contained file (--format), with a JSON sidecar"))
    app_only(group.add_argument("--format", choices=["onnx", "pt2"], default="onnx", dest="export_format",
                                help="with --export: 'onnx' (onnxruntime, any language) or 'pt2' "
                                     "(a torch.export program, torch.export.load) (default: %(default)s)"))
    app_only(group.add_argument("--out", default=None, metavar="FILE", dest="export_out",
                                help="with --export: the file to write (default: the checkpoint's "
                                     "name with .onnx or .pt2, beside it)"))
    app_only(group.add_argument("--export_policy", default=None, metavar="NAME",
                                help="with --export, for a team of several policies (--policy_map): "
                                     "write policy NAME alone, its agents' rows in and their actions "
                                     "out (default: the whole team, each policy's rows an input)"))
    app_only(group.add_argument("--record_video", default=None, metavar="DIR",
                                help="with --evaluate: also write --video_episodes episodes to "
                                     "DIR/episode-<k>.gif from the env's rgb_array rendering"))
    app_only(group.add_argument("--video_episodes", type=positive_int, default=1,
                                help="episodes --record_video writes (default: %(default)s)"))
    app_only(group.add_argument("--checkpoint_interval", type=positive_int, default=100_000,
                                help="write RUN_DIR/checkpoints/step-<N>.pt every this many env steps; "
                                     "one is also written at the end, on Ctrl-C and on SIGTERM "
                                     "(default: %(default)s)"))
    app_only(group.add_argument("--keep_checkpoints", type=positive_int, default=3,
                                help="how many step-<N>.pt to keep, newest first; best.pt (best "
                                     "evaluation) is kept apart (default: %(default)s)"))
    app_only(group.add_argument("--pause_at_steps", type=positive_int, default=None,
                                help="stop once this many env steps are done, with a checkpoint, as if "
                                     "interrupted: --restore RUN_DIR then continues the same schedule "
                                     "to --total_steps (e.g. for time-sliced jobs)"))
    app_only(group.add_argument("--log_interval", type=positive_int, default=1,
                                help="print a progress line every this many iterations "
                                     "(default: %(default)s; metrics.csv gets every one)"))
    group.add_argument("--quiet", action="store_true",
                       help="print only the final summary line")
    app_only(group.add_argument("--logger", type=logger_names, default="tensorboard,csv",
                                metavar="NAME[,NAME...]",
                                help="experiment trackers the metrics rows go to (loggers/): "
                                     "tensorboard (RUN_DIR/tensorboard), csv (RUN_DIR/metrics.csv), "
                                     "wandb (offline by default, RUN_DIR/wandb), mlflow (a local "
                                     "store, runs/mlruns, by default), a --user_dir's own; 'none' "
                                     "for none. Each brings its flags: `--logger wandb -h` shows "
                                     "them (default: %(default)s)"))
    app_only(group.add_argument("--tensorboard", action=argparse.BooleanOptionalAction, default=True,
                                help="keep --logger's tensorboard: --no-tensorboard drops it "
                                     "(default: on)"))
    app_only(group.add_argument("--plots", action=argparse.BooleanOptionalAction,
                                default=plots_default(),
                                help="draw RUN_DIR/learning_curves.png, in a child process that "
                                     "costs about a second of CPU per run: --no-plots skips it "
                                     "(the environment variable DDRL_PLOTS=0 makes that the "
                                     "default, as the test suite does) (default: on)"))
    app_only(group.add_argument("--plot_interval", type=positive_float, default=30.0,
                                help="seconds between redrawings of RUN_DIR/learning_curves.png "
                                     "(also drawn at the end) (default: %(default)s)"))
    return parser


def plots_default():
    """--plots' default: on, unless the environment says DDRL_PLOTS=0 (or off, false, no)."""
    return os.environ.get("DDRL_PLOTS", "1").strip().lower() not in ("0", "off", "false", "no")


def config_file(path):
    """--config PATH: a file, else one of the presets ddrl carries (CONFIG_DIR) by its name
    (sac-mujoco), its file name or as README writes it (configs/sac-mujoco.yaml): README's
    commands then work from any directory, and from a ddrl installed as a package."""
    if os.path.isfile(path):
        return path
    found = preset_named(path, CONFIG_DIR)
    if found is None:
        raise ConfigError(f"--config {path!r}: no such file, nor a preset of ddrl's. Give a YAML "
                          f"file of flag defaults or a preset's name: "
                          f"{', '.join(yaml_names(CONFIG_DIR))} (`ddrl list` says what each is "
                          f"for).")
    return found


def yaml_names(directory):
    """The names of ``directory``'s .yaml files, without the suffix, sorted."""
    if not os.path.isdir(directory):
        return []
    return sorted(f[:-len(".yaml")] for f in os.listdir(directory) if f.endswith(".yaml"))


def preset_label(path):
    """How the start line names --config's file: one of ddrl's presets as configs/NAME.yaml
    (wherever ddrl is installed: a site-packages path says nothing), another file as a path
    relative to the working directory."""
    path = os.path.abspath(path)
    if os.path.dirname(path) == os.path.abspath(CONFIG_DIR):
        return f"configs/{os.path.basename(path)}"
    return os.path.relpath(path)


def preset_named(path, directory, folder="configs"):
    """``directory``'s file that ``path`` names (NAME, NAME.yaml, or ``folder``/NAME.yaml as
    README writes it), or None: a path elsewhere names the user's own file, never a preset."""
    head, name = os.path.split(os.path.normpath(path))
    if head not in ("", os.path.normpath(folder)):
        return None
    for candidate in (name, name + ".yaml"):
        full = os.path.join(directory, candidate)
        if name and os.path.isfile(full):
            return full
    return None


def load_config(path):
    path = config_file(path)
    with open(path) as f:
        try:
            config = yaml.safe_load(f) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"--config {path!r} must be a mapping of flag names to values, "
                          f"e.g. `num_workers: 2`.")
    return {k.lstrip("-").replace("-", "_"): v for k, v in config.items()}


#: Flags every run had before they became the PPO loop's own (core/algos/ppo_trainer.py): a
#: config.yaml or checkpoint of another loop written before holds them, with no effect there.
FORMERLY_COMMON = ("rollout_steps", "sample_ahead", "grad_workers", "compiled_graph",
                   "elastic_start", "num_epochs")


def _apply_config(parser, config, strict):
    """Set preset values as defaults, converted by each flag's own type."""
    actions = {a.dest: a for a in parser._actions}
    unknown = sorted(k for k in config if k not in actions and k not in FORMERLY_COMMON)
    if strict and unknown:
        raise ConfigError(f"--config sets unknown flags: {', '.join(unknown)}. A preset's keys "
                          f"are flag names without dashes (e.g. num_workers); plugin flags "
                          f"count only when that plugin is chosen.")
    defaults = {}
    for key, value in config.items():
        action = actions.get(key)
        if action is None:
            continue
        if action.type is not None and value is not None and not isinstance(value, bool):
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            try:
                value = action.type(text)
            except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
                raise ConfigError(f"--config: {key}: {exc}") from exc
        if action.choices is not None and value is not None and value not in action.choices:
            raise ConfigError(f"--config: {key}: {value!r} is not one of "
                              f"{', '.join(map(str, action.choices))}")
        defaults[key] = value
    parser.set_defaults(**defaults)


def restored_config(path, flag="--restore", user_code=None):
    """The resolved configuration saved with a checkpoint (inside the file; a format-2 file's
    .json sidecar), minus what only concerned that process; run_dir stays, so the run goes on in
    its own directory. The file is memory-mapped, so a large one (a replay buffer) is not read
    whole; it loads with weights_only=True, as every checkpoint does. ``user_code``: a dict
    that gets the modules that registered the run's plugins as its own code ran (kind ->
    module), for the errors of a process that lacks them."""
    import torch
    from core.run.checkpoint import checkpoint_path, embedded_meta, payload_format
    file = checkpoint_path(path, flag)
    try:
        payload = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        meta = embedded_meta(payload)
    except Exception as exc:  # noqa: BLE001 - truncated, corrupted or crafted: never half-loaded
        raise ConfigError(f"{flag} {file}: not a readable ddrl checkpoint "
                          f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}). "
                          f"The file may be truncated or corrupted; an older checkpoint "
                          f"(e.g. checkpoints/best.pt) may still load.") from None
    if meta is None and payload_format(payload) >= 3:
        raise ConfigError(f"{flag} {file}: a checkpoint without metadata, so without the run's "
                          f"configuration. Give --config explicitly to restore without it.")
    if meta is None:  # format 2: the configuration is in the sidecar
        meta_path = file + ".json"
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{flag} {file}: cannot read {meta_path} ({exc}); it holds the "
                              f"run's configuration. Give --config explicitly to restore "
                              f"without it.") from None
    config = (meta.get("config") if isinstance(meta, dict) else None) or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{flag} {file}: the configuration saved in it is not a "
                          f"mapping. Give --config explicitly to restore without it.")
    from core.run.context import RUN_ONLY_KEYS  # here: core.run.context imports Ray, which -h does not need
    plugins = meta.get("user_code_plugins") if isinstance(meta, dict) else None
    if user_code is not None and isinstance(plugins, dict):
        user_code.update(plugins)
    return {k: v for k, v in config.items() if k not in RUN_ONLY_KEYS}


def chosen_class(registry, kind, name, user_code):
    """The registered class, or the unknown-name paragraph, naming the module that registered
    it when the run was trained (``user_code``: kind -> module, from the checkpoint)."""
    try:
        return registry.get(name)
    except ConfigError as exc:
        module = user_code.get(kind)
        if not isinstance(module, str):
            raise
        raise ConfigError(f"{exc} The run was trained with {kind} {name!r} as the training "
                          f"script's own code registered it, in module {module}: import "
                          f"{module} before ddrl.load or ddrl.train(restore=...), or give the "
                          f"folder of its file with --user_dir.") from None


def registries(user_dir=None):
    """Every plugin registry (envs, models, agents, loggers), the --user_dir's plugins
    registered too: what ``ddrl list`` and --list show."""
    import importlib
    from core.registry import published
    if user_dir:
        import_user_dir(user_dir)
    for package in PLUGIN_PACKAGES + ("loggers",):
        importlib.import_module(package)
    return published()


def plugin_listing(registries):
    """--list: every registered plugin with its one-line docstring and where it came from,
    then the presets in configs/ with their first comment line."""
    lines = []
    for registry in registries:
        lines.append(f"{registry.kind}s ({registry.flag}):")
        width = max((len(n) for n in registry.names()), default=0)
        for name in registry.names():
            entry = registry.entries[name]
            lines.append(f"  {name:<{width}}  {entry.summary}  [{entry.source}]")
    lines.append("presets (configs/, applied automatically for their --model_name and "
                 "--gym_id unless --config is given):")
    files = sorted(f for f in (os.listdir(CONFIG_DIR) if os.path.isdir(CONFIG_DIR) else [])
                   if f.endswith((".yaml", ".yml")))
    width = max((len(f) for f in files), default=0)
    for file in files:
        with open(os.path.join(CONFIG_DIR, file)) as f:
            lines.append(f"  {file:<{width}}  {preset_summary(f.read())}")
    return "\n".join(lines)


def preset_summary(text):
    """The first sentence of a preset's leading comment, whole (it may span lines); a long one
    (over 160 characters) up to its first colon, the title its sentence goes on from."""
    sentence = first_sentence(text)
    if len(sentence) > 160:
        depth = 0
        for i, char in enumerate(sentence):
            depth += (char in "([") - (char in ")]")
            if char == ":" and depth <= 0 and sentence[i + 1:i + 2] == " ":
                return sentence[:i]
    return sentence


def first_sentence(text):
    """The first sentence of a leading comment (lines starting with #)."""
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    words = " ".join(w for w in comment if w)
    depth = 0
    for i, char in enumerate(words):  # a full stop outside parentheses, not an abbreviation's
        depth += (char in "([") - (char in ")]")
        if char in ".!?" and depth <= 0 and (i + 1 == len(words) or words[i + 1] == " "):
            word = words[:i].rsplit(" ", 1)[-1].lower()
            if word not in ("e.g", "i.e", "al", "vs", "cf", "approx"):
                return words[:i + 1]
    return words


#: The flags that were commands, or belonged to one, before ``ddrl`` had subcommands
#: (ddrl/cli.py): ``python main.py`` still takes them (with a note naming the subcommand);
#: ``ddrl train -h`` and ``ddrl sweep -h`` do not show them, and ``ddrl train`` refuses them.
COMMAND_FLAGS = ("list", "evaluate", "eval_seeds", "record_video", "video_episodes",
                 "model_card", "export", "export_format", "export_out", "export_policy", "tune")
#: the parser's program name for each caller: main.py (the seed's form) or a ddrl subcommand
PROGS = {"main": "python main.py", "train": "ddrl train", "sweep": "ddrl sweep SPEC"}


def hide(parser, dests):
    """Leave the flags ``dests`` out of -h (they still parse)."""
    for action in parser._actions:
        if action.dest in dests:
            action.help = argparse.SUPPRESS


def sweep_flags(parser):
    """The dests of the sweep group's flags (what only ``ddrl sweep`` shows)."""
    group = next(g for g in parser._action_groups if g.title.startswith("sweeps"))
    return {a.dest for a in group._group_actions}


def build_parser(argv, command="main"):
    """The full parser for ``argv`` (two passes: --user_dir, --config or the automatic preset
    and the chosen plugins' flags first), with the user dir and the preset it applied.
    ``command``: who parses (PROGS): main.py shows every flag; ``ddrl train`` hides the old
    command flags and the sweep's, ``ddrl sweep`` the old command flags."""
    pre = Parser(add_help=False)
    pre.add_argument("--user_dir", default=None)
    pre.add_argument("--config", default=None)
    pre.add_argument("--list", action="store_true")
    pre.add_argument("--restore", default=None)
    pre.add_argument("--evaluate", default=None)
    early, _ = pre.parse_known_args(argv)
    if early.evaluate and not early.restore:
        from core.run.checkpoint import saved_model_path
        early.restore = saved_model_path(early.evaluate)  # the same configuration rules
    no_preset = early.config is not None and early.config.lower() == "none"
    if early.config and not no_preset:
        early.config = config_file(early.config)  # config.yaml records the file it read
    config = load_config(early.config) if early.config and not no_preset else {}
    user_code = {}  # kind -> the module that registered the restored run's plugin, if any
    if early.restore and early.config is None:
        # Resume with the configuration the checkpoint was trained with; flags given win.
        early.config, no_preset = "none", True
        config = restored_config(early.restore, "--evaluate" if early.evaluate else "--restore",
                                 user_code)
    user_dir = early.user_dir or config.get("user_dir")
    if user_dir:  # (a sweep's trial on another machine: the job's copy, core/plugins.py)
        import_user_dir(user_dir_here(user_dir))
    from envs import ENV_REGISTRY       # importing the packages registers the built-ins
    from models import MODEL_REGISTRY
    from agents import AGENT_REGISTRY
    if early.list:
        print(plugin_listing(registries()))
        raise SystemExit(0)

    parser = Parser(prog=PROGS[command], description="ddrl: distributed deep RL on Ray",
                    add_help=False)
    add_common_args(parser)
    get_custom_args(parser)
    if command != "main":
        hide(parser, set(COMMAND_FLAGS) | (sweep_flags(parser) if command == "train" else set()))
    _apply_config(parser, config, strict=False)
    known, _ = parser.parse_known_args(argv)
    if early.restore:
        for key in ("env_name", "model_name", "agent_name"):
            saved, wanted = config.get(key), vars(known)[key]
            if saved is not None and wanted is not None and saved != wanted:
                raise ConfigError(f"{'--evaluate' if early.evaluate else '--restore'} "
                                  f"{early.restore}: saved with --{key} {saved}, "
                                  f"this run has --{key} {wanted}. A checkpoint continues "
                                  f"with the plugins it was trained with.")

    model_cls = chosen_class(MODEL_REGISTRY, "model", known.model_name, user_code)
    if known.agent_name is None:
        known.agent_name = getattr(model_cls, "default_agent", "default_agent")
        parser.set_defaults(agent_name=known.agent_name)
    chosen = [("env", chosen_class(ENV_REGISTRY, "env", known.env_name, user_code),
               known.env_name),
              ("model", model_cls, known.model_name),
              ("agent", chosen_class(AGENT_REGISTRY, "agent", known.agent_name, user_code),
               known.agent_name)]
    for kind, cls, name in chosen:
        add_args = getattr(unwrap_actor_class(cls), "add_args", None)
        if add_args is not None:
            add_args(parser.add_argument_group(f"{kind} {name!r}"))
    # The training loop the model names may bring flags of its own (SAC: replay, learners).
    from core.algos.trainers import trainer_class
    trainer_class(chosen[1][1].trainer, chosen[1][1]).add_args(parser)
    # ... and defaults of its own for them (r2d2: batches and a buffer counted in sequences)
    parser.set_defaults(**getattr(chosen[1][1], "loop_defaults", {}))
    # The chosen trackers' flags (--logger); a configuration's flags of trackers not chosen now
    # (a run restored with another --logger) are left alone.
    from core.registry import registry_of
    for name in known.logger:
        add_args = getattr(registry_of("logger").get(name), "add_args", None)
        if add_args is not None:
            add_args(parser.add_argument_group(f"logger {name!r}"))
    unchosen = logger_flags([n for n in registry_of("logger").names() if n not in known.logger])
    unchosen |= replaced_plugin_flags(config, chosen, parser)
    _apply_config(parser, {k: v for k, v in config.items() if k not in unchosen}, strict=True)
    preset = None
    if early.config is None:
        parsed = parser.parse_known_args(argv)[0]
        preset = find_preset(known.model_name, env_label(chosen[0][1], parsed) or known.env_name)
        if preset:  # named after the model and env only: keys the chosen agent lacks are skipped
            _apply_config(parser, load_config(preset), strict=False)
    # Not flags: what core.plugins.make_env and --record_video set on an env's config
    # (core/config.py ENV_EXTRAS), present in the namespace so that an env built from it sees them.
    parser.set_defaults(evaluation=False, render_mode=None)
    parser.add_argument("-h", "--help", action="help", help="show this help and exit")
    return parser, user_dir, None if no_preset else (early.config or preset)


def replaced_plugin_flags(config, chosen, parser):
    """The keys of ``config`` (a preset) that are flags of a plugin it names but the command line
    replaced (``--config ppo-atari.yaml --env_name envpool_env``: the preset's gym_id is
    gym_env's), and not flags of the run's own plugins: they no longer apply, so they are left
    out with a line on stderr instead of failing as unknown flags."""
    from core.algos.trainers import trainer_class
    from core.config import flag_actions
    from core.registry import registry_of
    known = {a.dest for a in parser._actions}
    dropped = {}
    for kind, _cls, name in chosen:
        was = config.get(f"{kind}_name")
        if was is None or was == name or was not in registry_of(kind).names():
            continue
        cls = unwrap_actor_class(registry_of(kind).get(was))
        actions = flag_actions(getattr(cls, "add_args", None))
        if kind == "model":
            actions += flag_actions(trainer_class(cls.trainer, cls).add_args)
        keys = sorted({a.dest for a in actions} & set(config) - known)
        if keys:
            dropped[f"{kind} {was!r}"] = keys
    if dropped:
        print("--config: left out, as flags of a plugin the command line replaced: "
              + "; ".join(f"{', '.join(keys)} ({owner})" for owner, keys in dropped.items()),
              file=sys.stderr)
    return {k for keys in dropped.values() for k in keys}


def app_only_keys():
    """The dests of the common flags marked ``app_only`` (and custom_options', which a user
    may mark alike)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_common_args(parser)
    get_custom_args(parser)
    return tuple(a.dest for a in parser._actions if getattr(a, "app_only", False))


#: Common flags only the application reads (the command itself, Ray's start, sweeps, outputs):
#: in no component's config, so never pickled into an actor. Made from the flags' own marks.
APP_ONLY_KEYS = app_only_keys()


#: The packages of the built-in plugins: each publishes its registry when imported, and every
#: process that builds a run's plugins (a Ray worker's too) imports them by these names
#: (core/plugins.py load_plugins), so the library below never names them.
PLUGIN_PACKAGES = ("envs", "models", "agents")


def run_wide_actions():
    """The actions of the flags every component may read: the common ones and custom_options',
    less the application's own."""
    parser = argparse.ArgumentParser(add_help=False)
    add_common_args(parser)
    get_custom_args(parser)
    return [a for a in parser._actions if a.option_strings and a.dest not in APP_ONLY_KEYS]


def run_spec(args, gpus=None):
    """The run's core.plugins.PluginSpec from parsed ``args``: each component's typed config
    (core/config.py) made from the flags its class adds, plus the run-wide ones."""
    from core.algos.trainers import trainer_class
    from core.config import ENV_EXTRAS, flag_actions, make_config
    from core.plugins import PluginSpec, load_plugins
    values = vars(args)
    names = (args.env_name, args.model_name, args.agent_name)
    plugins = load_plugins(argparse.Namespace(  # (the names and user_dir, which args has)
        env_name=args.env_name, model_name=args.model_name, agent_name=args.agent_name,
        user_dir=args.user_dir, plugin_packages=PLUGIN_PACKAGES))
    run = run_wide_actions()

    def config(name, cls, extras=()):
        own = flag_actions(getattr(unwrap_actor_class(cls), "add_args", None))
        return make_config(name, own + run, values, extras)
    loop_cls = trainer_class(plugins.model_cls.trainer, plugins.model_cls)
    own = []
    for kind, name in zip(("env", "model", "agent"), names):
        if registered_by_user_code(kind, name):  # a Ray worker has not run the user's code
            cls = registry_of(kind).get(name)
            ship_by_value(unwrap_actor_class(cls))
            own.append((kind, name, cls))
    return PluginSpec(*names, run=make_config("RunConfig", run, values),
                      env=config("EnvConfig", plugins.env_cls, ENV_EXTRAS),
                      model=config("ModelConfig", plugins.model_cls),
                      agent=config("AgentConfig", plugins.agent_cls),
                      loop=config("LoopConfig", loop_cls),
                      user_dir=args.user_dir, gpus=gpus, plugin_packages=PLUGIN_PACKAGES,
                      own_plugins=tuple(own))


def parse_args(argv=None, command="main"):
    """Parse the command line; returns the argparse.Namespace. Raises ConfigError.
    ``command``: who parses (build_parser)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, user_dir, config = build_parser(argv, command)
    args = parser.parse_args(argv)
    args.user_dir = user_dir
    args.config = config
    return args


def flag_actions(argv):
    """{dest: argparse action} of every flag a run with ``argv`` has (plugins' and the training
    loop's included): what a sweep's SPEC may name."""
    parser, _, _ = build_parser(list(argv))
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}


CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def is_mujoco_id(gym_id):
    """A gymnasium id whose env is one of gymnasium's MuJoCo envs (HalfCheetah-v5, ...)."""
    import gymnasium
    spec = gymnasium.envs.registry.get(gym_id)
    return spec is not None and str(spec.entry_point).startswith("gymnasium.envs.mujoco")


def find_preset(model_name, label):
    """The tuned preset for this model and env, applied when no --config is given, as RL-Zoo
    does: configs/<model>-<label>.yaml, ``label`` being the env's own (core.plugins.env_label:
    gym_env's gymnasium id) or its --env_name. --config none skips it. Atari ids
    (ALE/Breakout-v5 is looked up as ALE-Breakout-v5) fall back to configs/<model>-atari.yaml,
    one preset for every game as RL-Zoo's, and gymnasium's MuJoCo ids to
    configs/<model>-mujoco.yaml, BabyAI's (BabyAI-...) to configs/<model>-babyai.yaml (it keeps
    the mission) and MiniGrid's (MiniGrid-..., and BabyAI's for a model without a BabyAI
    preset) to configs/<model>-minigrid.yaml."""
    names = [label.replace("/", "-")]
    if label.startswith("ALE/") or "NoFrameskip" in label:
        names.append("atari")
    elif is_mujoco_id(label):
        names.append("mujoco")
    elif label.startswith("BabyAI-"):
        names += ["babyai", "minigrid"]
    elif label.startswith("MiniGrid-"):
        names.append("minigrid")
    for name in names:
        path = os.path.join(CONFIG_DIR, f"{model_name}-{name}.yaml")
        if os.path.isfile(path):
            return path
    return None
