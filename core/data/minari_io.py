"""Minari datasets out of ddrl (``DatasetWriter``) and into it (``read_minari``).

Minari (Farama's successor to D4RL) keeps one dataset per directory: ``DIR/data/metadata.json``
(spaces, counts, env spec, who recorded it) and ``DIR/data/main_data.hdf5`` (one group per
episode: T+1 observations, T actions, rewards, terminations and truncations kept apart). Its
local store is a tree of such directories named by id (``namespace/name-vN``) under
MINARI_DATASETS_PATH, else ~/.minari/datasets. ddrl writes through Minari's own storage class,
so every Minari tool reads what ddrl writes, and reads any hdf5 (or arrow) Minari dataset.

What Minari does that shapes this module (minari 0.5.4):
- An episode's arrays are written as given (lists or numpy arrays; arrays here, a create per
  column), nested dicts as HDF5 groups and tuples as groups of ``_index_i``; every leaf
  round-trips in its dtype. Images (uint8 Boxes of 32x32 and up) are JPEG-encoded unless the
  storage is made with ``jpeg_encoding=False``: ddrl always makes it so (lossless pixels).
- ``update_metadata`` keeps any extra JSON key, but refuses to change dataset_id, the spaces,
  env_spec, data_format, jpeg_encoding and minari_version once written, and wants author and
  author_email as sets. Minari's warnings about missing author or code_permalink come from
  ``create_dataset_from_buffers`` only, which ddrl does not call (it buffers whole datasets
  in memory); ``MinariDataset`` insists on dataset_id and a minari_version it supports.
- ``minari.load_dataset(id)`` reads ``store/id/data``; ``list_local_datasets`` skips (with a
  warning) a directory whose metadata's dataset_id is not its path in the store.
"""
import json
import os
import pathlib
import re
import warnings

import numpy as np

from core import spaces
from core.data.native import (actions_to_carried, actions_to_native, carried_action_dtype,
                              check_action_space, observations_to_carried,
                              observations_to_native)
from core.data.offline import DatasetError, OfflineData, check_fits, check_shard
from core.errors import ConfigError
from core.learning.replay_buffer import Transitions

# Minari's DATASET_ID_RE (minari/dataset/minari_dataset.py) with the version required: its
# parse_dataset_id fails on an id without one.
DATASET_ID = re.compile(r"(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+")
NAME_AND_VERSION = re.compile(r"[-_\w]+?-v\d+")
# Keys of metadata.json that Minari or ddrl own: a caller's metadata may not set them.
RESERVED_KEYS = {"dataset_id", "observation_space", "action_space", "env_spec", "data_format",
                 "jpeg_encoding", "minari_version", "total_episodes", "total_steps",
                 "dataset_size", "algorithm_name", "ddrl"}
SET_KEYS = ("author", "author_email")          # Minari keeps these as sets of strings
STRING_KEYS = ("code_permalink", "description")


# -- the local store ---------------------------------------------------------------------------
def store_root():
    """Where Minari's local store is (MINARI_DATASETS_PATH, else ~/.minari/datasets), without
    creating it (minari.storage.get_dataset_path does)."""
    root = os.environ.get("MINARI_DATASETS_PATH")
    if root is None:
        return pathlib.Path(os.path.expanduser("~"), ".minari", "datasets")
    return pathlib.Path(root)


#: a writer's target that names an id of the local Minari store ("minari:ddrl/pendulum-v0");
#: any other target is a directory (an id and a relative path look alike)
STORE_PREFIX = "minari:"


def is_dataset_id(text):
    """Whether ``text`` reads as an id of the local store: Minari's id form
    ``(namespace/)name-vN`` (after an optional ``minari:``), not starting with '/', '.' or
    '~'. A reader tries a path of that spelling first; a writer takes the store only with the
    ``minari:`` prefix."""
    if isinstance(text, str) and text.startswith(STORE_PREFIX):
        text = text[len(STORE_PREFIX):]
    return (isinstance(text, str) and not text.startswith(("/", ".", "~"))
            and DATASET_ID.fullmatch(text) is not None)


def store_id(text):
    """``text`` without its ``minari:`` prefix."""
    return text[len(STORE_PREFIX):] if text.startswith(STORE_PREFIX) else text


def local_ids(root=None):
    """The ids of the datasets in the local store (directories holding data/metadata.json),
    sorted; [] when the store does not exist."""
    root = store_root() if root is None else pathlib.Path(root)
    found = []
    if not root.is_dir():
        return found
    for here, subdirs, _ in os.walk(root):
        if "data" in subdirs and os.path.isfile(os.path.join(here, "data", "metadata.json")):
            found.append(pathlib.Path(here).relative_to(root).as_posix())
            subdirs[:] = []
        else:
            subdirs[:] = [d for d in subdirs if not d.startswith(".")]
    return sorted(found)


def _resolve_target(target):
    """(dataset directory, dataset_id, in the store?) for a writer's ``target``: the store
    for ``minari:ID``, else a directory."""
    if isinstance(target, str) and target.startswith(STORE_PREFIX):
        dataset_id = store_id(target)
        if not is_dataset_id(dataset_id):
            raise DatasetError(f"{target}: {dataset_id!r} is not a Minari id; ids read "
                               f"(namespace/)name-vN, e.g. minari:ddrl/pendulum/medium-v0.")
        import minari.storage
        return pathlib.Path(minari.storage.get_dataset_path(dataset_id)), dataset_id, True
    directory = pathlib.Path(os.path.expanduser(os.fspath(target))).resolve()
    name = directory.name
    if NAME_AND_VERSION.fullmatch(name):
        return directory, name, False
    return directory, re.sub(r"[^-\w]", "_", name) + "-v0", False


def _refuse_existing(directory, dataset_id, in_store):
    taken = (directory.exists() if in_store else
             directory.is_file() or (directory / "data").exists()
             or (directory / "metadata.json").exists())
    if not taken:
        return
    where = f"the local Minari store's {dataset_id!r}" if in_store else "the directory"
    other = (f"another id (a new version, say {_next_version(dataset_id)})" if in_store
             else "another directory")
    raise DatasetError(f"{where} ({directory}) already holds a dataset, and ddrl never "
                       f"overwrites one. Pick {other}, or delete it first (rm -r {directory}"
                       f"{f'; or minari delete {dataset_id}' if in_store else ''}).")


def _next_version(dataset_id):
    stem, version = dataset_id.rsplit("-v", 1)
    return f"{stem}-v{int(version) + 1}"


def _env_spec(env_id):
    """gymnasium's EnvSpec of ``env_id`` when it is a registered id whose spec Minari can
    save as JSON; else None (the id is still kept in ddrl's own metadata)."""
    if not env_id:
        return None
    import gymnasium
    try:
        spec = gymnasium.spec(env_id)
        spec.to_json()
    except (gymnasium.error.Error, TypeError, ValueError):
        return None
    return spec


def _caller_metadata(metadata):
    """The caller's metadata as Minari's update_metadata takes it, checked: JSON values, no
    key Minari or ddrl owns, author(s) as sets, strings where Minari asserts strings."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"DatasetWriter's metadata must be a dict of JSON values; got a "
                          f"{type(metadata).__name__}.")
    reserved = sorted(RESERVED_KEYS.intersection(metadata))
    if reserved:
        raise ConfigError(f"DatasetWriter's metadata sets {', '.join(reserved)}, which Minari "
                          f"or ddrl write themselves (pass algorithm_name= as its own "
                          f"argument); every other key is kept as given.")
    out = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise ConfigError(f"DatasetWriter's metadata key {key!r} is not a string: "
                              f"metadata.json takes string keys only.")
        if key in SET_KEYS:
            names = {value} if isinstance(value, str) else value
            if not isinstance(names, (set, list, tuple)) or not all(
                    isinstance(n, str) for n in names):
                raise ConfigError(f"DatasetWriter's metadata {key!r} is {value!r}: give a "
                                  f"string, or a list or set of strings.")
            out[key] = set(names)
            continue
        if key in STRING_KEYS and not isinstance(value, str):
            raise ConfigError(f"DatasetWriter's metadata {key!r} is {value!r}: Minari takes "
                              f"a string there.")
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"DatasetWriter's metadata {key!r} is {value!r}, which is not "
                              f"JSON ({error}): give numbers, strings, lists and dicts of "
                              f"them (a numpy value as .tolist()).") from None
        out[key] = value
    return out


class DatasetWriter:
    """Steps from E envs in, a Minari dataset out.

    ``target``: ``minari:`` and a Minari id (``minari:ddrl/pendulum/medium-v0``: written into
    the local store, ``minari.load_dataset(id)`` reads it), or any other string or
    os.PathLike, a directory: written as one dataset directory, ``DIR/data/metadata.json``
    and ``DIR/data/main_data.hdf5``, read by ``minari.MinariDataset(DIR + "/data")`` and by
    ddrl's ``load_dataset(DIR)``. Its dataset_id is the directory's name when that is of
    Minari's form name-vN (then ``minari.load_dataset(name)`` reads it with
    MINARI_DATASETS_PATH set to the parent), else the name (other characters as '_') plus
    "-v0", which no store lookup finds under that directory name. A target that already
    holds a dataset is refused.

    ``add_steps`` takes one step of every env slot, in ddrl's carried form (what rollout
    workers hold): the writer keeps one open episode per slot and hands each finished one to
    Minari in gymnasium's native form, flushed every FLUSH_EPISODES episodes or FLUSH_STEPS
    steps so memory stays bounded. ``close`` (or leaving the ``with`` block) flushes the rest
    and drops the episodes still open, or with ``keep_partial`` writes them as truncated at
    their last step.

    ``env_id``: the env recorded (its gymnasium EnvSpec is saved when it is a registered id;
    the id itself always, in metadata["ddrl"]). ``algorithm_name``: the behaviour policy
    ("ddrl sac"). ``metadata``: any JSON keys besides Minari's own (the policy's flags, say;
    author, author_email, code_permalink and description are Minari's optional fields)."""

    FLUSH_EPISODES = 100
    FLUSH_STEPS = 100_000

    def __init__(self, target, observation_space, action_space, *, env_id=None,
                 algorithm_name=None, metadata=None, num_envs=1):
        import minari
        from minari.dataset.minari_storage import MinariStorage

        self.layout = spaces.layout_of(observation_space)  # a ConfigError for Text and such
        check_action_space(action_space)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ConfigError(f"DatasetWriter's num_envs is {num_envs!r}: the number of env "
                              f"slots whose steps come in each add_steps call, 1 or more.")
        if algorithm_name is not None and not isinstance(algorithm_name, str):
            raise ConfigError(f"DatasetWriter's algorithm_name is {algorithm_name!r}: the "
                              f"behaviour policy's name as a string (\"ddrl sac\").")
        extra = _caller_metadata(metadata)
        self.observation_space, self.action_space = observation_space, action_space
        self._shapes = spaces.carried(observation_space)[0]   # per env: {path: shape} or shape
        self.num_envs = int(num_envs)
        self.directory, self.dataset_id, in_store = _resolve_target(target)
        _refuse_existing(self.directory, self.dataset_id, in_store)

        if in_store:
            _create_namespace(self.dataset_id)
        data_path = self.directory / "data"
        data_path.mkdir(parents=True)
        self._storage = MinariStorage.new(
            data_path, observation_space=observation_space, action_space=action_space,
            env_spec=_env_spec(env_id), data_format="hdf5", jpeg_encoding=False)
        # Minari only touches main_data.hdf5 until its first episodes: made a valid (empty)
        # HDF5 file now, a dataset closed before any episode ended still reads as empty.
        import h5py
        h5py.File(data_path / "main_data.hdf5", "w", track_order=True).close()
        description = (f"Episodes of {algorithm_name or 'a policy'} on "
                       f"{env_id or 'an unnamed env'}, recorded by ddrl (core/data/).")
        self._ddrl = {"env_id": env_id, "num_envs": self.num_envs,
                      "open_episodes_dropped": 0, "open_steps_dropped": 0}
        self._storage.update_metadata({
            "dataset_id": self.dataset_id, "minari_version": minari.__version__,
            **({"algorithm_name": algorithm_name} if algorithm_name else {}),
            "description": description, **extra, "ddrl": self._ddrl})

        self._open = [_OpenEpisode() for _ in range(self.num_envs)]
        self.dropped_episodes = self.dropped_steps = 0  # cut by env failures, then at close
        self._last_next = None                 # the latest next_observations [E, ...]
        self._finished, self._finished_steps = [], 0
        self.episodes_written = self.steps_written = 0
        self.closed = False

    # -- steps in ------------------------------------------------------------------------------
    def add_steps(self, observations, actions, rewards, terminated, truncated,
                  next_observations, cut=None):
        """One step of each of the E env slots, in ddrl's carried form: observations and
        next_observations [E, ...] (trees for structured spaces), actions [E, ...] (indices
        from 0 for discrete spaces), rewards, terminated, truncated [E]. A slot whose step
        ended its episode (terminated or truncated) gives its final observation in
        next_observations; its next step starts a new episode. Only those final observations
        are read from next_observations: a step that goes on has its next observation in
        the next call's observations. ``cut`` (bool [E], optional): slots whose env failed at
        this step (core/sampling/envs.py rebuilt it): the step is not recorded and the
        slot's open episode is dropped (counted with those ``close`` drops)."""
        if self.closed:
            raise DatasetError(f"add_steps after close: the dataset {self.directory} is "
                               f"written; open a new DatasetWriter for more.")
        rewards = np.asarray(rewards, np.float64).reshape(-1)
        terminated = np.asarray(terminated, bool).reshape(-1)
        truncated = np.asarray(truncated, bool).reshape(-1)
        actions = np.asarray(actions)
        self._check_batch(observations, "observations")
        self._check_batch(next_observations, "next_observations")
        for name, column in (("rewards", rewards), ("terminated", terminated),
                             ("truncated", truncated)):
            if len(column) != self.num_envs:
                raise ConfigError(f"add_steps: {name} has {len(column)} rows; this writer "
                                  f"takes one per env slot (num_envs={self.num_envs}).")
        action_shape = (self.num_envs, *self.action_space.shape)
        if actions.shape != action_shape:
            raise ConfigError(f"add_steps: actions has shape {actions.shape}; the action "
                              f"space {self.action_space} takes {action_shape} from "
                              f"{self.num_envs} env slot(s).")
        self._last_next = spaces.copy(next_observations)
        cut = np.zeros(self.num_envs, bool) if cut is None else np.asarray(cut, bool)
        for e, episode in enumerate(self._open):
            if cut[e]:
                self.dropped_episodes += bool(len(episode))
                self.dropped_steps += len(episode)
                self._open[e] = _OpenEpisode()
                continue
            episode.append(spaces.copy(spaces.take(observations, e)), np.array(actions[e]),
                           rewards[e], terminated[e], truncated[e])
            if terminated[e] or truncated[e]:
                self._finish(e, spaces.take(self._last_next, e), cut=False)
        if (len(self._finished) >= self.FLUSH_EPISODES
                or self._finished_steps >= self.FLUSH_STEPS):
            self.flush()

    def _check_batch(self, batch, name):
        if self.layout.structured:
            if not spaces.is_tree(batch) or set(batch) != set(self.layout.leaves):
                got = sorted(batch) if spaces.is_tree(batch) else f"a {type(batch).__name__}"
                raise ConfigError(f"add_steps: {name} must be a tree with the leaves "
                                  f"{sorted(self.layout.leaves)} (core/spaces.py's carried "
                                  f"form of {self.observation_space}); got {got}.")
        shapes = (self._shapes if spaces.is_tree(batch) else {None: self._shapes})
        for path, leaf in (batch.items() if spaces.is_tree(batch) else [(None, batch)]):
            shape = np.shape(leaf)
            if shape[:1] != (self.num_envs,):
                raise ConfigError(f"add_steps: {name} has {shape[:1] or 'no'} rows; this "
                                  f"writer takes one per env slot (num_envs={self.num_envs}).")
            if shape[1:] != tuple(shapes[path]):
                where = f"{name}[{path!r}]" if path is not None else name
                raise ConfigError(f"add_steps: {where} has shape {shape}; the space "
                                  f"{self.observation_space} carries "
                                  f"[{self.num_envs}, *{tuple(shapes[path])}] there.")

    def _finish(self, e, final_observation, cut):
        episode = self._open[e]
        self._open[e] = _OpenEpisode()
        buffer = episode.to_minari(final_observation, cut, self.observation_space,
                                   self.action_space)
        self._finished.append(buffer)
        self._finished_steps += len(episode)

    def add_episodes(self, episodes):
        """Whole episodes as Minari's ``get_episodes`` gives them (native form: T+1
        observations, T actions, rewards, terminations, truncations): another dataset's, to
        merge (``merge_datasets``)."""
        from minari.data_collector.episode_buffer import EpisodeBuffer
        for episode in episodes:
            steps = len(episode["rewards"])
            if not steps:
                continue
            self._finished.append(EpisodeBuffer(
                observations=episode["observations"], actions=episode["actions"],
                rewards=np.asarray(episode["rewards"], np.float64),
                terminations=np.asarray(episode["terminations"], bool),
                truncations=np.asarray(episode["truncations"], bool), infos={}))
            self._finished_steps += steps
            if (len(self._finished) >= self.FLUSH_EPISODES
                    or self._finished_steps >= self.FLUSH_STEPS):
                self.flush()

    # -- out -----------------------------------------------------------------------------------
    def flush(self):
        """Write the finished episodes to the file now."""
        if self._finished:
            self._storage.update_episodes(self._finished)
            self.episodes_written += len(self._finished)
            self.steps_written += self._finished_steps
            self._finished, self._finished_steps = [], 0

    def close(self, keep_partial=False):
        """Flush, and drop the episodes still open (counted in metadata["ddrl"]) or, with
        ``keep_partial``, write each as truncated at its last step (its final observation the
        last next_observation given). Returns the dataset's directory; closing again does
        nothing more."""
        if self.closed:
            return str(self.directory)
        for e, episode in enumerate(self._open):
            if not len(episode):
                continue
            if keep_partial:
                self._finish(e, spaces.take(self._last_next, e), cut=True)
            else:
                self.dropped_episodes += 1
                self.dropped_steps += len(episode)
        self.flush()
        self._ddrl.update(open_episodes_dropped=self.dropped_episodes,
                          open_steps_dropped=self.dropped_steps)
        self._storage.update_metadata({"ddrl": self._ddrl})
        self._open, self.closed = [], True
        return str(self.directory)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()   # the finished episodes are whole even when the block raised


class _OpenEpisode:
    """One env slot's episode so far: its steps in carried form, a row each."""

    def __init__(self):
        self.observations, self.actions, self.rewards = [], [], []
        self.terminations, self.truncations = [], []

    def __len__(self):
        return len(self.rewards)

    def append(self, observation, action, reward, terminated, truncated):
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.terminations.append(bool(terminated))
        self.truncations.append(bool(truncated))

    def to_minari(self, final_observation, cut, observation_space, action_space):
        """Minari's EpisodeBuffer: T+1 native observations, T native actions; ``cut``: an
        episode ended by the writer's close, marked truncated at its last step."""
        from minari.data_collector.episode_buffer import EpisodeBuffer
        truncations = np.array(self.truncations)
        if cut:
            truncations[-1] = True
        observations = spaces.stack(self.observations + [final_observation])
        return EpisodeBuffer(
            observations=observations_to_native(observation_space, observations),
            actions=actions_to_native(action_space, np.stack(self.actions)),
            rewards=np.array(self.rewards, np.float64),
            terminations=np.array(self.terminations), truncations=truncations, infos={})


def _create_namespace(dataset_id):
    """The namespace directories Minari's create_dataset_from_buffers would make (with their
    namespace_metadata.json), so `minari list local` and its namespace API see the dataset."""
    if "/" not in dataset_id:
        return
    from minari import namespace
    name = dataset_id.rsplit("/", 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name not in namespace.list_local_namespaces():
            namespace.create_namespace(name)


# -- in ----------------------------------------------------------------------------------------
def read_minari(data_path, source, observation_space=None, action_space=None, shard=None):
    """The Minari dataset in ``data_path`` (the directory holding metadata.json) as
    OfflineData; ``source`` names it in messages. Spaces given: checked to fit, and carried.
    ``shard``: (index, count), only the rows at index modulo count (load_dataset's)."""
    metadata, storage, dataset_spaces = _open_minari(data_path, source)
    env_id = _recorded_env_id(metadata)
    check_fits(source, dataset_spaces, (observation_space, action_space), env_id)

    total = int(metadata.get("total_steps", 0))
    if total == 0:
        raise DatasetError(f"the dataset {source} holds no steps: nothing to learn from.")
    index, count = check_shard(shard)
    kept_total = len(range(index, total, count))
    columns = _allocate(dataset_spaces, kept_total)
    truncated = np.zeros(kept_total, bool)
    episode_ends = np.zeros(kept_total, bool)
    returns, lengths, row, kept = [], [], 0, 0
    for episode in storage.get_episodes(range(int(metadata.get("total_episodes", 0)))):
        steps = len(episode["rewards"])
        observations = observations_to_carried(dataset_spaces[0], episode["observations"])
        if spaces.batch_size(observations) != steps + 1 or row + steps > total:
            raise DatasetError(f"the dataset {source} is malformed: episode {episode['id']} "
                               f"has {spaces.batch_size(observations)} observations for "
                               f"{steps} steps (Minari stores T+1), or more steps than its "
                               f"metadata's total_steps {total}.")
        # this shard's steps of the episode: those at dataset row ``index`` modulo ``count``
        mine = np.arange((index - row) % count, steps, count)
        rows = slice(kept, kept + len(mine))
        spaces.assign(columns.observations, rows, spaces.take(observations, mine))
        spaces.assign(columns.next_observations, rows, spaces.take(observations, mine + 1))
        columns.actions[rows] = actions_to_carried(dataset_spaces[1], episode["actions"])[mine]
        columns.rewards[rows] = np.asarray(episode["rewards"])[mine]
        terminations = np.asarray(episode["terminations"], bool)
        columns.terminated[rows] = terminations[mine]
        truncations = np.asarray(episode["truncations"], bool)
        truncated[rows] = truncations[mine]
        if steps and count == 1:
            episode_ends[kept + steps - 1] = True
        if steps and (terminations[-1] or truncations[-1]):
            returns.append(float(np.sum(episode["rewards"], dtype=np.float64)))
            lengths.append(steps)
        row += steps
        kept += len(mine)
    if row != total:
        raise DatasetError(f"the dataset {source} is malformed: its episodes hold {row} steps, "
                           f"its metadata's total_steps says {total}.")
    return OfflineData(
        transitions=columns._replace(episode_ends=episode_ends if count == 1 else None),
        truncated=truncated,
        episode_returns=np.array(returns, np.float64),
        episode_lengths=np.array(lengths, np.int64),
        observation_space=dataset_spaces[0] if observation_space is None else observation_space,
        action_space=dataset_spaces[1] if action_space is None else action_space, env_id=env_id,
        metadata={k: v for k, v in metadata.items()
                  if k not in ("observation_space", "action_space")},
        source=str(source))


def minari_spaces(data_path, source):
    """The Minari dataset's (observation space, action space), from its metadata alone."""
    return _open_minari(data_path, source)[2]


def _open_minari(data_path, source):
    """(metadata, storage, (observation space, action space)) of the Minari dataset in
    ``data_path``, its spaces checked to be ones ddrl carries; no episode is read."""
    from minari.dataset.minari_storage import MinariStorage
    try:
        metadata = MinariStorage.read_raw_metadata(data_path)
        storage = MinariStorage.read(data_path)
    except Exception as error:  # noqa: BLE001 - Minari raises ValueError, KeyError, gym's...
        raise DatasetError(f"{source} is not a Minari dataset ddrl can read ({data_path}: "
                           f"{type(error).__name__}: {error}). Check that its data/ holds "
                           f"metadata.json and main_data.hdf5 as Minari writes them.") from None
    dataset_spaces = storage.observation_space, storage.action_space
    try:
        spaces.layout_of(dataset_spaces[0])
        check_action_space(dataset_spaces[1], f"the dataset {source}'s action space")
    except ConfigError as error:
        raise DatasetError(f"the dataset {source} cannot be carried by ddrl: {error}") from None
    return metadata, storage, dataset_spaces


def _allocate(dataset_spaces, total):
    """Empty Transitions columns for ``total`` rows, in carried shapes and dtypes."""
    observation_space, action_space = dataset_spaces
    shapes, dtypes = spaces.carried(observation_space)
    if spaces.is_tree(shapes):
        def observations():
            return {path: np.empty((total, *shape), dtypes[path])
                    for path, shape in shapes.items()}
    else:
        def observations():
            return np.empty((total, *shapes), dtypes)
    action_shape = () if not action_space.shape else tuple(action_space.shape)
    return Transitions(observations=observations(),
                       actions=np.empty((total, *action_shape),
                                        carried_action_dtype(action_space)),
                       rewards=np.empty(total, np.float32),
                       next_observations=observations(),
                       terminated=np.empty(total, np.float32))


def _recorded_env_id(metadata):
    """The gymnasium id the dataset names: its env_spec's, else the one ddrl's writer kept."""
    spec = metadata.get("env_spec")
    if isinstance(spec, str):
        try:
            env_id = json.loads(spec).get("id")
        except (ValueError, AttributeError):
            env_id = None
        if env_id:
            return env_id
    ours = metadata.get("ddrl")
    return ours.get("env_id") if isinstance(ours, dict) else None


def merge_datasets(data_paths, target, *, env_id=None, algorithm_name=None, metadata=None):
    """The Minari datasets in ``data_paths`` (each a directory holding metadata.json: a
    rollout worker's shard of --record_dataset) as one dataset at ``target`` (DatasetWriter's
    target), their episodes in the order given; returns the target's directory. The first
    dataset's spaces are the merged one's; the others must have the same."""
    from minari.dataset.minari_storage import MinariStorage
    storages = [MinariStorage.read(path) for path in data_paths]
    if not storages:
        raise DatasetError(f"nothing to merge into {target}: no dataset was given.")
    first = storages[0]
    for path, storage in zip(data_paths[1:], storages[1:]):
        if (storage.observation_space != first.observation_space
                or storage.action_space != first.action_space):
            raise DatasetError(f"cannot merge {path} into {target}: its spaces differ from "
                               f"{data_paths[0]}'s.")
    writer = DatasetWriter(target, first.observation_space, first.action_space, env_id=env_id,
                           algorithm_name=algorithm_name, metadata=metadata)
    with writer:
        for storage in storages:
            total = int(storage.metadata.get("total_episodes", 0))
            for start in range(0, total, writer.FLUSH_EPISODES):
                writer.add_episodes(storage.get_episodes(
                    range(start, min(total, start + writer.FLUSH_EPISODES))))
    return str(writer.directory)
