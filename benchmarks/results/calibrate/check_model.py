"""The cost model against the committed suites: would the model's pick have been near the best?

    PYTHONPATH=. python benchmarks/results/calibrate/check_model.py > benchmarks/results/calibrate/check.md

For each layout, the profile calibrated on it (this folder) prices the combos the suite
measured (benchmarks/results/<layout>/raw/*.json), at each size the suite measured them
all; the model's pick among them is compared with the measured best: "pick / best" is the
measured time of the model's pick over the measured best time. Lossless: native, ring,
rabenseifner, hierarchical; with a codec: those and the combos that use it. The suite and the calibration ran
at different times on a shared machine, so this is an offline preview, not the sweep
issue 13 asks for (that one runs `auto` itself).
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

from zipcoll.collectives.planning import PlanShape, Shape, load_profile, predict

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
    """{size: {combo: seconds}}, native as its own combo (median over runs at that size).

    Only the runs the suite lists (suite.json): raw/ also keeps files of earlier sweeps.
    """
    times = defaultdict(dict)
    natives = defaultdict(list)
    suite = json.load(open(RESULTS / layout / "suite.json"))
    for combo in suite["combos"]:
        for run in combo["runs"]:
            path = RESULTS.parent.parent / run["json"]
            if run.get("rc") != 0 or not path.exists():
                continue
            for row in json.load(open(path))["rows"]:
                times[row["size"]][combo["combo"]] = row["avg_us"] * 1e-6
                natives[row["size"]].append(row["native_avg_us"] * 1e-6)
    for size, values in natives.items():
        times[size]["native"] = sorted(values)[len(values) // 2]
    return times


def pick_ratio(times: dict, allowed: list, shape: Shape, profile, size: int) -> tuple[str, float]:
    """(the model's pick, its measured time / the measured best) among ``allowed`` combos."""
    def plan(combo):
        algorithm, _, codec = combo.partition("+")
        return plan_of(algorithm, codec or None)
    pick = min(allowed, key=lambda c: predict(plan(c), size, shape, profile))
    return pick, times[pick] / min(times[c] for c in allowed)


def main() -> int:
    print("# Cost model against the committed suites\n")
    print(__doc__.split("\n\n", 2)[2].strip() + "\n")
    print("Command: `PYTHONPATH=. python benchmarks/results/calibrate/check_model.py`\n")
    for layout, shape in LAYOUTS.items():
        profile = load_profile(str(HERE / f"{layout}.json"))
        times = measured(layout)
        combos = sorted(set.intersection(*(set(v) for v in times.values())))
        lossless = [c for c in combos if "+" not in c]
        codecs = sorted({c.partition("+")[2] for c in combos if "+" in c})
        print(f"## {layout} (profile: {layout}.json)\n")
        print("Each cell: the model's pick among the lossless combos (and, for a codec, the combos "
              "with it), its measured time / the measured best of that set.\n")
        print("| size | lossless | " + " | ".join(codecs) + " |")
        print("|---|---|" + "---|" * len(codecs))
        worst = {}
        for size in sorted(times):
            cells = []
            for label in ["lossless"] + codecs:
                allowed = lossless + [c for c in combos if label != "lossless" and c.endswith("+" + label)]
                pick, ratio = pick_ratio(times[size], allowed, shape, profile, size)
                worst[label] = max(worst.get(label, 0), ratio)
                cells.append(f"{pick} {ratio:.2f}")
            print(f"| {size >> 10} KiB | " + " | ".join(cells) + " |")
        print("| worst | " + " | ".join(f"{worst[k]:.2f}" for k in ["lossless"] + codecs) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
