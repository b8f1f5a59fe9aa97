"""Recurrent cores (LSTM, GRU) for policies with memory, and the state they carry.

A recurrent model (models/base.py ``recurrent``) keeps one state per env slot. ddrl carries that
state as a flat dict {name: array [B, hidden]}, the shape core/spaces.py gives structured
observations: rollout workers store it with each fragment, checkpoints keep it, Ray moves it as
plain arrays. An LSTM's state is {"h", "c"}, a GRU's {"h"}; a model with two cores prefixes
their names ("pi/h", "vf/h", ...).

Episode starts: the state of an env whose episode just began is zeroed before its first
observation goes in, in acting (``RecurrentCore.step``) and in learning (``unroll``) alike, so
that the loss replays exactly the sequence of states the acting policy went through (as
sb3-contrib's RecurrentPPO and CleanRL's ppo_atari_lstm do).
"""
from typing import Dict

import numpy as np
import torch
from torch import nn

RECURRENT_KINDS = ("lstm", "gru")
State = Dict[str, torch.Tensor]


class RecurrentCore(nn.Module):
    """One LSTM or GRU layer of ``hidden_size`` units over features [B, F]; its state is a dict
    {"h": [B, H]} (GRU) or {"h", "c"} (LSTM)."""

    def __init__(self, kind, input_size, hidden_size):
        super().__init__()
        if kind not in RECURRENT_KINDS:
            raise ValueError(f"recurrent core {kind!r}: one of {', '.join(RECURRENT_KINDS)}")
        self.kind, self.hidden_size = kind, hidden_size
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(input_size, hidden_size)
        # As CleanRL's ppo_atari_lstm: orthogonal weights, zero biases (torch's default uniform
        # init saturates the gates of wide inputs such as a CNN's 512 features).
        for name, param in self.rnn.named_parameters():
            if "bias" in name:
                nn.init.zeros_(param)
            else:
                nn.init.orthogonal_(param, 1.0)

    @property
    def state_names(self):
        return ("h", "c") if self.kind == "lstm" else ("h",)

    def initial_state(self, batch_size) -> Dict[str, np.ndarray]:
        """Zeros: the state of ``batch_size`` fresh episodes."""
        return {name: np.zeros((batch_size, self.hidden_size), np.float32)
                for name in self.state_names}

    def _torch_state(self, state: State):
        # nn.LSTM / nn.GRU want [layers, B, H]
        if self.kind == "lstm":
            return state["h"].unsqueeze(0).contiguous(), state["c"].unsqueeze(0).contiguous()
        return state["h"].unsqueeze(0).contiguous()

    def _dict_state(self, torch_state) -> State:
        if self.kind == "lstm":
            return {"h": torch_state[0].squeeze(0), "c": torch_state[1].squeeze(0)}
        return {"h": torch_state.squeeze(0)}

    @staticmethod
    def reset(state: State, starts) -> State:
        """Zero the rows of ``state`` where ``starts`` ([B] bool tensor) is True."""
        keep = (~starts).to(next(iter(state.values())).dtype).unsqueeze(-1)
        return {name: value * keep for name, value in state.items()}

    def step(self, features, state: State, starts):
        """One step for a batch: (output [B, H], next state). ``starts`` [B] bool: these rows
        begin an episode, their state is zeroed first."""
        out, next_state = self.rnn(features.unsqueeze(0),
                                   self._torch_state(self.reset(state, starts)))
        return out.squeeze(0), self._dict_state(next_state)

    def unroll(self, features, state: State, starts):
        """A batch of sequences, time-major: ``features`` [L, N, F], ``starts`` [L, N] bool,
        ``state`` the state before the first step ([N, H] each). Returns (outputs [L, N, H],
        the state after the last step). The state is zeroed where an episode starts, which
        splits the sequence into runs between the steps where any row starts one; each run
        goes through the fused kernel at once (one call per run, not per step)."""
        length = features.shape[0]
        cuts = torch.nonzero(starts.any(dim=1)).flatten().tolist()
        bounds = sorted(set([0, *cuts, length]))
        outputs = []
        for begin, end in zip(bounds[:-1], bounds[1:]):
            state = self.reset(state, starts[begin])
            out, torch_state = self.rnn(features[begin:end], self._torch_state(state))
            state = self._dict_state(torch_state)
            outputs.append(out)
        return torch.cat(outputs), state


def prefixed(prefix, state):
    """{"h": x} -> {"pi/h": x}."""
    return {f"{prefix}/{name}": value for name, value in state.items()}


def unprefixed(prefix, state):
    """The entries of ``state`` named "prefix/...", without the prefix."""
    head = prefix + "/"
    return {name[len(head):]: value for name, value in state.items() if name.startswith(head)}
