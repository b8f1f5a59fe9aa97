"""Reference returns on MPE simple_spread (mpe2, 3 agents, 25 steps, discrete actions, or with
--continuous its Box(5) actions), in the team reward envs/pettingzoo_env.py gives (the sum of
the agents' rewards at each step):

- random: every agent acts uniformly at random;
- scripted: the landmarks are assigned to the agents greedily (the closest free pair first),
  and each agent pushes along the axis where it is farthest from its landmark (corrected by its
  velocity), and waits once it is within a small radius (--continuous: that push as a one-hot
  of the Box(5) action, full strength).

    .venv/bin/python benchmarks/spread_baselines.py --episodes 200 [--continuous]

Prints the mean return with a 95% bootstrap interval for each (episode seeds 0..E-1).
"""
import argparse
import json

import numpy as np

from ddrl.stats import stratified_bootstrap_ci

# mpe2's discrete actions: 0 nothing, 1 -x, 2 +x, 3 -y, 4 +y
PUSH = {(0, -1): 1, (0, 1): 2, (1, -1): 3, (1, 1): 4}


def assignment(positions, landmarks):
    """Greedy: the closest (agent, landmark) pair first, then the closest among the rest."""
    pairs = sorted((np.linalg.norm(p - q), i, j) for i, p in enumerate(positions)
                   for j, q in enumerate(landmarks))
    taken_agents, taken_landmarks, goal = set(), set(), {}
    for _, i, j in pairs:
        if i not in taken_agents and j not in taken_landmarks:
            goal[i] = j
            taken_agents.add(i)
            taken_landmarks.add(j)
    return goal


def scripted_actions(observations, agents, radius=0.05, lookahead=2.0):
    """Each agent's action from its own observation (velocity, position, landmarks relative to
    it) and the assignment everyone computes alike from agent 0's view."""
    first = observations[agents[0]]
    origin = first[2:4]
    landmarks = [origin + first[4 + 2 * k: 6 + 2 * k] for k in range(len(agents))]
    positions = [observations[a][2:4] for a in agents]
    goal = assignment(positions, landmarks)
    actions = {}
    for i, agent in enumerate(agents):
        velocity, position = observations[agent][0:2], observations[agent][2:4]
        delta = landmarks[goal[i]] - (position + lookahead * 0.1 * velocity)
        if np.linalg.norm(delta) < radius:
            actions[agent] = 0
            continue
        axis = int(np.argmax(np.abs(delta)))
        actions[agent] = PUSH[(axis, int(np.sign(delta[axis])))]
    return actions


def play(policy, episodes, seed=0, continuous=False):
    from mpe2 import simple_spread_v3
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=continuous)
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        observations, _ = env.reset(seed=seed + episode)
        total = 0.0
        while env.agents:
            if policy == "random":
                actions = ({a: rng.uniform(0, 1, 5).astype(np.float32) for a in env.agents}
                           if continuous else {a: int(rng.integers(5)) for a in env.agents})
            else:
                actions = scripted_actions(observations, list(env.agents))
                if continuous:
                    actions = {a: np.eye(5, dtype=np.float32)[k] for a, k in actions.items()}
            observations, rewards, *_ = env.step(actions)
            total += sum(rewards.values())
        returns.append(total)
    env.close()
    return np.array(returns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--continuous", action="store_true",
                        help="the env's continuous actions (Box(5) per agent)")
    args = parser.parse_args()
    results = {}
    for policy in ("random", "scripted"):
        returns = play(policy, args.episodes, continuous=args.continuous)
        ci = stratified_bootstrap_ci(returns, np.mean, reps=10_000, seed=0)
        results[policy] = {"mean": float(returns.mean()), "ci95": [float(x) for x in ci],
                           "episodes": args.episodes}
        print(f"{policy}: {returns.mean():.2f} [{results[policy]['ci95'][0]:.2f}, "
              f"{results[policy]['ci95'][1]:.2f}] over {args.episodes} episodes")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
