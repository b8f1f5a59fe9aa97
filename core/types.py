"""Typed data contracts between rollout workers, agents and the learner."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

#: The key under which weights handed out by a learner carry their version (the learner's
#: update count when they were taken; core/learning/learner.py weights_for_workers). A model that loads
#: them remembers it as ``weights_version`` (models/base.py), so what it computes next (a
#: fragment, a gradient) reports the version it really used, not the one the caller meant to
#: send: the lags in metrics.csv are measured, not echoed.
WEIGHTS_VERSION_KEY = "__weights_version__"


#: An env may carry, in every step's info under this key, {name: array} the agent plugin reads
#: beside the reward; the rollout worker keeps them along the fragment (Trajectory.step_report,
#: [T, E, ...] each). The names agents/default_agent.py knows:
#: - "rewards", "acted", "terminated" ([K] each): about each of a team's K agents at that step
#:   (envs/pettingzoo_env.py): its own reward, 1 if it was in the episode and acted, 1 if it
#:   left the episode at this step; a model whose values are per agent learns each agent from
#:   its own reward (models/ma_ppo.py --agent_rewards);
#: - "next_sign" (a number): +1 when the player who moves at the next step is the one who moved
#:   at this one, -1 when it is its opponent in a two-player zero-sum game whose steps alternate
#:   between the players (envs/pettingzoo_aec.py --both_seats): the next state's value, seen by
#:   the player to move there, is then negated for this step's mover.
STEP_REPORT_KEY = "step_report"

#: An opponent slot of self-play (envs/pettingzoo_aec.py asks the model for opponents by slot,
#: models/selfplay_ppo.py answers): the learning policy itself as it is now, not a frozen
#: snapshot (and not rated). The one constant the env and the model share, so it lives below
#: both.
LATEST_POLICY = -2

@dataclass
class FragmentMemory:
    """A recurrent policy's state along a fragment (models/base.py ``recurrent``; trees are
    dicts {name: array}, core/sampling/memory.py). ``states[t]`` is the state the action of step
    t was chosen from, before the reset at an episode start; ``episode_starts[t]`` marks the
    steps whose observation began an episode (their state was reset first). The state to value
    ``last_observations`` with is ``last_state`` (``last_starts``), and each of
    ``truncated_observations`` has its row of ``truncated_states`` (``truncated_starts``): the
    state after the truncated step at a time limit, or the state the step was taken from when
    an env failure cut it there (its final observation is then the one the policy saw)."""
    states: dict                     # {name: [T, E, ...]}
    episode_starts: np.ndarray       # [T, E] bool
    last_state: dict                 # {name: [E, ...]}
    last_starts: np.ndarray          # [E] bool
    truncated_states: dict           # {name: [K, ...]}
    truncated_starts: np.ndarray     # [K] bool


@dataclass
class Trajectory:
    """A fragment of T steps from E envs, time-major: arrays are [T, E, ...].

    Observations (``observations``, ``last_observations``, ``truncated_observations``) are
    arrays for a Box observation space, and for any other space a dict {leaf path: array} with
    those leading dimensions on every leaf (core/spaces.py); an action mask rides along as the
    ``action_mask`` leaf.

    ``truncated_index`` lists the (t, e) of every step that ended an episode by truncation and
    ``truncated_observations`` the observation the env returned there before the automatic
    reset (``observations[t + 1, e]`` is already the next episode's first): the agent
    bootstraps from its value (a time limit is not a terminal state; Pardo et al. 2018,
    arXiv:1712.00378). ``last_observations`` is the observation after the fragment's last step,
    for bootstrapping the steps still running.

    ``valid`` marks the steps that happened: False where the env raised (core/sampling/envs.py) and the
    step was recorded as a cut (reward 0, truncated, its final observation the one the policy
    saw) only to keep the arrays rectangular. Agents should drop those steps from their losses;
    one that ignores ``valid`` still runs, on a few fake cut transitions. None: all valid.

    ``memory``: the policy's recurrent state along the fragment (``FragmentMemory``), None for
    a model without memory.

    ``terminal_index`` and ``terminal_observations``: the (t, e) of every step that ended its
    episode by termination and the observation the env returned there (``observations[t + 1,
    e]`` is the next episode's first). Nothing bootstraps from it; an agent that keeps whole
    episodes needs it where the goal an episode achieved matters (hindsight relabelling,
    agents/episodes.py). None: not recorded.
    """
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    log_probs: Optional[np.ndarray]        # [T, E] when the policy reports them (PPO)
    values: Optional[np.ndarray]           # [T, E] when the policy reports them (PPO)
    last_observations: np.ndarray          # [E, ...] observation after the last step
    truncated_index: np.ndarray            # [K, 2] (t, e) of truncated steps
    truncated_observations: np.ndarray     # [K, ...] their final observations
    weights_version: int = 0
    valid: Optional[np.ndarray] = None     # [T, E] bool; None means every step is valid
    memory: Optional[FragmentMemory] = None
    terminal_index: Optional[np.ndarray] = None          # [J, 2] (t, e) of terminated steps
    terminal_observations: Optional[np.ndarray] = None   # [J, ...] their final observations
    #: {name: [T, E, ...]}: what the env reported at every step beside the reward
    #: (STEP_REPORT_KEY above); zeros at steps whose env raised. None: it reports nothing.
    step_report: Optional[Dict[str, np.ndarray]] = None

    @property
    def num_steps(self) -> int:
        return int(self.rewards.size)


@dataclass
class GradientRequest:
    """What the learner asks of every worker for one minibatch step."""
    epoch: int
    minibatch: int
    num_minibatches: int
    advantage_mean: float
    advantage_std: float
    progress: float
    weights_version: int


@dataclass
class GradientResult:
    gradients: Dict[str, np.ndarray]
    num_samples: int
    weights_version: int
    stats: Dict[str, float] = field(default_factory=dict)


@dataclass
class RolloutStats:
    env_steps: int
    episode_returns: List[float]
    episode_lengths: List[int]
    weights_version: int
    sample_time_s: float = 0.0
    agent_stats: Dict[str, float] = field(default_factory=dict)  # what send_trajectory returned
    obs_moments: Any = None  # core.learning.normalizer.Moments of the raw observations (--normalize_obs)
    return_moments: Any = None  # Moments of the discounted returns seen (--normalize_reward)
    # Env errors survived while collecting (core/sampling/envs.py): {"worker", "env", "method" ("step" or
    # "reset"), "error" ("TypeName: text"), "step" (t in the fragment; None for a reset outside
    # one)}.
    env_errors: List[dict] = field(default_factory=list)
    # The agent's data of this fragment (BaseAgent.export_data), when the trainer asked for it:
    # a gradient worker then computes on it together with its own (--grad_workers).
    data: Any = None
    # What finished episodes scored besides their returns ({name: number} each, from the env's
    # info at their last step: core/sampling/envs.py EPISODE_METRICS_KEY).
    episode_metrics: List[dict] = field(default_factory=list)
