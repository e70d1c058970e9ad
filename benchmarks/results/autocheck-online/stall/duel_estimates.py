"""How a duel decides with each estimate: how often the runner-up takes over, each side
CONFIRM (6) calls, SWITCH 1.03. Calls vary lognormally by 15%, one in ten stalled 2x (as
on this machine's shared cores and emulated links); then one side stalls on 40% of its
calls, 2.5x (a plan the link's queues hit: the emulated cluster's stall-prone plans),
with a median 0.9x the other's and a mean 1.3-1.4x. 200000 duels a cell.

    python duel_estimates.py
"""
import numpy as np

rng = np.random.default_rng(2)
SWITCH, CONFIRM, DUELS = 1.03, 6, 200_000


def times(true: float, stalled: float = 0.1, factor: float = 2.0) -> np.ndarray:
    drawn = true * np.exp(rng.normal(0, 0.15, (DUELS, CONFIRM)))
    return np.where(rng.random((DUELS, CONFIRM)) < stalled, factor * drawn, drawn)


def lower_median(x: np.ndarray) -> np.ndarray:
    return np.sort(x, axis=1)[:, (x.shape[1] - 1) // 2]


def mean_but_slowest(x: np.ndarray) -> np.ndarray:
    return np.sort(x, axis=1)[:, :-1].mean(axis=1)


def takes_over(estimate, held: np.ndarray, runner_up: np.ndarray) -> float:
    return float(np.mean(SWITCH * estimate(runner_up) < estimate(held)))


for name, estimate in (("lower median", lower_median), ("mean but the slowest", mean_but_slowest)):
    alike = ", ".join(f"{r}x: {takes_over(estimate, times(1.0), times(r)):.3f}"
                      for r in (0.8, 0.9, 1.1, 1.2))
    print(f"{name}: stalled alike, the runner-up (its time over the held's) takes over at {alike}")
    held_stalls = takes_over(estimate, times(0.9, 0.4, 2.5), times(1.0))
    runner_up_stalls = takes_over(estimate, times(1.0), times(0.9, 0.4, 2.5))
    print(f"    the held stalls often: the runner-up (the lower mean) takes over {held_stalls:.3f}")
    print(f"    the runner-up stalls often: it (the higher mean) takes over {runner_up_stalls:.3f}")
