"""Per-process set-up shared by the driver and every actor."""
import os

import torch

# The most torch threads any component of this process asked for. With --num_workers 0 the
# learner, the rollout worker and the evaluator are objects in the driver's one process and
# share its thread pool: the rollout worker, made after the learner, must not take the learner's
# second thread away again (then "--learner_threads 2" would run on one thread).
_process_threads = 0


def setup_process(args, threads=None):
    """One torch thread per process unless --torch_threads (or, for a learner process, the
    ``threads`` it was given) says otherwise: on a 2-core machine, two torch threads per process
    made Stable-Baselines3's PPO 6.5x slower, while a large SAC update gains from two
    (benchmarks/probe.py update-cost). Components sharing a process get the largest of their
    requests."""
    global _process_threads
    from core.distributed.placement import record_task_events
    record_task_events(args.ray_task_events)
    wanted = int(threads or args.torch_threads)
    _process_threads = max(_process_threads, wanted)
    torch.set_num_threads(_process_threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(_process_threads))
    one_blas_thread()


def one_blas_thread():
    """numpy's BLAS (its own OpenBLAS: the numpy acting path, models/numpy_mlp.py) on one
    thread in every ddrl process, as Ray gives its workers (OMP_NUM_THREADS=1). In the driver
    it had a thread per core, and its pool hung for good, spinning a core in exec_blas, when
    Ray's start forked in the background thread while the elastic start's in-process worker
    acted on a batch big enough for the pool (APPO, 2 x 256 point masses: 5 runs of 15 hung
    on the 2-core AMD EPYC, none of 10 with one thread). Learning is torch's, on its own
    threads (torch.set_num_threads above); only numpy's BLAS is limited, for the process's
    life (ddrl.train's caller too, as its torch threads)."""
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")
