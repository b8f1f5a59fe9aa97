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
        """The outputs [L, N, H] over a batch of sequences, time-major: ``features`` [L, N, F],
        ``starts`` [L, N] bool, ``state`` the state before the first step ([N, H] each).

        The state is zeroed where an episode starts, so each column is a run of episode
        segments. Each segment becomes a sequence of its own (from the column's state, or from
        zeros when it begins an episode), padded at its end to the longest, and all go through
        the fused kernel in one call: a run's cost is then one call forward and one backward,
        where cutting every column at each step where any row starts an episode cost a call
        per cut (early in training, short episodes: about a dozen in 32 steps of 8 envs).
        Padding after a segment's last step never changes its outputs."""
        length, count = features.shape[:2]
        segments = segments_of(starts.detach().cpu().numpy())
        columns = torch.as_tensor(segments.columns, device=features.device)
        keep = torch.as_tensor(segments.carries_state, device=features.device,
                               dtype=features.dtype).unsqueeze(-1)
        first = {name: value[columns] * keep for name, value in state.items()}
        gather = torch.as_tensor(segments.gather, device=features.device)
        padded = features.reshape(length * count, -1)[gather]        # [Lmax, S, F]
        out, _ = self.rnn(padded, self._torch_state(first))
        real = torch.as_tensor(segments.real, device=features.device)
        order = torch.as_tensor(segments.order, device=features.device)
        return out[real][order].reshape(length, count, -1)


    def final_state(self, features, state: State, starts) -> State:
        """The state after the last step of each column of ``features`` [L, N, F]
        (time-major), from ``state`` before the first step, zeroed where ``starts`` [L, N]
        begins an episode: what ``step`` called L times gives, but only each column's last
        episode segment runs, all through the fused kernel in one call (packed to their own
        lengths, so no padding step touches a state)."""
        length, count = features.shape[:2]
        marks = starts.detach().cpu().numpy()
        restarted = marks.any(0)
        first = np.where(restarted, length - 1 - np.argmax(marks[::-1], axis=0), 0)
        lengths = length - first
        steps = np.minimum(first[None, :] + np.arange(lengths.max())[:, None], length - 1)
        device = features.device
        tail = features[torch.as_tensor(steps, device=device),
                        torch.arange(count, device=device)[None, :]]  # [Lmax, N, F]
        keep = torch.as_tensor(~restarted, device=device, dtype=features.dtype).unsqueeze(-1)
        begin = {name: value * keep for name, value in state.items()}
        packed = nn.utils.rnn.pack_padded_sequence(tail, torch.as_tensor(lengths),
                                                   enforce_sorted=False)
        _, final = self.rnn(packed, self._torch_state(begin))
        return self._dict_state(final)


class Segments:
    """Where the episode segments of a batch of sequences are (``segments_of``)."""

    def __init__(self, columns, carries_state, gather, real, order):
        self.columns = columns              # [S] the column each segment is in
        self.carries_state = carries_state  # [S] it continues the column's state (no start)
        self.gather = gather                # [Lmax, S] flat index t * N + n of each step
        self.real = real                    # [Lmax, S] bool: a step, not padding
        self.order = order                  # the real steps, flattened, into t * N + n order


def segments_of(starts):
    """Cut each column of ``starts`` [L, N] (numpy bool) at its episode starts."""
    length, count = starts.shape
    begins = starts.copy()
    begins[0, :] = True
    columns, times = np.nonzero(begins.T)      # sorted by column, then time
    ends = np.append(times[1:], length)
    ends[np.append(columns[1:] != columns[:-1], True)] = length
    lengths = ends - times
    steps = np.arange(lengths.max())[:, None]
    real = steps < lengths[None, :]
    flat = (times[None, :] + steps) * count + columns[None, :]
    gather = np.where(real, flat, 0)
    carries_state = (times == 0) & ~starts[0, columns]
    return Segments(columns, carries_state, gather, real, np.argsort(flat[real], kind="stable"))


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # never overflows, unlike 1 / (1 + exp(-x))


class NumpyCore:
    """``RecurrentCore.step`` in numpy, for acting on the CPU (models/numpy_mlp.py says why: a
    step through torch's LSTM costs about 70 us of call overhead for a few microseconds of
    arithmetic). It reads numpy views of the core's parameters, renewed only when a
    parameter's storage is replaced, so set_weights and optimizer steps are seen at once."""

    def __init__(self, core: RecurrentCore):
        self.kind = core.kind
        rnn = core.rnn
        self.parameters = [rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0]
        self.seen, self.views = None, None

    def refresh(self):
        addresses = [p.data_ptr() for p in self.parameters]
        if addresses != self.seen:
            w_ih, w_hh, b_ih, b_hh = (p.detach().numpy() for p in self.parameters)
            self.views, self.seen = (w_ih.T, w_hh.T, b_ih, b_hh), addresses

    def step(self, x, state, starts):
        """(output [B, H], next state) for float32 ``x`` [B, F] and numpy ``state``; rows where
        ``starts`` is True begin from zeros (torch's gate order: LSTM i, f, g, o; GRU r, z, n)."""
        self.refresh()
        w_ih, w_hh, b_ih, b_hh = self.views
        keep = ~np.asarray(starts, dtype=bool)[:, None]
        h = np.where(keep, state["h"], np.float32(0.0))
        if self.kind == "lstm":
            c = np.where(keep, state["c"], np.float32(0.0))
            i, f, g, o = np.split(x @ w_ih + b_ih + h @ w_hh + b_hh, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            return h, {"h": h, "c": c}
        x_r, x_z, x_n = np.split(x @ w_ih + b_ih, 3, axis=1)
        h_r, h_z, h_n = np.split(h @ w_hh + b_hh, 3, axis=1)
        r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
        h = (1.0 - z) * np.tanh(x_n + r * h_n) + z * h
        return h, {"h": h}


def prefixed(prefix, state):
    """{"h": x} -> {"pi/h": x}."""
    return {f"{prefix}/{name}": value for name, value in state.items()}


def unprefixed(prefix, state):
    """The entries of ``state`` named "prefix/...", without the prefix."""
    head = prefix + "/"
    return {name[len(head):]: value for name, value in state.items() if name.startswith(head)}
