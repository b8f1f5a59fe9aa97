"""Goal-conditioned toy envs for hindsight experience replay (--her, core/learning/her.py), in
gymnasium-robotics' convention: the observation is a Dict {"observation", "achieved_goal",
"desired_goal"}, the reward sparse (-1 until the goal is reached, 0 there) and given by
``compute_reward(achieved_goal, desired_goal, info)``, vectorized over rows (a batch of goals
[N, ...] gives N rewards), ``info["is_success"]`` 1.0 at the goal. Registered with gymnasium
at import under ``ddrl/`` (as envs/toys.py's ids): ``--gym_id ddrl/PointGoal-v0``. Each is pure
numpy, deterministic given ``reset(seed=...)``, and its state plain attributes (exact resume).

**PointGoal** (``ddrl/PointGoal-v0``, 50 steps, threshold -20): a point and a goal drawn
uniformly in [-1, 1]^2; an action in Box(-1, 1, (2,)) moves the point by 0.1 times it (clipped
to the square). Reward 0 while the point is within 0.05 of the goal, else -1; the episode never
terminates (the point must stay), so the return is minus the steps spent away from the goal. The
goal is 1.02 away on average, 11 steps at full speed: a policy that heads straight for it and
stops returns about -10. Uniform random actions return -49.9 (2,000 seeded episodes; 4.6% of
them touch the goal at some step). Measured (tests/test_her.py's e2e run: SAC's defaults with
64x64 networks, 1,000 random warm-up steps, one process, 4 envs): with --her every one of seeds
0-4 reached the threshold at its 6,144-step evaluation (-9.9 to -15.2); without it every
evaluation of every seed was -50.0 up to 8,192 steps.

**BitFlip** (``ddrl/BitFlip-v0``, n = 10 bits by default, ``gym.make(id, n_bits=n)``): the HER
paper's bit flipping. The state and the goal are n bits drawn at random (never equal at
reset), MultiBinary(n) each; action i (Discrete(n)) flips bit i. Reward 0 when the state equals
the goal, which terminates the episode, else -1; the env truncates after n steps itself. The
shortest path flips the bits that differ, returning -(d - 1) for a Hamming distance d (-3.95 on
average for n = 10); uniform random actions return -9.93 for n = 10 (2,000 seeded episodes).
Threshold -6 (for n = 10). Its ``compute_terminated`` is vectorized too, so relabelled
transitions that reach their goal are terminal. Learned (tests/test_her.py's e2e run: DQN with
256 units, lr 1e-3, batch 128, gamma 0.98, one process): with --her seeds 0-4 reached -4.1 to
-4.6 at their first evaluation, 2,048 steps; without it seed 0 stayed at -10.0 for 20k steps.
"""
import gymnasium as gym
import numpy as np
from gymnasium import spaces

NAMESPACE = "ddrl"


def _success(achieved_goal, desired_goal, tolerance):
    """1.0 where the achieved goal is within ``tolerance`` of the desired one (rows alike)."""
    distance = np.linalg.norm(np.asarray(achieved_goal, np.float64)
                              - np.asarray(desired_goal, np.float64), axis=-1)
    return (distance <= tolerance).astype(np.float32)


class PointGoalEnv(gym.Env):
    """Move a point to within a tolerance of a goal and stay there (the module docstring)."""

    metadata = {"render_modes": []}
    speed = 0.1
    tolerance = 0.05

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        point = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = spaces.Dict(
            {"observation": point, "achieved_goal": point, "desired_goal": point},
            sort_keys=False)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.position = np.zeros(2, dtype=np.float32)
        self.goal = np.zeros(2, dtype=np.float32)

    def _observation(self):
        return {"observation": self.position.copy(), "achieved_goal": self.position.copy(),
                "desired_goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return self._observation(), {}

    def step(self, action):
        move = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1.0, 1.0)
        self.position = np.clip(self.position + self.speed * move, -1.0, 1.0).astype(np.float32)
        success = float(_success(self.position, self.goal, self.tolerance))
        return self._observation(), success - 1.0, False, False, {"is_success": success}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return _success(achieved_goal, desired_goal, self.tolerance) - 1.0

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)


class BitFlipEnv(gym.Env):
    """Flip bits until they equal the goal's (the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, n_bits=10, render_mode=None):
        self.render_mode = render_mode
        self.n_bits = int(n_bits)
        bits = spaces.MultiBinary(self.n_bits)
        self.observation_space = spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}, sort_keys=False)
        self.action_space = spaces.Discrete(self.n_bits)
        self.state = np.zeros(self.n_bits, dtype=np.int8)
        self.goal = np.zeros(self.n_bits, dtype=np.int8)
        self.steps = 0

    def _observation(self):
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(),
                "desired_goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self.goal = self.state
        while np.array_equal(self.goal, self.state):
            self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.int8)
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        self.state = self.state.copy()
        self.state[int(action)] ^= 1
        self.steps += 1
        success = bool(np.array_equal(self.state, self.goal))
        return (self._observation(), 0.0 if success else -1.0, success,
                self.steps >= self.n_bits and not success, {"is_success": float(success)})

    def compute_reward(self, achieved_goal, desired_goal, info):
        return self.compute_terminated(achieved_goal, desired_goal, info).astype(np.float32) - 1.0

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)


# id: (entry point, max_episode_steps, reward_threshold)
GOAL_ENVS = {
    "PointGoal-v0": (PointGoalEnv, 50, -20.0),
    "BitFlip-v0": (BitFlipEnv, None, -6.0),   # it truncates after n_bits steps itself
}
IDS = tuple(f"{NAMESPACE}/{name}" for name in GOAL_ENVS)

for _name, (_entry_point, _steps, _threshold) in GOAL_ENVS.items():
    if f"{NAMESPACE}/{_name}" not in gym.registry:  # a re-import (Ray workers, --user_dir)
        gym.register(id=f"{NAMESPACE}/{_name}", entry_point=_entry_point,
                     max_episode_steps=_steps, reward_threshold=_threshold)
