"""Summarise the autocheck JSON files here: per layout and mode, how often auto's pick is
within 10% of the best plan measured, the worst sizes, and auto's own calls.

    python benchmarks/results/autocheck/summarize.py > benchmarks/results/autocheck/summary.md
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
LAYOUTS = ["1x4", "2x2-1gbit", "4x1-1gbit", "2x1-1gbit"]


def size_text(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def time_of(size: dict, label: str) -> float:
    return size["seconds"].get(label, size["screened"].get(label, float("inf")))


def modes(data: dict):
    yield "lossless", "auto", lambda label: " + " not in label
    if data["codec"]:
        yield data["codec"], f"auto + {data['codec']}", lambda label: True


def row(layout: str, data: dict, mode: str, auto: str, allowed) -> str:
    picks, autos, misses = [], [], []
    for size in data["sizes"]:
        plans = [x for x in size["screened"] if x != "MPI_Allreduce" and not x.startswith("auto")
                 and allowed(x)]
        best = min(time_of(size, x) for x in plans)
        pick = time_of(size, size["picks"][mode]) / best
        picks.append(pick)
        autos.append(size["seconds"][auto] / best)
        if pick > 1.10:
            misses.append(f"{size_text(size['nbytes'])} {pick:.2f}")
    within = sum(p <= 1.10 for p in picks)
    return (f"| {layout} | {mode} | {within} of {len(picks)} | {max(picks):.2f} | "
            f"{', '.join(misses) or '-'} | {min(autos):.2f}-{max(autos):.2f} |")


def main() -> int:
    print("| layout | auto allowed | sizes with pick/best <= 1.10 | worst pick/best | "
          "misses (size pick/best) | auto/best (its own calls) |")
    print("|---|---|---|---|---|---|")
    for layout in LAYOUTS:
        path = HERE / f"{layout}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        for mode, auto, allowed in modes(data):
            print(row(layout, data, mode, auto, allowed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
