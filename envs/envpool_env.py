"""envpool_env: EnvPool's C++ batched envs (``--envpool_id``): Atari, MuJoCo, classic control.

EnvPool (https://github.com/sail-sg/envpool, 0.8.4, in requirements.txt) steps a whole batch of
envs in C++ threads and hands back numpy arrays. A worker's ``--num_envs_per_worker`` envs are
one pool, stepped with one call (core/batched_env.py); evaluation plays pools of its own, built
with ``evaluation`` set (no reward clipping, no life cuts).

Ids are EnvPool's own: ``CartPole-v1``, ``Pendulum-v1``, ``Acrobot-v1``, ``MountainCar-v0``,
``LunarLander-v2``; Atari as ``Breakout-v5``, ``Pong-v5`` (no ``ALE/`` prefix); MuJoCo's
locomotion as ``HalfCheetah-v4``, ``Hopper-v4``, ``Ant-v4`` (EnvPool has no v5: v4's dynamics and
rewards, gymnasium's v5 changed some defaults). ``envpool.list_all_envs()`` names them all.

Atari: the preprocessing flags are gym_env's (envs/gym_env.py ``add_atari_args``), mapped onto
EnvPool's own preprocessing: ``--noop_max``, ``--frame_skip`` (the last two frames max-pooled),
``--screen_size``, ``--grayscale`` (without it: RGB, channels first, 3 x ``--frame_stack``
planes), ``--frame_stack``, ``--clip_reward`` and ``--episodic_life`` (training only), the
episode limit ``--max_episode_frames`` (as agent steps of ``--frame_skip`` frames) and sticky
actions ``--repeat_action_probability`` (default 0.25, ALE v5's and so gym_env's; EnvPool's own
default is 0). ``--fire_reset``, in games with a FIRE action: an env's first step of each
episode and its next step after each life lost are FIRE, whatever action the policy chose, so a
policy that never fires (a deterministic one in evaluation) does not stall a game until its limit
(EnvPool's own ``use_fire_reset``, passed on too, did not serve Breakout's first ball in 0.8.4).
gym_env presses FIRE inside the reset and inside the step that lost the life instead; here those
steps' actions in the data are the policy's, not FIRE: one step per life. EnvPool always
preprocesses: ``--no-atari_preprocessing`` is refused.

The envs' state lives in C++, so a checkpoint cannot hold it: a restored run starts fresh
episodes (exact resume needs gym_env). Seeds: EnvPool seeds its envs when a pool is built (env
``i`` with ``seed + i``, in int32: larger seeds are taken modulo 2**31), so a seeded reset
builds the pool anew (not the first one, with the seeds it was built with).

numpy 2: EnvPool 0.8.4 was compiled against numpy 1 and, under numpy 2, returns arrays whose
strides are all 0 (it reads the dtype's item size where numpy 1's struct kept it): every entry
would read as the first. The data beneath is laid out in C order, so ``_c_order`` views it with
the right strides (and copies it out of EnvPool's buffer); arrays with the right strides pass
untouched. tests/test_envpool_env.py checks the envs' states against gymnasium's CartPole.
"""
import contextlib
import io
import warnings

import gymnasium as gym
import numpy as np
from numpy.lib.stride_tricks import as_strided

from core.argtypes import non_negative_int, positive_int_or_none
from core.errors import ConfigError
from envs import register_env
from envs.gym_env import add_atari_args, check_atari_args

REQUIREMENT = "envpool==0.8.4"
#: ALE v5's sticky actions, which gym_env's ALE/...-v5 ids have: the default here too
ALE_V5_STICKY = 0.25


def import_envpool():
    """The envpool module, or a ConfigError that says how to install it."""
    try:
        # EnvPool imports the old `gym`, whose import prints a notice to stderr in every
        # process: not ddrl's to show
        with contextlib.redirect_stderr(io.StringIO()):
            import envpool
    except ImportError as exc:
        raise ConfigError(f"--env_name envpool_env needs EnvPool ({REQUIREMENT}, in "
                          f"requirements.txt; `make setup` installs it): importing it failed "
                          f"with {exc}. Install it with `.venv/bin/pip install {REQUIREMENT}`, "
                          f"or use --env_name gym_env with --vectorize sync|async for the same "
                          f"ids through gymnasium.") from exc
    return envpool


@register_env("envpool_env")
class EnvPoolEnv:
    """A pool of ``num_envs`` EnvPool envs in gymnasium's VectorEnv API (NextStep resets)."""

    metadata = {"autoreset_mode": "NextStep"}

    @staticmethod
    def label(config):
        return config.envpool_id

    @staticmethod
    def add_args(parser):
        parser.add_argument("--envpool_id", default="CartPole-v1",
                            help="EnvPool task id, e.g. CartPole-v1, Breakout-v5, "
                                 "HalfCheetah-v4 (envpool.list_all_envs() names them all) "
                                 "(default: %(default)s)")
        parser.add_argument("--max_episode_steps", type=positive_int_or_none, default=None,
                            help="override the id's time limit, in agent steps (default: the "
                                 "id's own; Atari: --max_episode_frames)")
        parser.add_argument("--envpool_threads", type=non_negative_int, default=0,
                            help="C++ threads stepping a pool (0: EnvPool's choice, one per "
                                 "env up to the cores) (default: %(default)s)")
        add_atari_args(parser)

    def __init__(self, args, num_envs, seed=None):
        self.envpool = import_envpool()
        if args.envpool_id not in self.envpool.list_all_envs():
            raise ConfigError(f"--envpool_id {args.envpool_id!r} is not an EnvPool id. Its ids "
                              f"include CartPole-v1, Pendulum-v1, Breakout-v5, Pong-v5, "
                              f"HalfCheetah-v4 and Hopper-v4 (envpool.list_all_envs() names "
                              f"all {len(self.envpool.list_all_envs())}).")
        if args.render_mode:
            raise ConfigError("envpool_env cannot render (EnvPool 0.8.4 has no render): "
                              "record videos with --env_name gym_env and the gym id.")
        self.args, self.num_envs = args, int(num_envs)
        self.kwargs = pool_kwargs(args, self.envpool)
        self.seed = 0 if seed is None else int(seed)
        self.pool = self._make_pool(self.seed)
        self.used = False  # reset or stepped since it was built
        self.single_observation_space, self.single_action_space = self.spaces
        config = self.pool.config
        self.reward_threshold = config.get("reward_threshold") or gym_threshold(args.envpool_id)
        self.fire = fire_action(args) if is_atari(args.envpool_id, self.envpool) else None
        self.lives = self.fire_next = self.resetting = None

    def _make_pool(self, seed):
        with warnings.catch_warnings():  # its spaces' float64 bounds cast to float32: harmless
            warnings.filterwarnings("ignore", message=".*precision lowered.*")
            pool = self.envpool.make(self.args.envpool_id, env_type="gymnasium",
                                     num_envs=self.num_envs, seed=self._int32(seed),
                                     **self.kwargs)
            self.spaces = (pool.observation_space, pool.action_space)  # built on first read
        receive = pool._recv
        pool._recv = lambda: [_c_order(a) for a in receive()]
        return pool

    def _int32(self, seed):
        """EnvPool takes seeds in int32 (env i's: seed + i); ddrl's may be larger."""
        return int(seed) % (2**31 - self.num_envs)

    def reset(self, seed=None, options=None):
        if seed is not None:
            first = int(seed[0] if isinstance(seed, (list, tuple, np.ndarray)) else seed)
            if first != self.seed or self.used:  # a seeded reset starts where the seed says
                self.close()
                self.seed, self.pool = first, self._make_pool(first)
        self.used = True
        obs, info = self.pool.reset()
        if self.fire is not None:
            self.lives = np.array(info["lives"])
            self.fire_next = np.ones(self.num_envs, dtype=bool)
            self.resetting = np.zeros(self.num_envs, dtype=bool)
        return obs, {}

    def step(self, actions):
        actions = np.array(actions)
        if self.fire is not None and self.fire_next.any():
            actions[self.fire_next] = self.fire
        obs, rewards, terminated, truncated, info = self.pool.step(actions)
        if self.fire is not None:
            # FIRE next: after a life lost, the episode going on, and after a reset (NextStep:
            # the step after an episode's end is its reset, its action ignored)
            lives, ended = np.array(info["lives"]), terminated | truncated
            lost = (lives < self.lives) & (lives > 0) & ~ended
            self.fire_next = lost | self.resetting
            self.resetting = ended & ~self.resetting
            self.lives = lives
        return obs, rewards, terminated, truncated, {}

    def close(self):
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()


def pool_kwargs(args, envpool):
    """envpool.make's keyword arguments for the flags (the module docstring)."""
    kwargs = {"num_threads": args.envpool_threads}
    if args.max_episode_steps:
        kwargs["max_episode_steps"] = args.max_episode_steps
    if not is_atari(args.envpool_id, envpool):
        return kwargs
    if not args.atari_preprocessing:
        raise ConfigError("--no-atari_preprocessing: EnvPool always preprocesses Atari frames; "
                          "use --env_name gym_env with the ALE/... id for the raw game.")
    check_atari_args(args)
    training = not args.evaluation
    sticky = args.repeat_action_probability
    kwargs.update(noop_max=args.noop_max, frame_skip=args.frame_skip,
                  img_height=args.screen_size, img_width=args.screen_size,
                  gray_scale=args.grayscale, stack_num=args.frame_stack,
                  reward_clip=bool(args.clip_reward and training),
                  episodic_life=bool(args.episodic_life and training),
                  use_fire_reset=args.fire_reset,
                  repeat_action_probability=ALE_V5_STICKY if sticky is None else sticky)
    kwargs.setdefault("max_episode_steps", max(1, args.max_episode_frames // args.frame_skip))
    return kwargs


def fire_action(args):
    """The index of FIRE in the game's actions when --fire_reset applies, else None. EnvPool
    does not name its actions; ALE's env for the same game does (the same minimal set)."""
    if not args.fire_reset:
        return None
    import ale_py
    gym.register_envs(ale_py)
    game = gym.make("ALE/" + args.envpool_id)
    try:
        meanings = game.unwrapped.get_action_meanings()
    finally:
        game.close()
    return meanings.index("FIRE") if "FIRE" in meanings else None


def is_atari(envpool_id, envpool):
    return envpool.make_spec(envpool_id).__class__.__name__.startswith("Atari")


def gym_threshold(envpool_id):
    """gymnasium's reward threshold for the same id (475 for CartPole-v1), or None."""
    try:
        return gym.spec(envpool_id).reward_threshold
    except gym.error.Error:
        return None


def _c_order(array):
    """``array`` with the strides of its shape in C order, copied out of EnvPool's buffer when
    they were wrong (the module docstring: EnvPool 0.8.4 under numpy 2), else as it is."""
    strides, step = [], array.dtype.itemsize
    for size in reversed(array.shape):
        strides.append(step)
        step *= size
    strides = tuple(reversed(strides))
    if array.size <= 1 or array.strides == strides:
        return array
    return as_strided(array, array.shape, strides).copy()
