"""ddrl: distributed deep reinforcement learning on Ray.

    python main.py                                   # PPO on CartPole-v1 until eval >= 475
    python main.py --env_name gym_env --gym_id Pendulum-v1 --num_workers 2
    python main.py --user_dir ~/my_plugins --env_name my_env -h
    python main.py --num_workers 0 --tune sweep.yaml --num_samples 8 --run_dir runs/sweep

This file parses, dispatches and maps outcomes to exit codes; a training run's lifetime is
core/app/session.py. Exit codes: 0 done, 1 a fault past its limit or another error (the run directory
still has its checkpoint and summary.json), 2 bad input, 130 Ctrl-C, 143 SIGTERM.
"""
import time

START_TIME = time.time()  # time-to-target is measured from process start

import os  # noqa: E402 - after START_TIME, the first thing the process does
import sys  # noqa: E402


def unwrap_config_error(exc):
    """A ConfigError raised inside a Ray actor arrives wrapped; find it."""
    from core.errors import ConfigError
    from core.faults import find_cause
    return find_cause(exc, ConfigError)


def main(argv=None, leave_quickly=False):
    """Run the command line ``argv``; returns the exit code. ``leave_quickly``: the caller
    ends the process right after (``leave``), so a training run skips Ray's graceful
    shutdown."""
    from core.errors import ConfigError
    from options.options import parse_args
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        from core.app.sweep import restore_request, run_sweep
        resumed = restore_request(argv)  # --restore DIR of an interrupted sweep
        if resumed is not None:
            saved_argv, sweep_dir = resumed
            return run_sweep(parse_args(saved_argv), saved_argv, sweep_dir)
        if "--model_card" in argv:  # a run directory's card: no flags to parse but its own
            from core.app.playback import model_card_command
            return model_card_command(argv)
        args = parse_args(argv)
        if args.tune:
            return run_sweep(args, argv)
        if args.evaluate:
            from core.app.playback import evaluate_saved_model
            evaluate_saved_model(args)
            return 0
        if args.export:
            from core.app.export import export_command
            export_command(args)
            return 0
        if args.record_video:
            raise ConfigError("--record_video goes with --evaluate PATH (the saved model to "
                              "film); training runs do not record.")
        from core.app.session import TrainingSession
        return TrainingSession(args, START_TIME, shutdown_ray=not leave_quickly).run()
    except KeyboardInterrupt:  # before training started: nothing learned to save
        print("ddrl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # user errors are one paragraph, the rest re-raise
        error = unwrap_config_error(exc)
        if error is not None:
            print(f"ddrl: error: {error}", file=sys.stderr)
            return 2
        failure = run_failure(exc)
        if failure is not None:  # a fault past its limit: its own paragraph, no traceback
            print(f"ddrl: error: {failure}", file=sys.stderr)
            return 1
        raise


def run_failure(exc):
    """A fault past its limit (core/faults.py RunFailure, core/sampling/envs.py EnvFailure), unwrapped
    from Ray's RayTaskError; None for anything else."""
    from core.errors import EnvFailure
    from core.errors import RunFailure
    from core.faults import find_cause
    return find_cause(exc, (RunFailure, EnvFailure))


def leave(code):
    """End the process now: what must be durable (checkpoints, metrics.csv, summary.json, the
    plot) is written and closed by then. Ray's processes (a local instance's GCS, raylet and
    workers: this process's descendants) are killed rather than shut down one by one, which
    took seconds after the run was over; a cluster joined with --address ends this job's
    actors itself when the driver is gone."""
    sys.stdout.flush()
    sys.stderr.flush()
    from core.process_tree import kill_descendants
    kill_descendants()
    os._exit(code)


if __name__ == "__main__":
    try:
        exit_code = main(leave_quickly=True)
    except SystemExit as exc:  # -h, and argparse's own exits
        exit_code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - printed as Python would, then the same quick exit
        import traceback
        traceback.print_exc()
        exit_code = 1
    leave(exit_code)
