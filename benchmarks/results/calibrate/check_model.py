"""The cost model against the committed suites: would the model's pick have been near the best?

    PYTHONPATH=. python benchmarks/results/calibrate/check_model.py > benchmarks/results/calibrate/check.md

For each layout, the profile calibrated on it (this folder) prices the combos the suite
measured (benchmarks/results/<layout>/raw/*.json), at each size the suite measured them
all; the model's pick among them is compared with the measured best: "pick / best" is the
measured time of the model's pick over the measured best time. Lossless: native, ring,
rabenseifner, hierarchical; with a codec: every combo. The suite and the calibration ran
at different times on a shared machine, so this is an offline preview, not the sweep
issue 13 asks for (that one runs `auto` itself).
"""
import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

from zipcoll.topologies.cost import PlanShape, Shape, load_profile, predict

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
LAYOUTS = {"1x4-shm": Shape(4, 1, 4), "2x2-1gbit": Shape(4, 2, 2), "4x1-1gbit": Shape(4, 4, 1)}
LOSSLESS = ("native", "ring", "rabenseifner", "hierarchical")


def plan_of(algorithm: str, codec: str | None) -> PlanShape:
    if algorithm == "hierarchical":
        return PlanShape("hierarchical", "allgather" if codec and codec.startswith("topk") else "ring",
                         None, codec)
    return PlanShape(algorithm, None, None, codec)


def measured(layout: str) -> dict:
    """{size: {combo: seconds}}, native as its own combo (median over runs at that size)."""
    times = defaultdict(dict)
    natives = defaultdict(list)
    for path in glob.glob(str(RESULTS / layout / "raw" / "*.json")):
        data = json.load(open(path))
        combo = data["algorithm"] + (f"+{data['codec']}" if data.get("codec") else "")
        for row in data["rows"]:
            times[row["size"]][combo] = row["avg_us"] * 1e-6
            natives[row["size"]].append(row["native_avg_us"] * 1e-6)
    for size, values in natives.items():
        times[size]["native"] = sorted(values)[len(values) // 2]
    return times


def main() -> int:
    print("# Cost model against the committed suites\n")
    print(__doc__.split("\n\n", 2)[2].strip() + "\n")
    print("Command: `PYTHONPATH=. python benchmarks/results/calibrate/check_model.py`\n")
    for layout, shape in LAYOUTS.items():
        profile = load_profile(str(HERE / f"{layout}.json"))
        times = measured(layout)
        combos = set.intersection(*(set(v) for v in times.values()))
        print(f"## {layout}\n\n| size | set | measured best | model's pick | pick / best |")
        print("|---|---|---|---|---|")
        for size in sorted(times):
            for label, allowed in (("lossless", [c for c in combos if c.split("+")[0] in LOSSLESS and "+" not in c]),
                                   ("any codec", sorted(combos))):
                measured_row = {c: times[size][c] for c in allowed}
                def plan(c):
                    algorithm, _, codec = c.partition("+")
                    return plan_of(algorithm, codec or None)
                predicted = {c: predict(plan(c), size, shape, profile) for c in allowed}
                best = min(measured_row, key=measured_row.get)
                pick = min(predicted, key=predicted.get)
                ratio = measured_row[pick] / measured_row[best]
                print(f"| {size >> 10} KiB | {label} | {best} {measured_row[best] * 1e3:.2f} ms | "
                      f"{pick} {measured_row[pick] * 1e3:.2f} ms | {ratio:.2f} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
