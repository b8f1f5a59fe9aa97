"""The cost of memory: PPO on CartPole-v1 with the velocities hidden (``--gym_id CartPole-v1
--hide_obs 1,3``), an MLP policy against an LSTM and a GRU one, acting and learning.

    .venv/bin/python benchmarks/probe.py memory-cost
    .venv/bin/python benchmarks/probe.py memory-cost --quick --out /tmp/memory-cost.json   # a quick check

The three policies, each with the CartPole preset's shape (configs/ppo-CartPole-v1.yaml, one
worker in this process with its 2 x 4 envs as 8: 8 envs x 32 steps, batch 256, 10 epochs):

- ``MLP 64,64``: no ``--recurrent``; actor and critic 64x64 tanh MLPs on the 2 inputs. It acts
  through the numpy actor (models/numpy_mlp.py) and the worker computes the values of the whole
  fragment at once after it (core/sampling/rollout.py ``values_later``);
- ``LSTM-64`` (``--recurrent lstm``) and ``GRU-64`` (``--recurrent gru``): a core of 64 units
  for the actor and one for the critic (no ``--shared_rnn``), then the same 64x64 heads. They
  act through torch, the values with every action, the state carried per env slot
  (core/sampling/memory.py EnvMemory), and learn on sequences (each env's 32 steps, default
  ``--bptt_len``: agents/default_agent.py ``sequence_grads``).

In this process, one torch thread; after one warm-up of everything, per repeat, the policies in
turn (their order rotated every repeat):

- acting, ``worker``: ``RolloutWorker.sample`` of 32 steps x 8 envs, ``--fragments`` times:
  env steps per second (best and median over repeats), and the worker's time per batched step
  split into the policy's, timed inside the loop where the worker calls it (a recurrent model's
  ``EnvMemory.act``, values included; the MLP's ``choose_actions(obs, values=False)`` plus its
  values of the fragment at once, spread over the steps), and the rest: the envs and the
  bookkeeping (for memory: storing the state of every step for the fragment);
- acting, ``policy``: the policy alone, the same call on the worker's batch of 8 observations
  ``--policy_calls`` times in a tight loop (warm caches; the MLP without its values), and for
  reference the MLP through torch with its values, as the recurrent policies act;
- learning, on one fragment the worker collected (its GAE done): ``gradient``, one minibatch
  gradient on its 256 samples (``agent.fetch_grads`` with ``GradientRequest(0, 0, 1, 0.0, 1.0,
  0.0, 0)``; for a recurrent model the 8 sequences of 32 steps), ``--gradients`` timed calls;
  and ``round``, one round's update work as the PPO loop does it with one gradient worker: 10
  epochs x 1 minibatch of (``fetch_grads`` with the learner's current weights, the learner's
  Adam step), on a copy of the agent with a learner of its own (acting is left alone).

Medians [min, max] over repeats (the gradient: over every timed call), the ratios LSTM / MLP and
GRU / MLP as times (above 1: memory costs more). Writes ``--out`` (every measurement, the
summary, the markdown table, the CPU's flags, torch version, commit, command, load averages)
and prints the table. ``--quick``: a tiny budget, a few seconds (the smoke test).
"""
import datetime
import json
import os
import statistics
import time

from probes import REPO, command, git_commit

POLICIES = (("mlp", "MLP 64,64", ()),
            ("lstm", "LSTM-64", ("--recurrent", "lstm", "--rnn_hidden_size", "64")),
            ("gru", "GRU-64", ("--recurrent", "gru", "--rnn_hidden_size", "64")))
GYM_FLAGS = ("--env_name", "gym_env", "--gym_id", "CartPole-v1", "--hide_obs", "1,3")
NUM_ENVS = 8
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "results", "memory-cost.json")
#: (repeats, fragments, policy calls, gradient calls) of --quick
QUICK = dict(repeats=2, fragments=1, policy_calls=20, gradients=2)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx")


def add_args(p):
    p.add_argument("--repeats", type=int, default=10,
                   help="timed repeats of every measurement, per policy (default: %(default)s)")
    p.add_argument("--fragments", type=int, default=8,
                   help="fragments of 32 steps x 8 envs per acting repeat (default: %(default)s)")
    p.add_argument("--policy_calls", type=int, default=500,
                   help="policy calls per repeat (default: %(default)s)")
    p.add_argument("--gradients", type=int, default=10,
                   help="timed minibatch gradients per repeat (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help=f"a tiny budget for a smoke test ({', '.join(f'--{k} {v}' for k, v in QUICK.items())}); "
                        "writes only with --out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None,
                   help="write the result JSON here (default: "
                        "benchmarks/results/memory-cost.json; with --quick, nowhere)")


def cpu_flags(path="/proc/cpuinfo"):
    """The instruction sets that decide small fp32 matrix products (and bf16): True/False for
    avx2, avx512f, avx512_bf16, and amx (any amx_* flag); None each without /proc/cpuinfo."""
    try:
        with open(path) as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return {name: None for name in CPU_FLAGS}
    flags = set(line.split(":", 1)[1].split()) if ":" in line else set()
    return {"avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags,
            "amx": any(flag.startswith("amx") for flag in flags)}


def stats(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values),
                n=len(values)) if values else None


def make_worker(flags, seed):
    from core.sampling.rollout import RolloutWorker
    from options.options import parse_args, run_spec
    args = parse_args(["--config", os.path.join(REPO, "configs", "ppo-CartPole-v1.yaml"),
                       *GYM_FLAGS, "--num_workers", "0", "--num_envs_per_worker", str(NUM_ENVS),
                       "--torch_threads", "1", "--seed", str(seed), *flags])
    shape = dict(num_envs=args.num_envs_per_worker, rollout_steps=args.rollout_steps,
                 batch_size=args.batch_size, num_epochs=args.num_epochs)
    assert shape == dict(num_envs=NUM_ENVS, rollout_steps=32, batch_size=256, num_epochs=10), \
        f"the CartPole preset's shape changed: {shape}"
    return RolloutWorker(run_spec(args), 0), shape


class Subject:
    """One policy: its worker, a memory of its own for the policy-alone calls, and a copy of
    the agent holding one collected fragment, with a learner, for the learning measurements."""

    def __init__(self, key, label, flags, seed):
        import copy

        from core.algos.ppo_trainer import advantage_moments
        from core.learning.learner import Learner
        from core.sampling.memory import EnvMemory
        self.key, self.label = key, label
        self.worker, self.shape = make_worker(flags, seed)
        model = self.worker.model
        self.recurrent = bool(model.recurrent)
        self.memory = EnvMemory(model, NUM_ENVS)
        self.steps = self.shape["rollout_steps"]
        collected = self.worker.collect(None, 0, self.steps)   # the agent's GAE done
        self.mean, self.std = advantage_moments([collected])
        self.agent = copy.deepcopy(self.worker.agent)          # learning leaves acting alone
        self.learner = Learner(copy.deepcopy(self.agent.model))
        self.samples = int(self.agent.data["weights"].sum().item() if self.recurrent
                           else len(self.agent.data["returns"]))
        self.sequences = len(self.agent.data["returns"])      # = samples without memory

    # -- acting ---------------------------------------------------------------------------------
    def acting(self, fragments):
        """Env steps per second of ``fragments`` calls of worker.sample, and the microseconds
        per batched step the policy took inside them (the calls the loop makes, timed where it
        makes them: ``EnvMemory.act``; without memory ``choose_actions`` and the fragment's
        values afterwards, spread over its steps)."""
        worker, spent = self.worker, [0.0]

        def timed(call):
            def wrapper(*a, **k):
                begin = time.perf_counter()
                try:
                    return call(*a, **k)
                finally:
                    spent[0] += time.perf_counter() - begin
            return wrapper
        # instance attributes in front of the methods, for these fragments only
        owners = ([(worker.memory, "act")] if self.recurrent else
                  [(worker.model, "choose_actions"), (worker, "fragment_values")])
        for owner, name in owners:
            setattr(owner, name, timed(getattr(owner, name)))
        try:
            steps, start = 0, time.perf_counter()
            for _ in range(fragments):
                steps += worker.sample(self.steps)[1].env_steps
            elapsed = time.perf_counter() - start
        finally:
            for owner, name in owners:
                delattr(owner, name)
        return steps / elapsed, 1e6 * spent[0] / (fragments * self.steps)

    def policy(self, calls):
        """Microseconds per policy call on the worker's batch of 8 observations, as the
        worker makes it."""
        from core import spaces
        worker, model = self.worker, self.worker.model
        obs = spaces.tree_map(lambda a, dtype: a.astype(dtype), worker.observations,
                              worker.carried_dtypes)
        memory, values = self.memory, not worker.values_later
        start = time.perf_counter()
        for _ in range(calls):
            memory.act(model, obs, values=values)
        return 1e6 * (time.perf_counter() - start) / calls

    def torch_policy(self, calls):
        """The MLP through torch, values with the action (the recurrent models' way of acting):
        what the numpy actor saves the MLP, for reading the acting ratios."""
        model = self.worker.model
        obs = self.worker.observations.astype("float32")
        saved, model.numpy_actor = model.numpy_actor, None
        try:
            start = time.perf_counter()
            for _ in range(calls):
                model.choose_actions(obs, values=True)
            return 1e6 * (time.perf_counter() - start) / calls
        finally:
            model.numpy_actor = saved

    # -- learning -------------------------------------------------------------------------------
    def gradient(self):
        """Milliseconds of one minibatch gradient on the whole fragment."""
        from core.types import GradientRequest
        start = time.perf_counter()
        result = self.agent.fetch_grads(None, GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, 0))
        elapsed = time.perf_counter() - start
        assert result.num_samples == self.samples, (result.num_samples, self.samples)
        return 1e3 * elapsed

    def round(self):
        """Milliseconds of one round's update work: epochs x (gradient, Adam step)."""
        from core.types import GradientRequest
        learner, epochs = self.learner, self.shape["num_epochs"]
        start = time.perf_counter()
        for epoch in range(epochs):
            request = GradientRequest(epoch, 0, 1, self.mean, self.std, 0.0, learner.version)
            result = self.agent.fetch_grads(learner.weights_for_workers(), request)
            learner.apply(result.gradients, 0.0)
        return 1e3 * (time.perf_counter() - start)

    def close(self):
        self.worker.close()


def cell(d, nd=0, best=None):
    if not d:
        return "—"
    text = f"{d['median']:,.{nd}f} [{d['min']:,.{nd}f}, {d['max']:,.{nd}f}]"
    return text if best is None else f"{best:,.{nd}f} / {text}"


#: (summary key, row label, decimals, higher is faster) in the table's order
ROWS = (("worker_steps_per_s", f"acting: rollout worker, {NUM_ENVS} envs x 32 steps (env steps/s, "
                               "best / median [min, max])", 0, True),
        ("step_us", f"acting: worker time per step of the {NUM_ENVS} envs (us)", 1, False),
        ("policy_in_loop_us", "acting: of which the policy, timed inside the worker (us)", 1,
         False),
        ("rest_us", "acting: of which the rest, envs and bookkeeping (us)", 1, False),
        ("policy_us", f"acting: the policy alone, one call on {NUM_ENVS} observations in a "
                      f"loop (us)", 1, False),
        ("gradient_ms", "learning: one minibatch gradient, 256 samples (ms)", 2, False),
        ("round_ms", "learning: one round, 10 epochs x 1 minibatch, gradient + Adam (ms)", 1,
         False))


def ratio(summary, key, row_key, faster):
    """Time of ``key``'s policy over the MLP's, from the medians."""
    mine, base = summary[key].get(row_key), summary["mlp"].get(row_key)
    if not mine or not base or not mine["median"] or not base["median"]:
        return None
    return base["median"] / mine["median"] if faster else mine["median"] / base["median"]


def markdown(summary):
    labels = {key: label for key, label, _ in POLICIES}
    lines = [f"| measure | {' | '.join(labels.values())} | LSTM / MLP | GRU / MLP |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row_key, label, nd, faster in ROWS:
        cells = [cell(summary[key].get(row_key), nd,
                      summary[key].get("worker_best") if row_key == "worker_steps_per_s"
                      else None) for key in labels]
        ratios = [ratio(summary, key, row_key, faster) for key in ("lstm", "gru")]
        lines.append(f"| {label} | {' | '.join(cells)} | "
                     + " | ".join("—" if r is None else f"{r:.2f}x" for r in ratios) + " |")
    torch_us = summary["mlp"].get("torch_policy_us")
    if torch_us:
        lines.append(f"\nRatios are times (above 1: memory costs more). The MLP acts through numpy "
                     f"without its values (they come for the whole fragment after it); through "
                     f"torch with its values, as the recurrent policies act, one call takes "
                     f"{torch_us['median']:,.1f} us.")
    return "\n".join(lines)


def summarize(measurements):
    summary = {}
    for key, _, _ in POLICIES:
        mine = [m for m in measurements if m["policy"] == key]
        rates = [m["worker_steps_per_s"] for m in mine]
        step_us = [1e6 * NUM_ENVS / r for r in rates]
        policy_us = [m["policy_us"] for m in mine]
        summary[key] = dict(
            worker_steps_per_s=stats(rates), worker_best=max(rates) if rates else None,
            step_us=stats(step_us), policy_us=stats(policy_us),
            # per repeat: the worker's time per step less the policy's, both measured then
            policy_in_loop_us=stats([m["policy_in_loop_us"] for m in mine]),
            rest_us=stats([s - m["policy_in_loop_us"] for s, m in zip(step_us, mine)]),
            gradient_ms=stats([g for m in mine for g in m["gradient_ms"]]),
            round_ms=stats([m["round_ms"] for m in mine]),
            torch_policy_us=stats([m["torch_policy_us"] for m in mine
                                   if m.get("torch_policy_us") is not None]))
    return summary


def run(args, argv):
    import torch

    from compare import machine_info
    from probes.update_cost import cpu_description
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, min(getattr(args, name), value))
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)
    torch.set_num_threads(1)
    started = time.perf_counter()
    result = dict(command=".venv/bin/python " + command(argv), options=vars(args),
                  date=datetime.date.today().isoformat(), commit=git_commit(),
                  torch=torch.__version__, machine=machine_info(),
                  cpu={**cpu_description(), "flags": cpu_flags()},
                  load_before=list(os.getloadavg()), measurements=[])
    subjects = [Subject(key, label, flags, args.seed) for key, label, flags in POLICIES]
    result["shape"] = subjects[0].shape
    result["policies"] = {s.key: dict(label=s.label, flags=list(f), recurrent=s.recurrent,
                                      parameters=sum(p.numel() for p in
                                                     s.worker.model.parameters()),
                                      samples=s.samples, sequences=s.sequences)
                          for s, (_, _, f) in zip(subjects, POLICIES)}
    for s in subjects:  # warm-up: first calls, torch's kernels, the allocator
        s.acting(1)
        s.policy(min(20, args.policy_calls))
        s.gradient()
        s.round()
    for n in range(args.repeats):
        shift = n % len(subjects)
        for s in subjects[shift:] + subjects[:shift]:
            rate, in_loop_us = s.acting(args.fragments)
            rec = dict(repeat=n, policy=s.key, worker_steps_per_s=rate,
                       policy_in_loop_us=in_loop_us,
                       policy_us=s.policy(args.policy_calls),
                       torch_policy_us=(None if s.recurrent else
                                        s.torch_policy(args.policy_calls)),
                       gradient_ms=[s.gradient() for _ in range(args.gradients)],
                       round_ms=s.round())
            result["measurements"].append(rec)
            print(f"repeat {n + 1}/{args.repeats} {s.label:10s} worker "
                  f"{rec['worker_steps_per_s']:>8,.0f} steps/s | policy in the loop "
                  f"{rec['policy_in_loop_us']:6.1f} us, alone {rec['policy_us']:6.1f} us "
                  f"| gradient {statistics.median(rec['gradient_ms']):6.2f} ms | round "
                  f"{rec['round_ms']:7.1f} ms", flush=True)
    for s in subjects:
        s.close()
    summary = summarize(result["measurements"])
    result["summary"] = summary
    result["ratios"] = {f"{key}/mlp": {row_key: ratio(summary, key, row_key, faster)
                                      for row_key, _, _, faster in ROWS}
                        for key in ("lstm", "gru")}
    result["markdown"] = markdown(summary)
    result["load_after"] = list(os.getloadavg())
    result["wall_s"] = time.perf_counter() - started
    result["torch_threads"] = torch.get_num_threads()
    print("\n" + result["markdown"])
    print(f"\nload average before {result['load_before'][0]:.2f}, after "
          f"{result['load_after'][0]:.2f}; {result['wall_s']:.0f} s")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"Wrote {os.path.relpath(out, REPO) if out.startswith(REPO) else out}")
