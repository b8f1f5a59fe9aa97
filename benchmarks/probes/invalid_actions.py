"""Invalid actions of a ddrl training run on a masked env: the env's own count, which ddrl's
metrics do not carry.

    .venv/bin/python benchmarks/probe.py invalid-actions --out benchmarks/results/masked-choice-invalid-actions.json

Runs main.py's ``main()`` in this process, with ``--num_workers 0`` so that every env of the run
(the rollout worker's and the test worker's, both in the driver) is built here, after the env
class of gym_env (envs/gym_env.py GymEnv) has been patched to count, per role (training envs,
evaluation envs: ``args.evaluation``):

- ``invalid``: the env's own invalid actions, the increments of ``info["invalid_actions"]``
  (envs/toys.py MaskedChoice: the episode's running count), summed over every episode of every
  env, whole and cut ones alike;
- ``outside_mask``: independently of the env, the actions outside the ``action_mask`` of the
  observation they answer;
- ``steps`` and ``episodes`` seen, so that the counts can be checked to cover the run
  (training steps = the run's env steps).

The policy is whatever the run trains: untrained at the start, trained by the end (``--flags``
decide; the default is ddrl's defaults in one process with 8 envs, 100k steps, no target, so the
run goes the whole budget). Writes ``--out`` (the counts, the run's summary and evaluations, the
command, machine, commit) and prints the counts.
"""
import datetime
import json
import os
import shlex
import time

from probes import REPO, command, git_commit

DEFAULT_FLAGS = ("--gym_id ddrl/MaskedChoice-v0 --num_workers 0 --num_envs_per_worker 8 "
                 "--total_steps 100000 --target_return none --seed 0")
COUNTS = ("invalid", "outside_mask", "steps", "episodes")


def add_args(p):
    p.add_argument("--flags", default=DEFAULT_FLAGS,
                   help="main.py's flags for the run (--num_workers must be 0: the envs are "
                        "counted in this process) (default: %(default)s)")
    p.add_argument("--run_dir", default=os.path.join(REPO, "benchmarks", "results",
                                                     "invalid-actions", "run"),
                   help="the run's directory (default: %(default)s, git-ignored)")
    p.add_argument("--out", default=None, help="write the result JSON here")


def patch_env_class(counts):
    """Count in every GymEnv built in this process from now on (see the module docstring)."""
    from core.registry import unwrap_actor_class
    from envs.gym_env import GymEnv
    cls = unwrap_actor_class(GymEnv)
    init, reset, step = cls.__init__, cls.reset, cls.step

    def mask_of(obs):
        return obs.get("action_mask") if isinstance(obs, dict) else None

    def counting_init(self, args, seed=None):
        init(self, args, seed=seed)
        self.probe_role = "evaluation" if args.evaluation else "training"
        self.probe_last, self.probe_mask = 0, None
        counts[self.probe_role]["envs"] += 1

    def counting_reset(self, seed=None, options=None):
        obs, info = reset(self, seed=seed, options=options)
        self.probe_last, self.probe_mask = info.get("invalid_actions", 0), mask_of(obs)
        return obs, info

    def counting_step(self, action):
        c = counts[self.probe_role]
        if self.probe_mask is not None and not self.probe_mask[int(action)]:
            c["outside_mask"] += 1
        result = step(self, action)
        obs, _, terminated, truncated, info = result
        now = info.get("invalid_actions", 0)
        c["invalid"] += now - self.probe_last
        self.probe_last, self.probe_mask = now, mask_of(obs)
        c["steps"] += 1
        c["episodes"] += int(terminated or truncated)
        return result

    cls.__init__, cls.reset, cls.step = counting_init, counting_reset, counting_step

    def restore():
        cls.__init__, cls.reset, cls.step = init, reset, step
    return restore


def run(args, argv):
    import csv
    import main as ddrl_main
    from compare import machine_info
    from options.options import parse_args
    flags = shlex.split(args.flags) + ["--run_dir", args.run_dir]
    parsed = parse_args(flags)
    if parsed.num_workers != 0:
        raise SystemExit("invalid-actions: --num_workers must be 0 (the envs are counted in "
                         "this process)")
    counts = {role: dict(envs=0, **{k: 0 for k in COUNTS}) for role in ("training", "evaluation")}
    restore = patch_env_class(counts)
    started = time.time()
    try:
        code = ddrl_main.main(flags)
    finally:
        restore()
    wall = time.time() - started
    with open(os.path.join(args.run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(args.run_dir, "metrics.csv")) as f:
        evaluations = [(int(r["env_steps"]), float(r["eval_return"])) for r in csv.DictReader(f)
                       if r.get("eval_return")]
    result = dict(command=".venv/bin/python " + command(argv), flags=args.flags,
                  exit_code=code, wall_s=wall, counts=counts,
                  steps_covered=counts["training"]["steps"] == summary["env_steps"],
                  summary=summary, evaluations=evaluations,
                  date=datetime.date.today().isoformat(), commit=git_commit(),
                  machine=machine_info())
    print(json.dumps(dict(counts=counts, steps_covered=result["steps_covered"],
                          env_steps=summary["env_steps"],
                          last_eval_return=summary.get("last_eval_return"))), flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"Wrote {args.out}")
    return code
