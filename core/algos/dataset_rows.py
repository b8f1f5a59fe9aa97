"""A dataset's rows as a run's replay buffer keeps them (--dataset): the offline loop's buffer
and the mixed buffer of offline-to-online fine-tuning (core/learning/mixed_replay.py) both take
them from here."""
import numpy as np

from core.errors import ConfigError
from core.learning.dataset_shard import normalized_rows, with_discount
from core.learning.normalizer import moments_of


def dataset_transitions(data, agent_cls, agent_config):
    """The dataset's transitions as the agent's buffer keeps them: with the discounts column
    (gamma^1 per row, from the agent's --gamma) for an agent whose transitions carry one (the
    DQN family's n-step transitions; offline they are one-step)."""
    return with_discount(data.transitions, dataset_discount(agent_cls, agent_config))


def dataset_discount(agent_cls, agent_config):
    """The discount of a dataset row in the agent's buffer: its --gamma for an agent whose
    transitions carry one, else None (the model applies its own)."""
    if not agent_cls.transition_discounts:
        return None
    n_step = getattr(agent_config, "n_step", 1)
    if n_step != 1:
        raise ConfigError(f"--n_step {n_step} with --dataset: a dataset's transitions are one "
                          f"step each, and ddrl does not rebuild n-step returns from them. "
                          f"Use --n_step 1.")
    gamma = getattr(agent_config, "gamma", None)
    if gamma is None:
        raise ConfigError(f"agent {agent_cls.__name__} stores discounted transitions but has "
                          f"no --gamma for a dataset's one-step rows.")
    return float(gamma)


def prepared_dataset(args, spec, spaces, agent_cls, obs_normalizer):
    """(OfflineData, its Transitions as the buffer stores them) for --dataset: read and checked
    against the env's spaces (core/data/), discounted for the agent, and under --normalize_obs
    normalized with the dataset's own statistics, which ``obs_normalizer`` takes (once: the
    same dataset gives the same) and keeps frozen, as the offline papers do."""
    from core.data import load_dataset
    data = load_dataset(args.dataset, *spaces)
    transitions = dataset_transitions(data, agent_cls, spec.agent)
    if obs_normalizer is not None:
        if not obs_normalizer.frozen:
            obs_normalizer.update(moments_of(transitions.observations))
            obs_normalizer.frozen = True
        transitions = normalized_rows(transitions, obs_normalizer.statistics(), args.obs_clip)
    return data, transitions


def dataset_info(data):
    """summary.json's ``dataset``: where it came from, its size and the behaviour's returns."""
    returns = data.episode_returns
    return {"source": str(data.source), "transitions": len(data),
            "episodes": int(len(returns)),
            "behaviour_return_mean": float(np.mean(returns)) if len(returns) else None,
            "behaviour_return_std": float(np.std(returns)) if len(returns) else None}
