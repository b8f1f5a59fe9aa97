"""Text observations as word indices (envs/words.py), the bow and gru encoders that read them
(models/encoders.py), BabyAI's levels kept quiet and scored by success, and BabyAI's preset."""
import argparse

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs.words import (CUT, VOCABULARY_SIZE, WORDS, BabyAILevel, WordTokens, encode_text,
                        word_index, words_of)
from models.encoders import BagOfWords, WordGRU, encoder_overrides

pytestmark = pytest.mark.unit


def test_words_get_fixed_indices_and_a_long_text_is_cut_and_marked():
    assert words_of("Go to the red ball, then open a door.") == [
        "go", "to", "the", "red", "ball", "then", "open", "a", "door"]
    ids, cut = encode_text("go to the red ball", 8)
    assert ids.tolist() == [2, 3, 4, 2 + WORDS.index("red"), 2 + WORDS.index("ball"), 0, 0, 0]
    assert not cut
    ids, cut = encode_text("pick up the blue key next to the grey box", 5)
    assert cut and ids[-1] == CUT and ids[:4].tolist() == [word_index(w) for w in
                                                           ["pick", "up", "the", "blue"]]
    # a word outside BabyAI's grammar: hashed past the grammar's indices, the same every time
    other = word_index("banana")
    assert 2 + len(WORDS) <= other < VOCABULARY_SIZE and other == word_index("banana")


class Talking(gym.Env):
    """A Dict env with a text mission whose reset prints what BabyAI's generator prints."""
    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,)),
                                         "mission": gym.spaces.Text(64)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        print("Sampling rejected: unreachable object at (2, 3)")
        print("Sampling rejected: unreachable object at (4, 1)")
        print("a line of the env's own")
        self.t = 0
        return {"x": np.zeros(2, np.float32), "mission": "go to the red ball"}, {}

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        return ({"x": np.zeros(2, np.float32), "mission": "go to the red ball"},
                float(done and action == 1), done and action == 1, done and action == 0, {})


def test_babyai_levels_keep_the_sampling_lines_off_stdout_count_them_and_say_success(capsys):
    env = WordTokens(BabyAILevel(Talking()), ["mission"], 6)
    obs, info = env.reset(seed=0)
    assert capsys.readouterr().out == "a line of the env's own\n"
    assert info["sampling_rejected"] == 2 and env.env.sampling_rejected == 2
    assert obs["mission"].tolist() == [word_index(w) for w in words_of("go to the red ball")] + [0]
    assert env.observation_space["mission"] == gym.spaces.MultiDiscrete([VOCABULARY_SIZE] * 6)
    for action, success in ((1, True), (0, False)):
        env.reset()
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step(action)
        assert info["is_success"] is success and (terminated or truncated)
    with pytest.raises(Exception, match="'x' is not a Text key"):
        WordTokens(Talking(), ["x"], 6)


def test_bag_of_words_is_the_mean_of_the_words_embeddings_without_the_padding():
    space = gym.spaces.MultiDiscrete([VOCABULARY_SIZE] * 5)
    torch.manual_seed(0)
    bow = BagOfWords(space, 4)
    weights = bow.embedding.weight.detach()
    batch = torch.tensor([[2, 3, 9, 0, 0], [7, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    out = bow(batch).detach()
    assert torch.allclose(out[0], (weights[2] + weights[3] + weights[9]) / 3)
    assert torch.allclose(out[1], weights[7]) and torch.all(out[2] == 0)


def test_the_word_gru_takes_its_state_after_the_last_word_whatever_the_padding():
    space = gym.spaces.MultiDiscrete([VOCABULARY_SIZE] * 6)
    torch.manual_seed(0)
    gru = WordGRU(space, 8, 12)
    padded = gru(torch.tensor([[5, 6, 7, 0, 0, 0], [0, 0, 0, 0, 0, 0]])).detach()
    _, alone = gru.gru(gru.embedding(torch.tensor([[5, 6, 7]])))
    assert torch.allclose(padded[0], alone[0, 0], atol=1e-6) and torch.all(padded[1] == 0)
    assert gru.features_dim == 12


def test_the_encoder_kinds_bow_and_gru_parse_and_fit_word_indices_only():
    assert encoder_overrides("image=flatten,mission=bow") == ("image=flatten", "mission=bow")
    with pytest.raises(argparse.ArgumentTypeError):
        encoder_overrides("mission=lstm")


@pytest.mark.contract
def test_babyai_ids_get_their_own_preset_which_keeps_the_mission():
    from options.options import find_preset, parse_args
    assert find_preset("ppo", "BabyAI-GoToLocal-v0").endswith("configs/ppo-babyai.yaml")
    assert find_preset("ppo", "MiniGrid-DoorKey-5x5-v0").endswith("configs/ppo-minigrid.yaml")
    args = parse_args(["--gym_id", "BabyAI-GoToLocal-v0"])
    assert args.text_keys == ("mission",) and "mission=bow" in args.encoder_for
    assert args.recurrent == "lstm"  # memory: the object asked for is often out of view
    from options.options import run_spec
    from core.plugins import load_plugins, make_env
    from models.ppo import PPOModel
    spec = run_spec(args)
    env = make_env(load_plugins(spec), spec.env, seed=0)
    model = PPOModel(spec.model, env.observation_space, env.action_space)
    assert "bow" in model.encoder.kinds


def test_symbolic_cells_embed_each_channels_code_and_sum_them_per_cell():
    from gymnasium import spaces as gym_spaces
    from models.encoders import SymbolicCells, leaf_kinds
    from core.spaces import layout_of
    view = gym_spaces.Box(0, 255, (7, 7, 3), np.uint8)   # MiniGrid's view, channels last
    torch.manual_seed(0)
    cells = SymbolicCells(view, 8, (16, 32), 64)
    grid = torch.randint(0, 11, (5, 7, 7, 3), dtype=torch.uint8)
    assert cells(grid).shape == (5, 64)
    codes = grid.long()
    by_hand = sum(cells.embedding.weight[k * 256 + codes[..., k]] for k in range(3))
    inner = cells.embedding(codes + cells.offsets).sum(dim=3)   # what forward embeds
    assert torch.allclose(inner, by_hand)
    # a code is a category: two grids that differ in one cell's colour differ in features
    other = grid.clone()
    other[0, 3, 3, 1] = (int(grid[0, 3, 3, 1]) + 1) % 11
    assert not torch.allclose(cells(grid)[0], cells(other)[0])
    leaf = layout_of(gym_spaces.Dict({"image": view})).feature_leaves()[0]
    assert "cells" in leaf_kinds(leaf)
    float_leaf = layout_of(gym_spaces.Dict({"x": gym_spaces.Box(0, 1, (7, 7, 3))}))
    assert "cells" not in leaf_kinds(float_leaf.feature_leaves()[0])
