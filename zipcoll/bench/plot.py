"""zipcoll-bench plot: time and bus bandwidth against message size, from benchmark JSON.

    zipcoll-bench plot benchmarks/results/2x2-1gbit/suite.json      # PNGs next to the file
    zipcoll-bench plot ring.json tree.json -o plots/ --name 4ranks   # several bench runs, one plot

Reads what `benchmarks/suite.py` writes (suite.json) and what `zipcoll-bench allreduce
--json` writes (one run, or a list of runs), and writes NAME-time.png (log-log),
NAME-busbw.png and NAME-speedup.png: one line per algorithm/codec, the MPI library's own
Allreduce dashed (the median over the runs that timed it, their range shaded).
Needs matplotlib: pip install 'zipcoll[plot]'.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING_MATPLOTLIB = "zipcoll-bench plot needs matplotlib: pip install 'zipcoll[plot]'"


@dataclass
class Series:
    """One algorithm/codec: its rows (one per size) and where they came from."""

    label: str
    ranks: int
    rows: list[dict]
    lossy: bool = False


@dataclass
class Figures:
    """Everything one set of plots shows."""

    title: str
    subtitle: str
    series: list[Series] = field(default_factory=list)


def load(paths: list[str | Path]) -> Figures:
    """Series from suite.json files, bench JSON files, or lists of bench runs."""
    series, contexts = [], []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict) and "combos" in data:          # benchmarks/suite.py
            contexts.append(data)
            runs = [dict(c, ranks=data["ranks"]) for c in data["combos"]]
        elif isinstance(data, dict) and "rows" in data:          # one zipcoll-bench run
            runs = [data]
        elif isinstance(data, list) and all(isinstance(d, dict) and "rows" in d for d in data):
            runs = data
        else:
            raise ValueError(f"{path}: neither suite.py's nor zipcoll-bench's JSON")
        contexts += runs
        for run in runs:
            if run["rows"]:
                label = run["algorithm"] + (f"+{run['codec']}" if run.get("codec") else "")
                series.append(Series(label, int(run["ranks"]), run["rows"], bool(run.get("codec"))))
    if not series:
        raise ValueError("no rows to plot in " + ", ".join(map(str, paths)))
    _disambiguate(series, paths)
    return Figures(_title(contexts, series), _subtitle(contexts), series)


def _disambiguate(series: list[Series], paths: list[str | Path]) -> None:
    """Same label twice (two runs of one combo): number them, so neither hides the other."""
    counts: dict[str, int] = {}
    for s in series:
        counts[s.label] = counts.get(s.label, 0) + 1
    seen: dict[str, int] = {}
    for s in series:
        if counts[s.label] > 1:
            seen[s.label] = seen.get(s.label, 0) + 1
            s.label = f"{s.label} #{seen[s.label]}"


def _title(contexts: list[dict], series: list[Series]) -> str:
    suites = {c["description"] + f" ({c['ranks']} ranks)" for c in contexts if "description" in c}
    if len(suites) == 1:
        return "Allreduce, " + suites.pop()
    ranks = sorted({s.ranks for s in series})
    hosts = {len(c.get("hosts") or []) for c in contexts if "hosts" in c}
    where = f", {hosts.pop()} node(s)" if len(hosts) == 1 else ""
    return f"Allreduce, {'/'.join(map(str, ranks))} ranks{where}"


def _subtitle(contexts: list[dict]) -> str:
    def one(key: str) -> str | None:
        values = {str(c[key]) for c in contexts if c.get(key)}
        return values.pop() if len(values) == 1 else None

    parts = []
    if one("zipcoll"):
        parts.append(f"zipcoll {one('zipcoll')}")
    if one("mpi_library"):
        parts.append(one("mpi_library"))
    dtype, op = one("dtype"), one("op")
    if dtype or op:
        parts.append(f"{dtype or ''} {op or ''}".strip())
    started = one("started") or one("timestamp")
    if started:
        parts.append(started[:10])
    if one("load_average_start"):
        parts.append(f"load avg {one('load_average_start')}")
    text = ", ".join(parts) + ("; " if parts else "") + "native = the MPI library's Allreduce, same runs"
    return f"{one('note')}\n{text}" if one("note") else text


# -- native: one line from every run that timed it ---------------------------------------
def native_points(series: list[Series]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(sizes, median, min, max) of native's average time in seconds, over the runs."""
    by_size: dict[int, list[float]] = {}
    for s in series:
        for r in s.rows:
            by_size.setdefault(r["size"], []).append(r["native_avg_us"] * 1e-6)
    sizes = sorted(by_size)
    return (sizes, [statistics.median(by_size[s]) for s in sizes],
            [min(by_size[s]) for s in sizes], [max(by_size[s]) for s in sizes])


def busbw(size: int, seconds: float, ranks: int) -> float:
    """GB/s, nccl-tests' bus bandwidth: size / time * 2(p-1)/p."""
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks if seconds > 0 else 0.0


def size_label(n: float) -> str:
    n = int(n)
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return str(n)


# -- drawing --------------------------------------------------------------------------
def _matplotlib() -> Any:
    """matplotlib's Figure class, imported only now (an optional dependency)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError as error:
        raise ImportError(MISSING_MATPLOTLIB) from error
    return Figure, FuncFormatter


MARKERS = "osD^v<>pP*Xh"


def draw(figs: Figures, out_dir: Path, name: str) -> list[Path]:
    """Write NAME-time.png, NAME-busbw.png and NAME-speedup.png into out_dir."""
    Figure, FuncFormatter = _matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes, native, low, high = native_points(figs.series)
    ranks = figs.series[0].ranks
    panels = {
        "time": ("Avg latency (ms), log scale", lambda r: r["avg_us"] / 1e3, [t * 1e3 for t in native]),
        "busbw": ("Bus bandwidth (GB/s) = size/time x 2(p-1)/p",
                  lambda r: r["busbw_gbs"], [busbw(s, t, ranks) for s, t in zip(sizes, native)]),
        "speedup": ("Speedup over native (native time / zipcoll time)", lambda r: r["speedup"],
                    [1.0] * len(sizes)),
    }
    written = []
    for key, (ylabel, value, native_y) in panels.items():
        fig = Figure(figsize=(9, 5.6), dpi=110, layout="constrained")
        ax = fig.add_subplot()
        if key == "time":
            ax.fill_between(sizes, [t * 1e3 for t in low], [t * 1e3 for t in high],
                            color="0.85", label="native, range over runs")
        ax.plot(sizes, native_y, "k--", lw=2, label="native (MPI Allreduce)" if key != "speedup" else "native = 1")
        for i, s in enumerate(figs.series):
            xs = [r["size"] for r in s.rows]
            ratio = s.rows[-1].get("compression_ratio")
            label = s.label + (f"  (codec ratio {ratio:.1f})" if ratio else "")
            ax.plot(xs, [value(r) for r in s.rows], marker=MARKERS[i % len(MARKERS)], ms=4,
                    lw=1.4, ls="-" if not s.lossy else "-.", color=f"C{i % 10}", label=label)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v)))
        if key in ("time", "speedup"):
            ax.set_yscale("log")
        ax.set_xlabel("message size per rank (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(fontsize=8, loc="upper left" if key == "time" else "best")
        fig.suptitle(figs.title, fontsize=12)
        ax.set_title(figs.subtitle, fontsize=8, color="0.35")
        path = out_dir / f"{name}-{key}.png"
        fig.savefig(path)
        written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipcoll-bench plot", description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="suite.json or zipcoll-bench allreduce --json files")
    p.add_argument("-o", "--out", default=None, help="output folder (default: the first file's)")
    p.add_argument("--name", default=None, help="file name prefix (default: the first file's stem)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Plot; prints the PNGs written. 2 on bad input or without matplotlib."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    first = Path(args.files[0])
    try:
        figs = load(args.files)
        paths = draw(figs, Path(args.out) if args.out else first.parent, args.name or first.stem)
    except (OSError, ValueError, KeyError, ImportError) as error:
        print(f"zipcoll-bench plot: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
