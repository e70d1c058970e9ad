"""auto's own overhead in an autocheck --online run: at each size and mode, the plan auto
ran most in the paired timing, and auto's median call running it over the median call of
the same plan named, timed call by call in turn with it.

    python auto_over_named.py second/*.online.json
"""
import json
import sys
from collections import Counter

import numpy as np

for path in sys.argv[1:]:
    data = json.load(open(path))
    rows = []
    for size in data["sizes"]:
        for mode, ran in size.get("auto_ran", {}).items():
            calls = size["paired_ms"][mode]
            auto = "auto" if mode == "lossless" else f"auto + {mode}"
            plan, _ = Counter(ran).most_common(1)[0]
            if plan in calls and plan != auto:
                mine, which = np.array(calls[auto]), np.array(ran)
                rows.append((size["nbytes"], np.median(mine[which == plan]) / np.median(calls[plan])))
    small = [ratio for nbytes, ratio in rows if nbytes <= 256 << 10]
    print(f"{path}: 64-256 KiB " + " ".join(f"{r:.3f}" for r in small)
          + f" | every size: median {np.median([r for _, r in rows]):.3f} of {len(rows)}")
