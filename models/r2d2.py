"""r2d2: a Q network with memory, learned from replayed sequences (R2D2: Kapturowski et al.
2019, "Recurrent Experience Replay in Distributed Reinforcement Learning",
https://openreview.net/forum?id=r1lyTjAqYX), in the Ape-X shape DQN runs in.

- Network: the observation encoder (models/encoders.py), a ReLU MLP of --dqn_hidden_sizes, an
  LSTM or GRU of --rnn_hidden_size units (--recurrent), and a head of one Q value per action
  (--dueling: a value and an advantage stream).
- Acting: epsilon-greedy as dqn's (--exploration linear or ladder), from the state each env slot
  carries (core/sampling/memory.py); the test worker acts greedily.
- Replay: sequences (agents/r2d2_agent.py: --burn_in + --sequence_length steps, with the state
  the acting policy held before the first one and the n-step targets' returns, factors and
  bootstrap positions). The online network replays the burn-in from the stored state without
  gradients, then unrolls the rest with them; the target network unrolls the whole sequence from
  the stored state too, and one step past it (the observation after the last step).
- Target: y_t = h(R_t + gamma^m h^-1(Q_target(s_{t+m}, a*))), a* = argmax Q(s_{t+m}) of the
  online network (double Q), h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x the paper's value
  rescaling (--value_rescale; off: h is the identity). Loss: the Huber loss of Q(s_t, a_t) - y_t
  over the learned steps, weighted by the replay's importance weights.
- Priorities: eta max_t |delta_t| + (1 - eta) mean_t |delta_t| over a sequence's learned steps
  (--priority_eta, the paper's 0.9).

Not implemented (refused): noisy networks, CUDA graphs of the update.
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.argtypes import positive_int, unit_interval
from core.errors import ConfigError
from core import spaces
from core.spaces import action_mask
from models import register_model
from models.dqn import MASKED_Q, DQNModel, NumpyQ, numpy_trunk_and_heads, trunk_and_linear
from models.encoders import Flatten, make_encoder
from models.exporting import ObservationInputs
from models.ppo import action_mask_of
from models.recurrent import RECURRENT_KINDS, NumpyCore, RecurrentCore
from models.sac import as_tensor, frozen_copy, structured_tensors

RESCALE_EPS = 1e-3


def rescale(x, eps=RESCALE_EPS):
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x, eps=RESCALE_EPS):
    """h^-1(x), the closed form of Pohlen et al. 2018, proposition A.2."""
    return torch.sign(x) * (((torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0)
                             / (2.0 * eps)) ** 2 - 1.0)


class RecurrentQNetwork(nn.Module):
    """encoder -> ReLU MLP -> LSTM/GRU -> one Q value per action (or dueling streams)."""

    def __init__(self, encoder, sizes, num_actions, dueling, kind, hidden_size):
        super().__init__()
        self.encoder = encoder
        self.trunk, linear = trunk_and_linear(encoder.features_dim, sizes)
        width = sizes[-1] if sizes else encoder.features_dim
        self.core = RecurrentCore(kind, width, hidden_size)
        self.dueling = dueling
        if dueling:
            self.value = linear(hidden_size, 1)
            self.advantage = linear(hidden_size, num_actions)
        else:
            self.q = linear(hidden_size, num_actions)

    def features(self, obs):
        return self.trunk(self.encoder(obs))

    def head(self, latent):
        if not self.dueling:
            return self.q(latent)
        advantage = self.advantage(latent)
        return self.value(latent) + advantage - advantage.mean(-1, keepdim=True)

    def step(self, obs, state, starts):
        """(Q [B, A], next state) for one step of a batch of env slots."""
        out, next_state = self.core.step(self.features(obs), state, starts)
        return self.head(out), next_state

    def unroll(self, features, state, starts):
        """Q [L, N, A] over sequences of features [L, N, F] (time-major)."""
        return self.head(self.core.unroll(features, state, starts))


def frozen_recurrent_copy(network):
    """``frozen_copy`` of a network with an LSTM/GRU: torch's RNN reads its weights from a list
    made when they were set, which must now name the copy's buffers."""
    target = frozen_copy(network)
    target.core.rnn._init_flat_weights()
    return target


@register_model("r2d2")
class R2D2Model(DQNModel):
    """Double DQN with an LSTM/GRU, learned from sequences with stored state and burn-in."""
    recurrent = True
    update_graph_safe = False  # an unroll's segments differ from batch to batch
    default_agent = "r2d2_agent"

    @staticmethod
    def add_args(parser):
        DQNModel.add_args(parser)
        parser.add_argument("--recurrent", choices=RECURRENT_KINDS, default="lstm",
                            help="the recurrent core after the MLP (default: %(default)s)")
        parser.add_argument("--rnn_hidden_size", type=positive_int, default=64,
                            help="units of the recurrent core (default: %(default)s)")
        parser.add_argument("--value_rescale", action=argparse.BooleanOptionalAction,
                            default=True,
                            help="R2D2's invertible value rescaling h of the targets, in place "
                                 "of reward clipping (default: on)")
        parser.add_argument("--priority_eta", type=unit_interval, default=0.9,
                            help="a sequence's priority: eta max |TD| + (1 - eta) mean |TD| "
                                 "over its learned steps (default: %(default)s)")
        # measured on CartPole with hidden velocities (BENCHMARKS.md, "R2D2"): with DQN's 1e-4
        # and a copy every 500 updates it had not learned at 40k env steps
        parser.set_defaults(dqn_lr=1e-3, target_update_interval=200)

    #: Rows are sequences (60 steps by default, 40 learned): a batch of 32 is 1,280 learned
    #: steps, and an update every 8 env steps replays each ~160 times.
    loop_defaults = {"batch_size": 32, "buffer_size": 20_000, "utd_ratio": 1 / 8,
                     "learning_starts": 5_000}

    def __init__(self, args, observation_space, action_space):
        if args.exploration == "noisy":
            raise ConfigError("--model_name r2d2 with --exploration noisy: not implemented "
                              "(noisy layers in a recurrent Q network). Use --exploration "
                              "linear or ladder.")
        super().__init__(args, observation_space, action_space)
        self.numpy_q = None  # (DQN's; acting here goes through numpy_memory)
        self.numpy_memory = self.numpy_acting()

    def numpy_acting(self):
        """(trunk or None, the core, the heads) in numpy, for acting on vectors on the CPU
        (models/numpy_mlp.py says why: a step through torch's modules costs ~0.7 ms of call
        overhead for 4 envs); None where the observation is not a plain vector."""
        if self.layout.structured or not isinstance(self.q_net.encoder, Flatten):
            return None
        parts = numpy_trunk_and_heads(self.q_net)
        if parts is None:
            return None
        trunk, heads = parts
        return trunk, NumpyCore(self.q_net.core), NumpyQ(None, heads)

    def build_networks(self, args):
        encoder = make_encoder(args, self.observation_space)
        self.q_net = RecurrentQNetwork(encoder, args.dqn_hidden_sizes, self.num_actions,
                                       args.dueling, args.recurrent, args.rnn_hidden_size)
        self.q_target = frozen_recurrent_copy(self.q_net)

    # -- acting --------------------------------------------------------------------------------
    def initial_state(self, batch_size):
        return self.q_net.core.initial_state(batch_size)

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False, state=None, episode_starts=None):
        """Epsilon-greedy actions from each row's state (None: fresh episodes), and the next
        state under "state"."""
        rows = len(spaces.leaves(obs)[0])
        if self.numpy_memory is not None and self.device.type == "cpu":
            q, next_state = self.numpy_q_values(obs, state, episode_starts, rows)
        else:
            state, starts = self.state_tensors(state, episode_starts, rows)
            q, next_state = self.q_net.step(self.flat_obs(obs), state, starts)
            q = q.float().cpu().numpy()
            next_state = {name: value.cpu().numpy() for name, value in next_state.items()}
        mask = action_mask(obs)
        if mask is not None:
            q = np.where(mask, q, MASKED_Q)
        return self.epsilon_greedy(q, deterministic), {"state": next_state}

    def numpy_q_values(self, obs, state, episode_starts, rows):
        """``q_net.step`` in numpy: (Q [B, A], next state)."""
        if state is None:
            state, episode_starts = self.initial_state(rows), np.ones(rows, dtype=bool)
        trunk, core, heads = self.numpy_memory
        x = np.asarray(obs, dtype=np.float32).reshape(rows, -1)
        latent, next_state = core.step(trunk(x) if trunk is not None else x,
                                       {k: np.asarray(v, np.float32) for k, v in state.items()},
                                       episode_starts)
        return heads(latent), next_state

    def export_module(self):
        return R2D2Acting(self)

    # -- learning ------------------------------------------------------------------------------
    def sequence_obs(self, observations, count, length):
        """[N, S, ...] observations -> the network's input for N * S rows, time-major."""
        def time_major(x):
            x = as_tensor(x, self.device)
            return x.transpose(0, 1).reshape(length * count, *x.shape[2:])
        if self.layout.structured:
            return structured_tensors({k: time_major(v) for k, v in observations.items()},
                                      self.device)
        x = time_major(observations)
        if not isinstance(self.q_net.encoder, Flatten):
            return x.reshape(-1, *self.observation_space.shape)
        return x.float().reshape(len(x), -1)

    def unpack(self, batch):
        s = getattr(batch, "transitions", batch)
        if isinstance(s.rewards, torch.Tensor):  # staged by a device round: read on the host
            s = type(s)(*(spaces.tree_map(lambda x: x.cpu().numpy(), column)
                          for column in s))
        if not hasattr(s, "bootstrap"):
            raise ValueError(f"model {type(self).__name__} learns from replayed sequences "
                             f"(agents/r2d2_agent.py); this batch holds "
                             f"{type(s).__name__}")
        device = self.device
        count, length = np.shape(s.rewards)
        following = s.next_observation
        # every position of the sequence and the observation after it: [S + 1, N]
        if self.layout.structured:
            observations = {k: np.concatenate([np.asarray(v), np.asarray(following[k])[:, None]],
                                              axis=1) for k, v in s.observations.items()}
        else:
            observations = np.concatenate([np.asarray(s.observations),
                                           np.asarray(following)[:, None]], axis=1)
        obs = self.sequence_obs(observations, count, length + 1)
        starts = torch.as_tensor(np.concatenate([np.asarray(s.starts, bool),
                                                 np.zeros((count, 1), bool)], axis=1).T.copy(),
                                 device=device)
        state = {name: torch.as_tensor(np.array(value, np.float32), device=device)
                 for name, value in s.state.items()}
        weights = getattr(batch, "weights", None)
        weights = (torch.ones(count, device=device) if weights is None
                   else torch.as_tensor(np.array(weights, np.float32), device=device))

        def time_major(x, dtype):
            return torch.as_tensor(np.array(x, dtype).T.copy(), device=device)
        return (obs, starts, state, time_major(s.actions, np.int64),
                time_major(s.rewards, np.float32), time_major(s.discounts, np.float32),
                time_major(s.bootstrap, np.int64), time_major(s.learn, np.float32),
                int(np.min(s.burn_in)), weights)

    def masked_positions(self, q, obs, positions, count):
        """``q`` [P, N, A] with each position's masked actions at MASKED_Q."""
        mask = action_mask_of(obs)
        if mask is None:
            return q
        mask = mask.reshape(positions, count, -1)
        return q.masked_fill(~mask[-len(q):], MASKED_Q)

    def unrolls(self, obs, starts, state, burn_in):
        """(online Q with gradients, target Q) [S + 1 - b, N, A] at the positions from the end
        of the burn-in b on, over a batch of sequences: both networks run the burn-in from the
        stored state only for the state it leaves (no gradient, no values)."""
        positions, count = starts.shape
        features = self.q_net.features(obs).reshape(positions, count, -1)
        with torch.no_grad():
            target_features = self.q_target.features(obs).reshape(positions, count, -1)
            online_state, target_state = state, state
            if burn_in:
                online_state = self.q_net.core.final_state(features[:burn_in].detach(), state,
                                                           starts[:burn_in])
                target_state = self.q_target.core.final_state(target_features[:burn_in],
                                                              state, starts[:burn_in])
            q_target = self.q_target.unroll(target_features[burn_in:], target_state,
                                            starts[burn_in:]).float()
        q_online = self.q_net.unroll(features[burn_in:], online_state, starts[burn_in:]).float()
        return (self.masked_positions(q_online, obs, positions, count),
                self.masked_positions(q_target, obs, positions, count))

    def update_loss(self, obs, starts, state, actions, returns, discounts, bootstrap, learn,
                    burn_in, weights):
        """The weighted Huber loss over the learned steps, statistics, and each sequence's
        priority (module docstring)."""
        q_online, q_target = self.unrolls(obs, starts, state, burn_in)
        length = len(actions)
        taken = q_online[:length - burn_in].gather(
            2, actions[burn_in:].unsqueeze(-1)).squeeze(-1)                  # [S - b, N]
        with torch.no_grad():
            # bootstrap positions are >= b + 1 where learned; the values start at b
            at = (bootstrap[burn_in:] - burn_in).clamp(min=0).unsqueeze(-1)  # [S - b, N, 1]
            chooser = q_online.detach() if self.args.double_q else q_target
            best_action = chooser.gather(0, at.expand(-1, -1, chooser.shape[-1])).argmax(-1)
            next_q = q_target.gather(0, at.expand(-1, -1, q_target.shape[-1])).gather(
                2, best_action.unsqueeze(-1)).squeeze(-1)
            if self.args.value_rescale:
                y = rescale(returns[burn_in:] + discounts[burn_in:] * unrescale(next_q))
            else:
                y = returns[burn_in:] + discounts[burn_in:] * next_q
        learned = learn[burn_in:]
        per_step = F.smooth_l1_loss(taken, y, reduction="none") * learned
        steps = learned.sum(0).clamp(min=1.0)                                # [N]
        loss = (weights * per_step.sum(0) / steps).mean()
        errors = (taken.detach() - y).abs() * learned
        eta = self.args.priority_eta
        priorities = eta * errors.max(0).values + (1.0 - eta) * errors.sum(0) / steps
        return loss, {"q_loss": loss.detach(),
                      "q_mean": (taken.detach() * learned).sum() / learned.sum().clamp(min=1.0),
                      "td_error_mean": errors.sum() / learned.sum().clamp(min=1.0)}, priorities

    @torch.no_grad()
    def td_errors(self, batch):
        """Each sequence's priority under the weights loaded now (an actor's initial ones)."""
        return self.update_loss(*self.unpack(batch))[2].cpu().numpy()

    def update_inputs(self, batch):
        return self.unpack(batch)


class R2D2Acting(nn.Module):
    """r2d2's greedy acting path as a module of tensors only (models/base.py
    ``export_module``): the observation tensors, the state tensors in ``initial_state``'s order
    and ``episode_starts`` in; the argmax of the Q values (masked actions at MASKED_Q) and the
    next state out."""

    def __init__(self, model):
        super().__init__()
        vectors = isinstance(model.q_net.encoder, Flatten) and not model.layout.structured
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=vectors)
        self.q_net = model.q_net
        self.state_names = list(model.initial_state(1))

    def forward(self, *inputs):
        batch = self.inputs(inputs)
        count = self.inputs.count
        state = dict(zip(self.state_names, inputs[count:-1]))
        q, next_state = self.q_net.step(batch, state, inputs[-1])
        q = q.float()
        mask = action_mask_of(batch)
        if mask is not None:
            q = q.masked_fill(~mask, MASKED_Q)
        return (q.argmax(-1), *(next_state[name] for name in self.state_names))
