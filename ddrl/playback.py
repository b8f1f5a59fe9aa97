"""``ddrl evaluate PATH``: the returns of a saved model; --record_video DIR: episodes as GIFs.

Runs in this process, without Ray: the policy is loaded as ``ddrl.load`` loads it
(ddrl/policy.py: the plugins and flags come from the checkpoint's configuration), then
--eval_episodes deterministic episodes run on fresh envs, as the test worker runs them.
Videos come from the env's rgb_array rendering (gymnasium's render_mode="rgb_array"), written
as animated GIFs with Pillow at the env's own frame rate.
"""
import dataclasses
import os

import numpy as np

from core.atomic import atomic_path
from core.sampling.envs import to_env_action
from core import seeding
from core.sampling.evaluator import Evaluator
from core.sampling.memory import EnvMemory, actions_only
from core.learning.normalizer import normalize
from core.plugins import load_plugins, make_env
from core import spaces
from core.errors import ConfigError
from ddrl.stats import bootstrap_interval


def evaluate_saved_model(args):
    """``ddrl evaluate PATH`` (``args``: the run's configuration with the flags given, as
    ``options.parse_args(["--evaluate", PATH, ...])`` makes it): the policy loaded as
    ``ddrl.load`` loads it (ddrl/policy.py), then --eval_episodes episodes on the test
    worker's envs, the mean and spread of their returns printed; --eval_seeds repeats them with
    other seeds, --record_video films some."""
    from ddrl.policy import policy_of
    policy = policy_of(args, "--evaluate")
    path, meta, spec = policy.path, policy.meta, policy.spec
    weights = policy.model.get_weights()
    statistics = policy.obs_statistics
    evaluator = Evaluator(spec, args.eval_episodes)
    evaluator.model.set_weights(weights)
    result = evaluator.evaluate(None, meta.get("updates", 0), meta.get("env_steps", 0),
                                statistics)
    if args.eval_seeds > 1:
        return evaluate_over_seeds(args, spec, weights, statistics, meta, path, result)
    returns = np.asarray(result["returns"])
    lost = result.get("eval_episodes_lost", 0)
    if lost:  # an episode whose env kept raising (core/sampling/evaluator.py)
        print(f"ddrl: {lost} episode(s) could not finish (the env kept raising) and are left "
              f"out", flush=True)
    if not len(returns):
        print(f"ddrl: {path}: no episode finished, so there is no return to report",
              flush=True)
        return result
    print(f"ddrl: {path} ({meta.get('env_steps', '?')} env steps): "
          f"{len(returns)} {'deterministic' if args.eval_deterministic else 'sampled'} "
          f"episodes, return {returns.mean():.2f} "
          f"+- {returns.std():.2f} (min {returns.min():.2f}, max {returns.max():.2f}, "
          f"mean length {result['eval_length']:.1f})", flush=True)
    if result.get("eval_success_rate") is not None:
        print(f"ddrl: success rate {result['eval_success_rate']:.2f} (the env's "
              f"info['is_success'] at each episode's last step)", flush=True)
    if args.record_video:
        for k in range(args.video_episodes):
            file = record_episode(spec, evaluator.model, args, k, args.record_video, statistics)
            print(f"ddrl: wrote {file}", flush=True)
    return result


def evaluate_over_seeds(args, spec, weights, statistics, meta, path, first):
    """--eval_seeds N: the evaluation above (the run's seed) and N - 1 more with seeds drawn
    from it (seeding.evaluation_repeat: no episode in common); each one's mean return, and the mean of those means with a 95% percentile
    bootstrap interval over the seeds (10,000 resamples, seeded: the same figures each time).
    Returns {"seed_means": [...], "mean": m, "ci95": (lo, hi), "returns": every episode's}."""
    results = [first]
    for offset in range(1, args.eval_seeds):
        seed = seeding.evaluation_repeat(args.seed, offset)
        evaluator = Evaluator(dataclasses.replace(spec, run=spec.run.replace(seed=seed)),
                              args.eval_episodes)
        evaluator.model.set_weights(weights)
        results.append(evaluator.evaluate(None, meta.get("updates", 0),
                                          meta.get("env_steps", 0), statistics))
    means = np.array([np.mean(r["returns"]) for r in results if len(r["returns"])])
    if not len(means):
        print(f"ddrl: {path}: no episode finished, so there is no return to report", flush=True)
        return {"seed_means": [], "returns": []}
    low, high = bootstrap_interval(means)
    for offset, result in enumerate(results):
        returns = np.asarray(result["returns"])
        success = result.get("eval_success_rate")
        print(f"ddrl: seed {seeding.evaluation_repeat(args.seed, offset)}: {len(returns)} "
              f"episodes, return "
              f"{returns.mean() if len(returns) else float('nan'):.2f} +- "
              f"{returns.std() if len(returns) else float('nan'):.2f}"
              f"{'' if success is None else f', success rate {success:.2f}'}", flush=True)
    print(f"ddrl: {path} ({meta.get('env_steps', '?')} env steps): {len(means)} seeds x "
          f"{args.eval_episodes} {'deterministic' if args.eval_deterministic else 'sampled'} "
          f"episodes, mean return {means.mean():.2f}, 95% interval [{low:.2f}, {high:.2f}] "
          f"(bootstrap over the seeds' means)", flush=True)
    out = {"seed_means": means.tolist(), "mean": float(means.mean()), "ci95": (low, high),
           "returns": [x for r in results for x in r["returns"]]}
    rates = [r["eval_success_rate"] for r in results if r.get("eval_success_rate") is not None]
    if rates:  # the env says is_success (BabyAI, MiniGrid, goal envs): its rate, alike
        out.update(seed_success_rates=rates, success_rate=float(np.mean(rates)),
                   success_ci95=bootstrap_interval(rates))
        print(f"ddrl: success rate {out['success_rate']:.2f}, 95% interval "
              f"[{out['success_ci95'][0]:.2f}, {out['success_ci95'][1]:.2f}] (the env's "
              f"info['is_success'] at each episode's last step; bootstrap over the seeds' "
              f"rates)", flush=True)
    return out


def record_episode(spec, model, args, k, directory, obs_statistics=None):
    """One episode (actions as --eval_deterministic says), rendered to
    DIRECTORY/episode-<k>.gif; returns the path."""
    from PIL import Image
    env = make_env(load_plugins(spec), spec.env.replace(render_mode="rgb_array"),
                   seed=seeding.evaluation_env(args.seed, k), evaluation=True)
    render = getattr(env, "render", None)
    if render is None:
        raise ConfigError(f"--record_video: env {args.env_name!r} has no render() method; its "
                          f"wrapper must render rgb_array frames (see envs/gym_env.py).")
    encode = spaces.layout_of(env.observation_space).encode
    obs, _ = env.reset(seed=seeding.evaluation_env(args.seed, k))
    frames = [render()]
    if frames[0] is None:
        raise ConfigError(f"--record_video: env {args.env_name!r} rendered nothing; it must "
                          f"accept render_mode='rgb_array' (gymnasium's) and return frames.")
    done = False
    memory = EnvMemory(model, 1)  # a recurrent policy's state
    while not done:
        seen = spaces.stack([encode(obs)])  # a batch of one
        if obs_statistics is not None:
            seen = normalize(seen, obs_statistics, args.obs_clip)
        action, _ = memory.act(model, seen, deterministic=args.eval_deterministic,
                               **actions_only(model))
        obs, _, terminated, truncated, _ = env.step(to_env_action(env.action_space, action[0]))
        frames.append(render())
        done = terminated or truncated
    getattr(env, "close", lambda: None)()
    fps = (getattr(getattr(env, "env", None), "metadata", None) or {}).get("render_fps") or 30
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"episode-{k}.gif")
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    with atomic_path(path, suffix=".gif") as tmp:  # Pillow picks the format by extension
        images[0].save(tmp, save_all=True, append_images=images[1:], loop=0,
                       duration=max(20, int(round(1000 / fps))))
    return path
