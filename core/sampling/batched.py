"""The env group of a batched env (core/batched_env.py): one call steps all of a worker's envs.

It answers the rollout worker as core/sampling/envs.py's EnvGroup does (reset, step ->
StepResult, get_state/set_state), with no Python loop over envs on the way: observations,
rewards and flags stay the env's batched arrays. What differs is only where an episode ends:

- SameStep envs return the new episode's observation at once; the final ones come from
  ``infos["final_obs"]`` (a handful of rows per step).
- NextStep envs return the final observation; the step after it is the env's reset, which
  ignores its action and returns reward 0. That step is reported as ``skipped``: the rollout
  keeps it as a cut (``Trajectory.valid`` False, as an env failure's), so no transition crosses
  the boundary and a truncated episode still bootstraps from its real final observation.

Faults: a batched env that raises is rebuilt whole with a fresh seed and reset; every one of its
envs' episodes is cut (``StepResult.failed`` all True). ``--max_env_errors`` in a row end the
run (EnvFailure), as for single envs.
"""
import numpy as np

from core import seeding, spaces
from core.batched_env import (FINAL_INFO, FINAL_OBS, NEXT_STEP, as_actions, autoreset_mode,
                              masked_rows, to_numpy)
from core.errors import ConfigError
from core.plugins import make_env_batch
from core.sampling.envs import (EPISODE_METRICS_KEY, EnvGroup, StepResult, describe_error,
                                env_failure, to_env_action)
from core.types import STEP_REPORT_KEY


def make_env_group(plugins, args, seeds, placement="worker", worker_index=None):
    """The env group of a rollout worker: one batched env of ``len(seeds)`` envs when the env
    plugin builds one (core/plugins.py make_env_batch), else an EnvGroup of single envs."""
    seeds = list(seeds)
    env = make_env_batch(plugins, args, len(seeds), seeds[0])
    if env is None:
        return EnvGroup(plugins, args, seeds, placement=placement, worker_index=worker_index)
    return BatchedEnvGroup(plugins, args, seeds, env, worker_index=worker_index)


class BatchedEnvGroup:
    def __init__(self, plugins, args, seeds, env, worker_index=None):
        """``env``: the batched env of ``len(seeds)`` envs, built with ``seeds[0]``."""
        if args.env_placement != "worker":
            raise ConfigError(f"--env_placement {args.env_placement}: this env plugin is "
                              f"batched (it steps all of a worker's envs in one call), so it "
                              f"runs inside the rollout worker; leave --env_placement at "
                              f"'worker' (the batch already makes one call per step).")
        self.plugins, self.args = plugins, args
        self.seeds = list(seeds)
        self.worker_index = worker_index
        self.max_errors = args.max_env_errors
        self.env = env
        self.mode = autoreset_mode(env)
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.layout = spaces.layout_of(self.observation_space)
        spaces.check_action_mask(self.layout, self.action_space)
        self.errors_in_a_row = 0
        self.error_count = 0
        self.reset_errors = []
        num_envs = len(self.seeds)
        # NextStep: the envs whose next step is their reset (their last step ended an episode)
        self.resetting = np.zeros(num_envs, dtype=bool)

    def __len__(self):
        return len(self.seeds)

    def bind_policy(self, source):
        bind = getattr(self.env, "bind_policy", None)
        if bind is not None:
            bind(source)

    # -- observations --------------------------------------------------------------------------
    def encode(self, obs):
        """A batch of observations as ddrl carries them (numpy; a tree for structured spaces)."""
        return self.layout.encode(to_numpy(obs))

    # -- faults -----------------------------------------------------------------------------------
    def _record(self, method, exc, errors):
        self.errors_in_a_row += 1
        self.error_count += 1
        error = describe_error(exc)
        errors.extend({"env": e, "method": method, "error": error} for e in range(len(self)))
        if self.errors_in_a_row >= self.max_errors:
            where = f"the batched env of {len(self)} envs" + (
                "" if self.worker_index is None else f" of worker {self.worker_index}")
            raise env_failure(where, self.errors_in_a_row, error) from exc

    def _rebuild(self, errors):
        """A new batched env with a fresh seed, reset (until that works; each failure counts):
        its first observations."""
        while True:
            seed = seeding.rebuilt_env(self.seeds[0], self.error_count)
            try:
                try:  # best effort: it is broken already
                    getattr(self.env, "close", lambda: None)()
                except Exception:  # noqa: BLE001
                    pass
                self.env = make_env_batch(self.plugins, self.args, len(self), seed)
                return self._reset_env([seed + e for e in range(len(self))])
            except Exception as exc:  # noqa: BLE001 - counts as another error
                self._record("reset", exc, errors)

    def _reset_env(self, seeds):
        obs, _ = self.env.reset(seed=[int(s) for s in seeds])
        self.resetting[:] = False
        return self.encode(obs)

    def _reset(self, seeds, errors):
        try:
            return self._reset_env(seeds)
        except Exception as exc:  # noqa: BLE001 - an env fault: rebuilt
            self._record("reset", exc, errors)
            return self._rebuild(errors)

    # -- the group's API ------------------------------------------------------------------------
    def reset(self):
        return self._reset(self.seeds, self.reset_errors)

    def reset_all(self, seeds):
        return self._reset(list(seeds), self.reset_errors)

    def take_reset_errors(self):
        errors, self.reset_errors = self.reset_errors, []
        return errors

    def step(self, actions) -> StepResult:
        num_envs = len(self)
        errors = []
        try:
            obs, rewards, terminated, truncated, infos = self.env.step(
                as_actions(self.env, to_env_action(self.action_space, actions)))
        except Exception as exc:  # noqa: BLE001 - the whole batch is cut and rebuilt
            self._record("step", exc, errors)
            observations = self._rebuild(errors)
            return StepResult(observations, np.zeros(num_envs, np.float32),
                              np.zeros(num_envs, bool), np.ones(num_envs, bool), {},
                              failed=np.ones(num_envs, bool), errors=errors)
        self.errors_in_a_row = 0
        observations = self.encode(obs)
        rewards = np.asarray(to_numpy(rewards), dtype=np.float32).reshape(num_envs)
        terminated = np.asarray(to_numpy(terminated), dtype=bool).reshape(num_envs)
        truncated = np.asarray(to_numpy(truncated), dtype=bool).reshape(num_envs)
        infos = infos or {}
        if self.mode == NEXT_STEP:
            skipped = self.resetting.copy()
            rewards[skipped] = 0.0
            terminated[skipped] = truncated[skipped] = False
            ended = np.flatnonzero(terminated | truncated)
            # the observation returned IS the final one; the next step is the reset
            final = {int(e): spaces.take(observations, e) for e in ended}
            ended_infos = infos
            self.resetting[:] = False
            self.resetting[ended] = True
        else:
            skipped = None
            ended = np.flatnonzero(terminated | truncated)
            finals = masked_rows(infos, FINAL_OBS)
            final = {int(e): self.layout.encode(to_numpy(finals[e])) for e in ended}
            ended_infos = infos.get(FINAL_INFO, {})
        episode_metrics = {}
        if len(ended) and EPISODE_METRICS_KEY in (ended_infos or {}):
            rows = masked_rows(ended_infos, EPISODE_METRICS_KEY)
            episode_metrics = {int(e): {k: float(v) for k, v in rows[e].items()}
                               for e in ended if e in rows}
        report = None
        if STEP_REPORT_KEY in infos:
            report = {name: np.asarray(to_numpy(value), np.float32)
                      for name, value in infos[STEP_REPORT_KEY].items()
                      if not name.startswith("_")}
        return StepResult(observations, rewards, terminated, truncated, final,
                          errors=errors, episode_metrics=episode_metrics, step_report=report,
                          skipped=skipped)

    # -- exact resume ---------------------------------------------------------------------------
    def get_state(self):
        """{"env": the batched env's state, "resetting": NextStep's pending resets}, or None
        when the env has no ``get_state`` or cannot give one."""
        get = getattr(self.env, "get_state", None)
        state = get() if get is not None else None
        if state is None:
            return None
        return {"env": state, "resetting": self.resetting.copy(), "num_envs": len(self)}

    def fits_state(self, state):
        return isinstance(state, dict) and state.get("num_envs") == len(self)

    def set_state(self, state):
        self.env.set_state(state["env"])
        self.resetting = np.asarray(state["resetting"], dtype=bool).copy()

    def close(self):
        getattr(self.env, "close", lambda: None)()
