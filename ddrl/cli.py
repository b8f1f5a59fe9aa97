"""The ``ddrl`` command: a subcommand for each thing a user does (Sample Factory's train.py,
enjoy.py and export_onnx.py, as subcommands of one command).

    ddrl train [FLAGS]              train; `python main.py FLAGS` is the same (the seed's form)
    ddrl evaluate PATH [...]        the returns of a saved model (a run directory or a .pt file)
    ddrl export PATH [--format onnx|pt2] [--out FILE] [--policy NAME]
    ddrl card RUN_DIR               (re)write a run's model card, RUN_DIR/README.md
    ddrl sweep SPEC [FLAGS]         a hyperparameter sweep of whole runs (Ray Tune)
    ddrl sweep resume DIR           go on with an interrupted sweep
    ddrl cluster start|stop ...     Ray nodes on this machine's loopback (for --address)
    ddrl list [--user_dir DIR]      the registered envs, models, agents, loggers; the presets
    ddrl check [FLAGS] [--steps N]  an env plugin tried against ddrl's contract
    ddrl dataset PATH --out TARGET --steps N   a saved policy's rollouts as a Minari dataset
    ddrl report PATH [PATH ...]     finished runs across seeds: IQMs with intervals, curves

Only ``train`` and ``sweep`` build the plugin and loop flags (``ddrl train --model_name sac -h``
lists SAC's); the others take a path and a few flags of their own. Exit codes: 0 done, 1 a fault
past its limit or another error (a training run's directory still has its checkpoint and
summary.json), 2 bad input, 130 Ctrl-C, 143 SIGTERM.

The flags that were commands before (``--evaluate``, ``--export``, ``--model_card``, ``--tune``,
``--list``, ``--restore`` of a sweep) still work with ``python main.py`` for this release, each
with a one-line note naming its subcommand; two of them in one line are an error.
"""
import time

START_TIME = time.time()  # time to target is measured from process start

import argparse  # noqa: E402 - after START_TIME, the first thing the process does
import os  # noqa: E402
import sys  # noqa: E402

#: subcommand -> one line for `ddrl -h`
COMMANDS = {
    "train": "train a policy (the flags of `python main.py`; `ddrl train -h` lists them)",
    "evaluate": "run episodes with a saved model and print their returns",
    "export": "write a saved model's acting path to ONNX or a torch.export program",
    "card": "(re)write a run's model card, RUN_DIR/README.md",
    "sweep": "a hyperparameter sweep (SPEC: flags -> distributions); `sweep resume DIR`",
    "cluster": "start or stop Ray nodes on this machine's loopback",
    "list": "the registered plugins and the presets",
    "check": "try an env plugin against ddrl's contract (reset, step, spaces, seeding)",
    "dataset": "roll out a saved policy into a Minari dataset (what --dataset reads)",
    "report": "finished runs summarized across seeds and compared (IQM, intervals, curves)",
}

#: the old command flags of main.py -> the subcommand that replaces each
OLD_COMMAND_FLAGS = {"evaluate": "evaluate", "export": "export", "model_card": "card",
                     "tune": "sweep", "list": "list"}


def overview():
    width = max(map(len, COMMANDS))
    lines = ["usage: ddrl COMMAND [ARGS]  (ddrl COMMAND -h says more)", "",
             "ddrl: distributed deep reinforcement learning on Ray", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    lines += ["", "python main.py FLAGS is `ddrl train FLAGS`, the seed's command line."]
    return "\n".join(lines)


# -- the commands ------------------------------------------------------------------------------
def train(argv, start_time, leave_quickly=False):
    """``ddrl train FLAGS``: one training run (ddrl/session.py)."""
    from core.errors import ConfigError
    from ddrl.session import TrainingSession
    from options.options import parse_args
    args = parse_args(argv, command="train")
    given = [name for name in OLD_COMMAND_FLAGS if getattr(args, name, None)]
    if given:
        name = given[0]
        raise ConfigError(f"ddrl train --{name}: --{name} is a command of its own now, "
                          f"`ddrl {OLD_COMMAND_FLAGS[name]}` (`ddrl "
                          f"{OLD_COMMAND_FLAGS[name]} -h` shows its flags).")
    if args.record_video:
        raise ConfigError("--record_video goes with `ddrl evaluate PATH` (the saved model to "
                          "film); training runs do not record.")
    return TrainingSession(args, start_time, shutdown_ray=not leave_quickly).run()


def command_parser(name, description, **kwargs):
    from options.options import Parser
    return Parser(prog=f"ddrl {name}", description=description, **kwargs)


def evaluate(argv, start_time=None, leave_quickly=False):
    """``ddrl evaluate PATH``: its own flags, and any flag of the run's to override (an acting
    flag such as selfplay_ppo's --search_depth); see -h."""
    parser = command_parser(
        "evaluate", "Run episodes with a saved model (in this process, no Ray) and print the "
        "mean and spread of their returns. Other flags given after PATH override the run's own "
        "(its configuration comes from the checkpoint), e.g. --search_depth 4.")
    parser.add_argument("path", metavar="PATH",
                        help="a run directory (its checkpoints/best.pt) or a checkpoint file")
    parser.add_argument("--eval_episodes", type=int, default=None,
                        help="episodes per evaluation (default: the run's)")
    parser.add_argument("--eval_seeds", type=int, default=None,
                        help="that many evaluations, the first on the run's own test envs, the "
                             "others with seeds drawn from --seed; each one's mean and their "
                             "mean with a 95%% bootstrap interval (default: 1)")
    parser.add_argument("--eval_deterministic", action=argparse.BooleanOptionalAction,
                        default=None, help="the most likely action (default: the run's)")
    parser.add_argument("--record_video", default=None, metavar="DIR",
                        help="also write --video_episodes episodes to DIR/episode-<k>.gif")
    parser.add_argument("--video_episodes", type=int, default=None,
                        help="episodes --record_video writes (default: 1)")
    own, overrides = parser.parse_known_args(argv)
    extra = [f"--{k}" if v is True else f"--no-{k}" if v is False else [f"--{k}", str(v)]
             for k, v in vars(own).items() if k != "path" and v is not None]
    flat = [t for item in extra for t in ([item] if isinstance(item, str) else item)]
    from core.errors import ConfigError
    from core.run.checkpoint import saved_model_path
    from ddrl.playback import evaluate_saved_model
    from options.options import parse_args
    if not os.path.exists(own.path):  # named as typed here, not as main.py's --evaluate
        raise ConfigError(f"evaluate {own.path}: no such file or directory. Give a run "
                          f"directory (its checkpoints/best.pt is played) or a checkpoint "
                          f"file (.pt).")
    saved_model_path(own.path, "evaluate")  # a directory without checkpoints, named as typed
    evaluate_saved_model(parse_args(["--evaluate", own.path, *flat, *overrides]))
    return 0


def export(argv, start_time=None, leave_quickly=False):
    """``ddrl export PATH``: load (ddrl.load), export (ddrl/export.py), one line on what was
    written."""
    parser = command_parser(
        "export", "Write a saved model's acting path to one self-contained file, with a JSON "
        "sidecar (inputs, outputs, spaces, the run's flags): ONNX for onnxruntime in any "
        "language, or a torch.export program.")
    parser.add_argument("path", metavar="PATH",
                        help="a run directory (its checkpoints/best.pt) or a checkpoint file")
    parser.add_argument("--format", choices=["onnx", "pt2"], default="onnx",
                        help="onnx or pt2 (default: %(default)s)")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="the file to write (default: the checkpoint's name with .onnx or "
                             ".pt2, beside it)")
    parser.add_argument("--policy", default=None, metavar="NAME",
                        help="for a team of several policies (--policy_map): policy NAME alone, "
                             "its agents' rows in and their actions out")
    args = parser.parse_args(argv)
    export_saved_model(args.path, args.format, args.out, args.policy)
    return 0


def export_saved_model(path, fmt="onnx", out=None, part=None):
    """Load the policy at ``path`` and export it; prints one line; returns the file written."""
    from core.errors import ConfigError
    from core.run.checkpoint import saved_model_path
    from ddrl.export import default_out, export_policy
    from ddrl.policy import load
    if not os.path.exists(path):
        raise ConfigError(f"export {path}: no such file or directory. Give a run directory "
                          f"(its checkpoints/best.pt is exported) or a checkpoint file (.pt).")
    saved_model_path(path, "export")  # a directory without checkpoints, named as typed
    policy = load(path)
    out = out or default_out(policy.path, fmt, part)
    info = export_policy(policy, fmt, out, part)
    names = ", ".join(f"{spec['name']} {spec['dtype']}[{','.join(map(str, spec['shape']))}]"
                      for spec in info["inputs"])
    notes = "".join(f"; {note}" for note in info["notes"])
    which = "" if part is None else f"policy {part} of "
    print(f"ddrl: wrote {out} ({fmt}, {os.path.getsize(out) / 1024:.0f} KiB) and {out}.json: "
          f"{which}{policy.args.model_name} on "
          f"{policy.meta.get('gym_id') or policy.args.env_name}, "
          f"{policy.meta.get('env_steps', '?')} env steps, from {policy.path}; inputs "
          f"{names}{notes}", flush=True)
    return out


def card(argv, start_time=None, leave_quickly=False):
    """``ddrl card RUN_DIR``: the run's model card (core/run/model_card.py)."""
    parser = command_parser(
        "card", "(Re)write RUN_DIR/README.md, the run's model card: what was trained, on what, "
        "with which flags, its evaluations, how to load and export it. A run writes one when "
        "it ends.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    args = parser.parse_args(argv)
    from core.run.model_card import write_model_card
    print(f"ddrl: wrote {write_model_card(args.run_dir)}", flush=True)
    return 0


SWEEP_USAGE = """usage: ddrl sweep SPEC [FLAGS]      a sweep: SPEC maps flags to distributions
       ddrl sweep resume DIR         go on with an interrupted sweep in DIR

SPEC (YAML) maps flags to distributions ({loguniform: [lo, hi]}, {uniform: ...}, {randint: ...},
{choice: [...]}, {grid: [...]}); FLAGS hold for every trial (the flags of `ddrl train`) and say
how the sweep runs (--num_samples, --max_concurrent, --search, --scheduler, ...: `ddrl sweep
SPEC -h` lists them all); every trial is a whole run in RUN_DIR/trials/<id>."""


def sweep(argv, start_time=None, leave_quickly=False):
    """``ddrl sweep SPEC [FLAGS]`` and ``ddrl sweep resume DIR`` (ddrl/sweep.py)."""
    from core.errors import ConfigError
    from ddrl.sweep import run_sweep, saved_sweep
    from options.options import parse_args
    if not argv or argv[0] in ("-h", "--help"):
        print(SWEEP_USAGE)
        return 0 if argv else 2
    if argv[0] == "resume":
        if len(argv) != 2 or argv[1].startswith("-"):
            raise ConfigError("ddrl sweep resume DIR: give the sweep's directory alone; it "
                              "goes on with the flags it was started with.")
        saved_argv, sweep_dir = saved_sweep(argv[1])
        return run_sweep(parse_args(saved_argv, command="sweep"), saved_argv, sweep_dir)
    spec, flags = argv[0], argv[1:]
    if spec.startswith("-"):
        raise ConfigError(f"ddrl sweep {spec}: the SPEC file comes first (`ddrl sweep SPEC "
                          f"[FLAGS]`), then the flags every trial runs with.")
    full = [*flags, "--tune", spec]  # what sweep.json keeps: `sweep resume` parses it again
    return run_sweep(parse_args(full, command="sweep"), full)


def cluster(argv, start_time=None, leave_quickly=False):
    """``ddrl cluster start|stop ...`` (ddrl/cluster.py)."""
    from ddrl.cluster import main as cluster_main
    return cluster_main(argv, prog="ddrl cluster")


def list_plugins(argv, start_time=None, leave_quickly=False):
    """``ddrl list [--user_dir DIR]``: every registered plugin and the presets."""
    parser = command_parser("list", "The registered envs, models, agents and loggers (with "
                                    "--user_dir: its plugins too) and the presets in configs/.")
    parser.add_argument("--user_dir", default=None,
                        help="a folder of your own plugins, listed beside the built-ins")
    args = parser.parse_args(argv)
    from options.options import plugin_listing, registries
    print(plugin_listing(registries(args.user_dir)))
    return 0


def check(argv, start_time=None, leave_quickly=False):
    """``ddrl check FLAGS [--steps N]``: the env the flags name, tried (ddrl/check.py)."""
    from ddrl.check import main as check_main
    return check_main(list(argv))


def dataset(argv, start_time=None, leave_quickly=False):
    """``ddrl dataset PATH --out TARGET --steps N``: a saved policy's rollouts as a Minari
    dataset (ddrl/datasets.py)."""
    parser = command_parser(
        "dataset", "Roll out a saved policy and write its transitions as a Minari dataset "
        "(in this process, no Ray): what `ddrl train --dataset` and Minari's own tools read. "
        "The D4RL recipe for a 'medium' set: a policy stopped at about a third of its final "
        "return, acting with its own sampled actions.")
    parser.add_argument("path", metavar="PATH",
                        help="a run directory (its checkpoints/best.pt) or a checkpoint file")
    parser.add_argument("--out", required=True, metavar="TARGET",
                        help="a directory to write the dataset to (Minari's layout: "
                             "TARGET/data/), or minari:ID (minari:namespace/name-v0) for the "
                             "local Minari store (MINARI_DATASETS_PATH, else "
                             "~/.minari/datasets); an existing dataset is never overwritten")
    parser.add_argument("--steps", type=int, required=True,
                        help="env steps to record, over all envs; the episodes still running "
                             "at the end are left out")
    parser.add_argument("--envs", type=int, default=1, help="envs stepped side by side "
                                                            "(default: %(default)s)")
    parser.add_argument("--deterministic", action="store_true",
                        help="the policy's most likely action (default: its sampled actions)")
    parser.add_argument("--epsilon", type=float, default=0.0,
                        help="probability of a uniform random action instead "
                             "(default: %(default)s)")
    parser.add_argument("--action_noise", type=float, default=0.0,
                        help="Box actions: Gaussian noise of this fraction of the half-range "
                             "added, then clipped to the bounds (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeds the envs and the noise (default: the run's --seed)")
    parser.add_argument("--description", default=None,
                        help="the dataset's description in its metadata")
    args = parser.parse_args(argv)
    from ddrl.datasets import collect_dataset
    collect_dataset(args.path, args.out, args.steps, args.envs, args.deterministic,
                    args.epsilon, args.action_noise, args.seed, args.description)
    return 0


def flag_names(text):
    """--by's value: flag names, comma-separated (leading dashes dropped)."""
    names = [name.strip().lstrip("-") for name in str(text).split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names no flag; write e.g. lr,num_workers")
    return names


def report(argv, start_time=None, leave_quickly=False):
    """``ddrl report PATH [PATH ...]``: finished runs across seeds (ddrl/report.py)."""
    from core.argtypes import positive_int
    parser = command_parser(
        "report", "Summarize finished runs across their seeds and compare configurations, as "
        "rliable does: per env, the runs grouped by the flags that differ among them (the seed "
        "and the output flags aside); for each group the interquartile mean (IQM) of the last "
        "and best evaluation return and of the time to the target, with stratified-bootstrap "
        "intervals, and the probability that a run of the group ends above one of the "
        "baseline. Prints Markdown; --out also writes report.md, report.json and report.png "
        "(each group's IQM learning curve with its band).")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, or folders searched for them (e.g. runs/, a "
                             "sweep's trials/); the first group found is the baseline")
    parser.add_argument("--by", type=flag_names, default=None, metavar="FLAG[,FLAG...]",
                        help="group by these flags (default: every flag whose value differs "
                             "among the runs of an env, less the seed and the output flags)")
    parser.add_argument("--baseline", default=None, metavar="GROUP",
                        help="the group the others are compared with: its label as the table "
                             "shows it, or its row number (default: the first)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="also write DIR/report.md, report.json and report.png")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="the intervals' coverage (default: %(default)s)")
    parser.add_argument("--reps", type=positive_int, default=2000,
                        help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--normalize", default=None, metavar="FILE",
                        help="a YAML file mapping env ids to [low, high] (e.g. a random "
                             "policy's return and a reference): also a table across those envs "
                             "of each configuration's normalized returns (rliable's aggregate "
                             "IQM, P(> baseline)) and, with --out, profile.png")
    args = parser.parse_args(argv)
    from ddrl.report import make_report, markdown, write_report
    result = make_report(args.paths, args.by, args.baseline, args.confidence, args.reps,
                         args.normalize)
    print(markdown(result), end="", flush=True)
    if args.out:
        print(f"ddrl: wrote {', '.join(write_report(result, args.out))}", flush=True)
    return 0


HANDLERS = {"train": train, "evaluate": evaluate, "export": export, "card": card,
            "sweep": sweep, "cluster": cluster, "list": list_plugins, "check": check,
            "dataset": dataset, "report": report}


# -- main.py's old command flags ---------------------------------------------------------------
def old_command(argv):
    """The old command flag ``argv`` uses (a name of OLD_COMMAND_FLAGS, or "sweep_resume" for
    --restore of a sweep directory), or None for a training run; ConfigError for two."""
    from core.errors import ConfigError
    from options.options import Parser
    pre = Parser(add_help=False)
    for name in OLD_COMMAND_FLAGS:
        if name == "list":
            pre.add_argument("--list", action="store_true")
        else:
            pre.add_argument(f"--{name}", default=None)
    pre.add_argument("--restore", default=None)
    early, _ = pre.parse_known_args(argv)
    used = [name for name in OLD_COMMAND_FLAGS if getattr(early, name)]
    if early.restore is not None and is_sweep_dir(early.restore):
        used.append("sweep_resume")
    if len(used) > 1:
        shown = ", ".join("--restore (of a sweep)" if u == "sweep_resume" else f"--{u}"
                          for u in used)
        raise ConfigError(f"{shown}: two commands in one line; each is a command of its own "
                          f"({', '.join(note_target(u) for u in used)}): run them one at a "
                          f"time.")
    return used[0] if used else None


def is_sweep_dir(path):
    from ddrl.sweep import SWEEP_FILE
    return os.path.isfile(os.path.join(path, SWEEP_FILE))


def note_target(used):
    return ("`ddrl sweep resume DIR`" if used == "sweep_resume"
            else f"`ddrl {OLD_COMMAND_FLAGS[used]}`")


def main_py(argv, start_time, leave_quickly=False):
    """``python main.py ARGV``: ``ddrl train ARGV``, and the old command flags for one more
    release (a note on stderr says which subcommand replaces the flag)."""
    used = old_command(argv)
    if used is None:
        from ddrl.session import TrainingSession
        from core.errors import ConfigError
        from options.options import parse_args
        args = parse_args(argv)
        if args.record_video:
            raise ConfigError("--record_video goes with --evaluate PATH (the saved model to "
                              "film); training runs do not record.")
        return TrainingSession(args, start_time, shutdown_ray=not leave_quickly).run()
    flag = "--restore DIR (of a sweep)" if used == "sweep_resume" else f"--{used}"
    print(f"ddrl: note: `python main.py {flag}` is {note_target(used)} now; the flag goes "
          f"away in the next release", file=sys.stderr, flush=True)
    from options.options import parse_args
    if used == "sweep_resume":
        from ddrl.sweep import run_sweep, saved_sweep
        path = early_value(argv, "--restore")
        others = [t for t in argv if t.startswith("--") and not t.startswith("--restore")]
        saved_argv, sweep_dir = saved_sweep(path, others)
        return run_sweep(parse_args(saved_argv), saved_argv, sweep_dir)
    if used == "model_card":
        return card([early_value(argv, "--model_card")])
    if used == "list":
        parse_args(argv)  # --list prints the listing and exits (options/options.py)
        return 0
    args = parse_args(argv)
    if used == "tune":
        from ddrl.sweep import run_sweep
        return run_sweep(args, argv)
    if used == "evaluate":
        from ddrl.playback import evaluate_saved_model
        evaluate_saved_model(args)
        return 0
    export_saved_model(args.export, args.export_format, args.export_out, args.export_policy)
    return 0


def early_value(argv, flag):
    from options.options import Parser
    pre = Parser(add_help=False)
    pre.add_argument(flag, default=None)
    return vars(pre.parse_known_args(argv)[0])[flag.lstrip("-")]


# -- exit codes --------------------------------------------------------------------------------
def run(handler, argv, start_time=START_TIME, leave_quickly=False):
    """``handler(argv, start_time, leave_quickly)``, its outcome as an exit code: 0 done, 1 a
    fault past its limit, 2 bad input (one paragraph, no traceback), 130 Ctrl-C before training
    started; anything else re-raises."""
    from core.errors import ConfigError, EnvFailure, RunFailure
    from core.faults import find_cause
    try:
        return handler(argv, start_time, leave_quickly)
    except KeyboardInterrupt:  # before training started: nothing learned to save
        print("ddrl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # user errors are one paragraph, the rest re-raise
        error = find_cause(exc, ConfigError)  # (raised inside a Ray actor: wrapped)
        if error is not None:
            print(f"ddrl: error: {error}", file=sys.stderr)
            return 2
        failure = find_cause(exc, (RunFailure, EnvFailure))
        if failure is not None:  # a fault past its limit: its own paragraph, no traceback
            print(f"ddrl: error: {failure}", file=sys.stderr)
            return 1
        raise


def dispatch(argv, start_time=START_TIME, leave_quickly=False):
    """``ddrl ARGV``: the exit code."""
    from core.errors import ConfigError
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in HANDLERS:
        import difflib
        close = difflib.get_close_matches(name, list(HANDLERS), n=1, cutoff=0.5)
        hint = (f" Did you mean `ddrl {close[0]}`?" if close else
                f" Flags come after a command: `ddrl train {' '.join(argv)}`."
                if name.startswith("-") else "")
        return run(lambda *_: (_ for _ in ()).throw(ConfigError(
            f"unknown command {name!r}. Commands: {', '.join(HANDLERS)}.{hint}")), [])
    return run(HANDLERS[name], rest, start_time, leave_quickly)


def leave(code, keep_children=False):
    """End the process now: what must be durable (checkpoints, metrics.csv, summary.json, the
    plot) is written and closed by then. Ray's processes (a local instance's GCS, raylet and
    workers: this process's descendants) are killed rather than shut down one by one, which
    took seconds after the run was over; a cluster joined with --address ends this job's
    actors itself when the driver is gone. ``keep_children``: none is killed (the node that
    `ddrl cluster start` started)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if not keep_children:
        from core.process_tree import kill_descendants
        kill_descendants()
    os._exit(code)


def exit_with(function, keep_children=False):
    """Run ``function()`` (an exit code) and end the process quickly with it: -h and argparse's
    own exits as they mean, anything unexpected printed as Python prints it, exit code 1.
    ``keep_children``: what this process started is meant to outlive it (leave())."""
    try:
        code = function()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - printed as Python would, then the same quick exit
        import traceback
        traceback.print_exc()
        code = 1
    leave(code, keep_children)


def main():
    """The ``ddrl`` console script."""
    # `ddrl cluster start` leaves the Ray node it started running: its GCS and raylet are this
    # process's children, which leave() would otherwise kill with it
    exit_with(lambda: dispatch(sys.argv[1:], START_TIME, leave_quickly=True),
              keep_children=sys.argv[1:2] == ["cluster"])


if __name__ == "__main__":
    main()
