"""An env of any observation and action space, for the tests that carry every space through
both loops (tests/test_spaces_loops.py):

    python main.py --user_dir tests/plugins --env_name spaces_env --obs_kind dict \
        --action_kind multi_discrete --masked

Observations: ``box`` (float vector), ``dict`` (a 7x7x3 uint8 grid, a Discrete heading, a float
vector, a nested Dict with a MultiBinary), ``tuple`` (a Box and a Discrete), ``image`` (a 16x16
uint8 grid), ``discrete`` (a Discrete starting at 3). Actions: ``discrete`` (5),
``multi_discrete`` ([3, 2]), ``multi_binary`` (4), ``box`` (2), ``box2x2`` (a [2, 2] Box).
With ``--masked`` (Discrete and MultiDiscrete actions) the observation carries an
``action_mask`` with a random half of each choice invalid; an invalid action is counted in
``info["invalid_actions"]`` and ends the episode with reward -1, so a test can assert none was
taken. The reward favours one action per step (the "target" shown in the observation), so a
policy can learn a little in a few hundred steps; nothing here is about learning well.
"""
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs import register_env, OBSERVATION

OBS_KINDS = ("box", "dict", "tuple", "image", "discrete")
ACTION_KINDS = ("discrete", "multi_discrete", "multi_binary", "box", "box2x2")


def action_space_of(kind):
    return {"discrete": spaces.Discrete(5),
            "multi_discrete": spaces.MultiDiscrete([3, 2]),
            "multi_binary": spaces.MultiBinary(4),
            "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "box2x2": spaces.Box(-1.0, 1.0, (2, 2), np.float32)}[kind]


def observation_space_of(kind, mask_width):
    if kind == "box":
        space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    elif kind == "dict":
        space = spaces.Dict({
            "grid": spaces.Box(0, 255, (7, 7, 3), np.uint8),
            "heading": spaces.Discrete(4),
            "target": spaces.Box(-1.0, 1.0, (4,), np.float32),
            "extra": spaces.Dict({"bits": spaces.MultiBinary(3)})})
    elif kind == "tuple":
        space = spaces.Tuple((spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)))
    elif kind == "image":
        space = spaces.Box(0, 255, (16, 16), np.uint8)
    else:
        space = spaces.Discrete(4, start=3)
    if mask_width:
        inner = space.spaces if isinstance(space, spaces.Dict) else {"observation": space}
        space = spaces.Dict({**inner, "action_mask": spaces.Box(0, 1, (mask_width,), np.int8)})
    return space


@register_env("spaces_env")
class SpacesEnv:
    """Observations and actions of the kinds the flags name (the module docstring)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--obs_kind", choices=OBS_KINDS, default="dict",
                            help="observation space (default: %(default)s)")
        parser.add_argument("--action_kind", choices=ACTION_KINDS, default="discrete",
                            help="action space (default: %(default)s)")
        parser.add_argument("--masked", action="store_true",
                            help="an action_mask with half of each choice invalid")
        parser.add_argument("--episode_steps", type=int, default=20,
                            help="steps per episode (default: %(default)s)")

    def __init__(self, args, seed=None):
        self.obs_kind, self.action_kind = args.obs_kind, args.action_kind
        self.action_space = action_space_of(self.action_kind)
        self.choices = ([int(self.action_space.n)] if self.action_kind == "discrete" else
                        [int(n) for n in self.action_space.nvec]
                        if self.action_kind == "multi_discrete" else None)
        self.masked = bool(args.masked) and self.choices is not None
        self.observation_space = observation_space_of(
            self.obs_kind, sum(self.choices) if self.masked else 0)
        self.episode_steps = args.episode_steps
        self.reward_threshold = None
        self.rng = np.random.default_rng(seed)
        self.t, self.invalid = 0, 0

    def _draw(self):
        """A new target (what the reward favours) and, if masked, a mask that allows it."""
        self.target = self.rng.uniform(-1, 1, 4).astype(np.float32)
        if self.masked:
            parts = []
            for n in self.choices:
                allowed = np.zeros(n, np.int8)
                allowed[self.rng.permutation(n)[:max(1, n // 2)]] = 1
                parts.append(allowed)
            self.mask = np.concatenate(parts)

    def _obs(self):
        kind, target = self.obs_kind, self.target
        if kind == "box":
            obs = target
        elif kind == "dict":
            grid = np.zeros((7, 7, 3), np.uint8)
            grid[int((target[0] + 1) * 3), int((target[1] + 1) * 3)] = (10, 5, 1)
            obs = {"grid": grid, "heading": int(target[2] > 0) + 2 * int(target[3] > 0),
                   "target": target, "extra": {"bits": (target[:3] > 0).astype(np.int8)}}
        elif kind == "tuple":
            obs = (target, int(target[0] > 0) + int(target[1] > 0))
        elif kind == "image":
            obs = np.zeros((16, 16), np.uint8)
            obs[int((target[0] + 1) * 7.5), int((target[1] + 1) * 7.5)] = 255
        else:
            obs = 3 + int(target[0] > 0) + 2 * int(target[1] > 0)
        if self.masked:
            obs = dict(obs) if isinstance(obs, dict) else {"observation": obs}
            obs["action_mask"] = self.mask.copy()
        return obs

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
            self.action_space.seed(seed)
        self.t, self.invalid = 0, 0
        self._draw()
        return self._obs(), {}

    def _reward(self, action):
        """1 for the favoured action, less for others; -1 (and the end) for an invalid one."""
        action = np.asarray(action)
        if self.masked:
            flat = action.reshape(-1).astype(np.int64)
            offsets = np.cumsum([0] + self.choices[:-1])
            if not all(self.mask[o + a] for o, a in zip(offsets, flat)):
                self.invalid += 1
                return -1.0, True
        if self.action_kind in ("box", "box2x2"):
            return float(-np.abs(action.reshape(-1)[:2] - self.target[:2]).sum()), False
        favoured = int(self.target[0] > 0)
        return float(np.mean(action.reshape(-1) == favoured)), False

    def step(self, action):
        reward, invalid = self._reward(action)
        self.t += 1
        self._draw()
        truncated = self.t >= self.episode_steps
        return OBSERVATION(self._obs(), reward, invalid, truncated and not invalid,
                           {"invalid_actions": self.invalid})

    # exact resume (core/sampling/rollout.py get_state): all of it is plain data
    def get_state(self):
        state = {"rng": self.rng.bit_generator.state, "t": self.t, "invalid": self.invalid,
                 "target": self.target.copy(),
                 "action_space_rng": self.action_space.np_random.bit_generator.state}
        if self.masked:
            state["mask"] = self.mask.copy()
        return state

    def set_state(self, state):
        self.rng.bit_generator.state = state["rng"]
        self.action_space.np_random.bit_generator.state = state["action_space_rng"]
        self.t, self.invalid = int(state["t"]), int(state["invalid"])
        self.target = np.asarray(state["target"], np.float32).copy()
        if self.masked:
            self.mask = np.asarray(state["mask"], np.int8).copy()

    def render(self):
        frame = np.zeros((32, 32, 3), np.uint8)
        frame[int((self.target[0] + 1) * 15), int((self.target[1] + 1) * 15)] = 255
        return frame

    def close(self):
        pass


gym.logger.min_level = 40  # the tests make many of these envs
