"""Per-process set-up shared by the driver and every actor."""
import os

import torch


def setup_process(args, threads=None):
    """One torch thread per process unless --torch_threads (or, for a learner process, the
    ``threads`` it was given) says otherwise: on 2 cores, two threads per process made
    Stable-Baselines3's PPO 6.5x slower (measured on the 2-core machines), while a large SAC update gains from
    two (benchmarks/update_cost.py)."""
    from core.placement import record_task_events
    record_task_events(getattr(args, "ray_task_events", False))
    threads = int(threads or getattr(args, "torch_threads", 1) or 1)
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
