"""An env host: a Ray actor holding several envs (``--env_placement actor --envs_per_actor K``).

One actor per env costs one Ray call per env and step: about 1 ms of CPU on the project's
2-core machines, more than a simulator step that waits 5 ms leaves free when 16 of them run.
A host takes the actions of all its envs in one call, steps them concurrently in threads (an
env that waits on its simulator, a socket or a sleep releases the GIL, so K such envs overlap
their waits), resets the ones whose episode ended in the same call, and answers with every
env's outcome. An env's exception is one of those outcomes, never the host's: the other envs'
results stand (core/sampling/envs.py rebuilds the env that raised, here in its host).
"""
from concurrent.futures import ThreadPoolExecutor

from core.distributed.process import setup_process


def construct(env_cls, args, seed):
    from core.plugins import _construct
    return _construct(env_cls, args, seed)


class EnvHost:
    def __init__(self, env_cls, args, seeds):
        setup_process(args)
        self.env_cls, self.args = env_cls, args
        self.envs = [construct(env_cls, args, seed) for seed in seeds]
        self.pool = ThreadPoolExecutor(len(self.envs)) if len(self.envs) > 1 else None

    def spaces(self):
        return self.envs[0].observation_space, self.envs[0].action_space

    def _map(self, work, items):
        if self.pool is None or len(items) < 2:
            return [work(item) for item in items]
        return list(self.pool.map(work, items))

    def call(self, method, calls):
        """``calls``: [(env index, args, kwargs)]; one (result, None) or (None, exception) each."""
        def one(call):
            index, args, kwargs = call
            try:
                return getattr(self.envs[index], method)(*args, **kwargs), None
            except Exception as exc:  # noqa: BLE001 - the env's fault, reported as its outcome
                return None, exc
        return self._map(one, calls)

    def step(self, steps):
        """``steps``: [(env index, action)]. Each env's outcome: (step result, None, reset) or
        (None, exception, None); ``reset`` is the new episode's (obs, info) when the step ended
        one (None when it did not, or the reset's exception to report)."""
        def one(item):
            index, action = item
            env = self.envs[index]
            try:
                result = tuple(env.step(action))
            except Exception as exc:  # noqa: BLE001
                return None, exc, None
            if not (result[2] or result[3]):
                return result, None, None
            try:
                return result, None, tuple(env.reset())
            except Exception as exc:  # noqa: BLE001
                return result, None, exc
        return self._map(one, steps)

    def rebuild(self, index, seed):
        """Replace env ``index`` by a new one with ``seed`` and reset it: its first observation
        (an exception propagates: the caller counts it and tries again)."""
        try:
            getattr(self.envs[index], "close", lambda: None)()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self.envs[index] = construct(self.env_cls, self.args, seed)
        return self.envs[index].reset(seed=seed)[0]

    def get_state(self):
        return [env.get_state() if hasattr(env, "get_state") else None for env in self.envs]

    def set_state(self, states):
        for env, state in zip(self.envs, states):
            env.set_state(state)

    def close(self):
        for env in self.envs:
            getattr(env, "close", lambda: None)()
        if self.pool is not None:
            self.pool.shutdown(wait=False)
