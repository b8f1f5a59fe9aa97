"""The sampling probe's tables and plot (benchmarks/probes/sampling.py measures): the median and
spread over the passes of every cell and raw-loop case, the markdown tables for BENCHMARKS.md,
and the log-log plot of steps/s against env steps per collect."""
import statistics

LABELS = {
    "local": "local worker in the driver (`--num_workers 0`)",
    "ray-1": "1 Ray worker",
    "ray-2": "2 Ray workers (steps of both)",
    "ray-1-env-actors": "1 Ray worker, `--env_placement actor`",
    "ray-1-env-host": "1 Ray worker, `--env_placement actor --envs_per_actor E`",
}


def kfmt(x):
    if x is None:
        return "—"
    return f"{x / 1e3:,.1f}k" if x >= 1e3 else f"{x:,.0f}"


def spread(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def summarize(result):
    """Median and spread over the passes: every platform cell, and every raw-loop case."""
    groups = {}
    for c in result["cells"]:
        if "steps_per_s" in c:
            key = (c["config"], c["env_placement"], c["num_envs_per_worker"], c["rollout_steps"])
            groups.setdefault(key, []).append(c)
    cells = []
    for (cfg, placement, e, t), cs in groups.items():
        cells.append(dict(config=cfg, env_placement=placement, num_envs_per_worker=e,
                          rollout_steps=t, steps_per_round_per_worker=e * t,
                          steps_per_s=spread([c["steps_per_s"] for c in cs]),
                          overhead_ms_per_round=statistics.median(
                              c["overhead_ms_per_round"] for c in cs),
                          cores_used_by_others_max=max(c["cores_used_by_others"] for c in cs),
                          cores_stolen_max=max(c["cores_stolen"] for c in cs)))
    raws = result["raw"]
    raw = dict(random_actions_1env=spread([r["random_actions_1env"] for r in raws]),
               policy={n: spread([r["policy"][n] for r in raws]) for n in raws[0]["policy"]})
    return dict(cells=cells, raw=raw)


def find(summary, cfg, e, t):
    placement = "actor" if cfg.startswith("ray-1-env-") else "worker"
    return next((c for c in summary["cells"] if (c["config"], c["env_placement"],
                 c["num_envs_per_worker"], c["rollout_steps"]) == (cfg, placement, e, t)), None)


def median_of(cell):
    return cell["steps_per_s"]["median"] if cell else None


def markdown(result, opts):
    summary = result["summary"]
    passes = opts.passes
    cols = [(e, t) for e in opts.num_envs for t in opts.rollout_steps]
    lines = [f"Env steps/s sampled through the platform on {opts.gym_id}, PPO policy inference and "
             f"GAE included, median of {passes} passes. Columns are envs per worker × fragment "
             f"length (steps per env per collect). — means not measured (E×T above "
             f"{opts.max_steps_per_round:,}).", "",
             "| configuration | " + " | ".join(f"{e}×{t}" for e, t in cols) + " |",
             "| --- |" + " ---: |" * len(cols)]
    for cfg in [c for c in ("local", "ray-1", "ray-2") if c in result["configs"]]:
        lines.append(f"| {LABELS[cfg]} | "
                     + " | ".join(kfmt(median_of(find(summary, cfg, e, t))) for e, t in cols) + " |")
    raw = summary["raw"]
    lines.append("| raw gymnasium loop, batched 64×64 policy (no fragments) | " + " | ".join(
        kfmt(raw["policy"][str(e)]["median"]) if str(e) in raw["policy"] else "—"
        for e, _t in cols) + " |")
    if opts.actor_envs and "ray-1-env-actors" in result["configs"]:
        e, ts = opts.actor_envs, opts.actor_rollout_steps
        lines += ["", f"Env placement, 1 Ray worker with {e} envs:", "",
                  "| env placement | " + " | ".join(f"{e}×{t}" for t in ts) + " |",
                  "| --- |" + " ---: |" * len(ts)]
        for cfg, label in (("ray-1", "`worker` (envs inside the worker, the default)"),
                           ("ray-1-env-actors", "`actor` (one actor per env)"),
                           ("ray-1-env-host", f"`actor --envs_per_actor {e}` (one actor hosting all)")):
            if cfg not in result["configs"]:
                continue
            lines.append(f"| {label} | "
                         + " | ".join(kfmt(median_of(find(summary, cfg, e, t))) for t in ts) + " |")
    rnd = raw["random_actions_1env"]
    lines += ["", f"Raw gymnasium loop in the same run ({len(result['raw'])} times, median [min, max]): "
                  f"random actions with 1 env {kfmt(rnd['median'])} [{kfmt(rnd['min'])}, "
                  f"{kfmt(rnd['max'])}]; batched policy "
                  + ", ".join(f"{n} env{'s' if int(n) > 1 else ''} {kfmt(v['median'])} "
                              f"[{kfmt(v['min'])}, {kfmt(v['max'])}]"
                              for n, v in raw["policy"].items()) + " steps/s."]
    oh = result.get("local_collect_1step_1env")
    if oh:
        lines += ["", f"One local collect of 1 step with 1 env takes "
                      f"{oh['new_weights_every_call_us']:,.0f} us when it loads new weights (as every "
                      f"round here and every training iteration does), and "
                      f"{oh['same_weights_us']:,.0f} us when it does not."]
    load = result["load"]
    others = [c["cores_used_by_others_max"] for c in summary["cells"]]
    stolen = [c["cores_stolen_max"] for c in summary["cells"]]
    lines += ["", f"Load average (1 min) before: {load['loadavg_before'][0]:.2f}, after: "
                  f"{load['loadavg_after'][0]:.2f}, on {result['machine']['nproc']} cores. While "
                  f"timing, other processes (Ray's daemons included) used at most "
                  f"{max(others):.2f} cores (median cell {statistics.median(others):.2f}), and the "
                  f"hypervisor stole at most {max(stolen):.2f}." if others else "",
              "", f"Command: `{result['command']}`"]
    return "\n".join(lines)


def plot(path, result, opts):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12.5, 6.5))
    colours = {"local": "C0", "ray-1": "C1", "ray-2": "C2", "ray-1-env-actors": "C3",
               "ray-1-env-host": "C4"}
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v"]
    cells = result["summary"]["cells"]
    keys = sorted({(c["config"], c["num_envs_per_worker"]) for c in cells},
                  key=lambda k: (list(colours).index(k[0]), k[1]))
    envs_seen = sorted({k[1] for k in keys})
    for cfg, e in keys:
        pts = sorted((c["steps_per_round_per_worker"], c["steps_per_s"]) for c in cells
                     if (c["config"], c["num_envs_per_worker"]) == (cfg, e))
        x = [p[0] for p in pts]
        y = [p[1]["median"] for p in pts]
        err = [[p[1]["median"] - p[1]["min"] for p in pts], [p[1]["max"] - p[1]["median"] for p in pts]]
        i = envs_seen.index(e)
        ax.errorbar(x, y, yerr=err, color=colours.get(cfg, "k"), ls=styles[i % len(styles)],
                    marker=markers[i % len(markers)], capsize=2, lw=1.3,
                    label=f"{cfg}, {e} env{'s' if e > 1 else ''}/worker")
    raw = result["summary"]["raw"]
    ax.axhline(raw["random_actions_1env"]["median"], color="k", lw=1.2, ls=(0, (6, 2)),
               label="raw loop, random actions, 1 env")
    greys = ["0.25", "0.45", "0.65", "0.8"]
    for j, (n, v) in enumerate(raw["policy"].items()):
        ax.axhline(v["median"], color=greys[j % len(greys)], lw=1, ls=(0, (2, 2)),
                   label=f"raw loop, batched policy, {n} env{'s' if int(n) > 1 else ''}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="env steps per collect per worker (envs per worker × fragment length)",
           ylabel="env steps/s (all workers together)",
           title=f"{opts.gym_id}: sampling through ddrl (PPO policy + GAE) against the raw gymnasium "
                 f"loop\nmedian [min, max] of {opts.passes} passes; {result['machine']['nproc']} cores, "
                 f"load before {result['load']['loadavg_before'][0]:.2f}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
