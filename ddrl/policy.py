"""ddrl.load: a trained policy as a Python object, for a notebook, a script or a control loop.

    policy = ddrl.load("runs/cartpole")            # a run directory (its best.pt) or a .pt file
    action = policy.act(obs)                       # one observation -> one action
    actions = policy.act(batch_of_obs)             # a batch -> a batch
    action, state = policy.act(obs, state)         # a recurrent policy threads its state

No Ray, no workers, no run directory: the checkpoint alone (weights, the run's flags, the
observation normalizer's statistics and the spaces) rebuilds the model its run trained, and
``act`` applies what training applied before the network (the normalizer; pixel scaling is the
model's own) and after it (actions clipped to a Box's bounds, Discrete starts added), as the
test worker does. The observation is what the env gives (``policy.make_env()`` builds the env
with the run's wrappers, frame stacking and preprocessing included).
"""
import os

import numpy as np
import torch

from core import seeding, spaces
from core.learning.normalizer import ObsNormalizer, normalize
from core.errors import ConfigError
from core.run.checkpoint import check_model_fits, load_for_restore, saved_model_path
from core.run.state import from_payload
from core.sampling.envs import to_env_action
from core.sampling.memory import actions_only


def load(path, **flags):
    """The policy saved at ``path``: a checkpoint file (.pt), or a run directory (its
    checkpoints/best.pt, else its newest checkpoint). ``flags`` override the run's own as on
    ``main.py --evaluate PATH --flag value`` (acting flags such as selfplay_ppo's
    ``search_depth=4``; flags that change the network's shape no longer fit its weights).
    Raises ConfigError for a path that holds no readable ddrl checkpoint."""
    from options.keywords import flags_to_argv
    from options.options import flag_actions, parse_args
    path = str(path)
    if not os.path.exists(path):
        raise ConfigError(f"ddrl.load({path!r}): no such file or directory. Give a run "
                          f"directory (its checkpoints/best.pt is loaded) or a checkpoint file.")
    checkpoint = saved_model_path(path, "ddrl.load")
    # the flags the run was trained with, less those given here (switches as the run's
    # parser takes them)
    given = flags_to_argv(flags, flag_actions(["--evaluate", checkpoint])) if flags else []
    return policy_of(parse_args(["--evaluate", checkpoint, *given]), "ddrl.load")


def policy_of(args, what="--evaluate"):
    """The policy of ``args.evaluate`` (a checkpoint or a run directory), built with ``args``:
    the run's configuration as its checkpoint saved it, with the flags given on top (what
    ``options.parse_args(["--evaluate", PATH, ...])`` makes). ``what`` names the caller in
    errors."""
    checkpoint, payload, meta = load_for_restore(saved_model_path(args.evaluate), args, what)
    return Policy(args, payload, meta, checkpoint, what)


class Policy:
    """A trained model, acting (module docstring). Attributes: ``observation_space``,
    ``action_space``, ``recurrent``, ``config`` (the run's flags, a dict), ``meta`` (the
    checkpoint's metadata: env steps, evaluation returns), ``path``."""

    def __init__(self, args, payload, meta, path, what="ddrl.load"):
        from core.plugins import load_plugins
        from options.options import run_spec
        self.args, self.meta, self.path, self.what = args, meta, path, what
        self.config = dict(meta.get("config") or vars(args))
        self.spec = run_spec(args)
        self.plugins = load_plugins(self.spec)
        self.observation_space, self.action_space = self._spaces()
        with torch.random.fork_rng(devices=[]):  # initial weights are overwritten: no RNG use
            self.model = self.plugins.model_cls(self.spec.model, self.observation_space,
                                                self.action_space)
        check_model_fits(payload["model"], self.model.get_weights(), path, what)
        self.model.set_weights({k: v.numpy() for k, v in payload["model"].items()})
        self.model.eval()
        self.recurrent = bool(getattr(self.model, "recurrent", False))
        self.act_kwargs = actions_only(self.model)  # the critic is not run: act returns actions
        self.layout = spaces.layout_of(self.observation_space)
        self.obs_statistics = self._normalizer_statistics(payload)

    def _spaces(self):
        """From the checkpoint's metadata, else (older checkpoints, spaces without a JSON form)
        from one env made with the run's flags."""
        from core.space_codec import space_from_json
        saved = self.meta.get("spaces")
        if saved:
            return space_from_json(saved["observation"]), space_from_json(saved["action"])
        env = self.make_env()
        try:
            return env.observation_space, env.action_space
        finally:
            getattr(env, "close", lambda: None)()

    def _normalizer_statistics(self, payload):
        if not self.args.normalize_obs:
            return None
        saved = (payload.get("state") or {}).get("obs_normalizer")
        if saved is None:
            raise ConfigError(f"{self.what} {self.path}: the run used --normalize_obs but this "
                              f"checkpoint holds no normalizer statistics.")
        normalizer = ObsNormalizer(self.observation_space, self.args.obs_clip)
        normalizer.load_state_dict(from_payload(saved))
        return normalizer.statistics()

    def make_env(self, seed=None, render_mode=None):
        """The env as the run's test worker made it (its wrappers and preprocessing, training-
        only ones such as reward clipping left out), reset-ready; ``seed`` seeds its
        constructor (default: the run's evaluation seed)."""
        from core.plugins import make_env
        env_config = self.spec.env if render_mode is None else self.spec.env.replace(
            render_mode=render_mode)
        seed = seeding.evaluation_env(self.args.seed, 0) if seed is None else seed
        return make_env(self.plugins, env_config, seed=seed, evaluation=True)

    def initial_state(self, batch_size=1):
        """A recurrent policy's state for ``batch_size`` new episodes (None without memory)."""
        return self.model.initial_state(batch_size) if self.recurrent else None

    def _is_single(self, obs):
        if not self.layout.structured:
            return np.shape(obs) == tuple(self.observation_space.shape)
        leaf = next(iter(self.layout.leaves.values()))
        return np.shape(self.layout.encode(obs)[leaf.path]) == tuple(leaf.shape)

    def act(self, obs, state=None, deterministic=True, episode_starts=None):
        """The action for one observation (as the env gives it), or actions [B, ...] for a
        batch (an array [B, ...], or for a Dict space a dict of arrays [B, ...]).
        ``deterministic``: the most likely action (a sampled one otherwise). A recurrent
        policy returns (actions, next state): pass ``state=None`` at an episode's start and
        the returned state after; ``episode_starts`` (bool [B]) resets chosen rows of a batch.
        Actions are what the env takes (clipped to a Box's bounds, Discrete starts added)."""
        single = self._is_single(obs)
        seen = self.layout.encode(obs)
        seen = spaces.stack([seen]) if single else spaces.tree_map(np.asarray, seen)
        if not self.layout.structured:
            seen = np.asarray(seen)
        if self.obs_statistics is not None:
            seen = normalize(seen, self.obs_statistics, self.args.obs_clip)
        rows = spaces.batch_size(seen)
        extra = {}
        if self.recurrent:
            if state is None:
                state, starts = self.model.initial_state(rows), np.ones(rows, dtype=bool)
            else:
                starts = (np.zeros(rows, dtype=bool) if episode_starts is None
                          else np.asarray(episode_starts, dtype=bool).reshape(rows))
            extra = {"state": state, "episode_starts": starts}
        with torch.no_grad():
            actions, extras = self.model.choose_actions(seen, deterministic=deterministic,
                                                        **extra, **self.act_kwargs)
        actions = to_env_action(self.action_space, np.asarray(actions))
        if single:
            actions = actions[0]
        if not self.recurrent:
            return actions
        return actions, {name: np.asarray(value) for name, value in extras["state"].items()}

    def play(self, episodes=10, seed=None, deterministic=True):
        """Returns of ``episodes`` whole episodes on ``make_env()`` (each reset with its own
        seed), acting with ``act``: a check that the loaded policy does what its run
        reported."""
        env = self.make_env(seed=seed)
        base = seeding.evaluation_env(self.args.seed, 0) if seed is None else seed
        returns = []
        try:
            for episode in range(episodes):
                obs, _ = env.reset(seed=base + episode)
                state, total, done = None, 0.0, False
                while not done:
                    if self.recurrent:
                        action, state = self.act(obs, state, deterministic)
                    else:
                        action = self.act(obs, deterministic=deterministic)
                    obs, reward, terminated, truncated, _ = env.step(action)
                    total += float(reward)
                    done = terminated or truncated
                returns.append(total)
        finally:
            getattr(env, "close", lambda: None)()
        return returns

    def export(self, out, fmt="onnx", policy=None):
        """Write this policy's acting path to ``out`` as ``fmt`` ("onnx" or "pt2"), with its
        JSON sidecar ``out``.json (ddrl/export.py; ``main.py --export``); returns the
        sidecar as a dict. ``policy``: one policy of a team of several (--policy_map) alone,
        its agents' rows in and their actions out (``main.py --export_policy``)."""
        from ddrl.export import export_policy
        return export_policy(self, fmt, str(out), policy)

    def __repr__(self):
        return (f"Policy({self.args.model_name} on {self.meta.get('gym_id') or self.args.env_name}, "
                f"{self.meta.get('env_steps', '?')} env steps, from {self.path})")
