"""Tables and plots of benchmarks/train/convergence.py's and step_time.py's JSON.

    python benchmarks/train/report.py benchmarks/results/train/convergence.json
    python benchmarks/train/report.py benchmarks/results/train/step_time.json
    python benchmarks/train/report.py benchmarks/results/train/time_to_accuracy.json

Writes, beside the JSON, a .md and a .png of the same name. Convergence: per task and
codec, final test accuracy mean and spread over the seeds, the gap to lossless, bytes
sent per step and rank, compression ratio against lossless, step time; the plot is test
accuracy against step (mean over seeds, one panel per task). Step time: per config, the
step split into compute and communication, and the speedup over DDP's own all-reduce;
the plot stacks the two. Time to accuracy: per config, the steps and seconds of training
until the test accuracy first reached the target, and the speedup over DDP's own
all-reduce; the plot is test accuracy against seconds of training.
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def group(runs: list[dict]) -> dict:
    """{task: {config: [runs over seeds]}}, in the order they ran."""
    by = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by[run["task"]][run["config"]].append(run)
    return by


def table(by: dict, meta: dict) -> str:
    lines = []
    for task, configs in by.items():
        lossless = configs.get("lossless")
        base_acc = np.mean([r["final_accuracy"] for r in lossless]) if lossless else None
        base_bytes = np.mean([r["bytes_per_step"] for r in lossless]) if lossless else None
        seeds = len(next(iter(configs.values())))
        params = next(iter(configs.values()))[0]["parameters"]
        lines += [f"### {task} ({params} parameters, {seeds} seeds)", "",
                  "| codec | schedule | final test accuracy (mean ± std) | min - max | "
                  "vs lossless (pp) | bytes sent / step / rank | compression | ms / step |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, runs in configs.items():
            acc = np.array([r["final_accuracy"] for r in runs])
            counted = [r["bytes_per_step"] for r in runs if r["bytes_per_step"] is not None]
            sent = np.mean(counted) if counted else None  # None: sent by gloo, not counted
            ms = 1e3 * np.mean([r["seconds_per_step"] for r in runs])
            gap = "" if base_acc is None else f"{100 * (acc.mean() - base_acc):+.2f}"
            rate = runs[0].get("compression")  # PowerSGD's own count of elements
            ratio = (f"{rate:.1f}x (elements)" if rate and sent is None else
                     "" if base_bytes is None or sent is None else f"{base_bytes / sent:.1f}x")
            spec = meta["configs"][name]
            shown = "n/a (gloo)" if sent is None else f"{sent:,.0f}"
            lines.append(f"| {name} | {_schedule(spec)} | {100 * acc.mean():.2f} ± "
                         f"{100 * acc.std():.2f} | {100 * acc.min():.2f} - {100 * acc.max():.2f} | "
                         f"{gap} | {shown} | {ratio} | {ms:.2f} |")
        lines.append("")
    return "\n".join(lines)


def _schedule(spec: dict | None) -> str:
    """What a config's all-reduce runs on (as hooks.schedule, without importing torch)."""
    if spec is None or spec.get("hook") in ("pytorch-powersgd", "fsdp-gloo"):
        return "gloo"
    if spec.get("hook") == "fsdp":  # FSDP2: its all-gather on gloo unless weights= is set
        return f"{spec.get('algorithm', 'auto')}; weights {spec.get('weights') or 'on gloo'}"
    return spec.get("algorithm", "auto")


def plot(by: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by), figsize=(6.5 * len(by), 4.8), squeeze=False)
    for ax, (task, configs) in zip(axes[0], by.items()):
        for name, runs in configs.items():
            steps = [s for s, _ in runs[0]["curve"]]
            mean = np.mean([[a for _, a in r["curve"]] for r in runs], axis=0)
            style = "-" if name == "lossless" else "--" if "EF" in name else ":"
            ax.plot(steps, 100 * mean, style, label=name, lw=2 if name == "lossless" else 1.3)
        ax.set(title=f"{task}: test accuracy (mean of {len(runs)} seeds)", xlabel="step",
               ylabel="test accuracy (%)")
        ax.set_ylim(max(0, ax.get_ylim()[0]), 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def step_split(rows: list[dict]) -> list[tuple[str, float, float, float | None]]:
    """(config, step, communication, in-hook) seconds; compute is rows[0]'s step."""
    compute = min(np.median(rows[0]["step"][:len(rows[0]["step"]) // 2]),
                  np.median(rows[0]["step"][len(rows[0]["step"]) // 2:]))
    out = [(rows[0]["config"], compute, 0.0, None)]
    for row in rows[1:]:
        step = float(np.median(row["step"]))
        out.append((row["config"], step, step - compute, row.get("in_hook_per_step")))
    return out


def step_time_report(data: dict, path: Path) -> str:
    meta, split = data["meta"], step_split(data["rows"])
    fsdp, base_name = meta.get("fsdp", False), meta.get("baseline", "DDP")
    baseline = next(step for name, step, _, _ in split if name.startswith(base_name))
    compute = split[0][1]
    a = meta["args"]
    how = (f"sharded by FSDP2 (each Linear layer and the model `fully_shard`ed, "
           f"{_layout(meta)}). Communication is the step less compute (FSDP's copies in and "
           f"out of its flat buffers included); in the collectives, the time in zipcoll's "
           f"reduce-scatters and all-gathers, forward's and backward's; bytes, what zipcoll "
           f"hands MPI (weights on gloo: the reduce-scatters' alone)." if fsdp else
           f"DDP's gradient_as_bucket_view: {a.get('bucket_view', False)}.")
    lines = ["# FSDP2 training step time: FSDP's own collectives (gloo) against zipcoll's"
             if fsdp else "# Training step time: DDP's own all-reduce against zipcoll's hook", "",
             f"{meta['ranks']} ranks, MLP of {meta['parameters'] / 1e6:.1f} M parameters "
             f"({4 * meta['parameters'] / 1e6:.0f} MB of float32 gradients), batch {a['batch']} "
             f"a rank, SGD with momentum, torch {meta['torch']} with {meta['torch_threads']} "
             f"thread(s) a rank; median of {a['steps']} steps after {a['warmup']}, slowest "
             f"rank{_rounds(a)}. {how} "
             f"Load average (1, 5, 15 min){_load_at_start(meta)} at the end: "
             f"{', '.join(f'{x:.1f}' for x in meta['load_average'])}.", "",
             f"Command (on the ranks): `{meta['command']}`", "",
             f"| config | schedule | step (ms) | compute (ms) | communication (ms) | "
             f"in the {'collectives' if fsdp else 'hook'} (ms) | speedup over "
             f"{base_name if fsdp else 'DDP'} | bytes sent / step / rank | compression |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = {row["config"]: row for row in data["rows"]}
    for name, step, comm, hook in split:
        row = rows[name]
        spec = row.get("hook")
        schedule = (_schedule(spec) if spec else "gloo" if name.startswith(base_name) else "-")
        sent, rate = row.get("bytes_per_step"), row.get("compression")
        lines.append(f"| {name} | {schedule} | {1e3 * step:.0f} | {1e3 * compute:.0f} | "
                     f"{1e3 * comm:.0f} | {'' if hook is None else f'{1e3 * hook:.0f}'} | "
                     f"{'' if name.startswith('compute') else f'{baseline / step:.2f}x'} | "
                     f"{'' if sent is None else f'{sent:,.0f}'} | "
                     f"{'' if rate is None else f'{rate:.1f}x (elements)'} |")
    _plot_split(split, path.with_suffix(".png"), _layout(meta), "FSDP2 " if fsdp else "")
    return "\n".join(lines) + f"\n\n![step time]({path.stem}.png)\n"


def _rounds(args: dict) -> str:
    rounds = args.get("rounds", 1)
    return f", configs in turn {rounds} times over (median of all {rounds * args['steps']} steps)" \
        if rounds > 1 else ""


def _load_at_start(meta: dict) -> str:
    start = meta.get("load_average_at_start")
    return f" at the start: {', '.join(f'{x:.1f}' for x in start)};" if start else ""


def _layout(meta: dict) -> str:
    per_node = meta.get("ranks_per_node", 1)
    return f"{meta['ranks'] // per_node} nodes x {per_node} rank{'s' if per_node > 1 else ''}"


def _plot_split(split: list, path: Path, layout: str, kind: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name, *_ in split[1:]]
    compute = split[0][1]
    comm = [c for _, _, c, _ in split[1:]]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.barh(names, [1e3 * compute] * len(names), label="compute")
    ax.barh(names, [1e3 * max(0.0, c) for c in comm], left=1e3 * compute, label="communication")
    ax.invert_yaxis()
    ax.set(xlabel="ms per training step", title=f"{kind}training step, {layout}, 1 Gbit/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def time_to_accuracy_report(data: dict, path: Path) -> str:
    meta, a = data["meta"], data["meta"]["args"]
    reached = {}
    for run in data["runs"]:
        hit = next(((step, sec) for step, sec, acc in run["curve"] if acc >= a["target"]), None)
        reached[run["config"]] = hit
    baseline = reached.get("DDP (gloo allreduce)")
    lines = ["# Time to a fixed test accuracy: DDP's own all-reduce against zipcoll's hook", "",
             f"{meta['ranks']} ranks, the 25.2 M-parameter MLP of step_time.py on digits at "
             f"32x32, batch {a['batch']} a rank, SGD lr {a['lr']} momentum 0.9, seed "
             f"{a['seed']}; target {100 * a['target']:.0f}% test accuracy (360 images), "
             f"evaluated every {a['eval_every']} steps, at most {a['max_steps']} steps. "
             f"torch {meta['torch']} with {meta['torch_threads']} thread(s) a rank. Load "
             f"average (1, 5, 15 min){_load_at_start(meta)} at the end: "
             f"{', '.join(f'{x:.1f}' for x in meta['load_average'])}.", "",
             f"Command (on the ranks): `{meta['command']}`", "",
             "| config | schedule | steps to target | training time to target (s) | "
             "ms / step | speedup over DDP | last accuracy |", "|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        name, hit, (last_step, last_sec, last_acc) = run["config"], reached[run["config"]], \
            run["curve"][-1]
        schedule = (run["hook"] or {}).get("algorithm", "gloo")
        if hit is None:
            cells = f"not in {last_step} | ({last_sec:.1f} s for {last_step}) "
            speed = ""
        else:
            cells = f"{hit[0]} | {hit[1]:.1f} "
            speed = f"{baseline[1] / hit[1]:.2f}x" if baseline else ""
        lines.append(f"| {name} | {schedule} | {cells}| {1e3 * last_sec / max(1, last_step):.0f} "
                     f"| {speed} | {100 * last_acc:.1f}% after {last_step} |")
    _plot_curves(data, path.with_suffix(".png"))
    return "\n".join(lines) + f"\n\n![time to accuracy]({path.stem}.png)\n"


def _plot_curves(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in data["runs"]:
        _, sec, acc = zip(*run["curve"])
        ax.plot(sec, [100 * x for x in acc], "o-", ms=3, label=run["config"])
    target = 100 * data["meta"]["args"]["target"]
    ax.axhline(target, color="grey", ls=":", lw=1)
    ax.set(xlabel="seconds of training (evaluation off the clock)", ylabel="test accuracy (%)",
           title=f"digits 32x32, {data['meta']['ranks']} ranks on 2 emulated nodes, 1 Gbit/s; "
                 f"target {target:.0f}%")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _through(meta: dict) -> str:
    if not meta.get("fsdp"):
        return "through zipcoll's DDP hook"
    return ("with PyTorch FSDP2 (each Linear layer and the model `fully_shard`ed): FSDP's own "
            "collectives on gloo against zipcoll's (`zipcoll.torch.fsdp_collectives`)")


def _loads(meta: dict) -> str:
    parts = meta.get("parts") or [meta]
    return "; ".join(", ".join(f"{x:.1f}" for x in part["load_average"]) for part in parts)


def _commands(meta: dict) -> str:
    parts = meta.get("parts") or [meta]
    return "Command" + ("s" if len(parts) > 1 else "") + ": " + ", ".join(
        f"`{part['command']}`" for part in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", type=Path)
    args = parser.parse_args()
    data = json.loads(args.json.read_text())
    if data.get("kind") == "time_to_accuracy":
        md = args.json.with_suffix(".md")
        md.write_text(time_to_accuracy_report(data, args.json))
        print(md.read_text())
        return
    if "rows" in data:
        md = args.json.with_suffix(".md")
        md.write_text(step_time_report(data, args.json))
        print(md.read_text())
        return
    meta, by = data["meta"], group(data["runs"])
    a = meta["args"]
    header = (f"# Convergence {_through(meta)}\n\n"
              f"{meta['ranks']} ranks, {a['steps']} steps, batch {a['batch']} per rank, SGD "
              f"lr {a['lr']} momentum 0.9, MLP with two hidden layers of {a['hidden']}; "
              f"torch {meta['torch']}. Whole matrix: {meta['seconds']:.0f} s. Load average at "
              f"the end {_loads(meta)} (2 cores, shared "
              f"machine: step times are only indicative).\n\n"
              f"{_commands(meta)}, then "
              f"`python benchmarks/train/report.py {args.json}`.\n\n")
    md = args.json.with_suffix(".md")
    md.write_text(header + table(by, meta) + f"\n![test accuracy]({args.json.stem}.png)\n")
    plot(by, args.json.with_suffix(".png"))
    print(md.read_text())


if __name__ == "__main__":
    main()
