"""One training run's lifetime: start (plugins, Ray in the background, run directory, trainer,
restore), the checkpoint timer, the stop flag signals set, and the finish that always happens:
the final checkpoint, summary.json (also after an error: ``stopped_because: "error"`` and the
error's one line), and Ray shut down. main.py only parses, dispatches and maps exit codes, as
Sample Factory's train.py does.
"""
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import threading
import time

import torch

from core import seeding
from core.run.checkpoint import (CheckpointManager, check_model_fits, failed_at_start,
                                 load_checkpoint)
from core.distributed.devices import check_local_gpus
from core.faults import Faults, short_error
from core.atomic import atomic_write_text
from core.distributed.placement import RayStarter
from core.plugins import env_label, load_plugins, make_env, steps_an_env
from options.options import preset_label, run_spec
from core.distributed.process import setup_process
from core.errors import ConfigError, EnvContractError
from core.registry import unwrap_actor_class
from core.run.context import RUN_ONLY_KEYS, RowRecorder, RunContext
from core.run.metrics import write_json
from core.run.observer import RunView, in_call_order
from core.run.plots import PlotProcess
from core.run.state import from_payload
from core.algos.trainer import LoopPartLost
from core.algos.trainers import check_agent_kind, trainer_class
from ddrl.callbacks import StopAtReturn, StopOnPlateau
from loggers import make_loggers

# While PPO or APPO learns in this process (an elastic start, Trainer.learns_while_ray_starts),
# Ray's processes start at this niceness, so that starting them takes the CPUs the learning in
# the driver leaves (on 2 cores the first round came about 1.4 s sooner when this was measured,
# CartPole, seeds 0-1). The driver keeps niceness 0, Ray's GCS and raylet keep 10, and Ray starts
# its workers 15 above the raylet (Ray's worker_niceness), so at 19. A run that waits for Ray
# instead starts the GCS and the raylet at the driver's niceness (the workers at 15).
RAY_NICENESS = 10

EXIT_CODES = {"interrupted": 130, "terminated": 143, "error": 1}  # 128 + SIGINT / SIGTERM


def run_label(args, label=None):
    """<env>[-<env label>]-<model>, one path component: an id's '/' (ALE/Breakout-v5) becomes
    '-'. ``label``: the env's own (core.plugins.env_label), e.g. gym_env's gymnasium id."""
    env = args.env_name + (f"-{label}" if label else "")
    return f"{env}-{args.model_name}".replace("/", "-").replace(os.sep, "-")


def default_run_dir(args, label=None):
    """runs/<env>-<model>-<time>, with a suffix when that name is taken (two runs started in
    the same second must not share a directory)."""
    base = os.path.join("runs", f"{run_label(args, label)}-{time.strftime('%Y%m%d-%H%M%S')}")
    path, k = base, 1
    while os.path.exists(path):
        k += 1
        path = f"{base}-{k}"
    return path


RUN_FILES = ("metrics.csv", "summary.json", "config.yaml", "checkpoints", "tensorboard",
             "learning_curves.png")


def check_run_dir(run_dir):
    """A run directory holds one run: reusing one that holds another run's files would mix two
    runs' metrics.csv and checkpoints. Other files (a log the shell or a scheduler writes
    there) are no run and stay allowed."""
    found = [f for f in RUN_FILES if os.path.exists(os.path.join(run_dir, f))]
    if found and failed_at_start(run_dir):  # nothing learned there: start again in it
        for name in found:
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        print(f"ddrl: --run_dir {run_dir} held a run that failed at its start (no "
              f"checkpoint); its files are replaced by this run's", file=sys.stderr, flush=True)
        return
    if found:
        raise ConfigError(f"--run_dir {run_dir} already holds a run ({', '.join(found)}). "
                          f"Continue that run with --restore {run_dir}, or give a new "
                          f"directory.")


def stop_rules(target, args):
    """The run's own stop rules that are observers (ddrl/callbacks.py): reaching ``target``
    (--target_return, resolved), --patience."""
    rules = [] if target is None else [StopAtReturn(target)]
    if args.patience:
        rules.append(StopOnPlateau(args.patience))
    return rules


def confirmation_note(summary):
    """The end line's word on --confirm_episodes: what the confirming episodes gave."""
    found = summary.get("target_confirmation")
    if not found:
        return ""
    interval = found.get("interval")
    spread = f" (95% {interval[0]:.1f} to {interval[1]:.1f})" if interval else ""
    mean = "-" if found["eval_return"] is None else f"{found['eval_return']:.1f}"
    return (f", confirmed by {found['episodes']} fresh episodes: {mean}{spread}"
            if found["confirmed"] else
            f", not confirmed: {found['episodes']} fresh episodes gave {mean}{spread}")


def probe_env(plugins, config, name):
    """Build one env in the driver to learn its spaces and reward threshold, and try it
    (ddrl/check.py ``check_at_start``: a seeded reset and a few random steps): what would break
    the run is an EnvContractError naming each problem, before anything else starts; what the
    run survives (an observation's dtype, its bounds) a warning line."""
    from ddrl.check import START_STEPS, check_at_start
    env = make_env(plugins, config, seed=config.seed)
    try:
        found = env.observation_space, env.action_space, getattr(env, "reward_threshold", None)
        problems, warnings = check_at_start(env, name)
    finally:
        getattr(env, "close", lambda: None)()
    if problems:
        raise EnvContractError(
            f"env plugin {name} does not keep gymnasium's contract (found by a seeded reset "
            f"and {START_STEPS} random steps at the start of the run): " + "; ".join(problems)
            + f". Fix the env; `ddrl check --env_name {name}` (with the run's env flags) tries "
            f"it at length.")
    for line in dict.fromkeys(warnings):  # one line per distinct finding
        print(f"ddrl: warning: env plugin {name}: {line} (the run goes on)", file=sys.stderr,
              flush=True)
    return found


class TrainingSession:
    def __init__(self, args, start_time, observers=(), shutdown_ray=True):
        """``observers``: RunObservers (core/run/observer.py: a user's callbacks, a sweep's
        reporter), called after the run's own stop rules (--target_return, --patience) and, by
        phase, around its recorders; ``shutdown_ray``: False when the process ends right after
        the run (main.py ``leave``): Ray's processes are then killed with it instead of shut
        down gracefully."""
        self.args = args
        self.start_time = start_time
        self.given_observers = list(observers)
        self.observers = []
        self.view = None
        self.shutdown_ray = shutdown_ray
        self.plotter = None
        self.ray_starter = None
        self.trainer = None
        self.fine_tune_from = None
        self.restored = None  # (checkpoint file, payload, meta) of --restore, read once
        self.context = None
        self.error = None
        self.previous_handlers = {}

    # -- start -------------------------------------------------------------------------------
    def start(self):
        args = self.args
        # First: it imports matplotlib while the run starts (core/run/plots.py).
        self.plotter = PlotProcess() if args.plots else None
        setup_process(args)
        if args.record_dataset:  # Ray's workers need not share our cwd
            args.record_dataset = os.path.abspath(os.path.expanduser(args.record_dataset))
        spec = run_spec(args)  # each component's typed config (core/config.py)
        self.plugins = load_plugins(spec)
        self.plugins.model_cls.check_contract(args.model_name)
        # the trackers (--logger) before anything starts: a missing package is a ConfigError
        trackers = make_loggers(args)
        trainer_cls = trainer_class(self.plugins.model_cls.trainer,
                                    self.plugins.model_cls).for_run(spec.loop)
        if steps_an_env(self.plugins.env_cls):
            observation_space, action_space, threshold = probe_env(self.plugins, spec.env,
                                                                   args.env_name)
        else:  # --env_name none: the loop's own experience gives the spaces
            (observation_space, action_space), threshold = (
                trainer_cls.spaces_without_env(spec.loop), None)
        self.spaces = observation_space, action_space
        self.plugins.model_cls.check_spaces(observation_space, action_space)
        check_agent_kind(trainer_cls, self.plugins, args)
        trainer_cls.check_plugins(self.plugins, spec)
        # Where GPUs go is the loop's to say; every actor reads it from the spec.
        self.spec = dataclasses.replace(spec, gpus=trainer_cls.gpu_plan(spec.loop))
        self.env_label = env_label(self.plugins.env_cls, spec.env)
        target = threshold if args.target_return == "auto" else args.target_return
        self.check_gpus()
        self.run_dir = args.run_dir or default_run_dir(args, self.env_label)
        self.fine_tune_from = self.offline_run_to_fine_tune(trainer_cls)
        if not args.restore or self.fine_tune_from:
            check_run_dir(self.run_dir)
        if args.record_dataset:
            from core.sampling.recording import check_target
            check_target(args.record_dataset)
        if args.num_workers > 0 or args.env_placement == "actor":
            # Ray starts in the background: a trainer that can learn in this process meanwhile
            # (PPO) starts at once; the others wait for it here. Envs in actors of their own
            # need it before the first worker is built, also with --num_workers 0 (else Ray
            # would start itself on the first actor, joining whatever cluster it finds).
            learns_meanwhile = trainer_cls.learns_while_ray_starts(args)
            self.ray_starter = RayStarter(args, nice=RAY_NICENESS if learns_meanwhile else 0)
            if not learns_meanwhile:
                self.ray_starter.ready(timeout=None)
        self.observers = in_call_order(stop_rules(target, args) + self.given_observers)
        columns = trainer_cls.metric_columns_for(self.plugins.model_cls, self.spaces[0])
        columns += [c for o in self.observers + trackers for c in o.columns if c not in columns]
        self.context = RunContext(args, self.run_dir, self.start_time, columns, target,
                                  self.plotter,
                                  trainer_cls.line_metrics_for(self.plugins.model_cls))
        # the run's own recorder (the terminal line, the curves), then the trackers
        self.observers = in_call_order(self.observers + [RowRecorder(self.context)] + trackers)
        self.view = RunView(self.context, vars(args), self.save)
        self.faults = Faults(args)
        # from here a failed start leaves a summary (a fine-tuning run is a new one)
        self.wrote_run_files = not args.restore or bool(self.fine_tune_from)
        self.save_resolved_config()
        self.trainer = trainer_cls(self.spec.loop, self.spec, self.plugins, self.spaces,
                                   self.context, self.faults, self.ray_starter)
        self.checkpoints = CheckpointManager(os.path.join(self.run_dir, "checkpoints"),
                                             keep=args.keep_checkpoints)
        if args.restore:
            self.restore()
        self.next_checkpoint = 0
        for observer in self.observers:
            observer.on_start(self.view)
        if not args.quiet:
            label = self.env_label
            print(f"ddrl: {args.env_name}{'/' + label if label else ''} + {args.model_name} + "
                  f"{args.agent_name}, {args.num_workers} workers x {args.num_envs_per_worker} "
                  f"envs, target {target}, run dir {self.run_dir}"
                  + (f", preset {preset_label(args.config)}" if args.config else "")
                  + self.trainer.start_note(), flush=True)

    def check_gpus(self):
        """A local run may ask only for GPUs torch sees here. With --address the cluster's GPUs
        count instead: core/distributed/placement.py checks them once joined."""
        args = self.args
        if args.gpu and not args.num_gpus:  # the seed's --gpu alone: said, not silently ignored
            print(f"ddrl: --gpu {','.join(map(str, args.gpu))} without --num_gpus: this run "
                  f"uses no GPU (--num_gpus 0, the default); add --num_gpus {len(args.gpu)} to "
                  f"train on {'it' if len(args.gpu) == 1 else 'them'}", file=sys.stderr,
                  flush=True)
        if args.num_gpus and args.gpu:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, args.gpu))
        if args.num_gpus and not args.address:
            check_local_gpus(args.num_gpus, torch.cuda.device_count(),
                             os.environ.get("CUDA_VISIBLE_DEVICES"))

    def save_resolved_config(self):
        import yaml
        # Re-runnable with --config: a new run (its own directory), not a resume.
        config = {k: v for k, v in vars(self.args).items()
                  if k not in RUN_ONLY_KEYS + ("run_dir",)}
        atomic_write_text(os.path.join(self.run_dir, "config.yaml"),
                          yaml.safe_dump(config, sort_keys=False))

    # -- checkpoints -------------------------------------------------------------------------
    def meta(self, extra=None):
        args, context = self.args, self.context
        return {"env_steps": context.env_steps, "wall_time_s": round(context.elapsed(), 3),
                "env_name": args.env_name, "model_name": args.model_name,
                "agent_name": args.agent_name, "gym_id": self.env_label,
                "best_eval_return": context.best_eval_return,
                "last_eval_return": context.last_eval_return, "run_dir": self.run_dir,
                "faults": dict(self.faults.counts), "spaces": self.spaces_json(),
                "config": {k: v for k, v in vars(args).items() if k != "config"},
                # plugins the user's code registered as it ran: named when a later process
                # (ddrl.load, ddrl evaluate) does not know them
                "user_code_plugins": {kind: unwrap_actor_class(cls).__module__
                                      for kind, _, cls in self.spec.own_plugins},
                **(extra or {})}

    def spaces_json(self):
        """The observation and action spaces as plain data (core/space_codec.py), so that
        ddrl.load builds the policy without making the env; None where a space has no JSON
        form (ddrl.load then makes one env to learn them)."""
        from core.space_codec import space_to_json
        try:
            return {"observation": space_to_json(self.spaces[0]),
                    "action": space_to_json(self.spaces[1])}
        except ValueError:
            return None

    def save(self, reason):
        # Work in flight first (SAC): the checkpoint's env steps, buffer, weights and worker
        # states then describe one moment, the same way on save and restore.
        self.recovering(self.trainer.drain)
        weights, optimizer_state, updates = self.trainer.checkpoint_state()
        state = self.trainer.get_state()
        state["driver_torch_rng"] = torch.get_rng_state()
        return self.checkpoints.save(self.context.env_steps, weights, optimizer_state,
                                     self.meta({"updates": updates, "reason": reason}), state)

    def save_best(self, result):
        weights, _, updates = self.trainer.checkpoint_state()
        self.checkpoints.save_best(weights, self.meta({"updates": updates,
                                                       "eval_return": result["eval_return"]}),
                                   self.trainer.evaluation_state())

    def periodic_checkpoint(self):
        interval = self.args.checkpoint_interval
        if self.context.env_steps >= self.next_checkpoint:
            if self.next_checkpoint:
                self.save("checkpoint_interval")
            self.next_checkpoint = (self.context.env_steps // interval + 1) * interval

    def newest_checkpoint(self):
        """This run's newest checkpoint as (weights, optimizer state, updates, meta, state),
        or None: what a loop rebuilds from when a part of it that holds state dies."""
        path = os.path.join(self.checkpoints.directory, "last.pt")
        if not os.path.isfile(path):
            return None
        payload, meta = load_checkpoint(path)
        weights = {k: v.numpy() for k, v in payload["model"].items()}
        return (weights, payload.get("optimizer"), int(meta.get("updates", 0)), meta,
                from_payload(payload.get("state") or {}))

    def offline_run_to_fine_tune(self, trainer_cls):
        """(checkpoint, meta) when --restore names a run this run's loop fine-tunes from
        (``Trainer.fine_tunes_from``: an offline run restored with --offline_ratio below 1): a
        new run (in a new directory: the offline run's stays as it was) that starts from its
        weights and optimizer, at env step 0. None otherwise. The checkpoint read here is the
        one ``restore`` takes (read once)."""
        from core.run.checkpoint import load_for_restore
        args = self.args
        if not args.restore:
            return None
        self.restored = load_for_restore(args.restore, args)
        path, _, meta = self.restored
        if not trainer_cls.fine_tunes_from(args, meta.get("config") or {}):
            return None
        if os.path.abspath(self.run_dir) == os.path.abspath(meta.get("run_dir") or ""):
            self.run_dir = default_run_dir(args, self.env_label)
        return path, meta

    def restore(self):
        """Continue from --restore: weights, optimizer state, counters, the workers' episodes
        and RNGs, evaluation records (core/run/checkpoint.py). A checkpoint whose tensors do not
        fit this model is a one-paragraph error; any other error keeps its own message."""
        from core.run.checkpoint import load_for_restore
        args = self.args
        path, payload, meta = self.restored or load_for_restore(args.restore, args)
        with torch.random.fork_rng(devices=[]):  # the check must not move the training RNG
            expected = self.plugins.model_cls(self.spec.model, *self.spaces).get_weights()
        check_model_fits(payload["model"], expected, path)
        weights = {k: v.numpy() for k, v in payload["model"].items()}
        state = from_payload(payload.get("state") or {})
        if self.fine_tune_from:  # the learner's state only: the run itself starts afresh
            updates = int(meta.get("updates", 0))
            self.trainer.restore(weights, payload.get("optimizer"), updates)
            self.trainer.load_evaluation_state(state)
            if not args.quiet:
                print(f"ddrl: fine-tuning online from the offline run's {path} ({updates:,} "
                      f"updates on {args.dataset}), --offline_ratio {args.offline_ratio} of "
                      f"every batch from the dataset; env steps count from 0 in {self.run_dir}",
                      flush=True)
            return
        env_steps = int(meta.get("env_steps", 0))
        self.trainer.restore(weights, payload.get("optimizer"), int(meta.get("updates", 0)))
        exact = self.trainer.set_state(state, seeding.resume_base(args.seed, env_steps))
        if state.get("driver_torch_rng") is not None:
            torch.set_rng_state(torch.as_tensor(state["driver_torch_rng"], dtype=torch.uint8))
            if args.num_workers == 0 and state.get("workers"):
                # In-process, the worker's RNG is the driver's: the worker's is the later one.
                torch.set_rng_state(torch.as_tensor(state["workers"][0]["torch_rng"],
                                                    dtype=torch.uint8))
        self.context.restore(meta)
        for key, value in (meta.get("faults") or {}).items():
            if key in self.faults.counts:
                self.faults.counts[key] = int(value)
        if not args.quiet:
            print(f"ddrl: restored {path} ({env_steps:,} env steps, "
                  f"{int(meta.get('updates', 0)):,} updates; episodes "
                  f"{'continue exactly' if exact else 'start afresh'})", flush=True)

    # -- the loop: the trainer iterates, the session records and checkpoints between --------
    def train(self):
        """Iterate until the run's stop rules say stop (core/run/context.py), recording each
        row, best.pt at a new best evaluation and the periodic checkpoints between iterations;
        then the evaluation still running counts."""
        trainer, run = self.trainer, self.context
        trainer.begin()
        try:
            while True:
                iteration = self.recovering(trainer.iterate)
                if iteration.evaluation is not None and run.record_eval(iteration.evaluation):
                    self.save_best(iteration.evaluation)
                row = run.complete(iteration.row, iteration.evaluation)
                self.notify(row, iteration.evaluation)
                self.periodic_checkpoint()
                if run.should_stop():
                    break
        except BaseException:
            with contextlib.suppress(Exception):  # the loop's own error is the one to report
                trainer.end()
            raise
        self.recovering(trainer.end)
        last = trainer.last_evaluation()
        if last is not None:
            if self.context.record_eval(last):
                self.save_best(last)
            for observer in self.observers:  # (the run stops anyway: no reason is kept)
                observer.on_evaluation(self.view, last)

    def notify(self, row, evaluation):
        """Every observer in call order (core/run/observer.py) with this iteration's evaluation
        and row; columns the callbacks added join the run's (RunView.columns: metrics.csv's
        header) before the recorders write it;
        a stop an observer asks for applies after this row."""
        given, stop = set(row), None
        for observer in self.observers:
            if given is not None and observer.phase != "callback":
                self.context.add_columns([k for k in row if k not in given])
                given = None
            asked = observer.on_evaluation(self.view, evaluation) if evaluation else None
            asked = observer.on_row(self.view, row) or asked
            stop = stop or asked
        if stop:
            self.view.stop(stop if isinstance(stop, str) else "callback")

    def recovering(self, step):
        """``step()``; when a part of the loop that holds state dies (LoopPartLost), the
        trainer rebuilds it from the newest checkpoint (or from the start) and the step runs
        again."""
        while True:
            try:
                return step()
            except LoopPartLost as lost:
                self.trainer.recover(lost, self.newest_checkpoint())

    # -- signals: a flag the loop checks, never an exception from whatever code runs -----------
    def on_signal(self, signum, frame):
        if signum == signal.SIGINT and self.context.stop_requested is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once (a checkpoint is still tried)
        if self.context.stop_requested is None:
            self.context.stop_requested = "interrupted" if signum == signal.SIGINT else "terminated"
            print(f"ddrl: {signal.Signals(signum).name}: stopping after this round with a "
                  f"checkpoint" + (" (Ctrl-C again to stop at once)"
                                   if signum == signal.SIGINT else ""),
                  file=sys.stderr, flush=True)

    def install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return  # a run in another thread (a sweep's trial): its host handles signals
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous_handlers[signum] = signal.signal(signum, self.on_signal)

    def restore_signal_handlers(self):
        for signum, handler in self.previous_handlers.items():
            signal.signal(signum, handler)
        self.previous_handlers = {}

    # -- the whole lifetime ------------------------------------------------------------------
    def run(self):
        """Train; returns the exit code. An exception is re-raised after the run directory
        has its final checkpoint and summary.json and Ray is shut down."""
        try:
            self.start()
        except BaseException as exc:
            self.record_failed_start(exc)
            self.shutdown()
            raise
        self.install_signal_handlers()
        try:
            self.train()
        except KeyboardInterrupt:
            self.context.stopped_because = "interrupted"
        except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised below
            self.context.stopped_because = "error"
            self.error = exc
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one final checkpoint, not two
            try:
                self.save(self.context.stopped_because or "error")
            except BaseException as save_error:  # noqa: BLE001 - the first error matters more
                print(f"ddrl: could not write the final checkpoint: "
                      f"{type(save_error).__name__}: {str(save_error).splitlines()[0][:300]}",
                      file=sys.stderr, flush=True)
            self.restore_signal_handlers()
        self.finish()
        if self.error is not None:
            raise self.error
        return EXIT_CODES.get(self.context.stopped_because, 0)

    def record_failed_start(self, error):
        """A new run that failed after writing its first files (config.yaml, metrics.csv)
        and before its first checkpoint: summary.json says so (``stopped_because: error``,
        ``failed_at_start``, the error's line), and the directory may be used again
        (``check_run_dir``). A restore that fails leaves the run it continues as it was."""
        if not getattr(self, "wrote_run_files", False):
            return
        try:
            if self.context is not None:
                self.context.stopped_because = "error"
                self.context.finish(run_dir=self.run_dir, error=short_error(error),
                                    failed_at_start=True)
            else:
                write_json(os.path.join(self.run_dir, "summary.json"),
                           {"env_steps": 0, "stopped_because": "error",
                            "error": short_error(error), "failed_at_start": True,
                            "run_dir": self.run_dir})
        except Exception as exc:  # noqa: BLE001 - the start's error is the one to report
            print(f"ddrl: could not write summary.json after a failed start: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def finish(self):
        extra = {"run_dir": self.run_dir, **self.faults.counts}
        if self.trainer is not None:
            extra.update(getattr(self.trainer, "summary_extra", dict)())
            extra.update(self.finish_recording())
        if self.error is not None:
            extra["error"] = short_error(self.error)
        try:
            summary = self.context.finish(**extra)
        finally:
            self.shutdown()
        counts = ", ".join(f"{k} {v}" for k, v in self.faults.counts.items() if v)

        def show(value, unit=""):
            return ("-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float)
                    else f"{value}{unit}")
        # an offline run's clock counts updates (summary.json's step_clock), not env steps
        steps = "updates" if summary.get("step_clock") == "updates" else "env steps"
        print(f"ddrl: stopped ({summary['stopped_because']}) after {summary['env_steps']:,} "
              f"{steps} in {summary['wall_time_s']:.1f} s ({summary['steps_per_s']:,.0f} "
              f"{steps}/s); "
              f"best eval {show(summary['best_eval_return'])}, last eval "
              f"{show(summary['last_eval_return'])}, time to target "
              f"{show(summary['time_to_target_s'], ' s')}" + confirmation_note(summary)
              + (f"; faults: {counts}" if counts else "")
              + f"; {os.path.join(self.run_dir, 'summary.json')}", flush=True)
        self.write_model_card()
        for observer in self.observers:  # a tracker may upload the plot and the card
            try:
                observer.on_end(self.view, summary)
            except Exception as exc:  # noqa: BLE001 - the run's results are on disk already
                print(f"ddrl: {type(observer).__name__}.on_end failed: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:300] if str(exc) else ''}", file=sys.stderr,
                      flush=True)
        return summary

    def finish_recording(self):
        """--record_dataset DIR: the workers' shards written whole and merged into one Minari
        dataset at DIR (core/sampling/recording.py); summary.json's ``recorded_dataset``. A
        failure here is reported, never the run's fate."""
        args = self.args
        if not args.record_dataset:
            return {}
        from core.sampling.recording import merge_shards
        try:
            self.trainer.close_recorders()
            merged = merge_shards(args.record_dataset, env_id=self.env_label,
                                  algorithm_name=f"ddrl {args.model_name}",
                                  metadata={"ddrl_run": {"run_dir": os.path.abspath(
                                      self.run_dir), "env_steps": self.context.env_steps}})
        except Exception as exc:  # noqa: BLE001 - the shards stay for a later merge
            print(f"ddrl: --record_dataset {args.record_dataset}: could not merge the "
                  f"workers' shards: {short_error(exc)}", file=sys.stderr, flush=True)
            return {}
        if merged is None:
            print(f"ddrl: --record_dataset {args.record_dataset}: no episode ended, nothing "
                  f"recorded", file=sys.stderr, flush=True)
            return {}
        path, episodes, steps = merged
        if not args.quiet:
            print(f"ddrl: recorded {episodes:,} episodes ({steps:,} steps) as a Minari dataset "
                  f"in {path}", flush=True)
        return {"recorded_dataset": {"path": path, "episodes": episodes, "steps": steps}}

    def write_model_card(self):
        """RUN_DIR/README.md (core/run/model_card.py), after the plot and summary.json are
        final; a failure is a warning: the run's results are already on disk."""
        from core.run.model_card import write_model_card
        try:
            write_model_card(self.run_dir)
        except Exception as exc:  # noqa: BLE001 - the card is a report, never the run's fate
            print(f"ddrl: could not write the model card: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:300] if str(exc) else ''}", file=sys.stderr,
                  flush=True)

    def shutdown(self):
        """Retire the workers and shut Ray down; nothing when the process is about to end
        (``shutdown_ray`` False: main.py kills Ray's processes with it)."""
        if self.plotter is not None:
            self.plotter.close()
        if self.ray_starter is not None:
            self.ray_starter.note_if_not_joined()
        if not self.shutdown_ray:
            return
        if self.trainer is not None:
            try:
                self.trainer.close()
            except Exception:  # noqa: BLE001 - Ray's shutdown below ends them anyway
                pass
        if self.ray_starter is not None:
            self.ray_starter.stop()
