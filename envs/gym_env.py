"""gym_env: any gymnasium id (--gym_id). Observations: any nesting of Box, Discrete,
MultiDiscrete, MultiBinary, Dict and Tuple (core/spaces.py says how ddrl carries them); actions:
Discrete, MultiDiscrete, MultiBinary and Box. step() hands the env a Discrete action as an int,
a MultiDiscrete one as int64 and a MultiBinary one as int8 arrays of the space's shape, a Box one
as a float32 array of the space's shape (whatever shape the model gave: flat or shaped).

``--gym_kwargs KEY=VALUE,...`` gives the id's constructor its keyword arguments, as
gymnasium.make takes them (envs/gym_kwargs.py): ``--gym_id LunarLander-v3 --gym_kwargs
enable_wind=true``.

Dict observations: ``--drop_keys`` drops top-level keys a model cannot take (MiniGrid's Text
``mission``: ``--gym_id MiniGrid-DoorKey-5x5-v0 --drop_keys mission``). Action masks end up under
the observation's top-level key ``action_mask`` (core/spaces.py ACTION_MASK; 1 = valid): an env
that gives its mask under another observation key names it with ``--action_mask_key KEY`` (it is
renamed). An env that gives it in ``info[KEY]`` instead (seen in the info of a reset made once
when the env is built, for Discrete and MultiDiscrete action spaces only) is wrapped so that its
observation becomes a Dict: its own keys (a Dict observation) or its observation under the key
``observation`` (any other), plus ``action_mask`` (Box(0, 1, (n,), int8); n = the Discrete's n
or the sum of the MultiDiscrete's nvec) read from the info of every reset and step (every action
valid at a step whose info lacks it). A mask in the observation wins over one in ``info``.
``--action_mask_key none`` turns masks off: a top-level ``action_mask`` key is dropped.
``--text_keys mission`` keeps a Text key as word indices instead (envs/words.py: BabyAI's
instruction, read with ``--encoder_for mission=bow`` or ``=gru``); BabyAI ids' "Sampling
rejected" prints are kept off the terminal and counted, and their episodes' ends say
``is_success`` (envs/words.py BabyAILevel).

``--hide_obs`` hides entries of a 1-D Box observation by index (comma-separated, from 0), so a
fully observed task becomes partially observable, for recurrent policies: ``--gym_id CartPole-v1
--hide_obs 1,3`` drops CartPole's two velocities (RL-Zoo's CartPoleNoVel-v1), ``--gym_id
Pendulum-v1 --hide_obs 2`` its angular velocity (PendulumNoVel-v1). The space keeps the other
entries' bounds and dtype. Evaluation envs hide the same entries, and exact resume reaches the
env beneath. envs/toys.py registers both as ``ddrl/CartPoleNoVel-v1`` and
``ddrl/PendulumNoVel-v1`` with the same wrapper, for benchmarks that make the env with
gymnasium.make (SB3's).

The MiniGrid ids (``MiniGrid-DoorKey-5x5-v0``, ...) and gymnasium-robotics' (``FetchReach-v4``,
...; both packages in requirements.txt) are registered the first time an id gymnasium does not
know is asked for (``register_ids_of``, at the bottom of this module), the toy ids of
envs/toys.py (``ddrl/MaskedChoice-v0``, ...) and envs/goal_envs.py by those modules.

Atari (any ``ALE/...`` id, from ale-py with its ROMs) gets the standard preprocessing by default
(Mnih et al. 2015; Machado et al. 2018): up to 30 no-op starts, every action repeated for 4
frames with the last two max-pooled, 84x84 grayscale, the last 4 frames stacked into a uint8
[4, 84, 84] observation, rewards clipped to their sign for training; the losses of a life end an
episode only with ``--episodic_life``. Each part has its flag; ``--no-atari_preprocessing``
leaves the id as gymnasium makes it. Evaluation envs (``args.evaluation``, set by the test
worker and --evaluate) never clip rewards nor cut episodes at a life loss: an evaluation return
is the game's full-episode score. Observations stay uint8 up to the model, which scales them.

MuJoCo ids (HalfCheetah-v5, Hopper-v5, Walker2d-v5, Ant-v5, ...) run on the installed
``mujoco``; their simulator state is plain arrays, so checkpoints hold it (exact resume).
"""
import argparse
import functools
from typing import Tuple

import gymnasium as gym
import numpy as np

from core.argtypes import (non_negative_int, positive_int, positive_int_or_none,
                           unit_interval_or_none)
from core.errors import ConfigError
from core.registry import unwrap_actor_class
from core.run.state import (generator_state, plain_attributes, set_attributes,
                        set_generator_state)
from core.spaces import ACTION_MASK
from envs import register_env, OBSERVATION
from envs.robotics_shim import fix_robotics_joint_types
from envs.gym_kwargs import as_dict, gym_kwargs_type, make_with_kwargs
from envs.gym_vector import VECTORIZE_MODES, GymVectorEnv
from envs.toys import HideObs
from envs.words import BabyAILevel, WordTokens


@register_env("gym_env")
class GymEnv:
    """Wraps gymnasium.make(--gym_id); structured observations, any array action space."""

    @staticmethod
    def label(config):
        """Run directories, logs and preset files name the env by its gymnasium id."""
        return config.gym_id

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gym_id", default="CartPole-v1",
                            help="gymnasium environment id, e.g. CartPole-v1, Pendulum-v1, "
                                 "LunarLanderContinuous-v3 (default: %(default)s)")
        parser.add_argument("--max_episode_steps", type=positive_int_or_none, default=None,
                            help="override the id's time limit (default: the id's own)")
        parser.add_argument("--gym_kwargs", type=gym_kwargs_type, default=(),
                            help="keyword arguments for the id's constructor, as gymnasium.make "
                                 "takes them: comma-separated KEY=VALUE pairs, each VALUE JSON "
                                 "or plain text, e.g. enable_wind=true,wind_power=5.0 for "
                                 "LunarLander-v3 or ctrl_cost_weight=0.05 for HalfCheetah-v5; "
                                 "every env of the run gets them, evaluation's too (default: "
                                 "none)")
        parser.add_argument("--drop_keys", type=key_list, default=(),
                            help="comma-separated top-level keys to drop from a Dict "
                                 "observation, e.g. mission for MiniGrid's text (default: "
                                 "none)")
        parser.add_argument("--text_keys", type=key_list, default=(),
                            help="comma-separated Text keys of a Dict observation to give the "
                                 "model as word indices (envs/words.py), e.g. mission for "
                                 "BabyAI's instruction; read them with --encoder_for "
                                 "mission=bow or mission=gru (default: none)")
        parser.add_argument("--max_words", type=positive_int, default=16,
                            help="words kept of each --text_keys text, padded to this length "
                                 "(default: %(default)s)")
        parser.add_argument("--hide_obs", type=index_list, default=(),
                            help="comma-separated indices (from 0) of entries to hide from a "
                                 "1-D Box observation, making the env partially observable, "
                                 "e.g. 1,3 for CartPole-v1's two velocities, 2 for "
                                 "Pendulum-v1's angular velocity; evaluation envs hide them "
                                 "too (default: none)")
        parser.add_argument("--action_mask_key", default=ACTION_MASK,
                            help="where the env gives its action mask (1 = valid action): a "
                                 "top-level key of a Dict observation, else the same key of "
                                 "the info of reset and step; either becomes the observation's "
                                 "action_mask key. 'none': no mask (default: %(default)s)")
        parser.add_argument("--vectorize", choices=VECTORIZE_MODES, default="none",
                            help="step a worker's --num_envs_per_worker envs as one batched "
                                 "env: native (the id's own vector env, e.g. CartPole-v1's "
                                 "numpy one), sync (gymnasium's SyncVectorEnv over these "
                                 "single envs) or async (a process per env); none: one by one "
                                 "(default: %(default)s)")
        add_atari_args(parser)

    @staticmethod
    def make_batch(args, num_envs, seed=None):
        """With --vectorize, a worker's envs as one batched env (envs/gym_vector.py)."""
        if args.vectorize == "none":
            return None
        register_ids_of(args.gym_id)
        return GymVectorEnv(args, num_envs, lambda: unwrap_actor_class(GymEnv)(args),
                            functools.partial(wrapped_gym_env, args))

    def __init__(self, args, seed=None):
        kwargs = {}
        if args.max_episode_steps:
            kwargs["max_episode_steps"] = args.max_episode_steps
        if args.render_mode:
            kwargs["render_mode"] = args.render_mode
        atari = is_atari(args.gym_id)
        preprocess = atari and args.atari_preprocessing
        if preprocess:
            check_atari_args(args)
            kwargs["frameskip"] = 1  # the preprocessing skips frames itself (and max-pools)
        if atari:
            kwargs["max_num_frames_per_episode"] = args.max_episode_frames
        if atari and args.repeat_action_probability is not None:
            kwargs["repeat_action_probability"] = args.repeat_action_probability
        user_kwargs = as_dict(args.gym_kwargs)
        try:
            register_ids_of(args.gym_id)
            self.env = make_with_kwargs(args.gym_id, kwargs, user_kwargs)
        except gym.error.Error as exc:
            reason = str(exc).rstrip(". ")  # gymnasium's own message may end with a stop
            own = ("" if ":" in args.gym_id or not isinstance(exc, gym.error.UnregisteredEnv)
                   else f" An id your own code registers (gym.register in a module of yours) "
                        f"is known only where that module was imported, not in a Ray worker: "
                        f"give it as --gym_id MODULE:{args.gym_id} (gymnasium imports MODULE "
                        f"first, in every process).")
            stop = "" if reason.endswith(("?", "!")) else "."  # "Did you mean: `X`?"
            raise ConfigError(f"--gym_id {args.gym_id!r} cannot be made by gymnasium: {reason}"
                              f"{stop} Use a registered id such as CartPole-v1, Pendulum-v1, "
                              f"ALE/Breakout-v5 or HalfCheetah-v5.{own}") from exc
        if preprocess:
            self.env = wrap_atari(self.env, args, evaluation=args.evaluation)
        if args.gym_id.startswith("BabyAI-"):
            self.env = BabyAILevel(self.env)
        if args.text_keys:
            self.env = WordTokens(self.env, args.text_keys, args.max_words)
        if args.drop_keys:
            self.env = DropKeys(self.env, args.drop_keys, flag="--drop_keys")
        if args.hide_obs:
            self.env = HideObs(self.env, args.hide_obs, flag="--hide_obs")
        self.env = wrap_action_mask(self.env, args.action_mask_key)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        spec = self.env.spec
        # The default --target_return: the id's own "solved" threshold (475 for CartPole-v1).
        self.reward_threshold = spec.reward_threshold if spec is not None else None
        self.convert_action = action_converter(self.action_space)

    def reset(self, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self.action_space.seed(seed)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(self.convert_action(action))
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    # -- exact resume ----------------------------------------------------------------------
    # A checkpoint can hold an env's state only if it is plain data. For gymnasium's classic
    # control envs it is (CartPole's `state` array, the time limit's step count, the RNG), for
    # the toys of envs/toys.py (their arrays and counters), and for MuJoCo's (the simulator's
    # qpos, qvel and time, besides those). Box2D keeps its state in a physics world of C++
    # bodies and ALE in an emulator whose saved states are opaque bytes of the emulator build,
    # so those return None and a restored run starts their episodes afresh. The wrappers below
    # (and HideObs, envs/toys.py) hold only plain settings (a key, a size, the entries kept) or
    # nothing: the info mask is read from the env's info at every step, never kept. Each
    # wrapper's layer is walked through (env.env) down to the base env, whose state is the one
    # that matters.
    def get_state(self):
        """The env's state as plain data, or None where it cannot be captured."""
        base = self.env.unwrapped
        module = type(base).__module__
        mujoco = module.startswith("gymnasium.envs.mujoco")
        plain = module.startswith("gymnasium.envs.classic_control") or module in PLAIN_MODULES
        if not (plain or mujoco):
            return None
        layers, env = [], self.env
        while True:
            layers.append(plain_attributes(env))
            if env is base:
                break
            env = env.env
        state = {"layers": layers, "np_random": generator_state(base.np_random),
                 "action_space_rng": generator_state(self.action_space.np_random)}
        if mujoco:
            data = base.data
            state["mujoco"] = {"qpos": data.qpos.copy(), "qvel": data.qvel.copy(),
                               "act": data.act.copy(), "time": float(data.time)}
        return state

    def set_state(self, state):
        env = self.env
        for attributes in state["layers"]:
            set_attributes(env, attributes)
            if env is self.env.unwrapped:
                break
            env = env.env
        set_generator_state(self.env.unwrapped.np_random, state["np_random"])
        set_generator_state(self.action_space.np_random, state["action_space_rng"])
        if "mujoco" in state:
            sim = state["mujoco"]
            base = self.env.unwrapped
            base.data.act[:] = np.asarray(sim["act"])
            base.set_state(np.asarray(sim["qpos"]), np.asarray(sim["qvel"]))  # runs mj_forward
            base.data.time = float(sim["time"])

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()


def add_atari_args(parser):
    """The Atari preprocessing flags (gym_env's, and envpool_env's, which maps them onto
    EnvPool's own preprocessing)."""
    atari = parser  # the env's own argument group (argparse deprecates nesting groups)
    atari.add_argument("--atari_preprocessing", action=argparse.BooleanOptionalAction,
                       default=True,
                       help="Atari (ALE/... ids): apply the standard preprocessing "
                            "that the next flags set (default: %(default)s)")
    atari.add_argument("--noop_max", type=non_negative_int, default=30,
                       help="at most this many no-op actions at each reset (0: none) "
                            "(default: %(default)s)")
    atari.add_argument("--frame_skip", type=positive_int, default=4,
                       help="repeat each action this many frames, max-pooling the last "
                            "two (default: %(default)s)")
    atari.add_argument("--screen_size", type=positive_int, default=84,
                       help="resize frames to this many pixels square (default: "
                            "%(default)s)")
    atari.add_argument("--grayscale", action=argparse.BooleanOptionalAction, default=True,
                       help="grayscale frames; --no-grayscale keeps RGB, channels last "
                            "(default: %(default)s)")
    atari.add_argument("--frame_stack", type=positive_int, default=4,
                       help="stack the last this many frames (1: no stacking) (default: "
                            "%(default)s)")
    atari.add_argument("--clip_reward", action=argparse.BooleanOptionalAction, default=True,
                       help="train on the sign of each reward; evaluation always sees "
                            "the game's score (default: %(default)s)")
    atari.add_argument("--episodic_life", action=argparse.BooleanOptionalAction,
                       default=False,
                       help="end a training episode at each life lost (evaluation plays "
                            "whole games) (default: %(default)s)")
    atari.add_argument("--fire_reset", action=argparse.BooleanOptionalAction, default=True,
                       help="in games with a FIRE action, press it at the start of every "
                            "episode and after every life lost, so a policy that never "
                            "fires (early, or deterministic in evaluation) does not stall "
                            "a game until its frame limit (default: %(default)s)")
    atari.add_argument("--max_episode_frames", type=positive_int, default=108_000,
                       help="ALE's limit on one episode, in emulator frames (108,000 = 30 "
                            "minutes of play) (default: %(default)s)")
    atari.add_argument("--repeat_action_probability", type=unit_interval_or_none, default=None,
                       help="sticky actions: the chance that the emulator repeats the "
                            "previous action instead (default: the id's own, 0.25 for "
                            "v5 ids)")


def wrapped_gym_env(args):
    """The gymnasium env with every gym_env wrapper for ``args`` (--vectorize async: built in
    AsyncVectorEnv's processes, so a module-level function)."""
    return unwrap_actor_class(GymEnv)(args).env


TOYS_MODULE = "envs.toys"
#: ddrl's own envs, whose state is plain attributes (envs/toys.py, envs/goal_envs.py)
PLAIN_MODULES = (TOYS_MODULE, "envs.goal_envs")


# -- structured spaces ----------------------------------------------------------------------------
def key_list(text):
    """--drop_keys: comma-separated keys as a tuple ('' or 'none': no key)."""
    if str(text).strip().lower() in ("", "none"):
        return ()
    return tuple(key.strip() for key in str(text).split(",") if key.strip())


def index_list(text) -> Tuple[int, ...]:
    """--hide_obs: comma-separated indices (integers from 0, each once) as a tuple ('' or
    'none': none). Whether they fit the observation is HideObs's check (envs/toys.py)."""
    if str(text).strip().lower() in ("", "none"):
        return ()
    indices = []
    for part in str(text).split(","):
        try:
            index = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part.strip()!r} is not an integer index; give comma-separated "
                f"observation entry indices counting from 0, e.g. 1,3") from None
        if index < 0:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {index} is negative; indices count from 0, e.g. 1,3")
        if index in indices:
            raise argparse.ArgumentTypeError(
                f"{text!r} gives index {index} more than once; give each index once, e.g. 1,3")
        indices.append(index)
    return tuple(indices)


def action_converter(space):
    """The function that turns the action a model hands over (an int, a flat or shaped array)
    into what the env's action space holds (the module docstring)."""
    if isinstance(space, gym.spaces.Discrete):
        return lambda action: int(np.asarray(action).reshape(()))
    shape = tuple(space.shape) if space.shape is not None else None
    if isinstance(space, gym.spaces.MultiDiscrete):
        return lambda action: np.asarray(action).astype(np.int64, copy=False).reshape(shape)
    if isinstance(space, gym.spaces.MultiBinary):
        return lambda action: np.asarray(action).astype(np.int8, copy=False).reshape(shape)
    if isinstance(space, gym.spaces.Box):
        dtype = np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype
        return lambda action: np.asarray(action).astype(dtype, copy=False).reshape(shape)
    return lambda action: action


class DropKeys(gym.ObservationWrapper):
    """A Dict observation without some of its top-level keys."""

    def __init__(self, env, keys, flag="--drop_keys"):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ConfigError(f"{flag} {','.join(keys)}: the observation space {space} is not a "
                              f"Dict, so it has no keys to drop. Leave {flag} out for this env.")
        unknown = [key for key in keys if key not in space.spaces]
        if unknown:
            raise ConfigError(f"{flag}: the observation has no key "
                              f"{', '.join(map(repr, unknown))}; its keys are "
                              f"{', '.join(map(str, space.spaces))}.")
        self.keys = tuple(keys)
        self.observation_space = gym.spaces.Dict(
            {k: s for k, s in space.spaces.items() if k not in self.keys}, sort_keys=False)

    def observation(self, observation):
        return {k: v for k, v in observation.items() if k not in self.keys}


class RenameKey(gym.ObservationWrapper):
    """A Dict observation with its key ``old`` named ``new`` (in the same place)."""

    def __init__(self, env, old, new):
        super().__init__(env)
        self.old, self.new = old, new
        self.observation_space = gym.spaces.Dict(
            {(new if k == old else k): s for k, s in env.observation_space.spaces.items()},
            sort_keys=False)

    def observation(self, observation):
        return {(self.new if k == self.old else k): v for k, v in observation.items()}


class InfoActionMask(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The action mask of ``info[key]`` (each reset and step) as the observation's
    ``action_mask`` key (the module docstring). Its constructor arguments are recorded, as
    gymnasium's own wrappers do, so that gymnasium can build the env again from its spec (its
    env_checker does)."""

    def __init__(self, env, key):
        gym.utils.RecordConstructorArgs.__init__(self, key=key)
        super().__init__(env)
        self.key = key
        actions = env.action_space
        self.size = (int(actions.n) if isinstance(actions, gym.spaces.Discrete)
                     else int(np.sum(actions.nvec)))
        space = env.observation_space
        self.is_dict = isinstance(space, gym.spaces.Dict)
        inner = dict(space.spaces) if self.is_dict else {"observation": space}
        inner[ACTION_MASK] = gym.spaces.Box(0, 1, (self.size,), np.int8)
        self.observation_space = gym.spaces.Dict(inner, sort_keys=False)

    def with_mask(self, observation, info):
        mask = info.get(self.key)
        if mask is None:
            mask = np.ones(self.size, dtype=np.int8)
        else:
            mask = np.asarray(mask).astype(np.int8).reshape(-1)
            if mask.size != self.size:
                raise ValueError(f"info[{self.key!r}] holds {mask.size} action-mask entries; the "
                                 f"action space {self.env.action_space} needs {self.size}.")
        out = dict(observation) if self.is_dict else {"observation": observation}
        out[ACTION_MASK] = mask
        return out

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return self.with_mask(observation, info), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self.with_mask(observation, info), reward, terminated, truncated, info


def wrap_action_mask(env, key):
    """``env`` with its action mask where core/spaces.py looks for it (--action_mask_key)."""
    space = env.observation_space
    keys = space.spaces if isinstance(space, gym.spaces.Dict) else {}
    if str(key).lower() == "none":
        return DropKeys(env, (ACTION_MASK,)) if ACTION_MASK in keys else env
    if key in keys:
        if key == ACTION_MASK:
            return env
        if ACTION_MASK in keys:
            raise ConfigError(f"--action_mask_key {key}: the observation has both {key!r} and "
                              f"{ACTION_MASK!r}, and ddrl reads the mask from {ACTION_MASK!r}. "
                              f"Drop the other one with --drop_keys {ACTION_MASK}, or use "
                              f"--action_mask_key {ACTION_MASK}.")
        return RenameKey(env, key, ACTION_MASK)
    if ACTION_MASK in keys:  # a mask in the observation wins over one in info
        return env
    if not isinstance(env.action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return env
    _, info = env.reset()  # unseeded: the caller's seeded reset comes next
    if isinstance(info, dict) and key in info:
        return InfoActionMask(env, key)
    return env


# -- Atari ----------------------------------------------------------------------------------------
def is_atari(gym_id):
    """An id made by ale-py (ALE/Breakout-v5, or the older BreakoutNoFrameskip-v4 style)."""
    if str(gym_id).startswith("ALE/"):
        return True
    try:
        register_ids_of(gym_id)
        spec = gym.spec(gym_id)
    except gym.error.Error:
        return False
    return "ale_py" in str(spec.entry_point)


def check_atari_args(args):
    """What the flags' types (core/argtypes.py) let through and the preprocessing cannot take:
    the types already keep --noop_max >= 0 and --frame_skip, --frame_stack and
    --max_episode_frames >= 1."""
    if args.screen_size < 8:
        raise ConfigError(f"--screen_size {args.screen_size} is out of range: the frames are "
                          f"resized to 8 pixels or more.")
    probability = args.repeat_action_probability
    if probability is not None and not 0.0 <= probability < 1.0:
        raise ConfigError(f"--repeat_action_probability {probability} is not a probability in "
                          f"[0, 1).")


def wrap_atari(env, args, evaluation=False):
    """The preprocessing of an ALE env made with frameskip=1 (the module docstring lists it);
    ``evaluation``: whole games at the game's own score (no reward clipping, no life cuts).
    benchmarks/probe.py atari-throughput gives SB3 the same chain."""
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=args.noop_max, frame_skip=args.frame_skip, screen_size=args.screen_size,
        terminal_on_life_loss=bool(args.episodic_life and not evaluation),
        grayscale_obs=args.grayscale, scale_obs=False)
    if args.fire_reset and "FIRE" in env.unwrapped.get_action_meanings():
        env = FireOnLifeStart(env)
    if args.clip_reward and not evaluation:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    if args.frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, args.frame_stack)
    return env


class FireOnLifeStart(gym.Wrapper):
    """Press FIRE at the start of an episode and after each life lost (games such as Breakout
    stand still until the player fires). The FIRE step's reward counts; an episode that ends
    on it ends there."""

    def __init__(self, env):
        super().__init__(env)
        self.fire = env.unwrapped.get_action_meanings().index("FIRE")
        self.lives = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire)
        if terminated or truncated:  # cannot happen in a real game; start over once
            obs, info = self.env.reset()
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(self.fire)
            reward += fire_reward
        self.lives = lives
        return obs, reward, terminated, truncated, info


try:  # registers the ALE/... ids with gymnasium (ale-py is in requirements.txt)
    import ale_py
    gym.register_envs(ale_py)
    # errors only: not the emulator's banner from every process that makes an env
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
except ImportError:  # pragma: no cover - a partial install: is_atari ids fail in gym.make
    pass

# -- ids of optional packages: MiniGrid, gymnasium-robotics (Fetch, Shadow Hand, mazes) ------------
# Both are in requirements.txt; importing them registers their ids with gymnasium, and costs 0.1 s
# (minigrid) and 0.2 s (gymnasium_robotics, which imports mujoco) in every process that imports
# envs: the driver, every Ray actor. Most runs need neither, so they are imported the first time an
# id gymnasium does not know is asked for (register_ids_of), in each process that makes one.
def _register_minigrid():
    import minigrid
    gym.register_envs(minigrid)


def _register_robotics():
    import contextlib
    import io
    # its import prints a notice about the Adroit envs to stderr, in every process (Ray's
    # workers too): not ddrl's to show
    with contextlib.redirect_stderr(io.StringIO()):
        import gymnasium_robotics
    gym.register_envs(gymnasium_robotics)
    fix_robotics_joint_types()


_OPTIONAL_IDS = [_register_minigrid, _register_robotics]   # each imported at most once


def register_ids_of(gym_id):
    """Make ``gym_id`` known to gymnasium if an optional package registers it: a no-op for an id
    gymnasium knows; else each package not imported yet is imported (a partial install without
    one leaves its ids unknown, and gym.make says so)."""
    while gym_id not in gym.registry and _OPTIONAL_IDS:
        try:
            _OPTIONAL_IDS.pop(0)()
        except ImportError:  # pragma: no cover - a partial install
            pass
