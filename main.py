"""ddrl: distributed deep reinforcement learning on Ray.

    python main.py                                   # PPO on CartPole-v1 until eval >= 475
    python main.py --env_name gym_env --gym_id Pendulum-v1 --num_workers 2
    python main.py --user_dir ~/my_plugins --env_name my_env -h
"""
import time

START_TIME = time.time()  # time-to-target is measured from process start

import os  # noqa: E402
import sys  # noqa: E402


def default_run_dir(args):
    env = args.env_name + (f"-{args.gym_id}" if getattr(args, "gym_id", None) else "")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{env}-{args.model_name}-{stamp}")


def probe_env(plugins, args):
    """Build one env in the driver to learn its spaces and reward threshold."""
    from core.plugins import make_env
    env = make_env(plugins, args, seed=args.seed)
    found = env.observation_space, env.action_space, getattr(env, "reward_threshold", None)
    getattr(env, "close", lambda: None)()
    return found


def save_resolved_config(args, run_dir):
    import yaml
    from core.metrics import atomic_write_text
    from options.options import RUN_ONLY_KEYS
    # Re-runnable with --config: a new run (its own directory), not a resume.
    config = {k: v for k, v in vars(args).items() if k not in RUN_ONLY_KEYS + ("run_dir",)}
    atomic_write_text(os.path.join(run_dir, "config.yaml"),
                      yaml.safe_dump(config, sort_keys=False))


def run(args):
    import ray
    import signal
    import torch
    from core.checkpoint import CheckpointManager
    from core.placement import start_ray
    from core.plugins import PluginSpec, load_plugins
    from core.trainers import trainer_class, trainer_module
    from core.process import setup_process
    from core.registry import ConfigError
    from core.run import RunContext

    setup_process(args)
    spec = PluginSpec(args.env_name, args.model_name, args.agent_name, args, args.user_dir)
    plugins = load_plugins(spec)
    observation_space, action_space, threshold = probe_env(plugins, args)
    plugins.model_cls.check_spaces(observation_space, action_space)
    trainer_name = plugins.model_cls.trainer
    target = threshold if args.target_return == "auto" else args.target_return
    if args.num_gpus and args.gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, args.gpu))
    if args.num_gpus and not args.address:
        import torch
        if torch.cuda.device_count() < args.num_gpus:
            raise ConfigError(f"--num_gpus {args.num_gpus} but torch sees "
                              f"{torch.cuda.device_count()} CUDA device(s) here. Use --num_gpus 0 "
                              f"on a machine without GPUs (everything then runs on the CPU).")
    if args.num_workers > 0:
        start_ray(args)

    run_dir = args.run_dir or default_run_dir(args)
    context = RunContext(args, run_dir, START_TIME, trainer_module(trainer_name).METRIC_COLUMNS,
                         target)
    save_resolved_config(args, run_dir)
    trainer = trainer_class(trainer_name)(args, spec, plugins, (observation_space, action_space),
                                          context)
    checkpoints = CheckpointManager(os.path.join(run_dir, "checkpoints"),
                                    keep=args.keep_checkpoints)

    def meta(extra=None):
        return {"env_steps": context.env_steps, "wall_time_s": round(context.elapsed(), 3),
                "env_name": args.env_name, "model_name": args.model_name,
                "agent_name": args.agent_name, "gym_id": getattr(args, "gym_id", None),
                "best_eval_return": context.best_eval_return,
                "last_eval_return": context.last_eval_return, "run_dir": run_dir,
                "config": {k: v for k, v in vars(args).items() if k != "config"},
                **(extra or {})}

    def save(reason):
        weights, optimizer_state, updates = trainer.checkpoint_state()
        state = trainer.get_state()
        state["driver_torch_rng"] = torch.get_rng_state()
        checkpoints.save(context.env_steps, weights, optimizer_state,
                         meta({"updates": updates, "reason": reason}), state)

    def save_best(result):
        weights, _, updates = trainer.checkpoint_state()
        checkpoints.save_best(weights, meta({"updates": updates,
                                             "eval_return": result["eval_return"]}),
                              trainer.evaluation_state())

    next_checkpoint = [0]

    def periodic_checkpoint():
        if context.env_steps >= next_checkpoint[0]:
            if next_checkpoint[0]:
                save("checkpoint_interval")
            next_checkpoint[0] = (context.env_steps // args.checkpoint_interval + 1) * \
                args.checkpoint_interval

    if args.restore:
        restore(args, trainer, context)
    context.on_new_best = save_best
    context.after_row = periodic_checkpoint
    if not args.quiet:
        print(f"ddrl: {args.env_name}{'/' + args.gym_id if getattr(args, 'gym_id', None) else ''}"
              f" + {args.model_name} + {args.agent_name}, {args.num_workers} workers x "
              f"{args.num_envs_per_worker} envs, target {target}, run dir {run_dir}"
              + (f", preset {os.path.relpath(args.config)}" if args.config else ""), flush=True)
    # SIGTERM (a scheduler's stop, `kill`) ends the run like Ctrl-C: with a checkpoint.
    previous_sigterm = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        trainer.train()
    except Terminated:
        context.stopped_because = "terminated"
    except KeyboardInterrupt:
        context.stopped_because = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one checkpoint, not two
        try:
            save(context.stopped_because or "error")
        except Exception as exc:  # noqa: BLE001 - a crash's own error must not be masked
            print(f"ddrl: could not write the final checkpoint: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
        signal.signal(signal.SIGTERM, previous_sigterm)
    summary = context.finish(run_dir=run_dir)
    def show(value, unit=""):
        return "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) \
            else f"{value}{unit}"
    print(f"ddrl: stopped ({summary['stopped_because']}) after {summary['env_steps']:,} env steps"
          f" in {summary['wall_time_s']:.1f} s ({summary['steps_per_s']:,.0f} steps/s); best eval "
          f"{show(summary['best_eval_return'])}, last eval {show(summary['last_eval_return'])}, "
          f"time to target {show(summary['time_to_target_s'], ' s')}; "
          f"{os.path.join(run_dir, 'summary.json')}", flush=True)
    if ray.is_initialized() and not args.address:
        ray.shutdown()
    return EXIT_CODES.get(summary["stopped_because"], 0)


EXIT_CODES = {"interrupted": 130, "terminated": 143}  # 128 + SIGINT / SIGTERM, as a shell


class Terminated(Exception):
    """SIGTERM arrived."""


def raise_terminated(signum, frame):
    raise Terminated()


def restore(args, trainer, context):
    """Continue from --restore: weights, optimizer state, counters, the workers' episodes and
    RNGs, evaluation records (core/checkpoint.py)."""
    import torch
    from core.checkpoint import load_for_restore
    from core.registry import ConfigError
    from core.state import from_payload
    path, payload, meta = load_for_restore(args.restore, args)
    weights = {k: v.numpy() for k, v in payload["model"].items()}
    state = from_payload(payload.get("state") or {})
    env_steps = int(meta.get("env_steps", 0))
    try:
        trainer.restore(weights, payload.get("optimizer"), int(meta.get("updates", 0)))
        exact = trainer.set_state(state, fresh_episode_seed=args.seed + 7_919 * env_steps)
    except Exception as exc:  # noqa: BLE001 - wrong shapes or names: say which file and why
        if unwrap_config_error(exc) is not None:
            raise
        raise ConfigError(f"--restore {path}: the checkpoint does not fit this model "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]}). Restore "
                          f"with the model flags it was trained with (its run's config.yaml)."
                          ) from None
    if state.get("driver_torch_rng") is not None:
        torch.set_rng_state(torch.as_tensor(state["driver_torch_rng"], dtype=torch.uint8))
        if args.num_workers == 0 and state.get("workers"):
            # In-process, the worker's RNG is the driver's: the worker's is the later one.
            torch.set_rng_state(torch.as_tensor(state["workers"][0]["torch_rng"],
                                                dtype=torch.uint8))
    context.restore(meta)
    if not args.quiet:
        print(f"ddrl: restored {path} ({env_steps:,} env steps, "
              f"{int(meta.get('updates', 0)):,} updates; episodes "
              f"{'continue exactly' if exact else 'start afresh'})", flush=True)


def unwrap_config_error(exc):
    """A ConfigError raised inside a Ray actor arrives wrapped; find it."""
    from core.registry import ConfigError
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ConfigError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__
        seen += 1
    return None


def main(argv=None):
    from core.registry import ConfigError
    from options.options import parse_args
    try:
        args = parse_args(argv)
        if args.evaluate:
            from core.playback import evaluate_saved_model
            evaluate_saved_model(args)
            return 0
        if args.record_video:
            raise ConfigError("--record_video goes with --evaluate PATH (the saved model to "
                              "film); training runs do not record.")
        return run(args)
    except KeyboardInterrupt:  # before training started: nothing learned to save
        print("ddrl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - user errors are one paragraph, the rest re-raise
        error = unwrap_config_error(exc)
        if error is None:
            raise
        print(f"ddrl: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
