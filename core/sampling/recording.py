"""--record_dataset DIR: the steps rollout workers take, written as a Minari dataset.

Each rollout worker records its own envs into a shard of its own, DIR/shards/worker-<slot>-<g>
(a Minari dataset directory: no two processes ever write one file), as the steps happen: the
observation the env gave (before any --normalize_obs), the action the env got (a Box action
clipped to its bounds, indices from 0 as ddrl carries them), the reward, termination and
truncation apart, the final observation of an episode that ended. When the run ends the loop
closes the recorders and the shards are merged into one dataset at DIR (``merge_shards``),
which Minari's own ``MinariDataset(DIR/data)`` and ``ddrl train --dataset DIR`` read. A
replacement worker records a shard of its own (its generation in the name).
"""
import glob
import os
import shutil

import numpy as np
from gymnasium import spaces as gym_spaces

from core import spaces

SHARDS = "shards"


def shard_path(directory, slot, generation):
    return os.path.join(os.path.abspath(directory), SHARDS, f"worker-{slot}-{generation}")


def check_target(directory):
    """Refuse, before a run starts, a --record_dataset directory that already holds a dataset
    or the shards of another run."""
    from core.errors import ConfigError
    found = [name for name in ("data", SHARDS)
             if os.path.exists(os.path.join(os.path.abspath(directory), name))]
    if found:
        raise ConfigError(f"--record_dataset {directory}: it already holds "
                          f"{'a dataset' if 'data' in found else 'the shards of another run'} "
                          f"({os.path.join(directory, found[0])}), which a new recording "
                          f"never overwrites. Name a new directory, or delete that one.")


class StepRecorder:
    """One rollout worker's steps into its shard (module docstring)."""

    def __init__(self, directory, slot, generation, observation_space, action_space, num_envs,
                 env_id=None, algorithm_name=None):
        from core.data import DatasetWriter
        self.action_space = action_space
        self.writer = DatasetWriter(shard_path(directory, slot, generation), observation_space,
                                    action_space, env_id=env_id, num_envs=num_envs,
                                    algorithm_name=algorithm_name)

    def record(self, observations, actions, result):
        """One step of every env: ``observations`` as the envs gave them before it, the
        ``actions`` the model chose, ``result`` the env group's StepResult."""
        next_observations = result.observations
        if result.final_observations:
            next_observations = spaces.copy(next_observations)
            for e, final in result.final_observations.items():
                spaces.assign(next_observations, e, final)
        actions = np.asarray(actions)
        if isinstance(self.action_space, gym_spaces.Box):
            actions = np.minimum(np.maximum(actions.reshape(len(actions),
                                                            *self.action_space.shape),
                                            self.action_space.low), self.action_space.high)
        self.writer.add_steps(observations, actions, result.rewards, result.terminated,
                              result.truncated, next_observations, cut=result.cut)

    def close(self):
        return self.writer.close()


def merge_shards(directory, env_id=None, algorithm_name=None, metadata=None):
    """The shards under DIR/shards merged into one Minari dataset at DIR, the shards removed
    after; returns (the dataset's directory, episodes, steps), or None when no shard holds an
    episode."""
    from core.data.minari_io import merge_datasets
    from minari.dataset.minari_storage import MinariStorage
    shards = sorted(glob.glob(os.path.join(os.path.abspath(directory), SHARDS, "*", "data")))
    kept = [path for path in shards
            if int(MinariStorage.read_raw_metadata(path).get("total_episodes", 0))]
    if not kept:
        return None
    written = merge_datasets(kept, os.path.abspath(directory), env_id=env_id,
                             algorithm_name=algorithm_name, metadata=metadata)
    meta = MinariStorage.read_raw_metadata(os.path.join(written, "data"))
    shutil.rmtree(os.path.join(os.path.abspath(directory), SHARDS), ignore_errors=True)
    return written, int(meta.get("total_episodes", 0)), int(meta.get("total_steps", 0))
