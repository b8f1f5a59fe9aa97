"""gym_env: any gymnasium id (--gym_id) with Discrete or Box actions and Box observations.

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

import gymnasium as gym
import numpy as np
import ray

from core.argtypes import (non_negative_int, positive_int, positive_int_or_none,
                           unit_interval_or_none)
from core.registry import ConfigError
from core.run.state import (generator_state, plain_attributes, set_attributes,
                        set_generator_state)
from envs import register_env, OBSERVATION


@register_env("gym_env")
@ray.remote
class GymEnv:
    """Wraps gymnasium.make(--gym_id); Box observations, Discrete or Box actions."""

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
        try:
            self.env = gym.make(args.gym_id, **kwargs)
        except gym.error.Error as exc:
            raise ConfigError(f"--gym_id {args.gym_id!r} cannot be made by gymnasium: {exc}. "
                              f"Use a registered id such as CartPole-v1, Pendulum-v1, "
                              f"ALE/Breakout-v5 or HalfCheetah-v5.") from exc
        if preprocess:
            self.env = wrap_atari(self.env, args, evaluation=args.evaluation)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        spec = self.env.spec
        # The default --target_return: the id's own "solved" threshold (475 for CartPole-v1).
        self.reward_threshold = spec.reward_threshold if spec is not None else None

    def reset(self, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self.action_space.seed(seed)
        return obs, info

    def step(self, action):
        if isinstance(self.action_space, gym.spaces.Discrete):
            action = int(np.asarray(action).reshape(()))
        obs, reward, terminated, truncated, info = self.env.step(action)
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    # -- exact resume ----------------------------------------------------------------------
    # A checkpoint can hold an env's state only if it is plain data. For gymnasium's classic
    # control envs it is (CartPole's `state` array, the time limit's step count, the RNG), and
    # for MuJoCo's (the simulator's qpos, qvel and time, besides those). Box2D keeps its state
    # in a physics world of C++ bodies and ALE in an emulator whose saved states are opaque
    # bytes of the emulator build, so those return None and a restored run starts their
    # episodes afresh.
    def get_state(self):
        """The env's state as plain data, or None where it cannot be captured."""
        base = self.env.unwrapped
        module = type(base).__module__
        mujoco = module.startswith("gymnasium.envs.mujoco")
        if not (module.startswith("gymnasium.envs.classic_control") or mujoco):
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


# -- Atari ----------------------------------------------------------------------------------------
def is_atari(gym_id):
    """An id made by ale-py (ALE/Breakout-v5, or the older BreakoutNoFrameskip-v4 style)."""
    if str(gym_id).startswith("ALE/"):
        return True
    try:
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
