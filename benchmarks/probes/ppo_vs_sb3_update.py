"""ddrl's PPO against SB3's, number for number, on Breakout: the same weights, the same rollout.

    .venv/bin/python benchmarks/probe.py ppo-update-vs-sb3 [--checkpoint RUN/checkpoints/last.pt]

1. SB3 PPO (RL-Zoo's Atari settings, on ddrl's env chain: benchmarks/sb3_ppo.py) gets the weights
   of a freshly built ddrl PPO model (Nature CNN, shared by both heads) and collects one rollout
   of 8 envs x 128 steps.
2. On that rollout ddrl's model gives the log-probabilities and values SB3 recorded, and ddrl's
   compute_gae the advantages SB3 computed.
3. One update on the whole rollout as a single minibatch: ddrl's PPOModel.step and Learner
   against SB3's train() (1 epoch, batch 1024, constant learning rate and clip range); the
   parameters after it are compared.
4. With --checkpoint: a ddrl checkpoint's policy evaluated by ddrl's test worker and by SB3's
   evaluate_policy (deterministic actions, whole games, --episodes each).

Prints the largest differences (outputs, GAE, gradients relative to their largest entry, the
weights after one Adam step; BENCHMARKS.md, "Atari: PPO learning", has those measured). Needs
benchmarks/requirements.txt (SB3).
"""
import os
import time

from probes import REPO

ENV_ID = "ALE/Breakout-v5"
# ddrl's parameter names -> SB3 ActorCriticCnnPolicy's (share_features_extractor=True)
SB3_NAMES = {"encoder.cnn.0": "features_extractor.cnn.0",
             "encoder.cnn.2": "features_extractor.cnn.2",
             "encoder.cnn.4": "features_extractor.cnn.4",
             "encoder.linear.0": "features_extractor.linear.0",
             "actor.0": "action_net", "critic.0": "value_net"}


def sb3_name(ddrl_name):
    prefix, leaf = ddrl_name.rsplit(".", 1)
    return f"{SB3_NAMES[prefix]}.{leaf}"


def load_into_sb3(sb3, ddrl_state):
    state = sb3.policy.state_dict()
    for name, tensor in ddrl_state.items():
        state[sb3_name(name)] = tensor.clone()
    sb3.policy.load_state_dict(state)


def capture_rollout():
    """A callback that copies SB3's rollout buffer at the end of collection, before train()
    uses it (made here: importing this module needs no SB3)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class CaptureRollout(BaseCallback):
        def __init__(self):
            super().__init__()
            self.data = {}

        def _on_step(self):
            return True

        def _on_rollout_end(self):
            b = self.model.rollout_buffer
            self.data = dict(obs=b.observations.copy(), actions=b.actions.copy(),
                             log_probs=b.log_probs.copy(), advantages=b.advantages.copy(),
                             returns=b.returns.copy(), values=b.values.copy(),
                             rewards=b.rewards.copy(), episode_starts=b.episode_starts.copy(),
                             last_obs=self.model._last_obs.copy(),
                             last_starts=self.model._last_episode_starts.copy())

    return CaptureRollout()


def compare_update(seed):
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.default_agent import compute_gae
    from core.learning.learner import Learner
    from models.ppo import PPOBatch, PPOModel
    from options.options import parse_args
    from sb3_ppo import PRESETS, atari_env
    args = parse_args(["--config", os.path.join(REPO, "configs", "ppo-atari.yaml"),
                       "--lr_schedule", "constant", "--clip_schedule", "constant"])
    env = DummyVecEnv([lambda i=i: atari_env(ENV_ID, seed + i) for i in range(8)])
    hyper = dict(PRESETS[ENV_ID]["ppo"], n_epochs=1, batch_size=1024, learning_rate=args.lr,
                 clip_range=args.clip_range)
    sb3 = PPO(env=env, seed=seed, device="cpu", verbose=0, **hyper)
    torch.manual_seed(seed)
    ddrl = PPOModel(args, env.observation_space, env.action_space)
    start = {name: t.clone() for name, t in ddrl.state_dict().items()}
    load_into_sb3(sb3, start)
    capture = capture_rollout()
    sb3.learn(total_timesteps=1024, callback=capture)  # one rollout, then one train()
    c, n = capture.data, 1024

    obs = torch.as_tensor(c["obs"].reshape(n, *env.observation_space.shape))
    actions = torch.as_tensor(c["actions"].reshape(n)).long()
    with torch.no_grad():
        features = ddrl.features(obs)
        log_probs = ddrl.log_prob(ddrl.distribution(features), actions).numpy()
        values = ddrl.values(features).numpy()
        last_values = ddrl.values(ddrl.features(torch.as_tensor(c["last_obs"]))).numpy()
    print(f"log-probs of the rollout's actions: max |ddrl - SB3| "
          f"{np.abs(log_probs - c['log_probs'].reshape(n)).max():.1e}")
    print(f"values: max |ddrl - SB3| {np.abs(values - c['values'].reshape(n)).max():.1e}")

    # SB3 marks episode starts; ddrl's GAE takes each step's own end (no time limits here).
    ends = np.concatenate([c["episode_starts"][1:], c["last_starts"][None]]).astype(bool)
    next_values = np.concatenate([c["values"][1:], last_values[None]])
    advantages, _ = compute_gae(c["rewards"], c["values"], next_values, ends,
                                np.zeros_like(ends), args.gamma, args.gae_lambda)
    print(f"GAE advantages: max |ddrl - SB3| {np.abs(advantages - c['advantages']).max():.1e} "
          f"(their std {c['advantages'].std():.3f})")

    adv = torch.as_tensor(c["advantages"].reshape(n))
    # as SB3 normalizes a minibatch (torch's std: n - 1)
    batch = PPOBatch(obs, actions, torch.as_tensor(c["log_probs"].reshape(n)),
                     (adv - adv.mean()) / (adv.std() + 1e-8),
                     torch.as_tensor(c["returns"].reshape(n)),
                     torch.as_tensor(c["values"].reshape(n)))
    gradients, stats = ddrl.step(batch, 0.0)
    Learner(ddrl).apply(gradients, 0.0)
    sb3_after = sb3.policy.state_dict()
    print(f"losses: ddrl policy {stats['policy_loss']:.6f} value {stats['value_loss']:.6f} "
          f"entropy {stats['entropy']:.6f}; SB3 value "
          f"{sb3.logger.name_to_value['train/value_loss']:.6f} entropy "
          f"{-sb3.logger.name_to_value['train/entropy_loss']:.6f}")
    # Adam's first step moves every weight by about the learning rate whatever the gradient's
    # size: the gradients themselves (after clipping to max_grad_norm, left in .grad by both).
    sb3_params = dict(sb3.policy.named_parameters())
    worst_grad = 0.0
    for name, param in ddrl.named_parameters():
        theirs = sb3_params[sb3_name(name)].grad
        worst_grad = max(worst_grad, float((param.grad - theirs).abs().max()
                                           / (theirs.abs().max() + 1e-30)))
    print(f"gradients (clipped): largest difference {worst_grad:.1e} of the largest entry, "
          f"per parameter")
    worst = 0.0
    for name, tensor in ddrl.state_dict().items():
        moved = float((tensor - start[name]).abs().max())
        diff = float((tensor - sb3_after[sb3_name(name)]).abs().max())
        worst = max(worst, diff)
        print(f"  {name:24s} moved {moved:.2e}  |ddrl - SB3| after the update {diff:.1e}")
    print(f"one update: parameters differ by at most {worst:.1e}")


def compare_evaluation(checkpoint, episodes):
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from core.run.checkpoint import load_checkpoint
    from core.sampling.evaluator import Evaluator
    from options.options import parse_args, run_spec
    from sb3_ppo import PRESETS, atari_env
    args = parse_args(["--config", os.path.join(REPO, "configs", "ppo-atari.yaml"),
                       "--eval_episodes", str(episodes)])
    payload, _ = load_checkpoint(checkpoint)
    t = time.time()
    evaluator = Evaluator(run_spec(args),
                          episodes)
    result = evaluator.evaluate({k: v.numpy() for k, v in payload["model"].items()})
    print(f"ddrl's test worker: returns {result['returns']}, mean length "
          f"{result['eval_length']:.0f} ({time.time() - t:.0f} s)")
    sb3 = PPO(env=DummyVecEnv([lambda: atari_env(ENV_ID, 0)]), device="cpu", verbose=0,
              **dict(PRESETS[ENV_ID]["ppo"], batch_size=128))
    load_into_sb3(sb3, payload["model"])
    t = time.time()
    returns, lengths = evaluate_policy(sb3, atari_env(ENV_ID, 10_000, evaluation=True),
                                       n_eval_episodes=episodes, deterministic=True,
                                       return_episode_rewards=True)
    print(f"SB3's evaluate_policy: returns {returns}, lengths {lengths} ({time.time() - t:.0f} s)")


def add_args(parser):
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="a ddrl Breakout PPO checkpoint")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--torch_threads", type=int, default=1)


def run(args, argv):
    import torch
    torch.set_num_threads(args.torch_threads)
    compare_update(args.seed)
    if args.checkpoint:
        compare_evaluation(args.checkpoint, args.episodes)
