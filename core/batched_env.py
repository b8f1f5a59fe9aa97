"""Batched envs: one object that steps many envs per call, in gymnasium's ``VectorEnv`` API.

An env plugin is batched when what it builds has ``num_envs``, ``single_observation_space``
and ``single_action_space``, ``reset(seed=[...])`` returning ``(observations, infos)`` with a
leading axis of ``num_envs`` on every array, and ``step(actions)`` returning ``(observations,
rewards, terminations, truncations, infos)`` likewise. gymnasium's own vector envs
(``gym.make_vec``), EnvPool's gymnasium envs and a user's numpy or torch simulator all fit.

Its ``metadata["autoreset_mode"]`` (gymnasium's ``AutoresetMode`` or its string) says what
happens when an env's episode ends (default ``NextStep``, gymnasium's default):

- ``NextStep``: the step that ends an episode returns its final observation; the env's next
  step ignores its action and returns the new episode's first observation with reward 0.
  ddrl keeps that step as a cut (``Trajectory.valid`` False): nothing is learned from it and
  no return crosses the boundary.
- ``SameStep``: the ending step returns the new episode's first observation and the final
  one in ``infos["final_obs"]`` (masked by ``infos["_final_obs"]``). No step is spent.

Arrays may be numpy arrays or torch tensors (a GPU simulator's, on any device). A torch env
says so with a ``device`` attribute: ddrl hands it its actions as a tensor on that device.

A plugin is batched in one of two ways (core/plugins.py ``make_env_batch``): its class's
``__init__`` takes ``num_envs`` (the class is batched by nature: a single env for evaluation
is the class built with ``num_envs=1`` seen through ``Unbatched``), or it has a static
``make_batch(args, num_envs, seed)`` that returns a batched env, or None to be stepped one
env at a time (envs/gym_env.py: batched only with ``--vectorize``).
"""
import numpy as np

from core.errors import ConfigError

NEXT_STEP, SAME_STEP = "NextStep", "SameStep"
#: the infos keys of gymnasium's SameStep mode: the ended envs' final observations and infos
FINAL_OBS, FINAL_INFO = "final_obs", "final_info"


def is_batched(env):
    """Whether ``env`` follows the batched API (a VectorEnv, EnvPool's, a user's)."""
    return (isinstance(getattr(env, "num_envs", None), (int, np.integer))
            and hasattr(env, "single_observation_space")
            and hasattr(env, "single_action_space"))


def autoreset_mode(env):
    """``NEXT_STEP`` or ``SAME_STEP`` for a batched env (its metadata's ``autoreset_mode``)."""
    mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode", NEXT_STEP)
    mode = getattr(mode, "value", mode)  # gymnasium's AutoresetMode enum
    if mode not in (NEXT_STEP, SAME_STEP):
        raise ConfigError(f"the batched env {type(env).__name__} has autoreset_mode {mode!r}; "
                          f"ddrl steps batched envs with {NEXT_STEP!r} or {SAME_STEP!r} "
                          f"(gymnasium's AutoresetMode.NEXT_STEP / SAME_STEP), which reset "
                          f"each env when its episode ends.")
    return mode


def is_tensor(x):
    return type(x).__module__.startswith("torch")


def to_numpy(x):
    """A torch tensor as a numpy array (no copy for a CPU tensor), anything else as is; trees
    (dict, tuple) leaf by leaf."""
    if isinstance(x, dict):
        return {k: to_numpy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(to_numpy(v) for v in x)
    if is_tensor(x):
        return x.detach().cpu().numpy()
    return x


def row(x, index):
    """Row ``index`` of every leaf of a batch (dict, tuple or array)."""
    if isinstance(x, dict):
        return {k: row(v, index) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(row(v, index) for v in x)
    return x[index]


def masked_rows(infos, key):
    """{env index: value} of a vector info entry: gymnasium's ``infos[key]`` with its mask
    ``infos["_" + key]`` (every row when there is no mask); {} when ``key`` is absent."""
    if not infos or key not in infos:
        return {}
    values = infos[key]
    mask = infos.get("_" + key)
    if isinstance(values, dict):  # a dict of arrays: one dict per row
        rows = {}
        for name, column in values.items():
            if name.startswith("_"):
                continue
            column = to_numpy(column)
            for e in present_rows(values.get("_" + name, mask), len(column)):
                rows.setdefault(e, {})[name] = column[e]
        return rows
    values = to_numpy(values)
    return {e: values[e] for e in present_rows(mask, len(values))}


def present_rows(mask, length):
    """The row indices a vector info mask marks (all ``length`` rows when there is none)."""
    if mask is None:
        return range(length)
    return np.flatnonzero(np.asarray(to_numpy(mask), dtype=bool)).tolist()


class Unbatched:
    """A batched env of one env seen as a single gymnasium env (reset -> (obs, info), step ->
    the 5-tuple): what evaluation, ``ddrl.load`` and playback get from a plugin that is batched
    by nature. Other attributes are the batched env's own (``reward_threshold``, ...)."""

    def __init__(self, env):
        if env.num_envs != 1:
            raise ValueError(f"Unbatched takes a batched env of 1 env, got {env.num_envs}")
        self.env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.mode = autoreset_mode(env)

    def __getattr__(self, name):
        if name == "env":  # not set yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=None if seed is None else [seed], options=options)
        return row(to_numpy(obs), 0), {}

    def step(self, action):
        obs, rewards, terminated, truncated, infos = self.env.step(
            as_actions(self.env, np.asarray(action)[None]))
        obs, infos = to_numpy(obs), infos or {}
        done = bool(to_numpy(terminated)[0]) or bool(to_numpy(truncated)[0])
        if done and self.mode == SAME_STEP:
            obs = masked_rows(infos, FINAL_OBS).get(0, row(obs, 0))
            info = masked_rows(infos, FINAL_INFO).get(0, {})
        else:
            obs, info = row(obs, 0), {}
        return (obs, float(to_numpy(rewards)[0]), bool(to_numpy(terminated)[0]),
                bool(to_numpy(truncated)[0]), info)

    def close(self):
        getattr(self.env, "close", lambda: None)()


def as_actions(env, actions):
    """Actions for a batched env: a torch tensor on the env's ``device`` (a torch env), else
    the numpy batch."""
    device = getattr(env, "device", None)
    if device is None:
        return actions
    import torch
    return torch.as_tensor(actions, device=device)
