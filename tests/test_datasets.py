"""core/data/: ddrl -> Minari -> ddrl for every space ddrl carries, what Minari's own readers see
of what ddrl writes, D4RL-style arrays, and the paragraphs for a dataset missing, taken or of
another env."""
import json
import os

import h5py
import minari
import numpy as np
import pytest
from gymnasium import spaces as S

from core import spaces
from core.data import DatasetError, DatasetWriter, load_dataset, local_ids
from core.errors import ConfigError
from core.learning.replay_buffer import ReplayBuffer

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("error")]

SPACES = {  # name: (observation space, action space)
    "box": (S.Box(-1, 1, (3,)), S.Box(-2, 2, (2,))),
    "box_float64": (S.Box(-1, 1, (2,), np.float64), S.Discrete(3)),
    "image": (S.Box(0, 255, (32, 32, 3), np.uint8), S.Discrete(4, start=1)),
    "discrete": (S.Discrete(5, start=-2), S.MultiDiscrete([3, 4], start=[1, 0])),
    "multidiscrete": (S.MultiDiscrete([3, 2], start=[2, 0]), S.Box(-1, 1, (1,))),
    "multibinary": (S.MultiBinary([2, 3]), S.MultiBinary(4)),
    "dict_with_mask": (S.Dict({"pos": S.Box(-1, 1, (2,)), "action_mask": S.MultiBinary(3)}),
                       S.Discrete(3)),
    "tuple": (S.Tuple((S.Box(-1, 1, (2,)), S.Discrete(3, start=1))), S.Box(-1, 1, (2,))),
    "nested_dict": (S.Dict({"a": S.Dict({"x": S.Box(-1, 1, (2,)), "y": S.Discrete(2)}),
                            "b": S.Tuple((S.MultiBinary(2), S.Box(0, 255, (4, 4), np.uint8)))}),
                    S.MultiDiscrete([2, 2])),
}
# per env slot: its episodes' (length, how they end); slot 0 then starts one more episode,
# 2 steps long and still open when slot 1's last one ends (and record stops)
SCHEDULE = [[(3, "term"), (2, "trunc")], [(4, "trunc"), (3, "term")]]
STEPS = 12     # of the finished episodes


def carried_observation(space):
    """One observation as ddrl carries it (the test's own conversion, not core/data's)."""
    _, dtypes = spaces.carried(space)
    encoded = spaces.layout_of(space).encode(space.sample())
    return spaces.tree_map(lambda a, d: np.asarray(a, d), encoded, dtypes) if \
        spaces.is_tree(encoded) else np.asarray(encoded, dtypes)


def carried_action(space):
    action = space.sample()
    if isinstance(space, S.Box):
        return np.asarray(action, np.float32)
    return np.asarray(action, np.int64) - np.asarray(getattr(space, "start", 0), np.int64)


def record(target, observation_space, action_space, schedule=SCHEDULE, seed=0, close=True,
           **kwargs):
    """Drive a DatasetWriter with len(schedule) env slots stepping in lockstep; returns the
    writer and the finished episodes, in the order they finished, each a list of steps
    (observation, action, reward, next observation, terminated, truncated)."""
    observation_space.seed(seed)
    action_space.seed(seed + 1)
    rng = np.random.default_rng(seed)
    writer = DatasetWriter(target, observation_space, action_space,
                           num_envs=len(schedule), **kwargs)
    queues = [list(episodes) for episodes in schedule]
    current = [carried_observation(observation_space) for _ in schedule]
    steps_in = [0] * len(schedule)
    open_steps = [[] for _ in schedule]
    finished = []
    while any(queues):
        actions = [carried_action(action_space) for _ in schedule]
        rewards = rng.normal(size=len(schedule)).astype(np.float32)
        nexts = [carried_observation(observation_space) for _ in schedule]
        terminated, truncated = np.zeros(len(schedule), bool), np.zeros(len(schedule), bool)
        for e, queue in enumerate(queues):
            steps_in[e] += 1
            if queue and steps_in[e] == queue[0][0]:
                terminated[e], truncated[e] = queue[0][1] == "term", queue[0][1] == "trunc"
        writer.add_steps(spaces.stack(current), np.stack(actions), rewards, terminated,
                         truncated, spaces.stack(nexts))
        for e in range(len(schedule)):
            open_steps[e].append((current[e], actions[e], rewards[e], nexts[e],
                                  terminated[e], truncated[e]))
            if terminated[e] or truncated[e]:
                finished.append(open_steps[e])
                open_steps[e], steps_in[e] = [], 0
                queues[e].pop(0)
                current[e] = carried_observation(observation_space)
            else:
                current[e] = nexts[e]
    if close:
        writer.close()
    return writer, finished


def assert_same(actual, expected):
    """Equal arrays (or trees of them), dtypes included."""
    if spaces.is_tree(expected):
        assert set(actual) == set(expected)
        for path in expected:
            assert_same(actual[path], expected[path])
        return
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


def column(episodes, field):
    return [step[field] for episode in episodes for step in episode]


@pytest.mark.parametrize("name", list(SPACES))
def test_round_trip_every_space(tmp_path, name):
    observation_space, action_space = SPACES[name]
    writer, episodes = record(tmp_path / "data-v0", observation_space, action_space)
    data = load_dataset(str(tmp_path / "data-v0"), observation_space, action_space)

    t = data.transitions
    assert len(data) == sum(len(episode) for episode in episodes) == STEPS
    assert_same(t.observations, spaces.stack(column(episodes, 0)))
    assert_same(t.actions, np.stack(column(episodes, 1)))
    np.testing.assert_array_equal(t.rewards, np.array(column(episodes, 2), np.float32))
    assert_same(t.next_observations, spaces.stack(column(episodes, 3)))
    np.testing.assert_array_equal(t.terminated, np.array(column(episodes, 4), np.float32))
    np.testing.assert_array_equal(data.truncated, column(episodes, 5))
    assert t.discounts is None and t.rewards.dtype == t.terminated.dtype == np.float32
    assert np.flatnonzero(t.episode_ends).tolist() == (
        np.cumsum([len(e) for e in episodes]) - 1).tolist()
    np.testing.assert_allclose(data.episode_returns,
                               [sum(float(s[2]) for s in e) for e in episodes], rtol=1e-6)
    assert data.episode_lengths.tolist() == [len(e) for e in episodes]

    shapes, dtypes = spaces.carried(observation_space)
    buffer = ReplayBuffer(len(data), shapes, action_space.shape, observation_dtype=dtypes,
                          action_dtype=np.int64 if t.actions.dtype == np.int64 else np.float32)
    assert buffer.add(t) == len(data)
    batch = buffer.sample(4)   # slot i holds row i: the block went in whole, in order
    assert_same(batch.transitions.observations, spaces.take(t.observations, batch.indices))
    assert_same(batch.transitions.actions, t.actions[batch.indices])


def test_what_minari_reads_is_gymnasium_native(tmp_path):
    observation_space, action_space = SPACES["nested_dict"]
    _, episodes = record(tmp_path / "nested-v0", observation_space, action_space)
    dataset = minari.MinariDataset(str(tmp_path / "nested-v0" / "data"))
    assert dataset.total_episodes == len(episodes) and dataset.total_steps == STEPS
    first, expected = dataset[0], episodes[0]
    assert len(first) == len(expected)
    assert observation_space.contains(
        {"a": {"x": first.observations["a"]["x"][0], "y": first.observations["a"]["y"][0]},
         "b": tuple(leaf[0] for leaf in first.observations["b"])})
    # the last of T+1 observations is the final one, uint8 pixels exact
    np.testing.assert_array_equal(first.observations["b"][1][-1], expected[-1][3]["b/1"])
    np.testing.assert_array_equal(first.actions, np.stack([s[1] for s in expected]))
    assert dataset.observation_space == observation_space
    assert dataset.action_space == action_space


def test_image_pixels_round_trip_exactly_in_minari(tmp_path):
    observation_space, action_space = SPACES["image"]
    _, episodes = record(tmp_path / "pixels-v0", observation_space, action_space)
    episode = minari.MinariDataset(str(tmp_path / "pixels-v0" / "data"))[0]
    expected = np.stack([s[0] for s in episodes[0]] + [episodes[0][-1][3]])
    np.testing.assert_array_equal(episode.observations, expected)   # no JPEG
    # actions as the env takes them: the Discrete's start added back
    np.testing.assert_array_equal(episode.actions, [s[1] + 1 for s in episodes[0]])


def test_terminations_and_truncations_are_kept_apart(tmp_path):
    observation_space, action_space = SPACES["box"]
    _, episodes = record(tmp_path / "ends-v0", observation_space, action_space,
                         schedule=[[(2, "trunc"), (2, "term")]])
    data = load_dataset(tmp_path / "ends-v0")
    t = data.transitions
    assert t.terminated.tolist() == [0, 0, 0, 1] and data.truncated.tolist() == [0, 1, 0, 0]
    # the truncated step's next observation is the final one the env returned, not the reset
    np.testing.assert_array_equal(t.next_observations[1], episodes[0][1][3])
    assert not np.array_equal(t.next_observations[1], t.observations[2])
    stored = minari.MinariDataset(str(tmp_path / "ends-v0" / "data"))
    assert [(e.terminations.tolist(), e.truncations.tolist()) for e in stored] == [
        ([False, False], [False, True]), ([False, True], [False, False])]


def test_episodes_from_interleaved_slots_come_out_whole(tmp_path):
    observation_space, action_space = SPACES["box"]
    schedule = [[(5, "term")], [(2, "trunc"), (1, "term"), (1, "trunc")], [(3, "term")]]
    _, episodes = record(tmp_path / "slots-v0", observation_space, action_space,
                         schedule=schedule)
    stored = list(minari.MinariDataset(str(tmp_path / "slots-v0" / "data")))
    assert [len(e) for e in stored] == [2, 1, 3, 1, 5]   # in the order they finished
    for episode, expected in zip(stored, episodes):
        observations = np.stack([s[0] for s in expected] + [expected[-1][3]])
        np.testing.assert_array_equal(episode.observations, observations)
        np.testing.assert_array_equal(episode.rewards, [s[2] for s in expected])


def test_minari_reads_an_id_written_to_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    observation_space, action_space = S.Box(-5, 5, (4,)), S.Discrete(2)
    writer, episodes = record("minari:ddrl/cartpole/tiny-v0", observation_space, action_space,
                              env_id="CartPole-v1", algorithm_name="ddrl dqn",
                              metadata={"flags": {"lr": 0.001}, "author": "ddrl tests"})
    assert writer.close() == str(tmp_path / "store" / "ddrl" / "cartpole" / "tiny-v0")
    dataset = minari.load_dataset("ddrl/cartpole/tiny-v0")
    assert dataset.total_episodes == 4 and dataset.total_steps == STEPS
    assert dataset.env_spec.id == "CartPole-v1"
    np.testing.assert_array_equal(dataset[1].actions, [s[1] for s in episodes[1]])
    assert "ddrl/cartpole/tiny-v0" in minari.list_local_datasets()
    assert local_ids() == ["ddrl/cartpole/tiny-v0"]

    data = load_dataset("ddrl/cartpole/tiny-v0", observation_space, action_space)
    assert data.env_id == "CartPole-v1" and len(data) == STEPS
    assert data.metadata["algorithm_name"] == "ddrl dqn"
    assert data.metadata["flags"] == {"lr": 0.001}
    assert data.metadata["author"] == ["ddrl tests"]
    assert data.metadata["ddrl"]["open_episodes_dropped"] == 1
    assert data.metadata["ddrl"]["open_steps_dropped"] == 2
    assert data.summary().startswith("ddrl/cartpole/tiny-v0: 12 transitions, 4 episodes, ")
    assert data.summary().endswith("ddrl dqn")


def test_a_directory_target_is_one_dataset_directory(tmp_path, monkeypatch):
    observation_space, action_space = SPACES["box"]
    path = record(tmp_path / "runs" / "pendulum-v3", observation_space, action_space,
                  env_id="my_plugin:Env")[0].close()
    assert sorted(os.listdir(os.path.join(path, "data"))) == ["main_data.hdf5",
                                                              "metadata.json"]
    assert minari.MinariDataset(os.path.join(path, "data")).id == "pendulum-v3"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "runs"))
    assert minari.load_dataset("pendulum-v3").total_steps == STEPS
    # an env id gymnasium does not know: no env_spec, the id kept in ddrl's metadata
    data = load_dataset(os.path.join(path, "data"))
    assert "env_spec" not in data.metadata and data.env_id == "my_plugin:Env"
    # a directory not named name-vN: its dataset_id gets a version
    other = record(tmp_path / "my run", observation_space, action_space)[0]
    assert other.dataset_id == "my_run-v0"
    assert load_dataset(other.close()).metadata["dataset_id"] == "my_run-v0"


def test_open_episodes_are_dropped_or_kept_as_truncated(tmp_path):
    observation_space, action_space = SPACES["box"]
    writer, _ = record(tmp_path / "partial-v0", observation_space, action_space, close=False)
    open_steps = [len(episode) for episode in writer._open]
    writer.close(keep_partial=True)
    data = load_dataset(tmp_path / "partial-v0")
    assert open_steps == [2, 0]
    assert len(data) == STEPS + sum(open_steps)
    assert data.truncated[-1] and data.transitions.terminated[-1] == 0
    assert data.episode_lengths.tolist()[-1] == 2
    assert data.metadata["ddrl"]["open_episodes_dropped"] == 0


def test_finished_episodes_are_flushed_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(DatasetWriter, "FLUSH_EPISODES", 2)
    observation_space, action_space = SPACES["box"]
    writer, _ = record(tmp_path / "chunks-v0", observation_space, action_space, close=False)
    assert writer.episodes_written == 4    # before close: on disk already
    assert minari.MinariDataset(str(tmp_path / "chunks-v0" / "data")).total_episodes == 4
    writer.close()


def test_an_existing_dataset_is_never_overwritten(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    observation_space, action_space = SPACES["box"]
    for target in (tmp_path / "taken-v0", "minari:ddrl/taken-v0"):
        record(target, observation_space, action_space)
        with pytest.raises(DatasetError, match="already holds a dataset.*never overwrites"):
            DatasetWriter(target, observation_space, action_space)
    with pytest.raises(DatasetError, match="ddrl/taken-v1"):   # the next version suggested
        DatasetWriter("minari:ddrl/taken-v0", observation_space, action_space)


def test_a_missing_dataset_is_one_paragraph(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    with pytest.raises(DatasetError) as empty:
        load_dataset("D4RL/door/human-v2")
    message = str(empty.value)
    assert "neither a path that exists nor an id" in message and "no datasets" in message
    assert f"MINARI_DATASETS_PATH={tmp_path / 'store'}" in message
    assert "never downloads" in message and "minari download" in message
    assert not (tmp_path / "store").exists()   # looking created nothing
    record("minari:ddrl/here-v0", *SPACES["box"])
    with pytest.raises(DatasetError, match="which holds ddrl/here-v0"):
        load_dataset("ddrl/elsewhere-v0")
    with pytest.raises(DatasetError, match="holds no Minari dataset"):
        load_dataset(tmp_path)


def test_a_dataset_of_another_env_is_one_paragraph(tmp_path):
    record(tmp_path / "box-v0", S.Box(-1, 1, (3,)), S.Discrete(3))
    with pytest.raises(DatasetError) as error:
        load_dataset(tmp_path / "box-v0", S.Box(-1, 1, (4,)), S.Discrete(5))
    message = str(error.value)
    assert "does not fit this run's env" in message
    assert "the observation space has shape (3,) in the dataset, (4,) in the env" in message
    assert "Discrete(3) in the dataset, Discrete(5) in the env" in message
    # other bounds, same shapes: it fits, and is carried in the env's spaces
    env_space = S.Box(-10, 10, (3,))
    assert load_dataset(tmp_path / "box-v0", env_space, S.Discrete(3)).observation_space \
        is env_space
    record(tmp_path / "dict-v0", SPACES["dict_with_mask"][0], S.Discrete(3))
    with pytest.raises(DatasetError, match=r"keys \['action_mask', 'pos'\] in the dataset, "
                                           r"\['pos'\] in the env"):
        load_dataset(tmp_path / "dict-v0", S.Dict({"pos": S.Box(-1, 1, (2,))}), None)


def test_the_writer_checks_what_it_is_given(tmp_path):
    observation_space, action_space = SPACES["box"]
    with pytest.raises(ConfigError, match="Dict action space has no array form"):
        DatasetWriter(tmp_path / "a-v0", observation_space, S.Dict({"a": S.Discrete(2)}))
    with pytest.raises(ConfigError, match="'total_steps'|total_steps, which Minari"):
        DatasetWriter(tmp_path / "b-v0", observation_space, action_space,
                      metadata={"total_steps": 3})
    with pytest.raises(ConfigError, match="'flags' is .* not JSON"):
        DatasetWriter(tmp_path / "c-v0", observation_space, action_space,
                      metadata={"flags": object()})
    assert not any((tmp_path / name).exists() for name in ("a-v0", "b-v0", "c-v0"))
    with DatasetWriter(tmp_path / "d-v0", observation_space, action_space,
                       num_envs=2) as writer:
        with pytest.raises(ConfigError, match="one per env slot \\(num_envs=2\\)"):
            writer.add_steps(np.zeros((3, 3)), np.zeros((3, 2)), np.zeros(3), np.zeros(3),
                             np.zeros(3), np.zeros((3, 3)))
        with pytest.raises(ConfigError, match=r"actions has shape \(2, 3\); .* takes \(2, 2\)"):
            writer.add_steps(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(2), np.zeros(2),
                             np.zeros(2), np.zeros((2, 3)))
    with pytest.raises(DatasetError, match="add_steps after close"):
        writer.add_steps(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros(2), np.zeros(2),
                         np.zeros(2), np.zeros((2, 3)))
    tree_space = SPACES["dict_with_mask"][0]
    with DatasetWriter(tmp_path / "e-v0", tree_space, S.Discrete(3)) as writer:
        with pytest.raises(ConfigError, match=r"leaves \['action_mask', 'pos'\]"):
            writer.add_steps({"pos": np.zeros((1, 2))}, [0], [0], [0], [0],
                             {"pos": np.zeros((1, 2))})
        wrong = {"pos": np.zeros((1, 5)), "action_mask": np.ones((1, 3), np.int8)}
        with pytest.raises(ConfigError, match=r"observations\['pos'\] has shape \(1, 5\)"):
            writer.add_steps(wrong, [0], [0], [0], [0], wrong)


# -- D4RL-style arrays ---------------------------------------------------------------------------
def d4rl_arrays(next_observations=True, timeouts=True):
    """Seven rows: an episode of 3 cut by a time limit (row 2), one of 2 ending terminal
    (row 4), then 2 rows of an episode still running."""
    observations = np.stack([np.arange(7), 10 + np.arange(7)], 1).astype(np.float32)
    arrays = {"observations": observations,
              "actions": np.linspace(-1, 1, 7, dtype=np.float32)[:, None],
              "rewards": np.arange(7, dtype=np.float32),
              "terminals": np.array([0, 0, 0, 0, 1, 0, 0], bool)}
    if timeouts:
        arrays["timeouts"] = np.array([0, 0, 1, 0, 0, 0, 0], bool)
    if next_observations:
        arrays["next_observations"] = observations + 100
    return arrays


def write_arrays(path, arrays, attrs=None):
    if path.suffix == ".npz":
        np.savez(path, **arrays, **(attrs or {}))
    else:
        with h5py.File(path, "w") as file:
            for name, array in arrays.items():
                file.create_dataset(name, data=array)
            file.attrs.update(attrs or {})
    return path


@pytest.mark.parametrize("suffix", [".npz", ".hdf5"])
def test_d4rl_arrays_with_next_observations_keep_every_row(tmp_path, suffix):
    path = write_arrays(tmp_path / f"hopper{suffix}", d4rl_arrays(),
                        {"env_id": "Hopper-v5", "algorithm": "SAC"})
    data = load_dataset(path)
    t = data.transitions
    assert len(data) == 7
    np.testing.assert_array_equal(t.next_observations, t.observations + 100)
    assert t.terminated.tolist() == [0, 0, 0, 0, 1, 0, 0]
    assert data.truncated.tolist() == [0, 0, 1, 0, 0, 0, 0]
    assert data.episode_returns.tolist() == [3.0, 7.0] and data.episode_lengths.tolist() == [3, 2]
    assert data.env_id == "Hopper-v5"
    assert isinstance(data.observation_space, S.Box) and data.observation_space.shape == (2,)
    assert np.isinf(data.action_space.high).all()
    if suffix == ".hdf5":
        assert data.metadata["algorithm_name"] == "SAC"


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_d4rl_arrays_without_next_observations_pair_following_rows(tmp_path, suffix):
    path = write_arrays(tmp_path / f"hopper{suffix}", d4rl_arrays(next_observations=False))
    data = load_dataset(path)
    t = data.transitions
    # the timeout row (2) has no next observation in the file, nor has the last row (6)
    assert t.observations[:, 0].tolist() == [0, 1, 3, 4, 5]
    # the terminal row keeps its own observation as its (never bootstrapped) next one
    assert t.next_observations[:, 0].tolist() == [1, 2, 4, 4, 6]
    assert t.terminated.tolist() == [0, 0, 0, 1, 0] and not data.truncated.any()
    assert t.episode_ends.tolist() == [False, True, False, True, True]
    assert data.episode_returns.tolist() == [3.0, 7.0]   # of every row, dropped ones too


def test_d4rl_arrays_without_timeouts_see_terminals_only(tmp_path):
    arrays = d4rl_arrays(next_observations=False, timeouts=False)
    data = load_dataset(write_arrays(tmp_path / "old.npz", arrays))
    assert data.transitions.observations[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert data.transitions.next_observations[:, 0].tolist() == [1, 2, 3, 4, 4, 6]
    assert data.episode_returns.tolist() == [10.0] and data.episode_lengths.tolist() == [5]
    with_next = load_dataset(write_arrays(tmp_path / "next.npz",
                                          d4rl_arrays(timeouts=False)))
    assert len(with_next) == 7 and not with_next.truncated.any()


def test_d4rl_arrays_take_the_env_spaces(tmp_path):
    arrays = d4rl_arrays()
    arrays["actions"] = np.array([1, 2, 3, 1, 2, 3, 1])          # the env's own values
    path = write_arrays(tmp_path / "discrete.npz", arrays)
    inferred = load_dataset(path)
    assert inferred.action_space == S.Discrete(4)
    data = load_dataset(path, S.Box(-np.inf, np.inf, (2,)), S.Discrete(3, start=1))
    assert data.transitions.actions.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert data.transitions.actions.dtype == np.int64
    with pytest.raises(DatasetError, match=r"take values 1\.\.3; the env's Discrete\(3\) "
                                           r"takes 0\.\.2"):
        load_dataset(path, None, S.Discrete(3))
    with pytest.raises(DatasetError, match="arrays carry Box observations only"):
        load_dataset(path, S.Dict({"pos": S.Box(-1, 1, (2,))}), None)
    with pytest.raises(DatasetError, match="shape \\(2,\\) in the dataset, \\(3,\\) in the env"):
        load_dataset(path, S.Box(-1, 1, (3,)), None)
    del arrays["terminals"]
    with pytest.raises(DatasetError, match="has no terminals array"):
        load_dataset(write_arrays(tmp_path / "broken.hdf5", arrays))


def test_statistics_for_normalization(tmp_path):
    data = load_dataset(write_arrays(tmp_path / "stats.npz", d4rl_arrays()))
    mean, var, count = data.obs_moments()
    assert count == 7
    np.testing.assert_allclose(mean, [3, 13])
    np.testing.assert_allclose(var, [4, 4])
    assert data.reward_range() == (0.0, 6.0)
    record(tmp_path / "tree-v0", *SPACES["dict_with_mask"])
    mean, var, count = load_dataset(tmp_path / "tree-v0").obs_moments()
    assert list(mean) == ["pos"] and count == STEPS and var["pos"].shape == (2,)
    record(tmp_path / "pixels-v0", *SPACES["image"])
    assert load_dataset(tmp_path / "pixels-v0").obs_moments()[:2] == (None, None)


def test_the_metadata_file_is_plain_json(tmp_path):
    record(tmp_path / "meta-v0", *SPACES["box"], algorithm_name="ddrl sac",
           metadata={"code_permalink": "https://example.org/ddrl", "flags": [1, 2]})
    with open(tmp_path / "meta-v0" / "data" / "metadata.json") as file:
        metadata = json.load(file)
    assert metadata["dataset_id"] == "meta-v0" and metadata["minari_version"] == minari.__version__
    assert metadata["code_permalink"] == "https://example.org/ddrl"
    assert metadata["jpeg_encoding"] is False and metadata["ddrl"]["num_envs"] == 2


def test_a_relative_path_of_an_ids_shape_is_a_directory(tmp_path, monkeypatch):
    """Only minari:ID writes into the store: data/pendulum-v0 is a directory here, as
    --record_dataset and ddrl dataset --out mean it; a reader finds it by that path, and by
    the id with the prefix only in the store."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    writer, _ = record("data/pendulum-v0", *SPACES["box"])
    assert writer.close() == str(tmp_path / "data" / "pendulum-v0")
    assert not (tmp_path / "store").exists()
    assert len(load_dataset("data/pendulum-v0")) == STEPS
    with pytest.raises(DatasetError, match="not a Minari id"):
        DatasetWriter("minari:pendulum", *SPACES["box"])


@pytest.mark.parametrize("name", ["box", "dict_with_mask", "nested_dict"])
@pytest.mark.parametrize("count", [2, 3, 5])
def test_shards_partition_the_rows_and_keep_the_episodes_statistics(tmp_path, name, count):
    """--shard_dataset: shard i of N holds the rows at i modulo N, read episode by episode
    (every row in exactly one shard, in order), each with the whole dataset's episode
    statistics and no episode structure of its own."""
    observation_space, action_space = SPACES[name]
    record(tmp_path / "data-v0", observation_space, action_space)
    whole = load_dataset(str(tmp_path / "data-v0"), observation_space, action_space)
    shards = [load_dataset(str(tmp_path / "data-v0"), observation_space, action_space,
                           shard=(i, count)) for i in range(count)]
    assert sum(len(s) for s in shards) == len(whole) == STEPS
    for i, shard in enumerate(shards):
        rows = np.arange(i, STEPS, count)
        for field in ("observations", "actions", "rewards", "next_observations", "terminated"):
            assert_same(getattr(shard.transitions, field),
                        spaces.take(getattr(whole.transitions, field), rows))
        np.testing.assert_array_equal(shard.truncated, whole.truncated[rows])
        np.testing.assert_array_equal(shard.episode_returns, whole.episode_returns)
        assert shard.transitions.episode_ends is None
        assert shard.overview(rows=len(whole)).summary() == whole.summary()


@pytest.mark.parametrize("suffix", [".npz", ".hdf5"])
@pytest.mark.parametrize("next_observations", [True, False])
def test_shards_of_arrays_partition_the_rows(tmp_path, monkeypatch, suffix, next_observations):
    """A shard of a file of arrays holds the kept rows at i modulo N; an HDF5 file's
    observations are read a block at a time (here 2 rows, so rows and their next observations
    straddle blocks), never whole."""
    import h5py

    from core.data import arrays as array_files
    path = write_arrays(tmp_path / f"d{suffix}", d4rl_arrays(next_observations))
    whole = load_dataset(str(path))
    monkeypatch.setattr(array_files, "ROWS_PER_READ", 2)
    reads = []
    read = h5py.Dataset.__getitem__

    def recorded(dataset, key):
        if dataset.name.endswith("observations"):
            reads.append(key)
        return read(dataset, key)
    monkeypatch.setattr(h5py.Dataset, "__getitem__", recorded)
    shards = [load_dataset(str(path), shard=(i, 3)) for i in range(3)]
    if suffix == ".hdf5":
        assert reads and all(isinstance(k, slice) and k.stop - k.start <= 2 for k in reads)
    assert sum(len(s) for s in shards) == len(whole)
    for i, shard in enumerate(shards):
        np.testing.assert_array_equal(shard.transitions.observations,
                                      whole.transitions.observations[i::3])
        np.testing.assert_array_equal(shard.transitions.next_observations,
                                      whole.transitions.next_observations[i::3])
        np.testing.assert_array_equal(shard.truncated, whole.truncated[i::3])
        assert shard.transitions.observations.base is None  # a copy: the whole may go
        np.testing.assert_array_equal(shard.transitions.rewards, whole.transitions.rewards[i::3])
        np.testing.assert_array_equal(shard.transitions.terminated,
                                      whole.transitions.terminated[i::3])
        assert shard.transitions.episode_ends is None
    with pytest.raises(ValueError, match="shard 3 of 3"):
        load_dataset(str(path), shard=(3, 3))


def test_a_datasets_spaces_come_from_its_metadata_alone(tmp_path, monkeypatch):
    """--env_name none asks the dataset for its spaces before the run: a Minari dataset's
    come from its metadata (no episode read), and match what load_dataset carries."""
    from core.data import dataset_spaces
    from minari.dataset.minari_storage import MinariStorage
    observation_space, action_space = SPACES["dict_with_mask"]
    record(tmp_path / "data-v0", observation_space, action_space)
    data = load_dataset(str(tmp_path / "data-v0"))

    def no_episodes(*args, **kwargs):
        raise AssertionError("an episode was read")
    monkeypatch.setattr(MinariStorage, "get_episodes", no_episodes)
    assert dataset_spaces(str(tmp_path / "data-v0")) == (data.observation_space,
                                                         data.action_space)
    arrays = load_dataset(write_arrays(tmp_path / "d.npz", d4rl_arrays()))
    assert dataset_spaces(str(tmp_path / "d.npz")) == (arrays.observation_space,
                                                      arrays.action_space)


@pytest.mark.parametrize("name", ["box", "dict_with_mask"])
def test_a_shard_filled_a_block_at_a_time_holds_what_one_block_would(tmp_path, monkeypatch,
                                                                      name):
    """fill_shard normalizes and stores its rows a block at a time (no whole normalized copy
    beside the rows read and the buffer): the buffer, and so every draw from it, is the same
    as one block's."""
    from core.algos.replay_trainer import buffer_columns
    from core.learning import dataset_shard
    from core.learning.normalizer import ObsNormalizer, moments_of
    observation_space, action_space = SPACES[name]
    record(tmp_path / "data-v0", observation_space, action_space)
    source = str(tmp_path / "data-v0")
    normalizer = ObsNormalizer(observation_space)
    normalizer.update(moments_of(load_dataset(source).transitions.observations))
    columns = buffer_columns((observation_space, action_space), True)

    def filled(block_rows):
        monkeypatch.setattr(dataset_shard, "FILL_BLOCK_ROWS", block_rows)
        holder = dataset_shard.DatasetShardHolder()
        holder.hold_shard(source, (observation_space, action_space), 1, 2, normalized=True)
        assert holder.fill_shard(columns, normalizer.statistics(), reward_scale=0.5,
                                 seed=3) == STEPS // 2
        return holder.shard_batches(16, 3)
    for one, blocks in zip(filled(10 ** 6), filled(4)):  # 6 rows: a block of 4, one of 2
        for a, b in zip(one.transitions, blocks.transitions):
            if a is None:
                assert b is None
            else:
                assert_same(a, b)
        np.testing.assert_array_equal(one.indices, blocks.indices)


def test_the_d3rlpy_harness_scales_rewards_as_ddrl_does(tmp_path):
    """benchmarks/d3rlpy_offline.py --reward_scale auto reads the Minari file itself (it runs
    in d3rlpy's venv, without ddrl): it must count the same episodes as ddrl's
    --reward_scale auto (those that end in a termination or truncation, an open one kept as
    truncated included), so that the side by side scales both systems' rewards alike."""
    from benchmarks.d3rlpy_offline import read_minari, resolved_reward_scale
    from core.algos.replay_trainer import resolved_reward_scale as ddrl_scale
    observation_space, action_space = SPACES["box"]
    writer, finished = record(tmp_path / "scaled-v0", observation_space, action_space,
                              close=False)
    writer.close(keep_partial=True)
    ddrl = ddrl_scale("auto", load_dataset(tmp_path / "scaled-v0"))
    episodes, _, _ = read_minari(str(tmp_path / "scaled-v0"))
    assert len(episodes) == len(finished) + 1
    returns = [float(np.sum(e[2], dtype=np.float64)) for e in episodes]
    assert resolved_reward_scale("auto", episodes) == pytest.approx(
        1000.0 / (max(returns) - min(returns)), rel=1e-12)
    assert resolved_reward_scale("auto", episodes) == pytest.approx(ddrl, rel=1e-6)
    assert resolved_reward_scale(2.5, episodes) == 2.5


def test_the_d3rlpy_harness_plays_its_final_weights_on_fresh_episodes_as_ddrl_evaluate_does():
    """--fresh_eval_seeds K --fresh_eval_episodes N (benchmarks/d3rlpy_offline.py): K blocks of
    N episodes of the final weights, reset with seeds no training evaluation used, each
    block's mean and the bootstrap interval ddrl evaluate --eval_seeds prints (the same
    resamples: ddrl/stats.py bootstrap_interval)."""
    from benchmarks.d3rlpy_offline import EVALUATION_OFFSET, EpisodeEvaluator
    from ddrl.stats import bootstrap_interval

    class StandStill:  # a d3rlpy algo's predict: the zero torque, whatever the observation
        def predict(self, obs):
            return np.zeros((len(obs), 1), dtype=np.float32)

    evaluator = EpisodeEvaluator("Pendulum-v1", 2, 7, 100, 0, lambda *a: None)
    seeds = []
    reset = evaluator.env.reset
    evaluator.env.reset = lambda seed: (seeds.append(seed), reset(seed=seed))[1]
    fresh = evaluator.fresh(StandStill(), 3, 2)
    assert len(set(seeds)) == 6 and min(seeds) > 7 + EVALUATION_OFFSET + 1_000 * 10 ** 6
    returns = evaluator.play(StandStill(), list(seeds))  # the same episodes: the same returns
    block_means = [np.mean(returns[2 * b:2 * b + 2]) for b in range(3)]
    assert fresh["block_means"] == pytest.approx(block_means, rel=1e-12)
    assert fresh["mean"] == pytest.approx(np.mean(block_means), rel=1e-12)
    assert fresh["ci95"] == pytest.approx(list(bootstrap_interval(block_means)), rel=1e-12)
    assert len(set(fresh["block_means"])) == 3  # other seeds, other episodes


@pytest.mark.parametrize("model", ["bc", "iql", "cql", "cql_discrete", "td3_bc"])
def test_the_d3rlpy_harness_defaults_are_ddrls_for_every_mapped_setting(model):
    """benchmarks/d3rlpy_offline.py's docstring promises that a bare command is already on
    ddrl's terms: for each setting benchmarks/offline.py pairs (MAPPING), d3rlpy_offline.py's
    default (for the algorithm it runs) is what ddrl's own parser resolves for the model; and
    resolve() hands the peer exactly the ddrl values."""
    from benchmarks import d3rlpy_offline
    from benchmarks.offline import D3RLPY_ALGO, MAPPING, resolve
    discrete = model == "cql_discrete"
    env = "CartPole-v1" if discrete else "Pendulum-v1"
    rows, _, peer_argv, _ = resolve(model, "data/none-v0", env, [], discrete)
    bare = vars(d3rlpy_offline.parse_args(["--dataset", "x", "--env", env, "--out", "x",
                                           "--algo", D3RLPY_ALGO[model]]))
    given = vars(d3rlpy_offline.parse_args(["--dataset", "x", "--env", env, "--out", "x",
                                            "--algo", D3RLPY_ALGO[model], *peer_argv]))
    assert {r["ddrl_flag"] for r in rows} == {ddrl for ddrl, _ in MAPPING[model]}
    for row in rows:
        if not row["applies"]:
            continue
        flag, value = row["d3rlpy_flag"], row["d3rlpy_value"]
        assert given[flag] == value, (model, flag, given[flag], value)
        assert bare[flag] == given[flag], (model, flag, bare[flag], given[flag])
