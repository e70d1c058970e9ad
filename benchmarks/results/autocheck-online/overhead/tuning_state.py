"""What auto's online tuning held at one size of an autocheck --online run (its JSON's
"tuning": after the learning and at the end), beside the paired timing's medians and
means and the plans auto's paired calls ran.

    python tuning_state.py second/4x1-1gbit.online.json 1048576 [lossless|int8]
"""
import json
import sys
from collections import Counter

import numpy as np

data = json.load(open(sys.argv[1]))
nbytes = int(sys.argv[2])
only = sys.argv[3] if len(sys.argv) > 3 else None
for size in data["sizes"]:
    if size["nbytes"] != nbytes:
        continue
    for mode, state in size["tuning"].items():
        if only and mode != only:
            continue
        calls = size["paired_ms"][mode]
        print(f"== {nbytes} B, {mode}: paired medians (ms)",
              {k: round(float(np.median(v)), 3) for k, v in calls.items()},
              "means", {k: round(float(np.mean(v)), 3) for k, v in calls.items()})
        print("   auto's paired calls ran", dict(Counter(size["auto_ran"][mode])))
        for phase in ("learned", "end"):
            held = state[phase]
            print(f"   {phase}: settled on {held['settled']}, best {held['best']}, dueling "
                  f"{held['dueling']}, {held['calls']} calls, {held['rechecks']} re-checks")
            for plan, seen in held["plans"].items():
                print(f"      {plan:34s} estimate {seen['estimate_ms']} ms, tries {seen['tries']}"
                      f"{', DROPPED' if seen['dropped'] else ''}; times kept {seen['ms']}")
