"""A group of envs stepped together, with automatic reset, hosted in-process or as actors.

``--env_placement worker`` (default) runs the wrapper classes inside the rollout worker: a
CartPole step costs ~7 us and a Ray call ~1.1 ms, so cheap envs must not pay a call per step
(benchmarks/probe.py sampling measures both placements). ``--env_placement actor`` puts the envs in
Ray actors of their own, ``--envs_per_actor`` of them per actor (core/sampling/env_host.py): one actor
per env for heavy simulators that compute, several for envs that wait (stepped concurrently in
their host, one call per host and step). The group steps every host at once and waits for all.

An env that raises (a simulator binding that loses its connection now and then) must not end
the run: every step and reset is guarded. The env that raised is rebuilt with a fresh seed and
reset, its episode is cut (``StepResult.failed``), and the others go on. Only an env that raises
``--max_env_errors`` times in a row, with no successful step between, is taken for broken:
``EnvFailure``.
"""
import numpy as np
from gymnasium import spaces as gym_spaces

from core import lazy_ray
from core.lazy_ray import ray
from core import seeding, spaces
from core.errors import EnvContractError, EnvFailure, NoValidAction  # (also importable here)
from core.types import STEP_REPORT_KEY
from core.sampling.env_host import EnvHost
from core.plugins import make_env



def check_valid_actions(observations, action_space, where):
    """NoValidAction naming the env and step (``where(row)``) when a row's action mask
    (core/spaces.py ACTION_MASK) leaves nothing to choose."""
    stuck = spaces.rows_without_valid_action(observations, action_space)
    if len(stuck):
        row = int(stuck[0])
        mask = spaces.action_mask(observations)[row].astype(int).tolist()
        raise NoValidAction(
            f"{where(row)} offered no valid action: its "
            f"{spaces.ACTION_MASK!r} is {mask} for the action space {action_space} (every "
            f"action, or every choice of one sub-action, is masked out). An env must leave at "
            f"least one valid action in every state it does not end; end the episode there "
            f"instead.")


def step_result_error(env_cls, result):
    """The paragraph for a step that did not return gymnasium's 5-tuple."""
    name = getattr(env_cls, "__name__", str(env_cls))
    where = getattr(env_cls, "__module__", "")
    try:
        kinds = ", ".join(type(x).__name__ for x in result)
        got = f"a {len(result)}-tuple ({kinds})"
    except TypeError:
        got = f"a {type(result).__name__}"
    old_api = (" That is the old gym API's (observation, reward, done, info): split done into "
               "terminated (the episode reached a terminal state) and truncated (it was cut, "
               "e.g. by a time limit)." if isinstance(result, tuple) and len(result) == 4
               else "")
    return (f"env plugin {name} ({where}): step() returned {got}; ddrl takes gymnasium's "
            f"5-tuple (observation, reward, terminated, truncated, info).{old_api} This is the "
            f"env's code, not a flaky env (never retried or counted as an env error): fix "
            f"its step().")


def check_finite_observations(observations, env_cls, where):
    """Raise EnvContractError when a float leaf of ``observations`` (an array [T, E, ...], or
    a dict of them) holds NaN or inf; ``where((t, e))`` words the place of the first. One sum
    per leaf (no copy) when all is well: the exact search only when the sum is not finite."""
    leaves = observations.items() if isinstance(observations, dict) else [(None, observations)]
    for path, array in leaves:
        array = np.asarray(array)
        if array.dtype.kind != "f" or np.isfinite(array.sum()):
            continue
        bad = np.argwhere(~np.isfinite(array))
        if not len(bad):  # finite values whose sum overflowed
            continue
        index = tuple(int(i) for i in bad[0])
        name = getattr(env_cls, "__name__", str(env_cls))
        leaf = f" leaf {path!r}" if path is not None else ""
        raise EnvContractError(
            f"env plugin {name} ({getattr(env_cls, '__module__', '')}): an observation{leaf} "
            f"holds {array[index]} ({where(index[:2])}, entry {list(index[2:])}). ddrl checks "
            f"every fragment's observations: a NaN or inf would reach the networks and show "
            f"up as NaN losses. Fix the env (a simulator that diverged can end its episode "
            f"there; values out of range can be clipped in its step()).")


def describe_error(exc):
    """'TypeName: text' on one line, of the env's own exception when Ray wrapped it."""
    wrapped = lazy_ray.imported() and isinstance(exc, ray.exceptions.RayTaskError)
    cause = getattr(exc, "cause", None) if wrapped else None
    exc = cause if isinstance(cause, BaseException) else exc
    text = " ".join(str(exc).split())
    if len(text) > 500:  # a Ray actor's death notice carries pages of context
        text = text[:500] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def env_failure(where, count, last_error):
    """The one-paragraph EnvFailure for ``where`` (e.g. 'env 1 of worker 0')."""
    return EnvFailure(
        f"{where} raised {count} times in a row (in step or reset, each time rebuilt and reset "
        f"with a fresh seed); the last error: {last_error}. An env that keeps failing is taken "
        f"for broken rather than flaky, so the run stops. Fix the env or its simulator, or "
        f"raise the limit with --max_env_errors (now {count}).")


#: An env's info at an episode's last step may carry {name: number} under this key: what the
#: episode scored besides its return (a game's win, draw or loss, the opponent it met). The
#: rollout worker hands them to the loop (RolloutStats.episode_metrics), which passes them to
#: the learner's model (models/base.py observe_episodes).
EPISODE_METRICS_KEY = "episode_metrics"


class StepResult:
    __slots__ = ("observations", "rewards", "terminated", "truncated", "final_observations",
                 "failed", "errors", "episode_metrics", "step_report", "skipped")

    def __init__(self, observations, rewards, terminated, truncated, final_observations,
                 failed=None, errors=None, episode_metrics=None, step_report=None,
                 skipped=None):
        self.observations = observations            # [E, ...] after auto-reset (or rebuild)
        self.rewards = rewards                      # [E]
        self.terminated = terminated                # [E] bool
        self.truncated = truncated                  # [E] bool
        self.final_observations = final_observations  # {e: obs before reset} for ended episodes
        # [E] bool: env e's step raised. Its episode is cut (reward 0, terminated False,
        # truncated True, no final observation: the env never returned one) and
        # observations[e] is the rebuilt env's first observation.
        self.failed = np.zeros(len(rewards), dtype=bool) if failed is None else failed
        # [{"env": e, "method": "step" or "reset", "error": "TypeName: text"}], every error
        # survived during this step: the steps that raised and the resets that did.
        self.errors = [] if errors is None else errors
        # {e: {name: number}} for ended episodes whose last info had EPISODE_METRICS_KEY
        self.episode_metrics = {} if episode_metrics is None else episode_metrics
        # {name: [E, ...]} from the infos' STEP_REPORT_KEY (zeros for an env whose step
        # raised), or None when the envs report nothing
        self.step_report = step_report
        # [E] bool or None: env e's step was a batched env's reset after the episode ended
        # (core/sampling/batched.py, NextStep mode): no transition, cut like a failed step
        # but no error and no episode
        self.skipped = skipped

    @property
    def cut(self):
        """[E] bool: the steps kept as cuts (Trajectory.valid False): failed or skipped."""
        return self.failed if self.skipped is None else self.failed | self.skipped


def to_env_action(action_space, action):
    """What the env gets for one env's action from the model."""
    if isinstance(action_space, gym_spaces.Box):
        # The Gaussian is unbounded; the env gets the action clipped to its bounds, the agent
        # keeps the sampled one for the log-probability (as SB3 does). (np.minimum/np.maximum:
        # np.clip costs several times more on a few numbers.)
        return np.minimum(np.maximum(action, action_space.low), action_space.high)
    if isinstance(action_space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete)):
        # models choose indices from 0; a space may start elsewhere
        start = action_space.start
        return action + start if np.any(start) else action
    return action


def to_env_actions(action_space, actions):
    """to_env_action for a batch (a row per env) in one array operation, not one per env (flat
    Box rows take the space's shape; rows of another size go row by row, as the env gets
    them)."""
    actions = np.asarray(actions)
    if isinstance(action_space, gym_spaces.Box) and actions.shape[1:] != action_space.shape:
        if actions[0].size != int(np.prod(action_space.shape)):
            return [to_env_action(action_space, a) for a in actions]
        actions = actions.reshape(len(actions), *action_space.shape)  # flat rows: shaped
    return to_env_action(action_space, actions)


class EnvGroup:
    def __init__(self, plugins, args, seeds, placement="worker", worker_index=None):
        self.placement = placement
        self.plugins, self.args = plugins, args
        self.seeds = list(seeds)
        self.worker_index = worker_index
        self.max_errors = args.max_env_errors
        self.errors_in_a_row = [0] * len(self.seeds)   # reset by a successful step
        self.error_counts = [0] * len(self.seeds)      # all of them: the fresh seeds' counter
        # Errors survived by reset() / reset_all(), which return observations only; the
        # caller takes them with take_reset_errors().
        self.reset_errors = []
        if placement == "actor":
            per_host = args.envs_per_actor
            # env e lives in host e // per_host, at index e % per_host there
            self.where = [(e // per_host, e % per_host) for e in range(len(self.seeds))]
            self.host_seeds = [self.seeds[i:i + per_host]
                               for i in range(0, len(self.seeds), per_host)]
            self.hosts = [self._new_host(seeds) for seeds in self.host_seeds]
            self.host_dead = [False] * len(self.hosts)
            self.observation_space, self.action_space = ray.get(self.hosts[0].spaces.remote())
        else:
            self.envs = [make_env(plugins, args, s, worker_index=worker_index)
                         for s in self.seeds]
            self.observation_space = self.envs[0].observation_space
            self.action_space = self.envs[0].action_space
        # Observations leave the group as core/spaces.py carries them (an array for a Box
        # space, a tree of arrays for any other); a space that cannot be carried fails here.
        self.layout = spaces.layout_of(self.observation_space)
        spaces.check_action_mask(self.layout, self.action_space)
        self.encode = self.layout.encode
        self.policy_source = None
        self.leaf_shapes = None  # each leaf's shape per env, from the first reset

    def stack(self, observations, what):
        """The envs' encoded observations stacked, each checked to have the shape the first
        reset gave (ddrl stores them in arrays of that shape): an env whose observation changes
        shape is an EnvContractError naming it, not a traceback from deep in the fragment."""
        try:
            stacked = spaces.stack(observations)
        except ValueError:
            stacked = None
        shapes = [tuple(a.shape[1:]) for a in spaces.leaves(stacked)] if stacked is not None \
            else None
        if self.leaf_shapes is None and shapes is not None:
            self.leaf_shapes = shapes
        if shapes is not None and shapes == self.leaf_shapes:
            return stacked
        raise EnvContractError(self.shape_error(observations, what))

    def shape_error(self, observations, what):
        def shape_of(obs):
            leaves = spaces.leaves(obs)
            return tuple(np.shape(leaves[0])) if len(leaves) == 1 and not spaces.is_tree(obs) \
                else {k: tuple(np.shape(v)) for k, v in obs.items()}

        found = [shape_of(o) for o in observations]
        expected = (self.leaf_shapes[0] if self.leaf_shapes is not None
                    and not spaces.is_tree(observations[0]) else None)
        if self.leaf_shapes is not None and spaces.is_tree(observations[0]):
            expected = dict(zip(sorted(observations[0]), self.leaf_shapes))
        odd = next((e for e, shape in enumerate(found) if shape != (expected or found[0])), 0)
        name = getattr(self.plugins.env_cls, "__name__", str(self.plugins.env_cls))
        module = getattr(self.plugins.env_cls, "__module__", "")
        worker = f" of rollout worker {self.worker_index}" if self.worker_index is not None \
            else ""
        return (f"env plugin {name} ({module}): the observation env {odd}{worker} returned "
                f"from {what} has shape {found[odd]}, where "
                + (f"the first reset's had {expected}" if expected is not None
                   else f"env 0's has {found[0]}")
                + f" (its observation_space: {self.observation_space}). An env's observations "
                f"keep one shape: ddrl stores them in arrays of it. This is the env's code, not "
                f"a flaky env (never retried or counted as an env error): fix its {what}, or "
                f"declare the observation_space it returns.")

    def bind_policy(self, source):
        """Hand every env that asks for one (an optional ``bind_policy(source)`` method, e.g.
        envs/pettingzoo_aec.py whose opponents are snapshots of the learning policy) ``source``:
        a callable that returns the model acting now. Rebuilt envs get it too. Envs in actors of
        their own (--env_placement actor) get nothing: the model is not in their process (an
        env that needs it says so when it does)."""
        self.policy_source = source
        if self.placement == "actor":
            return
        for env in self.envs:
            self._bind(env)

    def _bind(self, env):
        bind = getattr(env, "bind_policy", None)
        if bind is not None and self.policy_source is not None:
            bind(self.policy_source)
        return env

    def __len__(self):
        return len(self.seeds)

    # -- guarded calls -------------------------------------------------------------------------
    def _new_host(self, seeds):
        from core.distributed.placement import actor_options, remote_class
        return remote_class(EnvHost).options(**actor_options(num_cpus=0)).remote(
            self.plugins.env_cls, self.args, seeds)

    def _by_host(self, indices):
        """{host: [env indices]} for the actor placement."""
        groups = {}
        for e in indices:
            groups.setdefault(self.where[e][0], []).append(e)
        return groups

    def _host_calls(self, indices, submit):
        """Submit one call per host for the envs ``indices`` (``submit(host, envs)`` returns
        its ref), wait for all, and return {env: its outcome from the host's list}; every env of
        a host that died gets (None, the error)."""
        groups = self._by_host(indices)
        refs = {h: submit(h, envs) for h, envs in groups.items()}
        ray.wait(list(refs.values()), num_returns=len(refs))
        outcomes = {}
        for h, envs in groups.items():
            try:
                for e, outcome in zip(envs, ray.get(refs[h])):
                    outcomes[e] = outcome
            except Exception as exc:  # noqa: BLE001 - the host died: all its envs failed
                self.host_dead[h] = True
                for e in envs:
                    outcomes[e] = (None, exc)
        return outcomes

    def _each(self, indices, method, args_per_env, kwargs_per_env=None):
        """Call ``method`` on the envs ``indices``: one (result, None) or (None, exception) per
        env, so one env that raises loses none of the others' results."""
        kwargs_per_env = kwargs_per_env or [{}] * len(indices)
        if self.placement == "actor":
            calls = {e: (a, k) for e, a, k in zip(indices, args_per_env, kwargs_per_env)}
            outcomes = self._host_calls(indices, lambda h, envs: self.hosts[h].call.remote(
                method, [(self.where[e][1], *calls[e]) for e in envs]))
            return [outcomes[e] for e in indices]
        outcomes = []
        for i, a, k in zip(indices, args_per_env, kwargs_per_env):
            try:
                outcomes.append((getattr(self.envs[i], method)(*a, **k), None))
            except Exception as exc:  # noqa: BLE001 - an env fault, recorded by the caller
                outcomes.append((None, exc))
        return outcomes

    def _record(self, e, method, exc, errors):
        """Count an error of env e; EnvFailure once it has --max_env_errors in a row."""
        self.errors_in_a_row[e] += 1
        self.error_counts[e] += 1
        error = describe_error(exc)
        errors.append({"env": int(e), "method": method, "error": error})
        if self.errors_in_a_row[e] >= self.max_errors:
            where = f"env {e}" + ("" if self.worker_index is None
                                  else f" of worker {self.worker_index}")
            raise env_failure(where, self.errors_in_a_row[e], error) from exc

    def _rebuild(self, e, errors):
        """Replace env e by a new one with a fresh seed and reset it, until that works (each
        failure counts); the new env's first observation. With the actor placement the env is
        rebuilt in its host, and a host that died is replaced first (its other envs failed in
        the same call and are rebuilt in turn)."""
        while True:
            seed = seeding.rebuilt_env(self.seeds[e], self.error_counts[e])
            try:
                if self.placement == "actor":
                    h, index = self.where[e]
                    if self.host_dead[h]:
                        try:  # best effort: it is gone already
                            ray.kill(self.hosts[h], no_restart=True)
                        except Exception:  # noqa: BLE001
                            pass
                        self.hosts[h], self.host_dead[h] = self._new_host(self.host_seeds[h]), False
                    try:
                        return self.encode(ray.get(self.hosts[h].rebuild.remote(index, seed)))
                    except ray.exceptions.RayActorError:
                        self.host_dead[h] = True
                        raise
                try:  # best effort: the env is broken already
                    getattr(self.envs[e], "close", lambda: None)()
                except Exception:  # noqa: BLE001
                    pass
                self.envs[e] = self._bind(make_env(self.plugins, self.args, seed,
                                                           worker_index=self.worker_index))
                return self.encode(self.envs[e].reset(seed=seed)[0])
            except Exception as exc:  # noqa: BLE001 - counts as another error of env e
                self._record(e, "reset", exc, errors)

    def _reset(self, indices, seeds, errors):
        """Reset envs ``indices`` (seeded when ``seeds`` is given); one that raises is rebuilt."""
        outcomes = self._each(indices, "reset", [()] * len(indices),
                              [{"seed": None if seeds is None else seeds[k]}
                               for k in range(len(indices))])
        observations = []
        for i, (result, exc) in zip(indices, outcomes):
            if exc is None:
                observations.append(self.encode(result[0]))
            else:
                self._record(i, "reset", exc, errors)
                observations.append(self._rebuild(i, errors))
        return observations

    # -- the group's API -----------------------------------------------------------------------
    def reset(self):
        """First reset, seeded: env e of this group gets seeds[e]."""
        return self.stack(self._reset(range(len(self.seeds)), self.seeds, self.reset_errors),
                          "reset()")

    def reset_all(self, seeds):
        """Reset every env with these seeds; the new first observations, stacked."""
        return self.stack(self._reset(range(len(self.seeds)), list(seeds), self.reset_errors),
                          "reset()")

    def take_reset_errors(self):
        """The errors reset() and reset_all() survived since the last call, cleared."""
        errors, self.reset_errors = self.reset_errors, []
        return errors

    def step(self, actions) -> StepResult:
        env_actions = to_env_actions(self.action_space, actions)
        num_envs = len(self.seeds)
        if self.placement == "actor":  # one call per host; it resets the envs that ended
            outcomes = self._host_calls(range(num_envs), lambda h, envs: self.hosts[h].step.remote(
                [(self.where[e][1], env_actions[e]) for e in envs]))
            outcomes = [outcomes[e] if len(outcomes[e]) == 3 else (*outcomes[e], None)
                        for e in range(num_envs)]
        else:  # the hot path of cheap envs: one plain loop, each env's fault its own
            outcomes = []
            for env, action in zip(self.envs, env_actions):
                try:
                    outcomes.append((env.step(action), None, None))
                except Exception as exc:  # noqa: BLE001 - an env fault, recorded below
                    outcomes.append((None, exc, None))
        observations = [None] * num_envs
        rewards = np.zeros(num_envs, dtype=np.float32)
        terminated = np.zeros(num_envs, dtype=bool)
        truncated = np.zeros(num_envs, dtype=bool)
        failed = np.zeros(num_envs, dtype=bool)
        errors = []
        episode_metrics = {}
        report = {}
        encode = self.encode
        for e, (result, exc, _) in enumerate(outcomes):
            if exc is not None:
                failed[e] = truncated[e] = True
                self._record(e, "step", exc, errors)
                continue
            if len(result) != 5:
                raise EnvContractError(step_result_error(self.plugins.env_cls, result))
            self.errors_in_a_row[e] = 0
            observations[e] = encode(result[0])
            rewards[e], terminated[e], truncated[e] = result[1], result[2], result[3]
            info = result[4] if len(result) > 4 else None
            if not info:
                continue
            if EPISODE_METRICS_KEY in info and (terminated[e] or truncated[e]):
                episode_metrics[e] = dict(info[EPISODE_METRICS_KEY])
            if STEP_REPORT_KEY in info:
                for name, value in info[STEP_REPORT_KEY].items():
                    value = np.asarray(value, dtype=np.float32)
                    if name not in report:
                        report[name] = np.zeros((num_envs, *value.shape), np.float32)
                    report[name][e] = value
        ended = np.flatnonzero((terminated | truncated) & ~failed).tolist()
        final = {e: observations[e] for e in ended}
        if self.placement != "actor" and ended:
            for e, obs in zip(ended, self._reset(ended, None, errors)):
                observations[e] = obs
        for e in ended if self.placement == "actor" else ():
            reset = outcomes[e][2]
            if isinstance(reset, tuple):
                observations[e] = self.encode(reset[0])
            else:  # the reset in the host raised
                self._record(e, "reset", reset, errors)
                observations[e] = self._rebuild(e, errors)
        for e in np.flatnonzero(failed):
            observations[e] = self._rebuild(int(e), errors)
        return StepResult(self.stack(observations, "step()"), rewards, terminated, truncated,
                          final, failed, errors, episode_metrics, report or None)

    def get_state(self):
        """Every env's state (see envs/gym_env.py:get_state), or None if one of them cannot
        give it (a wrapper without get_state, or a simulator that is not plain data)."""
        if self.placement == "actor":
            states = [state for found in ray.get([h.get_state.remote() for h in self.hosts])
                      for state in found]
        else:
            states = [env.get_state() if hasattr(env, "get_state") else None
                      for env in self.envs]
        return None if any(s is None for s in states) else states

    def fits_state(self, states):
        """Whether ``states`` (get_state's, from a checkpoint) are this group's envs'."""
        return isinstance(states, list) and len(states) == len(self.seeds)

    def set_state(self, states):
        if self.placement == "actor":
            per_host = [[] for _ in self.hosts]
            for e, state in enumerate(states):
                per_host[self.where[e][0]].append(state)
            ray.get([h.set_state.remote(s) for h, s in zip(self.hosts, per_host)])
        else:
            for env, state in zip(self.envs, states):
                env.set_state(state)

    def close(self):
        if self.placement == "actor":
            for host in self.hosts:
                try:
                    ray.kill(host)
                except Exception:  # noqa: BLE001 - gone already
                    pass
            return
        for env in self.envs:
            getattr(env, "close", lambda: None)()
