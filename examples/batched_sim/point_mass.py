"""A batched simulator kept outside ddrl: 1,024 point masses stepped at once in torch.

    python main.py --user_dir examples/batched_sim --env_name point_mass --config none \
        --num_workers 0 --num_envs_per_worker 1024 --rollout_steps 16 --batch_size 4096 \
        --num_epochs 4 --total_steps 3000000

Each env is a point mass in the plane pushed by a 2-D force toward a goal drawn at every reset:
position p and velocity v in [-1, 1]^2 at the start, v <- 0.9 v + 0.2 a, p <- p + 0.1 v, the
force a clipped to [-1, 1]^2. Observation [p, v, g - p]; reward -|g - p| per step; 50 steps
per episode (a time limit: truncated). Mean returns over 4,096 episodes: random forces -59, no
force -53, a hand-tuned PD controller (a = clip(3 (g - p) - 2 v)) -9.8; the target is -12
(``reward_threshold``: ddrl's default --target_return).

The class is batched by nature: its ``__init__`` takes ``num_envs`` and it follows gymnasium's
VectorEnv API (README "Batched simulators"). Its arrays are torch tensors on ``--pm_device``
(cpu, cuda, ...): ddrl reads them as numpy (no copy on the CPU) and hands the actions back as a
tensor on that device. It resets in SameStep mode: an episode that ends is replaced in the same
step, its final observation in ``infos["final_obs"]``.
"""
import numpy as np
import torch
from gymnasium import spaces

from core.errors import ConfigError
from envs import register_env


def simulator_device(name):
    """The torch device --pm_device names, checked where the simulator runs (a Ray worker on
    another machine may have the GPU this process lacks): bad input is the run's ConfigError,
    one paragraph, exit code 2, not torch's traceback from deep in the first step."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"--pm_device {name!r} is not a torch device ({exc}). Give cpu, cuda "
                          f"or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"--pm_device {name}: torch here sees no CUDA device (torch {torch.__version__}, "
            f"{'built with CUDA: no GPU or driver found' if torch.backends.cuda.is_built() else 'a CPU-only build'}). "
            f"Use --pm_device cpu, or run where a GPU is; a policy trained on one plays here "
            f"with `ddrl evaluate RUN --pm_device cpu`.")
    return device


@register_env("point_mass")
class PointMass:
    """1,024 point masses (or --num_envs_per_worker) pushed toward goals, stepped at once in torch."""
    metadata = {"autoreset_mode": "SameStep"}
    reward_threshold = -12.0
    episode_steps = 50

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pm_device", default="cpu",
                            help="torch device of the simulator's tensors (default: %(default)s)")

    def __init__(self, args, seed=None, num_envs=1):
        self.num_envs = num_envs
        self.device = simulator_device(args.pm_device)
        self.single_observation_space = spaces.Box(-np.inf, np.inf, (6,), np.float32)
        self.single_action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(0 if seed is None else int(seed))
        shape = (num_envs, 2)
        self.p, self.v, self.g = (torch.zeros(shape, device=self.device) for _ in range(3))
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _uniform(self, rows):
        return torch.rand((int(rows), 2), generator=self.generator, device=self.device) * 2 - 1

    def _start(self, which):
        """New episodes in the envs ``which`` (a bool mask)."""
        count = int(which.sum())
        if count:
            self.p[which], self.v[which] = self._uniform(count), self._uniform(count) * 0.1
            self.g[which], self.t[which] = self._uniform(count), 0

    def _obs(self):
        return torch.cat([self.p, self.v, self.g - self.p], dim=1)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.generator.manual_seed(int(seed[0] if isinstance(seed, (list, tuple)) else seed))
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._obs(), {}

    def step(self, actions):
        force = torch.as_tensor(actions, dtype=torch.float32, device=self.device).clamp(-1, 1)
        self.v = 0.9 * self.v + 0.2 * force
        self.p = self.p + 0.1 * self.v
        self.t += 1
        reward = -torch.linalg.vector_norm(self.g - self.p, dim=1)
        truncated = self.t >= self.episode_steps
        terminated = torch.zeros_like(truncated)
        infos = {}
        if bool(truncated.any()):
            infos = {"final_obs": self._obs(), "_final_obs": truncated}
            self._start(truncated)
        return self._obs(), reward, terminated, truncated, infos

    def close(self):
        pass
