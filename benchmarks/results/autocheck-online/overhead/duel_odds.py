"""How often a duel's runner-up takes over, by its true time over the held plan's, when
each of the two has CONFIRM calls and the lower medians decide (SWITCH 1.03): calls whose
times vary lognormally by 15%, one in ten stalled 2x (as on this machine's shared cores
and emulated links). 200000 duels a cell.

    python duel_odds.py
"""
import numpy as np

rng = np.random.default_rng(2)
SWITCH = 1.03


def times(true: float, calls: int, duels: int) -> np.ndarray:
    drawn = true * np.exp(rng.normal(0, 0.15, (duels, calls)))
    return np.where(rng.random((duels, calls)) < 0.1, 2 * drawn, drawn)


def lower_median(x: np.ndarray) -> np.ndarray:
    return np.sort(x, axis=1)[:, (x.shape[1] - 1) // 2]


for confirm in (3, 4, 5, 6, 8):
    cells = []
    for ratio in (0.8, 0.9, 1.1, 1.2):
        held = lower_median(times(1.0, confirm, 200_000))
        runner_up = lower_median(times(ratio, confirm, 200_000))
        cells.append(f"{ratio}x: {np.mean(SWITCH * runner_up < held):.3f}")
    print(f"CONFIRM={confirm}: the runner-up takes over at " + ", ".join(cells))
