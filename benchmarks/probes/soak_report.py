"""The soak probe's verdicts and report (benchmarks/probes/soak.py takes the samples): growth of
every process's RSS and of the object store after the warm-up, the markdown table and the plot."""
import json
import os
import shlex
import statistics

ENDS = 3  # samples whose median is taken at the end of the warm-up and at the end


def mb(x):
    return "-" if x is None else f"{x / 2**20:,.1f}"


def growth(series, t_warm):
    """Median of the first ENDS values at or after t_warm, median of the last ENDS values, and
    their ratio - 1; None when the series does not cover both ends."""
    after = [(t, v) for t, v in series if t >= t_warm]
    if len(after) < 2:
        return None
    k = min(ENDS, len(after) // 2)
    base = statistics.median(v for _, v in after[:k])
    end = statistics.median(v for _, v in after[-k:])
    return dict(base=base, end=end, max=max(v for _, v in after),
                growth=(end - base) / base if base else None)


def verdicts(samples, t_warm, threshold):
    """Per process (alive at the warm-up's end and at the end), the total and the object store."""
    t_end = samples[-1]["t"] if samples else 0.0
    first_after = next((s["t"] for s in samples if s["t"] >= t_warm), None)
    pids = sorted({pid for s in samples for pid in s["processes"]}, key=int)
    procs = []
    for pid in pids:
        seen = [(s["t"], s["processes"][pid]) for s in samples if pid in s["processes"]]
        titles = [p["title"] for _, p in seen if p["title"] != "ray::IDLE"] or ["ray::IDLE"]
        rec = dict(pid=int(pid), name=f"{titles[-1]} {pid}", first_s=seen[0][0], last_s=seen[-1][0])
        if seen[0][0] > (first_after if first_after is not None else t_end) or seen[-1][0] < t_end:
            rec["status"] = "started after the warm-up" if seen[-1][0] >= t_end else "ended before the end"
        else:
            rec.update(rss=growth([(t, p["rss"]) for t, p in seen], t_warm),
                       anon=growth([(t, p.get("anon", 0)) for t, p in seen], t_warm))
            g = rec["rss"] and rec["rss"]["growth"]
            rec["status"] = "no samples after the warm-up" if g is None else (
                "GROWS" if g > threshold else "flat")
        procs.append(rec)
    total = growth([(s["t"], sum(p["rss"] for p in s["processes"].values())) for s in samples], t_warm)
    store = growth([(s["t"], s["object_store"]["used"]) for s in samples
                    if "used" in s["object_store"]], t_warm)
    if store:  # a few hundred kB of weights coming and going are no leak
        store["flagged"] = bool(store["growth"] is not None and store["growth"] > threshold
                                and store["end"] - store["base"] > 2**20)
    return procs, total, store


def run_summary(run_dir, t_warm, buffer_size):
    """What the run did after the warm-up (metrics.csv): env steps/s, updates/s, and whether the
    replay buffer was full at the warm-up's end."""
    from scaling import read_rows
    rows = [r for r in read_rows(run_dir) if r.get("wall_time_s") is not None]
    after = [r for r in rows if r["wall_time_s"] >= t_warm]
    out = dict(rows=len(rows))
    if len(after) >= 2:
        span = after[-1]["wall_time_s"] - after[0]["wall_time_s"]
        out["steps_per_s"] = (after[-1]["env_steps"] - after[0]["env_steps"]) / span if span else None
        if after[0].get("updates") is not None and after[-1].get("updates") is not None:
            out["updates_per_s"] = (after[-1]["updates"] - after[0]["updates"]) / span if span else None
        out["workers"] = after[-1].get("workers")
    if after and after[0].get("replay_size") is not None:
        out["replay_size_at_warmup_end"] = after[0]["replay_size"]
        out["buffer_size"] = buffer_size
        out["buffer_full_at_warmup_end"] = buffer_size is not None and after[0]["replay_size"] >= buffer_size
    return out


def flag_value(flags, name):
    words = shlex.split(flags)
    found = [words[i + 1] for i, w in enumerate(words[:-1]) if w == name]
    return found[-1] if found else None


def markdown(data):
    procs, total, store = data["processes"], data["total"], data["object_store"]
    pct = lambda g: "-" if not g or g.get("growth") is None else f"{100 * g['growth']:+.1f}%"  # noqa: E731
    lines = [f"Soak: {data['minutes']:g} min, a sample every {data['interval']:g} s, growth from "
             f"{data['warmup_minutes']:g} min to the end (median of {ENDS} samples at each end), "
             f"flagged above {100 * data['threshold']:.0f}%.", "",
             "| process | RSS at warm-up end (MB) | at the end (MB) | max (MB) | growth | anon growth | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for p in procs:
        r = p.get("rss")
        if r:
            lines.append(f"| {p['name']} | {mb(r['base'])} | {mb(r['end'])} | {mb(r['max'])} | {pct(r)} | "
                         f"{pct(p.get('anon'))} | {p['status']} |")
        else:
            lines.append(f"| {p['name']} | | | | | | {p['status']} ({p['first_s']:.0f}-{p['last_s']:.0f} s) |")
    if total:
        lines.append(f"| **all processes** | {mb(total['base'])} | {mb(total['end'])} | {mb(total['max'])} | "
                     f"{pct(total)} | | |")
    if store:
        lines.append(f"| **object store (used)** | {mb(store['base'])} | {mb(store['end'])} | {mb(store['max'])} | "
                     f"{pct(store)} | | {'GROWS' if store['flagged'] else 'bounded'} |")
    grows = [p["name"] for p in procs if p["status"] == "GROWS"]
    lines += ["", f"Run after the warm-up: {json.dumps(data['run'])}",
              "Verdict: " + (f"{len(grows)} process(es) grew by more than {100 * data['threshold']:.0f}%: "
                             + ", ".join(grows) if grows else "every process's RSS flat")
              + ("; object store grows." if store and store["flagged"] else "; object store bounded.")]
    return "\n".join(lines)


def plot(path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = data["samples"]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(14, 8), sharex=True, gridspec_kw=dict(height_ratios=[3, 1]))
    names = {str(p["pid"]): p["name"] for p in data["processes"]}
    colours = plt.get_cmap("tab20").colors
    for i, (pid, name) in enumerate(names.items()):
        pts = [(s["t"] / 60, s["processes"][pid]["rss"] / 2**20) for s in samples if pid in s["processes"]]
        ax.plot(*zip(*pts), lw=1, color=colours[i % 20], ls="-" if i < 20 else "--", label=name)
    t_warm = data["warmup_minutes"]
    for a in (ax, ax2):
        a.axvline(t_warm, color="k", ls="--", lw=1)
    ax.set(ylabel="RSS (MB)", title="Soak: RSS of every process of the run (warm-up ends at the dashed line)")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    pts = [(s["t"] / 60, s["object_store"]["used"] / 2**20) for s in samples if "used" in s["object_store"]]
    if pts:
        ax2.plot(*zip(*pts), color="C3")
    ax2.set(xlabel="minutes since main.py started", ylabel="object store used (MB)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")


def report(args_out, data):
    os.makedirs(os.path.dirname(os.path.abspath(args_out)), exist_ok=True)
    data["markdown"] = markdown(data)
    with open(args_out, "w") as f:
        json.dump(data, f, indent=1)
    plot(os.path.splitext(args_out)[0] + ".png", data)
    print("\n" + data["markdown"] + f"\n\nWrote {args_out} and {os.path.splitext(args_out)[0]}.png")


def replot(path):
    with open(path) as f:
        data = json.load(f)
    plot(os.path.splitext(path)[0] + ".png", data)
    print(markdown(data))
