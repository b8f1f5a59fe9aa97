"""Datasets in and out, for offline RL: learning from data recorded by another policy.

Out: ``DatasetWriter`` records steps from ddrl's envs as a Minari dataset (minari_io.py), the
format Farama's tools and the D4RL datasets' successors read. In: ``load_dataset`` reads a
Minari dataset (a directory, or an id in the local store) or a D4RL-style file of arrays
(arrays.py) into ``OfflineData``: one block of Transitions in ddrl's carried form
(core/spaces.py), ready for a ReplayBuffer, with the behaviour policy's episode returns.
ddrl never downloads a dataset (sources.py says where one comes from instead).
"""
from core.data.minari_io import DatasetWriter, local_ids, store_root
from core.data.offline import DatasetError, OfflineData
from core.data.sources import dataset_spaces, load_dataset

__all__ = ["DatasetError", "DatasetWriter", "OfflineData", "dataset_spaces", "load_dataset",
           "local_ids", "store_root"]
