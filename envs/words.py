"""Text observations as word indices, and BabyAI's mission generator kept quiet.

A gymnasium ``Text`` leaf (MiniGrid's and BabyAI's ``mission``: "go to the red ball") cannot be
batched into a tensor, so core/spaces.py refuses it. ``WordTokens`` turns the named Text leaves
of a Dict observation into ``MultiDiscrete([VOCABULARY_SIZE] * max_words)``: one index per word,
0 for padding after the last word. A model then reads it as any index leaf (one-hot per
position by default) or, with ``--encoder_for mission=bow`` / ``mission=gru``, the way the BabyAI
baselines read the mission: a bag of word embeddings, or a GRU over them (models/encoders.py).

The indices are fixed, not learned from data, so every process (workers, the test worker, a
policy loaded later) maps a word to the same index: BabyAI's grammar's words first (``WORDS``,
indices 2...), any other word hashed (CRC-32, not Python's salted ``hash``) into the rest of the
vocabulary, 1 for a word that overflows ``max_words`` being cut (never silently: the first such
mission is named in a warning).

``BabyAILevel``: BabyAI's level generator prints "Sampling rejected: ..." on stdout each time
it draws a mission it cannot place (roomgrid_level.py), thousands of lines in a run; this
wrapper keeps those lines off the terminal and counts them (``sampling_rejected``, and in each
reset's info; anything else the reset prints still goes through), and says at an episode's end
whether the instruction was done (``info["is_success"]``: evaluations report the success rate).
"""
import contextlib
import io
import sys
import zlib

import gymnasium as gym
import numpy as np

from core.errors import ConfigError

#: BabyAI's instruction grammar (minigrid/envs/babyai/core/verifier.py): verbs, objects,
#: colours, locations and connectives; each has an index of its own.
WORDS = ("go", "to", "the", "a", "pick", "up", "open", "put", "next", "and", "then", "after",
         "you", "door", "ball", "box", "key", "red", "green", "blue", "purple", "yellow", "grey",
         "on", "your", "left", "right", "in", "front", "of", "behind", "get", "use", "avoid",
         "goal", "square", "wall", "lava", "it", "that", "object", "fetch", "unlock", "exit",
         "room", "corridor", "find", "reach", "pickup")
PAD, CUT = 0, 1
VOCABULARY_SIZE = 128          # indices 0..127: pad, cut, the grammar's words, hashed others
_FIXED = {word: 2 + i for i, word in enumerate(WORDS)}
_HASHED = 2 + len(WORDS)       # other words share indices _HASHED..VOCABULARY_SIZE - 1


def word_index(word):
    """A word's index: its own for BabyAI's grammar, else a stable hash into the rest."""
    found = _FIXED.get(word)
    if found is not None:
        return found
    return _HASHED + zlib.crc32(word.encode("utf-8")) % (VOCABULARY_SIZE - _HASHED)


def words_of(text):
    """Lower-case words, punctuation dropped: "Go to the red ball," -> go, to, the, red, ball."""
    cleaned = "".join(c if c.isalnum() else " " for c in str(text).lower())
    return cleaned.split()


def encode_text(text, max_words):
    """(indices int64 [max_words], cut): the words' indices padded with 0; a text longer than
    ``max_words`` keeps its first max_words - 1 words and ends with the CUT index."""
    words = words_of(text)
    out = np.zeros(max_words, dtype=np.int64)
    cut = len(words) > max_words
    kept = words[:max_words - 1] if cut else words
    out[:len(kept)] = [word_index(w) for w in kept]
    if cut:
        out[max_words - 1] = CUT
    return out, cut


def is_text_space(space):
    """gymnasium's Text, or MiniGrid's MissionSpace (its missions are strings too)."""
    return isinstance(space, gym.spaces.Text) or any(
        cls.__name__ == "MissionSpace" for cls in type(space).__mro__)


class WordTokens(gym.ObservationWrapper):
    """The Text leaves ``keys`` of a Dict observation as word indices (the module docstring)."""

    def __init__(self, env, keys, max_words, flag="--text_keys"):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ConfigError(f"{flag} {','.join(keys)}: the observation space {space} is not a "
                              f"Dict, so it has no text keys. Leave {flag} out for this env.")
        wrong = [k for k in keys if not is_text_space(space.spaces.get(k))]
        if wrong:
            texts = [k for k, s in space.spaces.items() if is_text_space(s)]
            raise ConfigError(f"{flag}: {', '.join(map(repr, wrong))} is not a Text key of the "
                              f"observation {space}; its Text keys are "
                              f"{', '.join(map(repr, texts)) or '(none)'}.")
        self.keys, self.max_words, self.flag = tuple(keys), int(max_words), flag
        self.warned = False
        tokens = gym.spaces.MultiDiscrete(np.full(self.max_words, VOCABULARY_SIZE))
        self.observation_space = gym.spaces.Dict(
            {k: (tokens if k in self.keys else s) for k, s in space.spaces.items()},
            sort_keys=False)

    def observation(self, observation):
        out = dict(observation)
        for key in self.keys:
            out[key], cut = encode_text(observation[key], self.max_words)
            if cut and not self.warned:
                self.warned = True
                print(f"ddrl: warning: {self.flag} {key}: {observation[key]!r} has "
                      f"{len(words_of(observation[key]))} words, more than --max_words "
                      f"{self.max_words}: the words after the first {self.max_words - 1} are "
                      f"cut (this is said once per env)", file=sys.stderr, flush=True)
        return out


class BabyAILevel(gym.Wrapper):
    """A BabyAI level as ddrl runs it: its "Sampling rejected" lines kept off stdout and
    counted (``sampling_rejected``; each reset's info), and ``info["is_success"]`` at an
    episode's end (the instruction done: BabyAI rewards only that, 1 - 0.9 * steps / limit),
    so that evaluations report the success rate BabyAI's results are given in."""

    MESSAGES = ("Sampling rejected:", "Timeout during mission generation:")

    def __init__(self, env):
        super().__init__(env)
        self.sampling_rejected = 0

    def reset(self, **kwargs):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            obs, info = self.env.reset(**kwargs)
        rejected = 0
        for line in printed.getvalue().splitlines(keepends=True):
            if line.startswith(self.MESSAGES):
                rejected += 1
            else:
                sys.stdout.write(line)
        self.sampling_rejected += rejected
        return obs, {**info, "sampling_rejected": rejected}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "is_success": bool(terminated and reward > 0)}
        return obs, reward, terminated, truncated, info
