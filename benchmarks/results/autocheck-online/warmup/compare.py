"""The done-means counts per run and layout: auto's own calls over the best plan, sizes
within 1.15x at 4-64 MiB and within 1.10x at 64 KiB-64 MiB, lossless and int8 allowed.

    python benchmarks/results/autocheck-online/warmup/compare.py RUN_DIR...

RUN_DIR: folders of LAYOUT.online.json (relative to autocheck-online/)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from summarize import HERE, ratios  # noqa: E402


def counts(rows, limit, smallest):
    chosen = [r for r in rows if r[0] >= smallest]
    lossless = [r[1] for r in chosen]
    coded = [r[2] for r in chosen]
    return (f"{sum(x <= limit for x in lossless)}/{len(chosen)} (worst {max(lossless):.2f})",
            f"{sum(x <= limit for x in coded)}/{len(chosen)} (worst {max(coded):.2f})")


def main() -> None:
    print("| run | layout | 4-64 MiB within 1.15x: lossless | int8 allowed "
          "| 64 KiB-64 MiB within 1.10x: lossless | int8 allowed |")
    print("|---|---|---|---|---|---|")
    for run in sys.argv[1:]:
        for path in sorted((HERE / run).glob("*.online.json")):
            rows = ratios(path)
            wide = counts(rows, 1.15, 4 << 20)
            every = counts(rows, 1.10, 0)
            print(f"| {run} | {path.name.split('.')[0]} | {' | '.join(wide + every)} |")


if __name__ == "__main__":
    main()
