"""``load_dataset``: from whatever names a dataset (a path, a Minari id) to OfflineData.

ddrl never downloads: these machines may have no network, and a dataset that appears mid-run
from somewhere else is not reproducible. A remote Minari dataset is fetched with Minari's own
command where there is network (``minari download ID``), and its directory copied here.
"""
import os
import pathlib

from core.data.arrays import SUFFIXES, array_spaces, read_arrays
from core.data.minari_io import (is_dataset_id, local_ids, minari_spaces, read_minari,
                                 store_id, store_root)
from core.data.offline import DatasetError

LISTED_IDS = 20   # local ids named in the paragraph for a dataset not found


def load_dataset(source, observation_space=None, action_space=None, shard=None):
    """The dataset ``source`` names, as OfflineData in ddrl's carried form.

    ``source``: a Minari dataset's directory (``DIR``, or the ``DIR/data`` holding its
    metadata.json), an id in the local Minari store (MINARI_DATASETS_PATH, else
    ~/.minari/datasets), or a D4RL-style .hdf5/.h5/.npz file of arrays (core/data/arrays.py).
    A path that exists wins over an id of the same spelling. ``observation_space`` and
    ``action_space``: the env's, from the run; the dataset's must fit them (same types and
    shapes; a Box's bounds may differ), and the data is carried in them.

    ``shard``: (index, count) keeps only the rows whose place in the dataset is ``index``
    modulo ``count`` (a learner's share under --shard_dataset; every row in exactly one shard,
    each episode's rows spread over all of them); the episode statistics stay the whole
    dataset's, and ``transitions.episode_ends`` is None (a shard holds no whole episodes). A
    Minari dataset is read episode by episode, so a shard's process never holds more than its
    rows and one episode; an HDF5 file of arrays is read a block of rows at a time, so its
    process holds its rows and one block (a .npz is read whole, then its rows picked)."""
    kind, where, label = locate(source)
    if kind == "arrays":
        return read_arrays(where, label, observation_space, action_space, shard)
    return read_minari(where, label, observation_space, action_space, shard)


def dataset_spaces(source):
    """(observation space, action space) of the dataset ``source`` names (load_dataset's),
    without reading its rows where the format allows: a Minari dataset's come from its
    metadata; a file of arrays' are inferred from its actions and its observations' shape and
    dtype."""
    kind, where, label = locate(source)
    if kind == "arrays":
        return array_spaces(where, label)
    return minari_spaces(where, label)


def locate(source):
    """("minari", the directory holding metadata.json, label) or ("arrays", the file, label)
    for ``source`` (load_dataset's); a DatasetError paragraph when it names neither."""
    path = pathlib.Path(os.path.expanduser(os.fspath(source)))
    label = os.fspath(source)
    if path.is_file():
        if path.name == "main_data.hdf5" and (path.parent / "metadata.json").is_file():
            return "minari", path.parent, label
        if path.suffix in SUFFIXES:
            return "arrays", path, label
        raise DatasetError(f"{label} is a file ddrl does not read as a dataset: a D4RL-style "
                           f"file of arrays ends in {', '.join(SUFFIXES)}; a Minari dataset "
                           f"is a directory (pass it, not a file in it).")
    if path.is_dir():
        for data in (path / "data", path):
            if (data / "metadata.json").is_file():
                return "minari", data, label
        raise DatasetError(f"the directory {label} holds no Minari dataset: Minari keeps one "
                           f"as DIR/data/metadata.json beside DIR/data/main_data.hdf5. Pass "
                           f"the directory that holds data/ (or a .hdf5/.npz file of arrays).")
    if is_dataset_id(label):
        data = store_root() / store_id(label) / "data"
        if (data / "metadata.json").is_file():
            return "minari", data, label
    raise DatasetError(not_found(label))


def not_found(label):
    """The paragraph for a source that is neither a path nor a local Minari id."""
    root = store_root()
    where = (f"MINARI_DATASETS_PATH={root}" if "MINARI_DATASETS_PATH" in os.environ
             else f"{root}, MINARI_DATASETS_PATH being unset")
    ids = local_ids(root)
    if ids:
        listed = ", ".join(ids[:LISTED_IDS]) + (f" and {len(ids) - LISTED_IDS} more"
                                                if len(ids) > LISTED_IDS else "")
        holds = f"which holds {listed}"
    else:
        holds = "which holds no datasets"
    if is_dataset_id(label):
        what = (f"the dataset {label!r} is neither a path that exists nor an id in the local "
                f"Minari store")
    else:
        absolute = os.path.abspath(os.path.expanduser(label))
        what = (f"the dataset {label!r} does not exist ({absolute}: no such file or "
                f"directory), and is not an id of the local Minari store either (ids read "
                f"(namespace/)name-vN)")
    return (f"{what}: the store is {where}, {holds}. ddrl never downloads datasets: where "
            f"there is network, run `minari download ID`, then copy the dataset's directory "
            f"here and pass its path, or set MINARI_DATASETS_PATH to the directory holding it "
            f"(a store, with the id's namespaces as subdirectories).")
