"""Test worker: its own envs, one episode per env, batched inference; deterministic actions, or
sampled ones with --no-eval_deterministic (drawn from generators seeded per evaluation, apart
from the training's).

An env that raises (in reset or step) is rebuilt with a fresh constructor seed and its episode
run again from its start, with the episode's own reset seed, so that every evaluation compares
the same starts. Two limits, both --max_env_errors (``n`` below):

- **Broken**: an env that raises ``n`` times in a row, with no progress between, stops the run
  with EnvFailure (core/sampling/envs.py ``env_failure``), as a rollout worker's env does.
  Progress is one successful ``step`` since the last error, the training side's rule
  (EnvGroup resets its count on every successful step), so that both sides of a run call the
  same env broken. One step is enough: it shows the rebuilt env can be constructed, reset and
  stepped, which an env that cannot run at all (a dead simulator, a wrong binary) never does;
  an env that raises on every reset or on every first step still fails in ``n`` attempts.
  Requiring more steps would call broken an env that is merely very flaky, which training
  survives. The count follows the env from one evaluation to the next.
- **Lost episode**: an episode that raised ``n`` times in this evaluation (with progress
  between: else it is broken) is given up: it is counted in ``eval_episodes_lost``, named in
  ``lost_episodes`` (env, failures, last error), left out of the mean, and its env is rebuilt
  before the next evaluation. A flaky env's faults do not depend on the policy, but a long
  episode has more steps to raise in: the mean of the finished ones leans toward the short
  episodes' returns (low ones in CartPole), and the count says how much is missing. Without
  the cap an env that raises at a fixed step of every episode would rerun for
  ever; with it, an env that raises with probability p per step loses an episode of L steps
  with probability about (1 - (1 - p)**L)**n (p = 0.002, L = 500, n = 5: 0.1). When every
  episode is lost the evaluation has no return: ``eval_return`` and its spread are None.
"""
import numpy as np
import torch

from core import seeding
from core import spaces
from core.errors import EnvContractError
from core.sampling.envs import (check_valid_actions, describe_error, env_failure,
                                step_result_error, to_env_action)
from core.learning.normalizer import normalize
from core.sampling.memory import EnvMemory, actions_only
from core.plugins import evaluation_config, load_plugins, make_env
from core.sampling.batched_eval import batched_episodes, normalizer_for
from core.distributed.process import setup_process


class EpisodeLost(Exception):
    """Internal: episode k of this evaluation raised --max_env_errors times; it is given up."""


class Evaluator:
    def __init__(self, spec, num_episodes):
        args = spec.run
        setup_process(args)
        plugins = load_plugins(spec)
        self.seed = args.seed
        self.plugins, self.env_config = plugins, spec.env
        self.max_errors = args.max_env_errors
        self.error_count = 0  # every error survived, for the rebuilt envs' fresh seeds
        # A batched env plugin evaluates its episodes as one batch (core/sampling/batched_eval.py)
        self.batch = batched_episodes(plugins, evaluation_config(spec.env), num_episodes,
                                      self.seed, self.max_errors)
        self.envs = ([self.batch] * num_episodes if self.batch is not None else
                     [make_env(plugins, spec.env, seeding.evaluation_env(self.seed, k),
                               evaluation=True) for k in range(num_episodes)])
        # Per env, across evaluations: errors since its last successful step (see the module's
        # docstring), and whether it raised last (an episode given up): rebuilt before use.
        self.errors_in_a_row = [0] * num_episodes
        self.needs_rebuild = [False] * num_episodes
        self.action_space = self.envs[0].action_space
        self.encode = spaces.layout_of(self.envs[0].observation_space).encode
        # Its initial weights are overwritten before use; drawing them must not advance the
        # training RNG when the test worker shares the driver's process (--num_workers 0).
        with torch.random.fork_rng(devices=[]):
            self.model = plugins.model_cls(spec.model, self.envs[0].observation_space,
                                           self.action_space)
        self.deterministic = args.eval_deterministic
        self.normalize_obs = args.normalize_obs
        self.obs_clip = args.obs_clip

    def _failed(self, k, exc, failures, last_errors):
        """Env k raised in this evaluation's episode: count it. EnvFailure when it is the env's
        --max_env_errors-th error without progress (broken); EpisodeLost when it is the
        episode's --max_env_errors-th (the episode is given up); else the caller reruns it."""
        failures[k] += 1
        self.error_count += 1
        self.errors_in_a_row[k] += 1
        self.needs_rebuild[k] = True
        last_errors[k] = describe_error(exc)
        if self.errors_in_a_row[k] >= self.max_errors:
            raise env_failure(f"the test worker's env {k}", self.errors_in_a_row[k],
                              last_errors[k]) from exc
        if failures[k] >= self.max_errors:
            raise EpisodeLost(k)

    def _start(self, k, seed, failures, last_errors):
        """Episode k from its start (reset with ``seed``, so that a rerun is the episode the
        others are compared with), on a rebuilt env (a fresh constructor seed, so a fault drawn
        from it is not replayed) if the env raised last. Its first observation; EpisodeLost or
        EnvFailure from ``_failed``."""
        while True:
            try:
                if self.needs_rebuild[k]:
                    try:  # best effort: the env is broken already
                        getattr(self.envs[k], "close", lambda: None)()
                    except Exception:  # noqa: BLE001
                        pass
                    self.envs[k] = make_env(
                        self.plugins, self.env_config,
                        seeding.rebuilt_env(seeding.evaluation_env(self.seed, k),
                                            self.error_count),
                        evaluation=True)
                    self.needs_rebuild[k] = False
                return self.encode(self.envs[k].reset(seed=seed)[0])
            except Exception as exc:  # noqa: BLE001 - another failure of this episode
                self._failed(k, exc, failures, last_errors)

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
        """Mean, spread and list of the returns of one episode per env, over the episodes that
        finished; with --normalize_obs, observations normalized with ``obs_statistics`` (never
        updated here). An env that raises is rebuilt and its episode run again from the start
        with the same seed; "env_errors" counts the errors survived, "eval_episodes_lost" the
        episodes given up ("lost_episodes": [{"env", "failures", "error"}]), see the module's
        docstring. "eval_success_rate" is the share of finished episodes whose last step's info
        said ``is_success`` (goal envs), None when no env says. Every return statistic is None
        when no episode finished."""
        if weights is not None:
            self.model.set_weights(weights)
        # Each evaluation draws fresh starts, a function of the env-step count only, so a
        # restored run evaluates as the uninterrupted one.
        seeds = [seeding.evaluation_episode(self.seed, k, env_steps)
                 for k in range(len(self.envs))]
        errors_before = self._errors()
        played = self._play(seeds, obs_statistics)
        return self._statistics(*played, weights_version, env_steps,
                                self._errors() - errors_before, len(self.envs))

    @torch.no_grad()
    def confirm(self, weights, weights_version=0, env_steps=0, obs_statistics=None,
                episodes=50):
        """The confirming evaluation of --confirm_episodes: ``episodes`` episodes of the same
        weights on fresh starts (``seeding.confirmation_episode``: none is a start the regular
        evaluations play), played on the test envs in rounds of one episode per env; the same
        statistics as ``evaluate``. Sampled actions (--no-eval_deterministic) are drawn from
        generators of their own, as ``evaluate``'s."""
        if weights is not None:
            self.model.set_weights(weights)
        seeds = [seeding.confirmation_episode(self.seed, j, env_steps) for j in range(episodes)]
        errors_before = self._errors()
        with torch.random.fork_rng(devices=[]):
            if not self.deterministic:
                seed = seeding.confirmation_episode(self.seed, episodes, env_steps)
                torch.manual_seed(seed)
                if hasattr(self.model, "acting_rng"):
                    self.model.acting_rng = np.random.default_rng(seed)
            parts, width = [], len(self.envs)
            for start in range(0, episodes, width):
                part = list(self._play(seeds[start:start + width], obs_statistics))
                part[3] = [start + k for k in part[3]]  # lost episodes, numbered in the whole
                parts.append(part)
        returns, lengths, successes = (np.concatenate([p[i] for p in parts]) for i in range(3))
        lost = [k for p in parts for k in p[3]]
        failures = [f for p in parts for f in p[4]] if parts[0][4] is not None else None
        last_errors = [e for p in parts for e in p[5]] if parts[0][5] is not None else None
        return self._statistics(returns, lengths, successes, lost, failures, last_errors,
                                weights_version, env_steps, self._errors() - errors_before,
                                episodes)

    def _errors(self):
        """Env errors survived so far (a batched env counts its own)."""
        return self.batch.error_count if self.batch is not None else self.error_count

    def _play(self, seeds, obs_statistics):
        """One episode on each of the first len(seeds) test envs, env k reset with seeds[k]:
        (returns, lengths, successes) of the episodes that finished, the episodes lost, and per
        episode its failures and last error (None for a batched env)."""
        if self.batch is not None:
            return self._play_batch(seeds, obs_statistics)
        n = len(seeds)
        failures = [0] * n  # of the episode now running in env k
        last_errors = [None] * n
        lost = []
        observations = [None] * n
        returns = np.zeros(n)
        lengths = np.zeros(n, dtype=np.int64)
        # info["is_success"] at an episode's last step (goal envs: gymnasium-robotics, SB3's
        # success_rate); NaN where the env does not say.
        successes = np.full(n, np.nan)
        running = []
        memory = EnvMemory(self.model, n)  # a recurrent policy's state per env
        only = actions_only(self.model)
        for k, s in enumerate(seeds):
            try:
                observations[k] = self._start(k, s, failures, last_errors)
                running.append(k)
            except EpisodeLost:
                lost.append(k)
        while running:
            batch = spaces.stack([observations[i] for i in running])
            check_valid_actions(batch, self.action_space,
                                lambda row, envs=running: f"the test worker's env {envs[row]}, "
                                f"at step {lengths[envs[row]]} of its episode,")
            if self.normalize_obs:
                batch = normalize(batch, obs_statistics, self.obs_clip)
            actions, _ = memory.act(self.model, batch, rows=running,
                                    deterministic=self.deterministic, **only)
            still_running = []
            for i, action in zip(running, actions):
                try:
                    result = self.envs[i].step(to_env_action(self.action_space, action))
                except Exception as exc:  # noqa: BLE001 - the episode is run again
                    returns[i], lengths[i] = 0.0, 0
                    memory.episodes_ended([i])  # run again from its start
                    try:
                        self._failed(i, exc, failures, last_errors)
                        observations[i] = self._start(i, seeds[i], failures, last_errors)
                    except EpisodeLost:
                        lost.append(i)
                        continue
                    still_running.append(i)
                    continue
                if len(result) != 5:  # the env's code is wrong: not a fault to retry
                    raise EnvContractError(step_result_error(type(self.envs[i]), result))
                obs, reward, terminated, truncated, info = result
                self.errors_in_a_row[i] = 0   # progress: see the module's docstring
                returns[i] += reward
                lengths[i] += 1
                observations[i] = self.encode(obs)
                if not (terminated or truncated):
                    still_running.append(i)
                elif "is_success" in info:
                    successes[i] = float(info["is_success"])
            running = still_running
        finished = np.array(sorted(set(range(n)) - set(lost)), dtype=np.int64)
        return (returns[finished], lengths[finished], successes[finished], sorted(lost),
                failures, last_errors)

    def _play_batch(self, seeds, obs_statistics):
        """One episode per env of the batch (core/sampling/batched_eval.py); a round shorter
        than the batch (the last of a confirmation) keeps its first len(seeds) episodes, the
        other envs replay its first start, their returns left out."""
        n = len(seeds)
        width = len(self.envs)
        padded = list(seeds) + [seeds[0]] * (width - n)
        returns, lengths, successes = self.batch.run(
            self.model, padded, self.deterministic,
            normalizer_for(obs_statistics, self.obs_clip) if self.normalize_obs else None)
        return returns[:n], lengths[:n], successes[:n], [], None, None

    def _statistics(self, done_returns, done_lengths, done_successes, lost, failures,
                    last_errors, weights_version, env_steps, env_errors, episodes):
        done_successes = done_successes[~np.isnan(done_successes)]

        def statistic(fn, values):
            return float(fn(values)) if len(values) else None
        return {"eval_return": statistic(np.mean, done_returns),
                "eval_return_std": statistic(np.std, done_returns),
                "eval_return_min": statistic(np.min, done_returns),
                "eval_return_max": statistic(np.max, done_returns),
                "eval_length": statistic(np.mean, done_lengths),
                "eval_success_rate": statistic(np.mean, done_successes),
                "returns": done_returns.tolist(),
                "weights_version": weights_version, "env_steps": env_steps,
                "env_errors": env_errors,
                "eval_episodes": episodes,
                "eval_episodes_lost": len(lost),
                "lost_episodes": [{"env": k, "failures": failures[k], "error": last_errors[k]}
                                  for k in sorted(lost)]}
