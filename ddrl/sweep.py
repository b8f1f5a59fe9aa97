"""Hyperparameter sweeps on Ray Tune, from main.py's own command line.

    ddrl sweep sweep.yaml --gym_id CartPole-v1 --num_workers 0 --num_samples 8 \\
        --max_concurrent 2 --scheduler asha --run_dir runs/sweep-cartpole
    ddrl sweep resume runs/sweep-cartpole      # continue an interrupted sweep
    (python main.py ... --tune sweep.yaml and --restore DIR, the old form, work too)

Each trial is a whole ddrl run (ddrl/session.py) in a Tune trial actor, in
RUN_DIR/trials/<trial id>, with the sweep's fixed flags plus the values Tune sampled from the
SPEC (options/sweep_spec.py). At every evaluation the trial writes a checkpoint and reports
``eval_return`` against ``env_steps`` to Tune: ASHA stops trials that trail at a rung, PBT copies
a better trial's checkpoint and perturbs the SPEC's flags. A trial that Tune restarts (resume,
PBT) continues from its checkpoint with ddrl's exact resume.

RUN_DIR gets: sweep.json (the command, for ``ddrl sweep resume``), spec.yaml (the SPEC as given), tune/
(Tune's experiment state), trials/ (one ddrl run directory each), sweep.csv (every trial's
flags and results), best.yaml (the best trial's configuration: ``--config best.yaml``
re-runs it) and sweep.png (eval return against env steps, every trial).
"""
import csv
import json
import os
import shutil
import sys
import time

from core.errors import ConfigError
from core.run.observer import RunObserver
from options.sweep_spec import (SWEEP_SWITCHES, SWEEP_VALUE_FLAGS, Dist, check_spec, config_to_argv,
                             flags_given, load_spec, mutations, search_space, spec_file)

METRIC = "eval_return"
SWEEP_FILE = "sweep.json"
# Written by the driver into a trial's run directory when Tune's scheduler ended the trial
# before it wrote summary.json (Tune ends the trial's actor at once).
STOPPED_FILE = "stopped_by_scheduler"
ERROR_FILE = "trial_error"  # the same when the trial raised (Tune's error.txt has the traceback)
# Keys of a trial's config.yaml that best.yaml leaves out: the sweep's own and how it ran.
NOT_IN_BEST = set(SWEEP_VALUE_FLAGS) | set(SWEEP_SWITCHES)


#: flags naming a file or folder: made absolute for the trials, which run in Tune's own
#: working directory (a relative --config found nothing there)
PATH_FLAGS = ("config", "user_dir")


def _absolute(value):
    return value if value.lower() == "none" else os.path.abspath(os.path.expanduser(value))


def trial_base_argv(argv):
    """``argv`` without the sweep's own flags, its paths absolute: what every trial runs
    with."""
    out, skip, path_next = [], False, False
    for token in argv:
        if skip:
            skip = False
            continue
        if path_next:
            path_next = False
            out.append(_absolute(token))
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_") if token.startswith("--") else None
        if name in SWEEP_VALUE_FLAGS:
            skip = "=" not in token
            continue
        if name in SWEEP_SWITCHES:
            continue
        if name in PATH_FLAGS:
            if "=" in token:
                flag, value = token.split("=", 1)
                token = f"{flag}={_absolute(value)}"
            else:
                path_next = True
        out.append(token)
    return out


def saved_sweep(path, others=()):
    """(the argv a sweep in ``path`` was started with, its absolute directory), to go on with
    it (``ddrl sweep resume DIR``); ``others``: flags given beside it, which cannot change a
    sweep's (a ConfigError naming them)."""
    if not os.path.isfile(os.path.join(path, SWEEP_FILE)):
        raise ConfigError(f"sweep resume {path}: not a sweep directory (no {SWEEP_FILE} in it: "
                          f"a sweep writes one when it starts).")
    if others:
        raise ConfigError(f"resuming the sweep in {path} goes on with the flags it was started "
                          f"with; {', '.join(others)} cannot change them. Start a new sweep "
                          f"(another --run_dir) to change them.")
    with open(os.path.join(path, SWEEP_FILE)) as f:
        saved = json.load(f)
    return saved["argv"], os.path.abspath(path)


# -- the trial: one ddrl run inside a Tune trial actor ------------------------------------------
def run_trial(config, base_argv, sweep_dir, pbt):
    """Tune's function trainable: parse the trial's flags, restore what there is to restore,
    train, report at every evaluation."""
    from ray import tune

    from ddrl.session import TrainingSession
    from options.options import flag_actions, parse_args
    start_time = time.time()
    trial_id = tune.get_context().get_trial_id()
    run_dir = os.path.join(sweep_dir, "trials", trial_id)
    argv = (list(base_argv) + config_to_argv(config, flag_actions(base_argv))
            + ["--run_dir", run_dir, "--quiet"])
    restore = None
    given = tune.get_checkpoint()  # PBT's exploit, or Tune restarting this trial
    if given is not None:
        incoming = os.path.join(run_dir, "checkpoints", "incoming")
        shutil.rmtree(incoming, ignore_errors=True)
        given.to_directory(incoming)
        restore = os.path.join(incoming, "last.pt")
    elif os.path.isfile(os.path.join(run_dir, "checkpoints", "last.pt")):
        restore = run_dir  # the sweep was interrupted: this trial goes on where it stopped
    elif os.path.isdir(run_dir):
        shutil.rmtree(run_dir)  # stopped before its first checkpoint: start it again
    if restore:
        argv += ["--restore", restore]
    args = parse_args(argv)
    reporter = TuneReporter(pbt)
    session = TrainingSession(args, start_time, observers=[reporter])
    session.run()  # an error raises: Tune records it as the trial's
    # The last evaluation is reported only now, with summary.json written: Tune ends a trial
    # (its actor) as soon as the scheduler has its last result.
    summary = session.context.summary()
    if summary.get("last_eval_return") is not None:
        tune.report({"env_steps": int(summary["env_steps"]),
                     METRIC: float(summary["last_eval_return"]),
                     "best_eval_return": float(summary["best_eval_return"]),
                     "wall_time_s": float(summary["wall_time_s"])})


class TuneReporter(RunObserver):
    """After each metrics row with an evaluation: a checkpoint, then ``tune.report`` (Tune's
    scheduler may end the trial there; the checkpoint is what it leaves). Not for the row
    after which the run stops by itself: run_trial reports that one once the run is done.
    When Tune stops the trial gracefully, report raises SystemExit in this thread: the run
    then stops at this row like an interrupted one."""

    phase = "reporter"  # after the row is in metrics.csv: Tune may end the trial at report

    def __init__(self, pbt):
        self.pbt = pbt

    def on_row(self, run, row):
        if row.get("eval_return") is None:
            return
        if run.stop_requested is not None or run.env_steps >= run.config["total_steps"]:
            return  # the run stops at this row: run_trial reports it once it is done
        from ray import tune
        path = run.save_checkpoint("sweep_report")
        checkpoint = None
        if self.pbt:  # PBT hands checkpoints between trials: this one alone, not the history
            folder = os.path.join(run.run_dir, "checkpoints", "for_tune")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            os.link(path, os.path.join(folder, "last.pt"))
            checkpoint = tune.Checkpoint.from_directory(folder)
        metrics = {"env_steps": int(run.env_steps), METRIC: float(row["eval_return"]),
                   "best_eval_return": float(run.best_eval_return),
                   "wall_time_s": float(row["wall_time_s"])}
        try:
            tune.report(metrics, checkpoint=checkpoint)
        except SystemExit:
            run.stop("stopped_by_scheduler")


# -- the driver ---------------------------------------------------------------------------------
class Sweep:
    def __init__(self, args, argv, sweep_dir=None):
        self.args = args
        self.resuming = sweep_dir is not None
        self.sweep_dir = sweep_dir or os.path.abspath(args.run_dir or default_sweep_dir(args))
        self.base_argv = trial_base_argv(argv)
        spec_path = (os.path.join(self.sweep_dir, "spec.yaml") if self.resuming
                     else spec_file(args.tune))
        self.spec = load_spec(spec_path)
        from options.options import flag_actions
        self.actions = flag_actions(self.base_argv)
        check_spec(self.spec, self.actions, args.tune, args.search)
        both = flags_given(self.base_argv, self.spec)
        if both:
            raise ConfigError(f"--tune {args.tune} varies {', '.join(both)}, which the command "
                              f"line also sets; give each flag in one place only.")
        if args.scheduler == "pbt" and args.search != "random":
            raise ConfigError("--scheduler pbt chooses new values itself (it perturbs the "
                              "SPEC's flags); use it with --search random.")
        if not self.resuming:
            self.start_directory(argv, spec_path)
        # A trial's own process (learner, evaluator, in-process worker) reserves
        # --cpus_per_trial, each of its rollout workers one more, as bundles of one placement
        # group: ddrl's actors are placed inside it (core/distributed/placement.py near_driver).
        self.bundles = [{"CPU": float(args.cpus_per_trial or 1.0)}] + \
            [{"CPU": 1.0}] * self.max_workers()
        self.cpus_per_trial = sum(b["CPU"] for b in self.bundles)

    def max_workers(self):
        entry = self.spec.get("num_workers", self.args.num_workers)
        values = entry.candidates() if isinstance(entry, Dist) else [entry]
        return max(int(v) for v in values)

    def start_directory(self, argv, spec_path):
        if os.path.exists(self.sweep_dir) and os.listdir(self.sweep_dir):
            raise ConfigError(f"--run_dir {self.sweep_dir} is not empty. A sweep starts in a "
                              f"new directory; continue an interrupted one with `ddrl sweep "
                              f"resume {self.sweep_dir}`.")
        os.makedirs(self.sweep_dir, exist_ok=True)
        shutil.copyfile(spec_path, os.path.join(self.sweep_dir, "spec.yaml"))
        from core.run.metrics import write_json
        saved = [t for t in argv]
        if self.args.run_dir is None:  # --restore must find the same directory again
            saved += ["--run_dir", self.sweep_dir]
        write_json(os.path.join(self.sweep_dir, SWEEP_FILE),
                   {"argv": saved, "started": time.strftime("%Y-%m-%d %H:%M:%S")})

    def run(self):
        # Tune's own progress output off (verbose=0 leaves the new engine's banner on): the
        # TrialTable callback prints the sweep's lines.
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        try:
            from ray import tune
        except ImportError as exc:
            raise ConfigError(f"--tune needs Ray Tune and Optuna: `pip install -r "
                              f"requirements.txt` (or `make setup`) installs them ({exc}).") \
                from None
        from core.distributed.placement import start_ray
        import ray
        start_ray(self.args)
        try:
            return self.fit(tune, ray)
        finally:
            if not self.args.address:
                ray.shutdown()

    def fit(self, tune, ray):
        args = self.args
        cpus = ray.cluster_resources().get("CPU", 1.0)
        if self.cpus_per_trial > cpus:
            raise ConfigError(f"a trial needs {self.cpus_per_trial:g} CPUs (--cpus_per_trial "
                              f"for its process, 1 per rollout worker) but the Ray cluster has "
                              f"{cpus:g}. Lower --num_workers (0 runs a trial in one process).")
        concurrent = (max(1, int(cpus // self.cpus_per_trial)) if args.max_concurrent == "auto"
                      else args.max_concurrent)
        trainable = tune.with_resources(
            tune.with_parameters(run_trial, base_argv=self.base_argv, sweep_dir=self.sweep_dir,
                                 pbt=args.scheduler == "pbt"),
            tune.PlacementGroupFactory(self.bundles))
        table = trial_table(self, quiet=args.quiet)
        # Tune keeps every checkpoint a trial reports (only PBT's trials report any): a
        # num_to_keep would delete the one another trial is about to copy.
        run_config = tune.RunConfig(storage_path=self.sweep_dir, name="tune", verbose=0,
                                    callbacks=[table])
        space = search_space(self.spec)
        if not args.quiet:
            print(f"ddrl sweep: {args.num_samples} sample(s) of {len(self.spec)} flag(s) "
                  f"({', '.join(self.spec)}), {args.search} search, {args.scheduler} scheduler, "
                  f"{concurrent} at a time x {self.cpus_per_trial:g} CPUs, in {self.sweep_dir}",
                  flush=True)
        tune_dir = os.path.join(self.sweep_dir, "tune")
        if self.resuming and tune.Tuner.can_restore(tune_dir):
            tuner = tune.Tuner.restore(tune_dir, trainable, param_space=space,
                                       resume_unfinished=True, resume_errored=True)
        else:
            tuner = tune.Tuner(trainable, param_space=space, run_config=run_config,
                               tune_config=tune.TuneConfig(
                                   metric=METRIC, mode="max", num_samples=args.num_samples,
                                   search_alg=self.search_alg(concurrent),
                                   scheduler=self.scheduler()))
        interrupted = False
        try:
            tuner.fit()
        except KeyboardInterrupt:
            interrupted = True
        return self.finish(interrupted)

    def expected_trials(self):
        grid = 1
        for entry in self.spec.values():
            if isinstance(entry, Dist) and entry.kind == "grid":
                grid *= len(entry.values)
        return self.args.num_samples * grid

    def search_alg(self, concurrent):
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.basic_variant import BasicVariantGenerator
        if self.args.search == "random":
            return BasicVariantGenerator(random_state=self.args.seed, max_concurrent=concurrent)
        import optuna
        from ray.tune.search.optuna import OptunaSearch
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return ConcurrencyLimiter(OptunaSearch(sampler=optuna.samplers.TPESampler(
            seed=self.args.seed)), max_concurrent=concurrent)

    def scheduler(self):
        from ray.tune.schedulers import (ASHAScheduler, FIFOScheduler,
                                         PopulationBasedTraining)
        args = self.args
        if args.scheduler == "asha":
            grace = (max(args.eval_interval, args.total_steps // 8) if args.grace_steps == "auto"
                     else args.grace_steps)
            return ASHAScheduler(time_attr="env_steps", max_t=args.total_steps,
                                 grace_period=grace, reduction_factor=args.reduction_factor)
        if args.scheduler == "pbt":
            interval = (max(args.eval_interval, args.total_steps // 8)
                        if args.pbt_interval == "auto" else args.pbt_interval)
            return PopulationBasedTraining(time_attr="env_steps", perturbation_interval=interval,
                                           hyperparam_mutations=mutations(self.spec))
        return FIFOScheduler()

    # -- outputs ---------------------------------------------------------------------------
    def trial_rows(self):
        """One row per trial from its run directory (config, summary.json, metrics.csv), in
        trial order, whether this process ran it or an earlier one did."""
        trials_dir = os.path.join(self.sweep_dir, "trials")
        rows = []
        for trial_id in sorted(os.listdir(trials_dir)) if os.path.isdir(trials_dir) else []:
            rows.append(TrialRow.read(os.path.join(trials_dir, trial_id), trial_id, self.spec))
        return rows

    def finish(self, interrupted):
        """Outputs from the trials' run directories (also those an earlier process ran); the
        sweep counts as interrupted when a trial is unfinished or was never started."""
        rows = self.trial_rows()
        interrupted = (interrupted or len(rows) < self.expected_trials()
                       or any(r.status == "unfinished" for r in rows))
        self.write_csv(rows)
        best = self.best(rows)
        if best is not None:
            self.write_best(best)
        from core.run.plots import plot_sweep
        plot_sweep(os.path.join(self.sweep_dir, "sweep.png"), rows, best)
        print(self.final_table(rows, best), flush=True)
        if interrupted:
            print(f"ddrl sweep: interrupted; every trial keeps its last checkpoint. Continue "
                  f"with: ddrl sweep resume {self.sweep_dir}", file=sys.stderr, flush=True)
            return 130
        return 0

    def write_csv(self, rows):
        keys = list(self.spec)
        columns = (["trial", "status"] + keys + ["env_steps", "best_eval_return",
                   "last_eval_return", "time_to_target_s", "wall_time_s", "stopped_because",
                   "run_dir"])
        from core.atomic import atomic_write_text
        import io
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row.flags, **row.result, "trial": row.trial_id,
                             "status": row.status, "run_dir": row.run_dir})
        atomic_write_text(os.path.join(self.sweep_dir, "sweep.csv"), out.getvalue())

    @staticmethod
    def best(rows):
        """Highest best eval return; among equals, the one that got there first."""
        scored = [r for r in rows if r.result.get("best_eval_return") is not None]
        if not scored:
            return None

        def key(r):  # env steps before time: they do not depend on the machine's load
            steps = r.result.get("steps_to_target")
            reached = r.result.get("time_to_target_s")
            return (-r.result["best_eval_return"], steps if steps is not None else 1e18,
                    reached if reached is not None else 1e18, r.result.get("env_steps") or 0)
        return min(scored, key=key)

    def write_best(self, best):
        import yaml
        from core.atomic import atomic_write_text
        with open(os.path.join(best.run_dir, "config.yaml")) as f:
            config = yaml.safe_load(f) or {}
        config = {k: v for k, v in config.items() if k not in NOT_IN_BEST}
        flags = ", ".join(f"{k}={v}" for k, v in best.flags.items())
        header = (f"# The best trial of the sweep in {self.sweep_dir}: {best.trial_id} ({flags}),\n"
                  f"# best eval return {best.result['best_eval_return']:.2f} in "
                  f"{best.result.get('env_steps')} env steps. Re-run it with\n"
                  f"#     ddrl train --config best.yaml\n")
        atomic_write_text(os.path.join(self.sweep_dir, "best.yaml"),
                          header + yaml.safe_dump(config, sort_keys=False))

    def final_table(self, rows, best):
        lines = [f"ddrl sweep: {len(rows)} trial(s) in {self.sweep_dir}"]
        for row in sorted(rows, key=lambda r: -(r.result.get("best_eval_return") or -1e18)):
            lines.append(("* " if row is best else "  ") + row.line())
        if best is not None:
            lines.append(f"best: {best.trial_id}; its configuration: "
                         f"{os.path.join(self.sweep_dir, 'best.yaml')} (ddrl train --config "
                         f"{os.path.join(self.sweep_dir, 'best.yaml')})")
        lines.append(f"all trials: {os.path.join(self.sweep_dir, 'sweep.csv')}, "
                     f"{os.path.join(self.sweep_dir, 'sweep.png')}")
        if "seed" in self.spec:  # several seeds of a configuration: their IQMs and intervals
            lines.append(f"across seeds: ddrl report {os.path.join(self.sweep_dir, 'trials')}")
        return "\n".join(lines)


def default_sweep_dir(args):
    from ddrl.session import run_label
    from core.plugins import env_label
    from envs import ENV_REGISTRY
    label = run_label(args, env_label(ENV_REGISTRY.get(args.env_name), args))
    return os.path.join("runs", f"sweep-{label}-{time.strftime('%Y%m%d-%H%M%S')}")


class TrialRow:
    """A trial's flags, status and results, read from its run directory."""

    def __init__(self, trial_id, run_dir, flags, status, result):
        self.trial_id, self.run_dir, self.flags = trial_id, run_dir, flags
        self.status, self.result = status, result

    @classmethod
    def read(cls, run_dir, trial_id, spec):
        import yaml
        flags, result = {}, {}
        try:
            with open(os.path.join(run_dir, "config.yaml")) as f:
                config = yaml.safe_load(f) or {}
            flags = {k: config.get(k) for k in spec}
        except OSError:
            pass
        try:
            with open(os.path.join(run_dir, "summary.json")) as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = last_metrics(run_dir)
            if os.path.isfile(os.path.join(run_dir, STOPPED_FILE)):
                result["stopped_because"] = "stopped_by_scheduler"
            elif os.path.isfile(os.path.join(run_dir, ERROR_FILE)):
                result["stopped_because"] = "error"
        if result.get("stopped_because") == "error":
            status = "error"
        elif result.get("stopped_because") == "stopped_by_scheduler":
            status = "stopped early"
        elif result.get("stopped_because") in ("total_steps", "target_return", "max_time"):
            status = "done"
        else:
            status = "unfinished"
        return cls(trial_id, run_dir, flags, status, result)

    def line(self):
        flags = " ".join(f"{k}={short(v)}" for k, v in self.flags.items())
        r = self.result
        best = r.get("best_eval_return")
        return (f"{self.trial_id}  {flags} | {int(r.get('env_steps') or 0):,} steps | best eval "
                f"{'-' if best is None else format(best, '.1f')} | {self.status}"
                + (f" ({r['stopped_because']})" if r.get("stopped_because") else ""))


def last_metrics(run_dir):
    """Results of a trial without summary.json (still running or killed): its metrics.csv."""
    path = os.path.join(run_dir, "metrics.csv")
    result = {}
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                result["env_steps"] = int(float(row["env_steps"]))
                result["wall_time_s"] = float(row["wall_time_s"])
                if row.get("eval_return") not in (None, ""):
                    value = float(row["eval_return"])
                    result["last_eval_return"] = value
                    best = result.get("best_eval_return")
                    result["best_eval_return"] = value if best is None else max(best, value)
    except (OSError, ValueError, KeyError):
        pass
    return result


def short(value):
    return format(value, ".3g") if isinstance(value, float) else str(value)


def make_trial_table():
    from ray.tune import Callback

    class TrialTable(Callback):
        """The live view: one line per trial at each of its evaluations and at its end."""

        def __init__(self, sweep_dir, keys, scheduler, quiet=False):
            # Plain data only: Tune pickles its callbacks with the experiment and a resumed
            # sweep runs that copy.
            self.sweep_dir, self.keys, self.scheduler = sweep_dir, list(keys), scheduler
            self.quiet = quiet

        def show(self, trial, text):
            if not self.quiet:
                flags = " ".join(f"{k}={short(trial.config.get(k))}" for k in self.keys)
                print(f"[sweep] {trial.trial_id}  {flags} | {text}", flush=True)

        def mark(self, trial, name):
            """A marker file in the trial's run directory when it has no summary.json."""
            run_dir = os.path.join(self.sweep_dir, "trials", trial.trial_id)
            if os.path.isdir(run_dir) and not os.path.exists(os.path.join(run_dir,
                                                                          "summary.json")):
                open(os.path.join(run_dir, name), "w").close()
                return True
            return False

        def on_trial_start(self, iteration, trials, trial, **info):
            self.show(trial, "started")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.show(trial, f"{int(result.get('env_steps', 0)):,} steps | eval "
                             f"{result.get(METRIC, float('nan')):.1f} (best "
                             f"{result.get('best_eval_return', float('nan')):.1f})")

        def on_trial_complete(self, iteration, trials, trial, **info):
            result = trial.last_result or {}
            how = (f"stopped by {self.scheduler.upper()}" if self.mark(trial, STOPPED_FILE)
                   else "finished")
            self.show(trial, f"{how} at {int(result.get('env_steps', 0)):,} steps, best "
                             f"eval {result.get('best_eval_return', float('nan')):.1f}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self.mark(trial, ERROR_FILE)
            self.show(trial, f"error (traceback in {trial.local_path or 'its Tune directory'})")

    return TrialTable


def trial_table(sweep, quiet=False):
    """The live view's Tune callback (its class is made here: Ray Tune is imported only when a
    sweep runs)."""
    return make_trial_table()(sweep.sweep_dir, sweep.spec, sweep.args.scheduler, quiet=quiet)


def run_sweep(args, argv, sweep_dir=None):
    return Sweep(args, argv, sweep_dir).run()
