"""Evaluation on a batched env (core/batched_env.py): the test worker's episodes, one per env of
one batch, stepped together with one call per step.

Used when the env plugin builds a batched env (gym_env --vectorize, a simulator batched by
nature): an evaluation of N episodes is N envs of one batch, each reset with its episode's seed,
stepped until every one has finished its first episode (what an env does after that is not
looked at; a NextStep env's reset steps included). The returns are the same statistics as
core/sampling/evaluator.py's.

Faults: a batch cannot rerun one env's episode alone, so a batch that raises is rebuilt with a
fresh seed and the whole evaluation runs again from the same episode seeds. ``--max_env_errors``
errors in a row without a successful step between stop the run (EnvFailure), as on the training
side; no episode is ever given up alone.
"""
import numpy as np

from core import seeding, spaces
from core.batched_env import (FINAL_INFO, NEXT_STEP, as_actions, autoreset_mode, masked_rows,
                              to_numpy)
from core.learning.normalizer import normalize
from core.plugins import make_env_batch
from core.sampling.envs import check_valid_actions, describe_error, env_failure, to_env_action
from core.sampling.memory import EnvMemory, actions_only


class BatchedEpisodes:
    """The test worker's batch of ``num_episodes`` envs (built with evaluation on)."""

    def __init__(self, plugins, env_config, env, seed, max_errors):
        self.plugins, self.env_config = plugins, env_config
        self.env, self.seed, self.max_errors = env, seed, max_errors
        self.num_envs = env.num_envs
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.layout = spaces.layout_of(self.observation_space)
        self.errors_in_a_row = 0
        self.error_count = 0

    def _rebuild(self):
        try:  # best effort: it is broken already
            getattr(self.env, "close", lambda: None)()
        except Exception:  # noqa: BLE001
            pass
        self.env = make_env_batch(self.plugins, self.env_config, self.num_envs,
                                  seeding.rebuilt_env(seeding.evaluation_env(self.seed, 0),
                                                      self.error_count))

    def run(self, model, seeds, deterministic, normalizer=None):
        """(returns, lengths, successes) of one episode per env, each reset with its seed;
        the batch rebuilt and the evaluation run again after an error."""
        while True:
            try:
                return self._episodes(model, seeds, deterministic, normalizer)
            except Exception as exc:  # noqa: BLE001 - the whole batch failed: counted
                self._failed(exc)
            while True:  # a rebuild that raises counts too
                try:
                    self._rebuild()
                    break
                except Exception as exc:  # noqa: BLE001 - counted like a step's error
                    self._failed(exc)

    def _failed(self, exc):
        """Count an error; EnvFailure at --max_env_errors in a row."""
        self.error_count += 1
        self.errors_in_a_row += 1
        if self.errors_in_a_row >= self.max_errors:
            raise env_failure(f"the test worker's batched env of {self.num_envs} envs",
                              self.errors_in_a_row, describe_error(exc)) from exc

    def _episodes(self, model, seeds, deterministic, normalizer):
        n, env = self.num_envs, self.env
        mode = autoreset_mode(env)
        obs, _ = env.reset(seed=[int(s) for s in seeds])
        obs = self.layout.encode(to_numpy(obs))
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        successes = np.full(n, np.nan)
        done = np.zeros(n, dtype=bool)
        memory = EnvMemory(model, n)
        only = actions_only(model)
        while not done.all():
            live = np.flatnonzero(~done)
            if self.layout.has_mask:
                check_valid_actions(spaces.take(obs, live), self.action_space,
                                    lambda row, live=live: f"the test worker's env "
                                    f"{live[row]}, at step {lengths[live[row]]} of its episode,")
            seen = normalizer(obs) if normalizer is not None else obs
            actions, _ = memory.act(model, seen, deterministic=deterministic, **only)
            obs, rewards, terminated, truncated, infos = env.step(
                as_actions(env, to_env_action(self.action_space, actions)))
            self.errors_in_a_row = 0
            rewards = np.asarray(to_numpy(rewards), dtype=np.float64).reshape(n)
            ended = (np.asarray(to_numpy(terminated), bool).reshape(n)
                     | np.asarray(to_numpy(truncated), bool).reshape(n)) & ~done
            returns[~done] += rewards[~done]
            lengths[~done] += 1
            if ended.any():
                ended_infos = (infos or {}) if mode == NEXT_STEP else (infos or {}).get(
                    FINAL_INFO, {})
                for e, value in masked_rows(ended_infos, "is_success").items():
                    if ended[e]:
                        successes[e] = float(value)
                memory.episodes_ended(ended)
            done |= ended
            obs = self.layout.encode(to_numpy(obs))
        return returns, lengths, successes

    def close(self):
        getattr(self.env, "close", lambda: None)()


def batched_episodes(plugins, env_config, num_episodes, seed, max_errors):
    """BatchedEpisodes when the env plugin builds a batched env for evaluation, else None."""
    env = make_env_batch(plugins, env_config, num_episodes,
                         seeding.evaluation_env(seed, 0))
    return None if env is None else BatchedEpisodes(plugins, env_config, env, seed, max_errors)


def normalizer_for(obs_statistics, obs_clip):
    return lambda obs: normalize(obs, obs_statistics, obs_clip)
