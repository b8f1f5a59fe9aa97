"""Toy gymnasium envs, one per space ddrl carries (issue 30): each small, fast (pure numpy),
deterministic given ``reset(seed=...)``, and registered with gymnasium at import under the
``ddrl/`` namespace with a ``reward_threshold`` (the default --target_return) and a time limit.
Run them through gym_env: ``--env_name gym_env --gym_id ddrl/MaskedChoice-v0``. This module
registers no ddrl plugin; envs/__init__.py imports every module of the package, so the ids exist
wherever ddrl runs, Ray's workers included.

Returns per episode, of a hand-written optimal policy and of uniform random actions (means over
2,000 seeded episodes, 200 for DictCartPole; tests/test_toy_envs.py checks that the optimal
policy reaches each threshold and the random one does not):

    id                          actions              optimal  random   threshold
    ddrl/MaskedChoice-v0        Discrete(8), masked   20.0    -7.5       18
    ddrl/MaskedChoiceInfo-v0    (the same, info mask) 20.0    -7.5       18
    ddrl/TinyGrid-v0            Discrete(4)           0.96   -0.12       0.8
    ddrl/MultiButton-v0         MultiDiscrete(3,3,3)  10.0    3.3         9
    ddrl/BitMatch-v0            MultiBinary(6)        10.0    5.0         9
    ddrl/PointReach-v0          Box(-1, 1, (2,))     -5.0    -52        -8
    ddrl/PointReachGrid-v0      Box(-1, 1, (1, 2))   -5.0    -52        -8
    ddrl/DictCartPole-v0        Discrete(2)           500     22        475
    ddrl/MemoryChoice-v0        Discrete(5), masked   1.0    -4.6        0.9
    ddrl/DeepSea-v0 (size 10)   Discrete(2)           0.99   -0.004      0.9

Learned (one seed, the ddrl defaults but one process of 8 envs, 10 deterministic evaluation
episodes): PPO reached the thresholds of MaskedChoice and MaskedChoiceInfo (19.2), MultiButton
(10.0) and BitMatch (9.5) at its first evaluation, 5,120 steps, while MaskedChoiceInfo with
``--action_mask_key none`` (the mask unseen) stayed at 10-12 for 40k steps; PPO with 16 envs,
gamma 0.99, lambda 0.95 and an entropy bonus of 0.01 reached 0.93 on TinyGrid in 82k steps, and
with the defaults (2 workers) 500 on DictCartPole in 16k steps; SAC with
configs/sac-Pendulum-v1.yaml reached -7.6 on PointReach and on PointReachGrid (the same curve)
in 5,120 steps.

**MaskedChoice** (20 steps): at every step a random 4 of the 8 actions are valid
(``action_mask``, 1 = valid, int8). The observation (Box float32 [16]) one-hot encodes a
*preferred* action (any of the 8; valid 3 times in 7) and a *fallback* (always valid); the
target is the preferred action when it is valid, else the fallback. Reward +1 for the target, 0
for another valid action, -1 for an invalid one, which the env counts in
``info["invalid_actions"]`` (the episode's running count) and otherwise plays as a step. The
mask is not in the Box, so only a policy whose choice respects the mask can score more than
20 * 4/7 = 11.4 (always the fallback); a masked uniform choice gets 5, an unmasked one -7.5.
``MaskedChoiceInfo`` gives the mask in ``info["action_mask"]`` (of every reset and step) instead
of the observation, which is then the Box alone: gym_env's --action_mask_key lifts it into the
observation.

**TinyGrid** (50 steps): an 8x8 grid drawn as a uint8 image [16, 16, 1] (channels last, 2x2
pixels a cell: SmallCNN's size), the agent 255, the goal 128, both placed at random; actions
up, down, left, right (a move into a wall stays). Reward +1 on reaching the goal (the episode
ends), else -0.01 a step. The shortest path returns 1 - 0.01 (d - 1) for a Manhattan distance d
(0.87 to 1.0). A grid of 16x16 cells (``cell=1``) is much harder to explore: PPO's best
evaluation in 300k steps was -0.08 there.

**MultiButton** (10 steps): three 3-way buttons; the observation one-hot encodes a fresh random
target setting every step (Box float32 [9]); reward: the fraction of buttons set as the target.

**BitMatch** (10 steps): six bits; the observation gives a fresh random target as +-1 (Box
float32 [6]); reward: the fraction of bits matched.

**PointReach** (50 steps): a point and a goal in [-1, 1]^2 (Dict {"position", "goal"}, float32);
an action in [-1, 1]^2 moves the point by 0.1 times it (clipped to the square); reward: minus
the distance to the goal after the move. ``PointReachGrid`` takes the same action shaped
[1, 2] (a Box of more than one dimension).

**DictCartPole** (500 steps): CartPole-v1 with its observation as Dict {"cart": [x, x_dot],
"pole": [theta, theta_dot]}, the same dynamics and threshold: the structured path's cost
against the plain one is measured on it.

**MemoryChoice** (``delay`` + 2 = 6 steps; time limit 50, a safety net): a test of memory, with a
Dict observation and an action mask. Reset draws a cue c in {0..3}; the observation is Dict
{"cue": Box(0, 1, (4,), float32), "phase": Box(0, 1, (2,), float32), "action_mask": Box(0, 1,
(5,), int8)}. The cue is one-hot on the first observation only and zeros after it; the phase
is [1, 0] (waiting) on that first observation and the ``delay`` (4) blank ones after it, where
the only valid action is 0 ("wait"), then [0, 1] (deciding) on the last one, where actions 1..4
are valid and 0 is not. Choosing 1 + c there gives +1, anything else -1 (wait included), and
the episode ends (terminated; the final observation is a blank waiting one, never an all-zero
mask). An invalid action while waiting costs -1 and is otherwise played as a wait, counted in
``info["invalid_actions"]`` as in MaskedChoice. Nothing but the first cue tells c (no step
count, nothing in info), so a policy without memory is at chance: its best return is 1/4 - 3/4
= -0.5, as is a masked uniform choice's; an unmasked uniform one adds 5 * -0.8 while waiting
(-4.6). The threshold 0.9 needs memory: 95% of the decisions right. ``gym.make(id, delay=...,
num_cues=...)`` changes either (a delay beyond 48 needs ``max_episode_steps``).

Partially observable classic control, as RL-Zoo's (for recurrent policies, and for comparing
them with SB3's on exactly the same env): ``ddrl/CartPoleNoVel-v1`` is CartPole-v1 with
observation entries 1 and 3 (the velocities x_dot and theta_dot) hidden, the same as gym_env's
``--gym_id CartPole-v1 --hide_obs 1,3``; ``ddrl/PendulumNoVel-v1`` is Pendulum-v1 with entry 2
(the angular velocity) hidden, the same as ``--gym_id Pendulum-v1 --hide_obs 2``. Each has its
base id's time limit and reward_threshold (500 and 475; 200 and none) and the same wrapper
(``HideObs`` below) as the flag, so the two give the same episodes for a seed. They are not in
``IDS`` (the toys above): their returns are CartPole's and Pendulum's.
"""
import functools
import operator

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv, PendulumEnv

from core.errors import ConfigError

NAMESPACE = "ddrl"


class MaskedChoiceEnv(gym.Env):
    """Choose the preferred action when it is valid, else the fallback (the module docstring)."""

    metadata = {"render_modes": []}
    num_actions = 8
    num_valid = 4

    def __init__(self, mask_in_info=False, render_mode=None):
        n = self.num_actions
        self.mask_in_info = mask_in_info
        self.render_mode = render_mode
        box = spaces.Box(0.0, 1.0, (2 * n,), np.float32)
        mask = spaces.Box(0, 1, (n,), np.int8)
        self.observation_space = (box if mask_in_info else
                                  spaces.Dict({"observation": box, "action_mask": mask},
                                              sort_keys=False))
        self.action_space = spaces.Discrete(n)
        self.mask = np.ones(n, dtype=np.int8)
        self.preferred = 0
        self.fallback = 0
        self.target = 0
        self.invalid_actions = 0

    def _draw(self):
        n, rng = self.num_actions, self.np_random
        valid = rng.permutation(n)[:self.num_valid]
        self.mask = np.zeros(n, dtype=np.int8)
        self.mask[valid] = 1
        self.fallback = int(rng.choice(valid))
        others = [a for a in range(n) if a != self.fallback]
        self.preferred = int(others[rng.integers(n - 1)])
        self.target = self.preferred if self.mask[self.preferred] else self.fallback

    def _observation(self):
        n = self.num_actions
        box = np.zeros(2 * n, dtype=np.float32)
        box[self.preferred] = 1.0
        box[n + self.fallback] = 1.0
        if self.mask_in_info:
            return box
        return {"observation": box, "action_mask": self.mask.copy()}

    def _info(self):
        info = {"invalid_actions": self.invalid_actions}
        if self.mask_in_info:
            info["action_mask"] = self.mask.copy()
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.invalid_actions = 0
        self._draw()
        return self._observation(), self._info()

    def step(self, action):
        action = int(np.asarray(action).reshape(()))
        if not self.mask[action]:
            reward = -1.0
            self.invalid_actions += 1
        else:
            reward = 1.0 if action == self.target else 0.0
        self._draw()
        return self._observation(), reward, False, False, self._info()


class TinyGridEnv(gym.Env):
    """Walk to the goal on a grid drawn as a 16x16 uint8 image (the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    size = 16  # pixels a side
    agent_value, goal_value = 255, 128
    moves = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])  # up, down, left, right (row, col)
    step_cost = 0.01

    def __init__(self, cell=2, render_mode=None):
        self.render_mode = render_mode
        self.cell = int(cell)  # pixels a side of one cell
        self.cells = self.size // self.cell
        self.observation_space = spaces.Box(0, 255, (self.size, self.size, 1), np.uint8)
        self.action_space = spaces.Discrete(4)
        self.agent = np.zeros(2, dtype=np.int64)
        self.goal = np.zeros(2, dtype=np.int64)

    def _observation(self):
        image = np.zeros((self.size, self.size, 1), dtype=np.uint8)
        c = self.cell
        (gr, gc), (ar, ac) = self.goal * c, self.agent * c
        image[gr:gr + c, gc:gc + c, 0] = self.goal_value
        image[ar:ar + c, ac:ac + c, 0] = self.agent_value
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        n = self.cells
        where = self.np_random.choice(n * n, size=2, replace=False)
        self.agent = np.array(divmod(int(where[0]), n), dtype=np.int64)
        self.goal = np.array(divmod(int(where[1]), n), dtype=np.int64)
        return self._observation(), {}

    def step(self, action):
        move = self.moves[int(np.asarray(action).reshape(()))]
        self.agent = np.clip(self.agent + move, 0, self.cells - 1)
        reached = bool(np.array_equal(self.agent, self.goal))
        reward = 1.0 if reached else -self.step_cost
        return self._observation(), reward, reached, False, {}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        gray = self._observation()[:, :, 0]
        return np.repeat(np.repeat(np.repeat(gray[:, :, None], 3, axis=2), 8, axis=0), 8, axis=1)


class MultiButtonEnv(gym.Env):
    """Set three 3-way buttons as the observation's target (the module docstring)."""

    metadata = {"render_modes": []}
    nvec = (3, 3, 3)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, (sum(self.nvec),), np.float32)
        self.action_space = spaces.MultiDiscrete(self.nvec)
        self.target = np.zeros(len(self.nvec), dtype=np.int64)
        self.offsets = np.cumsum((0,) + self.nvec[:-1])

    def _draw(self):
        self.target = self.np_random.integers(0, self.nvec).astype(np.int64)
        obs = np.zeros(sum(self.nvec), dtype=np.float32)
        obs[self.offsets + self.target] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw(), {}

    def step(self, action):
        action = np.asarray(action).reshape(len(self.nvec))
        reward = float(np.mean(action == self.target))
        return self._draw(), reward, False, False, {}


class BitMatchEnv(gym.Env):
    """Set six bits as the observation's +-1 target (the module docstring)."""

    metadata = {"render_modes": []}
    num_bits = 6

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (self.num_bits,), np.float32)
        self.action_space = spaces.MultiBinary(self.num_bits)
        self.bits = np.zeros(self.num_bits, dtype=np.int8)

    def _draw(self):
        self.bits = self.np_random.integers(0, 2, self.num_bits).astype(np.int8)
        return (2.0 * self.bits - 1.0).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw(), {}

    def step(self, action):
        action = np.asarray(action).reshape(self.num_bits)
        reward = float(np.mean(action == self.bits))
        return self._draw(), reward, False, False, {}


class PointReachEnv(gym.Env):
    """Move a point to a goal in [-1, 1]^2 (the module docstring)."""

    metadata = {"render_modes": []}
    speed = 0.1

    def __init__(self, action_shape=(2,), render_mode=None):
        self.render_mode = render_mode
        point = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = spaces.Dict({"position": point, "goal": point},
                                             sort_keys=False)
        self.action_space = spaces.Box(-1.0, 1.0, tuple(action_shape), np.float32)
        self.position = np.zeros(2, dtype=np.float32)
        self.goal = np.zeros(2, dtype=np.float32)

    def _observation(self):
        return {"position": self.position.copy(), "goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return self._observation(), {}

    def step(self, action):
        move = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1.0, 1.0)
        self.position = np.clip(self.position + self.speed * move, -1.0, 1.0).astype(np.float32)
        reward = -float(np.linalg.norm(self.position - self.goal))
        return self._observation(), reward, False, False, {}


class DictObservation(gym.ObservationWrapper):
    """CartPole's [x, x_dot, theta, theta_dot] as {"cart": [x, x_dot], "pole": [theta,
    theta_dot]}."""

    def __init__(self, env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = spaces.Dict(
            {"cart": spaces.Box(low[:2], high[:2], dtype=np.float32),
             "pole": spaces.Box(low[2:], high[2:], dtype=np.float32)}, sort_keys=False)

    def observation(self, observation):
        observation = np.asarray(observation, dtype=np.float32)
        return {"cart": observation[:2].copy(), "pole": observation[2:].copy()}


class MemoryChoiceEnv(gym.Env):
    """Remember the first step's cue through a delay, then choose it (the module docstring)."""

    metadata = {"render_modes": []}
    WAITING, DECIDING = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)

    def __init__(self, num_cues=4, delay=4, render_mode=None):
        if isinstance(num_cues, bool) or not isinstance(num_cues, (int, np.integer)) \
                or num_cues < 2:
            raise ValueError(f"MemoryChoice: num_cues={num_cues!r}; it takes an integer >= 2 "
                             f"(a single cue needs no memory).")
        if isinstance(delay, bool) or not isinstance(delay, (int, np.integer)) or delay < 0:
            raise ValueError(f"MemoryChoice: delay={delay!r}; it takes an integer >= 0 (the "
                             f"blank waiting steps between the cue and the decision).")
        self.num_cues, self.delay = int(num_cues), int(delay)
        self.render_mode = render_mode
        n = self.num_cues
        self.observation_space = spaces.Dict(
            {"cue": spaces.Box(0.0, 1.0, (n,), np.float32),
             "phase": spaces.Box(0.0, 1.0, (2,), np.float32),
             "action_mask": spaces.Box(0, 1, (n + 1,), np.int8)}, sort_keys=False)
        self.action_space = spaces.Discrete(n + 1)  # 0: wait; 1 + c: choose cue c
        self.cue = 0
        self.t = 0  # actions taken this episode
        self.invalid_actions = 0

    def _observation(self):
        n = self.num_cues
        cue = np.zeros(n, dtype=np.float32)
        if self.t == 0:
            cue[self.cue] = 1.0
        deciding = self.t == self.delay + 1
        mask = np.zeros(n + 1, dtype=np.int8)
        if deciding:
            mask[1:] = 1
        else:
            mask[0] = 1
        return {"cue": cue, "phase": (self.DECIDING if deciding else self.WAITING).copy(),
                "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue = int(self.np_random.integers(self.num_cues))
        self.t = 0
        self.invalid_actions = 0
        return self._observation(), {"invalid_actions": 0}

    def step(self, action):
        action = int(np.asarray(action).reshape(()))
        deciding = self.t == self.delay + 1
        if deciding:
            reward = 1.0 if action == 1 + self.cue else -1.0
            self.invalid_actions += int(action == 0)
        else:
            reward = 0.0 if action == 0 else -1.0
            self.invalid_actions += int(action != 0)
        self.t += 1  # delay + 2 after the decision: a blank waiting observation
        return (self._observation(), reward, deciding, False,
                {"invalid_actions": self.invalid_actions})


class DeepSeaEnv(gym.Env):
    """bsuite's deep sea (Osband et al. 2020, "Behaviour Suite for Reinforcement Learning",
    arXiv:1908.03568), the deterministic form: an N x N grid the agent descends one row per
    step from the top-left cell, moving one column left or right (clipped at the edges). Going
    right costs 0.01 / N; standing in the bottom-right cell at the last step pays 1, so the
    optimal return is 0.99 and only N - 1 moves right out of N earn it. Which action means
    right is drawn per cell from ``mapping_seed`` (the same in every env of a run: one task),
    so no fixed action gets there, and dithering exploration finds the reward with
    probability about 2^-N per episode: a test of deep exploration. Observation: the one-hot
    of the agent's cell, N * N floats; ``size`` is N (--gym_kwargs size=20)."""

    metadata = {"render_modes": []}

    def __init__(self, size=10, mapping_seed=0, render_mode=None):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
            raise ValueError(f"DeepSea: size={size!r}; it takes an integer >= 2 (the grid's "
                             f"side and the episode's length).")
        self.size = int(size)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, (self.size * self.size,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.right_action = self.action_mapping(self.size, mapping_seed)
        self.row = self.col = 0

    @staticmethod
    def action_mapping(size, mapping_seed=0):
        """[N, N]: the action that moves right in each cell (bsuite's per-cell coin flips)."""
        return np.random.default_rng(mapping_seed).integers(0, 2, (size, size))

    def _observation(self):
        obs = np.zeros(self.size * self.size, dtype=np.float32)
        obs[min(self.row, self.size - 1) * self.size + self.col] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.row = self.col = 0
        return self._observation(), {}

    def step(self, action):
        action = int(np.asarray(action).reshape(()))
        reward = 1.0 if (self.row, self.col) == (self.size - 1, self.size - 1) else 0.0
        if action == self.right_action[self.row, self.col]:
            self.col = min(self.col + 1, self.size - 1)
            reward -= 0.01 / self.size
        else:
            self.col = max(self.col - 1, 0)
        self.row += 1
        return self._observation(), reward, self.row == self.size, False, {}


class HideObs(gym.ObservationWrapper):
    """A 1-D Box observation without the entries at ``indices`` (gym_env's --hide_obs and the
    NoVel ids): hiding the velocities makes a task partially observable, so only a policy that
    infers them from past observations (a recurrent one, or stacked frames) can solve it. The
    space keeps the other entries' low, high and dtype. Here rather than in gym_env so that this
    module, which gym_env's module imports, registers the NoVel ids with the same class."""

    def __init__(self, env, indices, flag="--hide_obs"):
        super().__init__(env)
        space = env.observation_space
        shown = ",".join(map(str, indices))
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"{flag} {shown}: the observation space {space} is not a 1-D Box, "
                              f"so it has no entries to hide by index. Leave {flag} out for this "
                              f"env (--drop_keys drops top-level keys of a Dict observation).")
        size = int(space.shape[0])
        allowed = f"indices 0 to {size - 1} of its {size} entries, each at most once"
        try:
            if any(isinstance(i, bool) for i in indices):
                raise TypeError
            hidden = [operator.index(i) for i in indices]
        except TypeError:
            raise ConfigError(f"{flag} {shown}: not a list of integer indices; the observation "
                              f"space {space} takes {allowed}, e.g. {flag} 0.") from None
        outside = [i for i in hidden if not 0 <= i < size]
        repeated = sorted({i for i in hidden if hidden.count(i) > 1})
        if outside or repeated:
            what = (f"index {', '.join(map(str, outside))} is out of range" if outside else
                    f"index {', '.join(map(str, repeated))} is given more than once")
            raise ConfigError(f"{flag} {shown}: {what}; the observation space {space} takes "
                              f"{allowed}.")
        if len(hidden) == size:
            raise ConfigError(f"{flag} {shown} hides every entry of the observation space "
                              f"{space}, leaving nothing to observe: keep at least one of the "
                              f"{allowed}.")
        self.hidden = tuple(hidden)
        self.keep = np.array([i for i in range(size) if i not in hidden], dtype=np.int64)
        self.observation_space = spaces.Box(space.low[self.keep], space.high[self.keep],
                                            dtype=space.dtype)

    def observation(self, observation):
        return np.asarray(observation)[self.keep]


def make_hidden(env_class, indices, **kwargs):
    """``env_class(**kwargs)`` with the observation entries at ``indices`` hidden."""
    return HideObs(env_class(**kwargs), indices)


def make_dict_cartpole(**kwargs):
    return DictObservation(CartPoleEnv(**kwargs))


def make_point_reach_grid(**kwargs):
    return PointReachEnv(action_shape=(1, 2), **kwargs)


def make_masked_choice_info(**kwargs):
    return MaskedChoiceEnv(mask_in_info=True, **kwargs)


# id: (entry point, max_episode_steps, reward_threshold)
TOYS = {
    "MaskedChoice-v0": (MaskedChoiceEnv, 20, 18.0),
    "MaskedChoiceInfo-v0": (make_masked_choice_info, 20, 18.0),
    "TinyGrid-v0": (TinyGridEnv, 50, 0.8),
    "MultiButton-v0": (MultiButtonEnv, 10, 9.0),
    "BitMatch-v0": (BitMatchEnv, 10, 9.0),
    "PointReach-v0": (PointReachEnv, 50, -8.0),
    "PointReachGrid-v0": (make_point_reach_grid, 50, -8.0),
    "DictCartPole-v0": (make_dict_cartpole, 500, 475.0),
    "MemoryChoice-v0": (MemoryChoiceEnv, 50, 0.9),
    # (it ends itself after --gym_kwargs size=N steps; the limit only bounds N)
    "DeepSea-v0": (DeepSeaEnv, 1000, 0.9),
}
IDS = tuple(f"{NAMESPACE}/{name}" for name in TOYS)

# RL-Zoo's partially observable ids (the module docstring) -- id: (the base id, its env class,
# the observation entries hidden); each has its base id's time limit and reward_threshold.
NO_VEL = {
    "CartPoleNoVel-v1": ("CartPole-v1", CartPoleEnv, (1, 3)),
    "PendulumNoVel-v1": ("Pendulum-v1", PendulumEnv, (2,)),
}
NO_VEL_IDS = tuple(f"{NAMESPACE}/{name}" for name in NO_VEL)

for _name, (_entry_point, _steps, _threshold) in TOYS.items():
    if f"{NAMESPACE}/{_name}" not in gym.registry:  # a re-import (Ray workers, --user_dir)
        gym.register(id=f"{NAMESPACE}/{_name}", entry_point=_entry_point,
                     max_episode_steps=_steps, reward_threshold=_threshold)

for _name, (_base, _class, _hidden) in NO_VEL.items():
    if f"{NAMESPACE}/{_name}" not in gym.registry:
        _spec = gym.spec(_base)
        gym.register(id=f"{NAMESPACE}/{_name}",
                     entry_point=functools.partial(make_hidden, _class, _hidden),
                     max_episode_steps=_spec.max_episode_steps,
                     reward_threshold=_spec.reward_threshold)
