"""Train, load and use a policy from Python (what a notebook does), in one process, no Ray.

    .venv/bin/python examples/python_api.py                 # from the repository's root
    .venv/bin/python examples/python_api.py --run_dir /tmp/api-cartpole

1. ``ddrl.train`` runs PPO on CartPole-v1 (its preset, configs/ppo-CartPole-v1.yaml) with
   every flag a keyword, until the evaluation reaches the target or the budget ends.
2. ``ddrl.load`` rebuilds the best policy from the run directory alone.
3. ``policy.act`` plays 10 episodes on the env the run trained on, one observation at a time.

tests/test_api.py runs this file.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ddrl  # (after the repository's root is on the path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", default="runs/python-api-cartpole")
    parser.add_argument("--episodes", type=int, default=10)
    cli = parser.parse_args()

    run = ddrl.train(gym_id="CartPole-v1", num_workers=0, seed=0, total_steps=150_000,
                     target_return=495, run_dir=cli.run_dir, quiet=True)
    print(f"trained: {run.summary['env_steps']:,} env steps, stopped because "
          f"{run.summary['stopped_because']}, best eval {run.summary['best_eval_return']:.1f}")

    policy = ddrl.load(run.run_dir)          # checkpoints/best.pt
    env = policy.make_env()                  # CartPole-v1 as the run built it
    returns = []
    for episode in range(cli.episodes):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    print(f"played {len(returns)} episodes with policy.act: mean return "
          f"{sum(returns) / len(returns):.1f} (min {min(returns):.0f}, max {max(returns):.0f})")


if __name__ == "__main__":
    main()
