"""Test worker: its own envs, one episode per env, batched inference; deterministic actions, or
sampled ones with --no-eval_deterministic (drawn from generators seeded per evaluation, apart
from the training's)."""
import numpy as np
import torch

from core import seeding
from core.sampling.envs import describe_error, env_failure, to_env_action
from core.learning.normalizer import normalize
from core.plugins import load_plugins, make_env
from core.distributed.process import setup_process

class Evaluator:
    def __init__(self, spec, num_episodes):
        args = spec.run
        setup_process(args)
        plugins = load_plugins(spec)
        self.seed = args.seed
        self.plugins, self.env_config = plugins, spec.env
        self.max_errors = args.max_env_errors
        self.error_count = 0  # every error survived, for the rebuilt envs' fresh seeds
        self.envs = [make_env(plugins, spec.env, seeding.evaluation_env(self.seed, k),
                              evaluation=True)
                     for k in range(num_episodes)]
        self.action_space = self.envs[0].action_space
        # Its initial weights are overwritten before use; drawing them must not advance the
        # training RNG when the test worker shares the driver's process (--num_workers 0).
        with torch.random.fork_rng(devices=[]):
            self.model = plugins.model_cls(spec.model, self.envs[0].observation_space,
                                           self.action_space)
        self.deterministic = args.eval_deterministic
        self.normalize_obs = args.normalize_obs
        self.obs_clip = args.obs_clip

    def _restart(self, k, seed, exc, failures):
        """Env k raised in this episode: count it, rebuild the env (a fresh constructor seed,
        so a fault drawn from it is not replayed) and start the episode again with its seed
        ``seed`` (so the rerun is the episode the others are compared with). EnvFailure after
        --max_env_errors failures of one episode. The new first observation."""
        while True:
            failures[k] += 1
            self.error_count += 1
            if failures[k] >= self.max_errors:
                raise env_failure(f"the test worker's env {k}", failures[k],
                                  describe_error(exc)) from exc
            try:  # best effort: the env is broken already
                getattr(self.envs[k], "close", lambda: None)()
            except Exception:  # noqa: BLE001
                pass
            try:
                self.envs[k] = make_env(self.plugins, self.env_config,
                                        seeding.rebuilt_env(seeding.evaluation_env(self.seed, k),
                                                            self.error_count),
                                        evaluation=True)
                return self.envs[k].reset(seed=seed)[0]
            except Exception as again:  # noqa: BLE001 - another failure of this episode
                exc = again

    @torch.no_grad()
    def evaluate(self, weights, weights_version=0, env_steps=0, obs_statistics=None):
        """See ``_evaluate``. Sampled actions come from torch's generator and the model's
        ``acting_rng`` (if it has one), both seeded from the env-step count: the same draws in a
        restored run, and the training's generators (this process's, with --num_workers 0)
        left where they were."""
        if self.deterministic:
            return self._evaluate(weights, weights_version, env_steps, obs_statistics)
        seed = seeding.evaluation_sampling(self.seed, env_steps)
        if hasattr(self.model, "acting_rng"):  # this model is the test worker's own
            self.model.acting_rng = np.random.default_rng(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._evaluate(weights, weights_version, env_steps, obs_statistics)

    def _evaluate(self, weights, weights_version, env_steps, obs_statistics):
        """Mean, spread and list of the returns of one episode per env; with
        --normalize_obs, observations normalized with ``obs_statistics`` (never updated here).
        An env that raises is rebuilt and its episode run again from the start with the same
        seed; "env_errors" counts the errors survived."""
        if weights is not None:
            self.model.set_weights(weights)
        # Each evaluation draws fresh starts, a function of the env-step count only, so a
        # restored run evaluates as the uninterrupted one.
        seeds = [seeding.evaluation_episode(self.seed, k, env_steps)
                 for k in range(len(self.envs))]
        errors_before = self.error_count
        failures = [0] * len(self.envs)  # of the episode now running in env k
        observations = []
        for k, s in enumerate(seeds):
            try:
                observations.append(self.envs[k].reset(seed=s)[0])
            except Exception as exc:  # noqa: BLE001 - survived: rebuilt, reset again
                observations.append(self._restart(k, s, exc, failures))
        returns = np.zeros(len(self.envs))
        lengths = np.zeros(len(self.envs), dtype=np.int64)
        running = list(range(len(self.envs)))
        while running:
            batch = np.stack([observations[i] for i in running])
            if self.normalize_obs:
                batch = normalize(batch, obs_statistics, self.obs_clip)
            actions, _ = self.model.choose_actions(batch, deterministic=self.deterministic)
            still_running = []
            for i, action in zip(running, actions):
                try:
                    obs, reward, terminated, truncated, _ = self.envs[i].step(
                        to_env_action(self.action_space, action))
                except Exception as exc:  # noqa: BLE001 - the episode is run again
                    observations[i] = self._restart(i, seeds[i], exc, failures)
                    returns[i], lengths[i] = 0.0, 0
                    still_running.append(i)
                    continue
                returns[i] += reward
                lengths[i] += 1
                observations[i] = obs
                if not (terminated or truncated):
                    still_running.append(i)
            running = still_running
        return {"eval_return": float(returns.mean()), "eval_return_std": float(returns.std()),
                "eval_return_min": float(returns.min()), "eval_return_max": float(returns.max()),
                "eval_length": float(lengths.mean()), "returns": returns.tolist(),
                "weights_version": weights_version, "env_steps": env_steps,
                "env_errors": self.error_count - errors_before}
