"""Per layout: auto's own calls (tuned online, no profile) over the best plan measured, at
each size, and how many sizes are within 1.10x and 1.15x; from LAYOUT.online.json.

Runs that have it (autocheck's "paired" timing: each auto beside its mode's fastest plans
of the rounds, call by call in turn) are judged by it, from each call's time where the
run kept them (`autocheck.capped_means`: a stall counted as STALL x the median call);
older runs by the rounds."""
import json
import sys
from pathlib import Path

from zipcoll.bench.autocheck import capped_means

HERE = Path(__file__).resolve().parent


def ratios(path: Path, paired: bool = True) -> list[tuple[int, float, float | None]]:
    """(bytes, lossless auto / best lossless, auto with the codec / best) per size; from
    the paired timing where the run has it and `paired`, else from the rounds."""
    data = json.loads(path.read_text())
    rows = []
    for size in data["sizes"]:
        if paired and size.get("paired"):
            rows.append(_paired(size, data["codec"]))
            continue
        times = {**size["screened"], **size["seconds"]}
        lossless = [k for k in times if "+" not in k and not k.startswith("auto")
                    and k != "MPI_Allreduce"]
        every = [k for k in times if not k.startswith("auto") and k != "MPI_Allreduce"]
        best = _best(size, lossless)
        best_coded = _best(size, every)
        coded = size["seconds"].get(f"auto + {data['codec']}") if data["codec"] else None
        rows.append((size["nbytes"], size["seconds"]["auto"] / best,
                     None if coded is None else coded / best_coded))
    return rows


def _paired(size: dict, codec: str | None) -> tuple[int, float, float | None]:
    """auto's mean over the least of its mode's plans', each mode timed call by call in turn."""
    def ratio(mode: str) -> float:
        calls = size.get("paired_ms", {}).get(mode)
        times = capped_means(calls) if calls else size["paired"][mode]
        auto = "auto" if mode == "lossless" else f"auto + {mode}"
        return times[auto] / min(s for x, s in times.items() if x != auto)
    return size["nbytes"], ratio("lossless"), ratio(codec) if codec else None


def _best(size: dict, labels: list[str]) -> float:
    """The fastest of `labels` in the rounds, as autocheck's own table takes it (a
    screening time, a few calls, only where none of them was timed in the rounds).

    Runs before the lossless finalists were kept by the fastest lossless plan (see
    README.md) could leave a lossless mode with only its slower plans in the rounds."""
    rounds = [size["seconds"][k] for k in labels if k in size["seconds"]]
    return min(rounds) if rounds else min(size["screened"][k] for k in labels)


def main() -> None:
    for path in sorted(HERE.glob("**/*.online.json")):
        rows = ratios(path)
        print(f"## {path.relative_to(HERE).as_posix().split('.')[0]}\n")
        print("| size | auto / best lossless | auto + int8 / best plan |\n|---|---|---|")
        for nbytes, lossless, coded in rows:
            size = f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K"
            print(f"| {size} | {lossless:.2f} | {'-' if coded is None else f'{coded:.2f}'} |")
        for limit in (1.10, 1.15):
            ok = sum(r[1] <= limit for r in rows)
            ok_coded = sum(r[2] is not None and r[2] <= limit for r in rows)
            print(f"\nwithin {limit:.2f}x: lossless {ok} of {len(rows)} sizes, "
                  f"int8 allowed {ok_coded} of {len(rows)}", end="")
        worst = max(rows, key=lambda r: r[1])
        worst_coded = max(rows, key=lambda r: r[2] or 0)
        print(f"\nworst: lossless {worst[1]:.2f} at {worst[0]} B, int8 allowed "
              f"{worst_coded[2]:.2f} at {worst_coded[0]} B\n")


if __name__ == "__main__":
    sys.exit(main())
