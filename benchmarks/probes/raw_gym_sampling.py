"""Raw gymnasium stepping speed on this machine: the floor any platform's sampling is measured against.

    .venv/bin/python benchmarks/probe.py raw-gym --env CartPole-v1 --out benchmarks/results/raw_gym_CartPole-v1.json

(a) one env, random actions (action_space.sample());
(b) N envs in one process, stepped in a python loop, actions from a 64x64 tanh MLP whose forward pass
    is batched over the N envs (torch, 1 thread), for N in --num_envs (default 1 10 100).
Envs auto-reset on termination or truncation. Each case runs for --seconds of wall time.
"""
import json
import os
import platform
import time


def random_actions(env_id, seconds, seed):
    import gymnasium as gym
    env = gym.make(env_id)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    steps, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1000):  # check the clock once per 1000 steps
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        steps += 1000
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return steps / elapsed


def policy_actions(env_id, n, seconds, seed):
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    envs = [gym.make(env_id) for _ in range(n)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    space = envs[0].action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    out = space.n if discrete else int(np.prod(space.shape))
    net = nn.Sequential(nn.Linear(obs.shape[1], 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))
    steps, t0 = 0, time.perf_counter()
    while True:
        with torch.no_grad():
            head = net(torch.from_numpy(obs))
            if discrete:  # sample from the categorical (Gumbel-max trick: cheap, exact)
                acts = (head - torch.log(-torch.log(torch.rand_like(head)))).argmax(1).numpy()
            else:  # Gaussian around the mean, clipped to the box
                acts = np.clip((head + 0.1 * torch.randn_like(head)).numpy(), space.low, space.high)
        for i, e in enumerate(envs):
            o, _, term, trunc, _ = e.step(acts[i])
            obs[i] = e.reset()[0] if term or trunc else o
        steps += n
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return steps / elapsed


def add_args(p):
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num_envs", type=int, nargs="+", default=[1, 10, 100])
    p.add_argument("--seconds", type=float, default=3.0, help="wall time per case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON output path (default: print only)")


def run(args, argv):
    import gymnasium as gym
    import torch
    torch.set_num_threads(1)  # same rule as every ddrl process

    result = dict(env=args.env, seconds_per_case=args.seconds, nproc=os.cpu_count(),
                  python=platform.python_version(), torch=torch.__version__, gymnasium=gym.__version__,
                  random_actions_1env_steps_per_s=random_actions(args.env, args.seconds, args.seed),
                  policy_steps_per_s={})
    for n in args.num_envs:
        result["policy_steps_per_s"][str(n)] = policy_actions(args.env, n, args.seconds, args.seed)
    print(json.dumps(result, indent=2))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
