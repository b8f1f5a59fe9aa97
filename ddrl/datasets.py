"""``ddrl dataset PATH --out TARGET --steps N``: a dataset made by rolling out a saved policy.

The behaviour policy is loaded as ``ddrl.load`` loads it (ddrl/policy.py), steps --envs envs
of the run's own kind (the test worker's: training-only wrappers such as reward clipping left
out) for --steps steps, and every transition goes to a Minari dataset (core/data/: Minari's
format, so Minari's tools and other libraries read it; terminations and truncations kept
apart). What acts: the policy's sampled actions (its own exploration), or its most likely
action with --deterministic; --epsilon replaces an action by a uniform random one with that
probability, --action_noise adds Gaussian noise to a Box action (its standard deviation a
fraction of the half-range, the result clipped to the bounds). The D4RL recipe for a "medium"
set is a policy stopped at about a third of its final return, rolled out with its own sampled
actions. The policy's name, checkpoint, returns and flags, and the noise, go in the dataset's
metadata.
"""
import os

import numpy as np

from core import seeding, spaces
from core.errors import ConfigError
from gymnasium import spaces as gym_spaces


def carried_actions(action_space, actions):
    """Env actions [E, ...] as ddrl carries them: Discrete and MultiDiscrete indices from 0."""
    actions = np.asarray(actions)
    if isinstance(action_space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete)):
        start = np.asarray(action_space.start)
        return (actions - start if np.any(start) else actions).astype(np.int64)
    if isinstance(action_space, gym_spaces.MultiBinary):
        return actions.astype(np.int64)
    return actions.astype(np.float32)


class NoisyActions:
    """--epsilon and --action_noise on a batch of env actions, with a generator of its own."""

    def __init__(self, action_space, epsilon, action_noise, seed):
        self.space, self.epsilon, self.noise = action_space, epsilon, action_noise
        self.rng = np.random.default_rng(seed)
        self.space.seed(int(self.rng.integers(2**31)))

    def __call__(self, actions):
        actions = np.array(actions, copy=True)
        if self.noise and isinstance(self.space, gym_spaces.Box):
            half = (self.space.high - self.space.low) / 2.0
            actions = np.clip(actions + self.noise * half * self.rng.standard_normal(
                actions.shape), self.space.low, self.space.high).astype(self.space.dtype)
        if self.epsilon:
            for row in np.flatnonzero(self.rng.random(len(actions)) < self.epsilon):
                actions[row] = self.space.sample()
        return actions


def collect_dataset(path, out, steps, envs=1, deterministic=False, epsilon=0.0,
                    action_noise=0.0, seed=None, description=None, quiet=False):
    """Roll out the policy saved at ``path`` for ``steps`` env steps over ``envs`` envs into
    the Minari dataset ``out`` (a directory path or an id in the local Minari store); the
    episodes still running at the end are dropped (a dataset holds whole episodes). Returns
    the dataset's path."""
    from core.data import DatasetWriter
    from ddrl.policy import load
    if steps < 1 or envs < 1:
        raise ConfigError(f"ddrl dataset: --steps {steps} and --envs {envs} must be positive.")
    if not 0.0 <= epsilon <= 1.0 or action_noise < 0.0:
        raise ConfigError(f"ddrl dataset: --epsilon {epsilon} must be in [0, 1] and "
                          f"--action_noise {action_noise} at least 0.")
    policy = load(path)
    if action_noise and not isinstance(policy.action_space, gym_spaces.Box):
        raise ConfigError(f"ddrl dataset --action_noise {action_noise}: the action space is "
                          f"{policy.action_space}, not a Box; use --epsilon for random "
                          f"actions instead.")
    seed = policy.args.seed if seed is None else seed
    layout = spaces.layout_of(policy.observation_space)
    env_list = [policy.make_env(seed=seeding.evaluation_env(seed, 1000 + i))
                for i in range(envs)]
    noisy = NoisyActions(policy.action_space, epsilon, action_noise, seed)
    meta = policy.meta
    behaviour = {"checkpoint": os.path.abspath(policy.path), "model_name": policy.args.model_name,
                 "env_steps": meta.get("env_steps"), "updates": meta.get("updates"),
                 "eval_return": meta.get("eval_return", meta.get("last_eval_return")),
                 "deterministic": deterministic, "epsilon": epsilon,
                 "action_noise": action_noise, "seed": seed,
                 "flags": {k: v for k, v in policy.config.items()
                           if isinstance(v, (str, int, float, bool, type(None)))}}
    writer = DatasetWriter(out, policy.observation_space, policy.action_space,
                           env_id=meta.get("gym_id"), num_envs=envs,
                           algorithm_name=f"ddrl {policy.args.model_name}",
                           metadata={"ddrl_behaviour_policy": behaviour,
                                     **({"description": description} if description else {})})
    try:
        obs = [env.reset(seed=seeding.evaluation_env(seed, 2000 + i))[0]
               for i, env in enumerate(env_list)]
        state = policy.initial_state(envs)
        starts = np.ones(envs, dtype=bool)
        returns, totals = [], np.zeros(envs)
        for _ in range(-(-steps // envs)):
            seen = spaces.stack([layout.encode(o) for o in obs])
            batch = layout.decode(seen)
            if policy.recurrent:
                actions, state = policy.act(batch, state, deterministic, episode_starts=starts)
            else:
                actions = policy.act(batch, deterministic=deterministic)
            actions = noisy(actions)
            next_seen, rewards, terminated, truncated = [], [], [], []
            for i, env in enumerate(env_list):
                new_obs, reward, term, trunc, _ = env.step(actions[i])
                next_seen.append(layout.encode(new_obs))
                rewards.append(float(reward))
                terminated.append(bool(term))
                truncated.append(bool(trunc))
                totals[i] += float(reward)
                if term or trunc:
                    returns.append(totals[i])
                    totals[i] = 0.0
                    new_obs = env.reset()[0]
                obs[i] = new_obs
            writer.add_steps(seen, carried_actions(policy.action_space, actions),
                             np.asarray(rewards, np.float32), np.asarray(terminated),
                             np.asarray(truncated), spaces.stack(next_seen))
            starts = np.asarray(terminated) | np.asarray(truncated)
        written = writer.close()
    finally:
        for env in env_list:
            getattr(env, "close", lambda: None)()
    if not quiet:
        spread = (f"return {np.mean(returns):.2f} +- {np.std(returns):.2f} over "
                  f"{len(returns)} episodes" if returns else "no episode ended")
        print(f"ddrl: wrote {written}: {policy.args.model_name} from {policy.path}, "
              f"{steps:,} steps on {envs} env{'s' if envs > 1 else ''}, {spread}", flush=True)
    return written
