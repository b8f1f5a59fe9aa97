"""ddrl: distributed deep reinforcement learning on Ray. The seed's command line: `python main.py
FLAGS` is `ddrl train FLAGS` (ddrl/cli.py has every subcommand; `ddrl -h` lists them).

    python main.py                                   # PPO on CartPole-v1 until eval >= 475
    python main.py --env_name gym_env --gym_id Pendulum-v1 --num_workers 2
    python main.py --user_dir ~/my_plugins --env_name my_env -h

Exit codes: 0 done, 1 a fault past its limit or another error (the run directory still has its
checkpoint and summary.json), 2 bad input, 130 Ctrl-C, 143 SIGTERM. The flags that were commands
(--evaluate, --export, --model_card, --tune, --list, --restore of a sweep) still work here for
this release, each with a note naming the subcommand that replaces it.
"""
import time

START_TIME = time.time()  # time-to-target is measured from process start

import sys  # noqa: E402 - after START_TIME, the first thing the process does


def main(argv=None, leave_quickly=False):
    """Run the command line ``argv``; returns the exit code. ``leave_quickly``: the caller
    ends the process right after (ddrl/cli.py ``leave``), so a training run skips Ray's
    graceful shutdown."""
    from ddrl.cli import main_py, run
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(main_py, argv, START_TIME, leave_quickly)


if __name__ == "__main__":
    from ddrl.cli import exit_with
    exit_with(lambda: main(leave_quickly=True))
