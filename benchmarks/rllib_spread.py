"""Peer run: RLlib's multi-agent PPO on MPE simple_spread with ddrl's ma_ppo settings
(configs/ma_ppo-simple_spread_v3.yaml), evaluated the way ddrl evaluates it.

    python3 -m venv benchmarks/.venv-rllib
    benchmarks/.venv-rllib/bin/pip install -r benchmarks/requirements-rllib.txt
    nice -n 10 benchmarks/.venv-rllib/bin/python benchmarks/rllib_spread.py --seed 0 \
        --total_steps 2000000 --eval_every 50000 --eval_episodes 20 --out /tmp/rllib-spread-s0.json

RLlib 2.60 needs gymnasium 1.2.2 and the project pins gymnasium 1.4.0, so this runs in a venv of
its own (benchmarks/requirements-rllib.txt), and imports nothing from ddrl.

The task: mpe2.simple_spread_v3 (N=3, max_cycles=25, continuous_actions=False), through a small
pettingzoo ParallelEnv wrapper (TeamSpread below) and RLlib's ParallelPettingZooEnv. On equal
terms with ddrl's envs/pettingzoo_env.py with --agent_ids --team_reward mean, the wrapper gives:

- observations: each agent's own 18 numbers, then an "alive" 1.0, then a one-hot of the agent's
  index: ddrl's row layout exactly (22 numbers). The alive entry is always 1.0 here (no agent
  leaves simple_spread before the end, and PettingZoo sends no observation for one that has);
  it is kept only so that the two policies see the same inputs;
- rewards: every agent receives the TEAM MEAN of the agents' rewards at each step (ddrl's
  --team_reward mean), so an agent's episode return is the team-mean return.

RLlib's PPO (new API stack: RLModule, Learner, EnvRunner, as RLlib 2.60 defaults), ONE policy
(RLModule "shared") mapped to all three agents, with ddrl's preset settings:

- lr 7e-4 decayed linearly to 0 over --total_steps env steps (RLlib's lr schedule
  [[0, 7e-4], [total_steps, 0]], interpolated on the lifetime env steps sampled); gamma 0.99,
  GAE lambda 0.95, entropy_coeff 0.01, clip_param 0.2 (constant, as the preset's
  clip_schedule), vf_clip_param 1e10 (off: ddrl does not clip the value loss), vf_loss_coeff
  0.5 (both take the unhalved squared error), grad_clip 0.5 by global norm, no KL penalty
  (use_kl_loss=False: RLlib's PPO adds an adaptive one by default, ddrl has none); advantages
  standardized over the whole batch (both do, by default);
- per iteration 800 env steps from 32 envs x 25 steps (num_envs_per_env_runner=32,
  rollout_fragment_length=25, train_batch_size_per_learner=800), sampled in this process
  (num_env_runners=0, as ddrl's --num_workers 0) and learned in it (num_learners=0);
  10 epochs of ONE minibatch (the whole batch): see "minibatch" below;
- model: 64x64 tanh MLPs, separate actor and critic (vf_share_layers=False), a linear head each;
  the critic local per agent (each agent's value from its own observation: RLlib's default in
  multi-agent, ddrl's --ma_critic local; the preset's default is --ma_critic central, so set it
  beside a ddrl run with --ma_critic local);
- steps: env steps everywhere (count_steps_by="env_steps"; one step of all three agents = 1
  step, as ddrl counts): the budget --total_steps, the lr schedule, the steps reported. RLlib's
  agent steps (3 per env step) are recorded beside them as a check;
- one torch thread; Ray started with --num_cpus CPUs (1 or 2, default 1), no dashboard, on
  127.0.0.1 only (Ray 2.60 swaps a loopback node address for the machine's outward one unless
  ray._private.services.get_node_ip_address is pinned, as ddrl's core/distributed/loopback.py
  does; the same pin is here: every Ray server of a run listens on 127.0.0.1, checked with ss).

Minibatch: RLlib's minibatch_size counts rows per module, and its learner adds to each episode
chunk of each agent one artificial (loss-masked) step for the value bootstrap. One minibatch of
the whole batch is therefore 3 agents x 32 episodes x (25 + 1) = 2496 rows (2400 of them
counted by the loss): minibatch_size is set to that, and the script checks every iteration that
the rows the learner got were exactly that many (a smaller count would repeat rows in the
minibatch, a larger one split it); the rows seen go in the JSON ("module_rows_seen").

What differs from ddrl, and why:

- the PPO ratio is clipped per agent (each agent's row is a sample with its own advantage), as
  RLlib's multi-agent PPO (and MAPPO) does; ddrl's ma_ppo clips the team's ratio (the product
  of the agents') and uses one team advantage. With the local critic each RLlib agent's value
  target is the same team-mean return, and ddrl's team value is the mean of the agents' values;
- initialization and the optimizer are RLlib's own: torch's default init of the layers (ddrl:
  orthogonal, gain sqrt(2) hidden, 0.01 on the policy head, 1 on the value head; RLlib takes
  one initializer for both heads) and Adam with eps 1e-8 (ddrl 1e-5);
- the lr schedule's clock: RLlib sets an update's lr from the env steps sampled including that
  iteration's batch, ddrl from those before it, so RLlib's lr runs one iteration (800 of
  --total_steps env steps) ahead: its first update takes 7e-4 * (1 - 800/total), its last 0;
- the team-mean reward is each agent's reward, so RLlib's own training "episode return" is the
  sum over the three agents; the script reports it divided by 3 (train_return: RLlib's mean
  over its last 100 training episodes, metrics_num_episodes_for_smoothing), and its own
  deterministic evaluations (below) as the number to compare.

Evaluation, by the script itself (not RLlib's evaluation workers), every --eval_every env steps
(at the first iteration that reaches it; iterations are 800 env steps) and at 0 and at the end:
--eval_episodes episodes of a fresh TeamSpread, episode k seeded 10_000 + k, deterministic
actions (the shared module's forward_inference on the three agents' observations as one batch
-> action_dist_inputs -> argmax); the number recorded is the mean over episodes of the
team-mean return (the sum over the 25 steps of the mean of the agents' rewards), what ddrl's
evaluation reports with --team_reward mean. A random team scores about -27 by it; the untrained
policy's argmax scores worse (about -60: each agent repeats one move and drifts off).

Seeds: --seed seeds RLlib (config.debugging(seed=...): the module's init, the envs' resets, the
sampling), torch and numpy. RLlib's ParallelPettingZooEnv keeps the agents in a set, whose order
(and so the order of the agents' rows in every batch) follows the process's string hash seed;
the script therefore runs itself with PYTHONHASHSEED=0 unless it is set, and then two runs of
one --seed give the same numbers (checked: the same eval return to the last digit; without it
they differed).

Output: a line per evaluation (env steps, wall s, eval return), and --out, a JSON file with the
curve (env steps, agent steps, wall_s since training started, train_s = wall_s without the time
spent in evaluations, eval return and its std, train_return, the learning rate), the settings,
the versions, the CPU (model and avx2/avx512f/avx512_bf16/amx flags), the setup time (process
start to the first training iteration) and, with --target, the first evaluation that reached it
(wall_s, train_s, env steps). Training runs to --total_steps whatever the target.
"""
import os
import sys
import time

if "PYTHONHASHSEED" not in os.environ:  # repeatable runs: see "Seeds" in the docstring
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

T_PROCESS = time.time()  # the setup time counts from here (imports included)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
from importlib import metadata  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from pettingzoo.utils.env import ParallelEnv  # noqa: E402

N_AGENTS, MAX_CYCLES = 3, 25
NUM_ENVS, ROLLOUT = 32, 25
BATCH_ENV_STEPS = NUM_ENVS * ROLLOUT                          # 800 env steps per iteration
MODULE_ROWS = N_AGENTS * NUM_ENVS * (ROLLOUT + 1)             # 2496: one minibatch (see above)
MODULE_ID = "shared"
LOOPBACK = "127.0.0.1"


class TeamSpread(ParallelEnv):
    """simple_spread_v3 with ddrl's --agent_ids rows and --team_reward mean (module docstring)."""

    def __init__(self):
        from mpe2 import simple_spread_v3
        self.env = simple_spread_v3.parallel_env(N=N_AGENTS, max_cycles=MAX_CYCLES,
                                                 continuous_actions=False)
        self.possible_agents = list(self.env.possible_agents)
        self.metadata = self.env.metadata
        n = len(self.possible_agents)
        width = int(np.prod(self.env.observation_space(self.possible_agents[0]).shape))
        # 1.0 = alive, then the one-hot of the agent's index
        self.suffix = {a: np.concatenate([[1.0], np.eye(n)[i]]).astype(np.float32)
                       for i, a in enumerate(self.possible_agents)}
        space = gym.spaces.Box(-np.inf, np.inf, (width + 1 + n,), np.float32)
        self.observation_spaces = {a: space for a in self.possible_agents}
        self.action_spaces = {a: self.env.action_space(a) for a in self.possible_agents}

    @property
    def agents(self):
        return self.env.agents

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def _rows(self, observations):
        return {a: np.concatenate([np.asarray(o, np.float32).ravel(), self.suffix[a]])
                for a, o in observations.items()}

    def reset(self, seed=None, options=None):
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._rows(observations), infos

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        team = float(np.mean([rewards[a] for a in actions]))  # the agents that acted
        return (self._rows(observations), {a: team for a in rewards}, terminations,
                truncations, infos)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()


def evaluate(module, episodes):
    """Mean and std over ``episodes`` of the team-mean return, argmax actions, seeds 10_000 + k."""
    from ray.rllib.core.columns import Columns
    env = TeamSpread()
    returns = []
    for k in range(episodes):
        observations, _ = env.reset(seed=10_000 + k)
        total = 0.0
        for _ in range(MAX_CYCLES):
            agents = [a for a in env.possible_agents if a in observations]
            if not agents or not env.agents:
                break
            batch = torch.from_numpy(np.stack([observations[a] for a in agents]))
            with torch.no_grad():
                out = module.forward_inference({Columns.OBS: batch})
            chosen = out[Columns.ACTION_DIST_INPUTS].argmax(dim=-1).tolist()
            observations, rewards, _, _, _ = env.step(dict(zip(agents, chosen)))
            total += float(np.mean([rewards[a] for a in agents]))
        returns.append(total)
    env.close()
    return float(np.mean(returns)), float(np.std(returns))


def cpu_info():
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return {"model": model, "cpus": os.cpu_count(),
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags,
            "amx": sorted(f for f in flags if f.startswith("amx"))}


def versions():
    out = {"python": platform.python_version()}
    for name in ("ray", "torch", "gymnasium", "pettingzoo", "mpe2"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def start_ray(num_cpus):
    """A new local Ray instance on 127.0.0.1 only (see the module docstring)."""
    import ray
    from ray._private import services

    def node_ip(address=None):  # Ray's signature; the answer no longer depends on it
        return LOOPBACK

    services.get_node_ip_address = node_ip
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             _node_ip_address=LOOPBACK, logging_level="WARNING")
    return ray


def watch_module_rows():
    """Record the rows per module each learner update iterates over (the minibatch check)."""
    from ray.rllib.core.learner import learner as learner_module
    seen = []
    base = learner_module.MiniBatchCyclicIterator

    class Watched(base):
        def __init__(self, batch, **kwargs):
            seen.append({mid: len(b) for mid, b in batch.policy_batches.items()})
            super().__init__(batch, **kwargs)

    learner_module.MiniBatchCyclicIterator = Watched
    return seen


def build_config(args):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    class WholeBatchPPOConfig(PPOConfig):
        """PPOConfig whose check "minibatch_size <= train_batch_size_per_learner" compares like
        with like: minibatch_size counts rows per module (2496 for the whole batch), the train
        batch env steps (800). The check runs with the env-step count; the rows are set back
        after it (and every iteration's rows are checked in main)."""

        def validate(self):
            rows, self.minibatch_size = self.minibatch_size, self.train_batch_size_per_learner
            try:
                super().validate()
            finally:
                self.minibatch_size = rows

    register_env("team_spread", lambda _config: ParallelPettingZooEnv(TeamSpread()))
    model = DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh",
                               vf_share_layers=False, head_fcnet_hiddens=[])
    return (
        WholeBatchPPOConfig()
        .framework("torch")
        .environment("team_spread")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=NUM_ENVS,
                     rollout_fragment_length=ROLLOUT, batch_mode="truncate_episodes")
        .learners(num_learners=0)
        .multi_agent(policies={MODULE_ID},
                     policy_mapping_fn=lambda agent_id, episode, **kwargs: MODULE_ID,
                     count_steps_by="env_steps")
        .rl_module(rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={MODULE_ID: RLModuleSpec(model_config=model)}))
        .training(lr=[[0, 7e-4], [args.total_steps, 0.0]], gamma=0.99, lambda_=0.95,
                  entropy_coeff=0.01, clip_param=0.2, vf_clip_param=1e10, vf_loss_coeff=0.5,
                  grad_clip=0.5, grad_clip_by="global_norm", use_kl_loss=False, kl_coeff=0.0,
                  num_epochs=10, train_batch_size_per_learner=BATCH_ENV_STEPS,
                  minibatch_size=MODULE_ROWS, shuffle_batch_per_epoch=True)
        .debugging(seed=args.seed)
    )


SETTINGS = {
    "env": "mpe2.simple_spread_v3", "env_kwargs": {"N": N_AGENTS, "max_cycles": MAX_CYCLES,
                                                   "continuous_actions": False},
    "observation": "own obs (18) + alive 1.0 + one-hot agent index (3)",
    "reward": "team mean of the agents' rewards, to every agent",
    "policies": "one RLModule shared by all agents", "critic": "local (own observation)",
    "api_stack": "new (RLModule/Learner/EnvRunner)",
    "lr": "7e-4 linear to 0 over total_steps env steps", "gamma": 0.99, "lambda": 0.95,
    "entropy_coeff": 0.01, "clip_param": 0.2, "vf_clip_param": 1e10, "vf_loss_coeff": 0.5,
    "grad_clip": 0.5, "grad_clip_by": "global_norm", "use_kl_loss": False, "num_epochs": 10,
    "train_batch_size_per_learner_env_steps": BATCH_ENV_STEPS,
    "num_envs_per_env_runner": NUM_ENVS, "rollout_fragment_length": ROLLOUT,
    "num_env_runners": 0, "num_learners": 0, "minibatch_size_rows": MODULE_ROWS,
    "model": "fcnet 64x64 tanh, vf_share_layers False, linear heads",
    "count_steps_by": "env_steps", "torch_threads": 1,
}


def settings():
    return {**SETTINGS, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total_steps", type=int, default=2_000_000,
                        help="env steps (one step of all three agents = 1)")
    parser.add_argument("--target", type=float, default=None,
                        help="team-mean eval return whose first reaching is timed")
    parser.add_argument("--eval_every", type=int, default=50_000, help="env steps")
    parser.add_argument("--eval_episodes", type=int, default=20)
    parser.add_argument("--num_cpus", type=int, choices=[1, 2], default=1,
                        help="CPUs Ray is given")
    parser.add_argument("--out", default="rllib_spread.json", help="JSON path")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    ray = start_ray(args.num_cpus)
    rows_seen = watch_module_rows()
    algo = build_config(args).build_algo()
    module = algo.get_module(MODULE_ID)

    curve, reached = [], None
    eval_time = 0.0
    t_train = time.time()
    setup_s = t_train - T_PROCESS

    def record(env_steps, agent_steps, result):
        nonlocal eval_time, reached
        t0 = time.time()
        mean, std = evaluate(module, args.eval_episodes)
        wall_s = t0 - t_train  # up to the evaluation's start: the evaluations before it count
        train_s = wall_s - eval_time
        eval_time += time.time() - t0
        point = {"env_steps": env_steps, "agent_steps": agent_steps, "wall_s": round(wall_s, 2),
                 "train_s": round(train_s, 2), "eval_return": mean, "eval_return_std": std}
        if result is not None:
            runners = result.get("env_runners", {})
            if "episode_return_mean" in runners:
                point["train_return"] = runners["episode_return_mean"] / N_AGENTS
            lr = result.get("learners", {}).get(MODULE_ID, {}).get(
                "default_optimizer_learning_rate")
            if lr is not None:
                point["lr"] = float(lr)
        curve.append(point)
        print(f"env_steps {env_steps:>8d}  wall {wall_s:8.1f} s  train {train_s:8.1f} s  "
              f"eval_return {mean:8.2f} +- {std:5.2f}", flush=True)
        if args.target is not None and reached is None and mean >= args.target:
            reached = {"env_steps": env_steps, "wall_s": point["wall_s"],
                       "train_s": point["train_s"], "eval_return": mean}

    record(0, 0, None)
    env_steps = agent_steps = 0
    next_eval = args.eval_every
    result = None
    while env_steps < args.total_steps:
        result = algo.train()
        runners = result["env_runners"]
        env_steps = int(runners["num_env_steps_sampled_lifetime"])
        agent_steps = int(sum(runners["num_agent_steps_sampled_lifetime"].values()))
        rows = rows_seen[-1] if rows_seen else {}
        if rows != {MODULE_ID: MODULE_ROWS}:
            print(f"warning: the learner got {rows} rows, not {MODULE_ROWS}: the minibatch "
                  f"is not the whole batch this iteration", flush=True)
        if env_steps >= next_eval:
            record(env_steps, agent_steps, result)
            while next_eval <= env_steps:
                next_eval += args.eval_every
    if curve[-1]["env_steps"] != env_steps:
        record(env_steps, agent_steps, result)
    wall_s = time.time() - t_train

    counts = {}
    for rows in rows_seen:
        key = str(rows.get(MODULE_ID))
        counts[key] = counts.get(key, 0) + 1
    summary = {
        "library": "rllib", "algorithm": "PPO (multi-agent, one shared policy)",
        "seed": args.seed, "total_steps": args.total_steps, "env_steps": env_steps,
        "agent_steps": agent_steps, "iterations": len(rows_seen),
        "eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
        "eval_seeds": f"10000..{10_000 + args.eval_episodes - 1}",
        "num_cpus": args.num_cpus, "setup_s": round(setup_s, 2), "wall_s": round(wall_s, 2),
        "train_s": round(wall_s - eval_time, 2), "eval_s": round(eval_time, 2),
        "target": args.target, "reached_target": reached,
        "final_eval_return": curve[-1]["eval_return"],
        "module_rows_seen": counts, "settings": settings(), "versions": versions(),
        "cpu": cpu_info(), "curve": curve,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"wrote {args.out}: {len(curve)} evaluations, {env_steps} env steps, "
          f"{wall_s:.1f} s ({wall_s - eval_time:.1f} s without evaluations)"
          + (f", target {args.target} reached at {reached}" if args.target is not None else ""),
          flush=True)
    logdir = getattr(algo, "logdir", None)
    algo.stop()
    ray.shutdown()
    if logdir and os.path.isdir(logdir) and not os.listdir(logdir):
        os.rmdir(logdir)  # the empty ~/ray_results/<date> dir Ray's Trainable always makes


if __name__ == "__main__":
    main()
