"""Per-call costs behind ddrl's design choices, measured on this machine.

    .venv/bin/python benchmarks/probe.py overheads --out benchmarks/results/overheads.json

- an empty actor call, one actor and two in parallel;
- weights of a 64x64 actor-critic to two actors: ray.put once and pass the reference, against
  inlining them in each call (core/distributed/placement.py:Placement.share picks by size);
- the same gradient round trip as ordinary calls and as a Ray Compiled Graph (--compiled_graph);
- one learner step: torch's default Adam against the fused kernel (models/ppo.py).
"""
import json
import os
import time

from probes import command


def per_call_ms(fn, n):
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def echo_actor():
    """The actor class: made here so that importing this module needs no Ray (Ray ships a
    class defined in a function to its workers by value)."""
    import numpy as np
    import ray

    @ray.remote(num_cpus=1)
    class Echo:
        def noop(self, *args):
            return None

        def gradients(self, weights, request=None):
            # The size of a GradientResult for the default model: ~10k float32 in 10 arrays.
            return {k: np.zeros_like(v) for k, v in weights.items()}

    return Echo


def add_args(parser):
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", default=None)


def run(args, argv):
    import ray
    import torch
    load_before = os.getloadavg()[0]
    torch.set_num_threads(1)

    import gymnasium as gym
    from models.ppo import PPOModel
    from options.options import parse_args
    model_args = parse_args(["--num_workers", "0", "--config", "none"])
    env = gym.make("CartPole-v1")
    model = PPOModel(model_args, env.observation_space, env.action_space)
    weights = model.get_weights()
    nbytes = sum(v.nbytes for v in weights.values())

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
             _node_ip_address="127.0.0.1")
    echo = echo_actor()
    actors = [echo.remote() for _ in range(2)]
    ray.get([a.noop.remote() for a in actors])
    n = args.calls
    results = {"weights_bytes": nbytes}
    results["empty_call_one_actor_ms"] = per_call_ms(lambda: ray.get(actors[0].noop.remote()), n)
    results["empty_call_two_actors_ms"] = per_call_ms(
        lambda: ray.get([a.noop.remote() for a in actors]), n)
    results["ray_put_weights_ms"] = per_call_ms(lambda: ray.put(weights), n)
    results["weights_by_put_two_actors_ms"] = per_call_ms(
        lambda: ray.get([a.gradients.remote(ref) for ref in [ray.put(weights)] for a in actors]), n)
    results["weights_inline_two_actors_ms"] = per_call_ms(
        lambda: ray.get([a.gradients.remote(weights) for a in actors]), n)

    from ray.dag import InputNode, MultiOutputNode
    with InputNode() as inp:
        dag = MultiOutputNode([a.gradients.bind(inp[0], inp[1]) for a in actors])
    graph = dag.experimental_compile()
    try:
        results["compiled_graph_two_actors_ms"] = per_call_ms(
            lambda: ray.get(graph.execute(weights, None)), n)
    finally:
        graph.teardown()
    ray.shutdown()

    gradients = {k: torch.randn_like(p) for k, p in model.named_parameters()}
    for name, fused in (("adam_default_step_ms", False), ("adam_fused_step_ms", True)):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-5, fused=fused)
        for k, p in model.named_parameters():
            p.grad = gradients[k].clone()
        results[name] = per_call_ms(optimizer.step, n)

    results = {k: round(v, 3) if isinstance(v, float) else v for k, v in results.items()}
    results["command"] = command(argv)
    results["load_before"] = load_before
    print(json.dumps(results, indent=2))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)

