"""A team acting uniformly at random in a PettingZoo parallel env with Discrete actions: the floor a trained team is
measured from (the team-mean return, as envs/pettingzoo_env.py --team_reward mean scores it).

    .venv/bin/python benchmarks/random_team.py --pz_env mpe2.simple_speaker_listener_v4 \\
        --pz_kwargs '{"max_cycles": 25, "continuous_actions": false}' --episodes 200

Prints the mean return over the episodes (seeds 0..E-1) with a 95% bootstrap interval.
"""
import argparse
import importlib
import json

import numpy as np

from ddrl.stats import stratified_bootstrap_ci


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pz_env", default="mpe2.simple_speaker_listener_v4")
    parser.add_argument("--pz_kwargs", default='{"max_cycles": 25, "continuous_actions": false}')
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    env = importlib.import_module(args.pz_env).parallel_env(**json.loads(args.pz_kwargs))
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(args.episodes):
        env.reset(seed=episode)
        total = 0.0
        while env.agents:
            actions = {agent: int(rng.integers(env.action_space(agent).n)) for agent in env.agents}
            _, rewards, _, _, _ = env.step(actions)
            total += float(np.mean(list(rewards.values())))
        returns.append(total)
    low, high = stratified_bootstrap_ci(np.array(returns), np.mean, reps=10_000, seed=0)
    print(f"{args.pz_env}: random team, {args.episodes} episodes: team-mean return "
          f"{np.mean(returns):.2f} [{low:.2f}, {high:.2f}]")


if __name__ == "__main__":
    main()
