"""Kernel threads counted per machine: which ranks share cores (pure functions, no MPI)."""
import os
import subprocess
import sys

import pytest

from zipcoll.codecs.backend import _parse_identity, machine_identity, threads_for


def test_identity_is_boot_id_and_affinity():
    boot, cpus = _parse_identity(machine_identity())
    assert boot and cpus == frozenset(os.sched_getaffinity(0))
    assert _parse_identity("b/0-2,5,7-8") == ("b", frozenset({0, 1, 2, 5, 7, 8}))


@pytest.mark.parametrize("identities, expected", [
    (["m/0-1"] * 2, [1, 1]),                               # 2 emulated nodes, 2 cores
    (["m/0-7"] * 3, [2, 2, 2]),                            # 8 cores, 3 ranks
    (["m/0-1"] * 5, [1] * 5),                              # oversubscribed: at least 1
    (["a/0-7", "b/0-7"], [8, 8]),                          # two machines
    (["m/0-3", "m/4-7", "m/4-7"], [4, 2, 2]),              # pinned to disjoint halves
    (["m/0-3", "m/3-6", "m/7"], [2, 2, 1]),                # overlaps share, others do not
    (["m/0-7", "m/0", "m/1"], [2, 1, 1]),                  # a wide mask shares with both
])
def test_threads_divide_the_cores_of_one_machine(identities, expected):
    assert [threads_for(identities, r) for r in range(len(identities))] == expected


@pytest.mark.parametrize("bad", ["", "m/", "/0-1", "m/x"])
def test_bad_identity_raises(bad):
    with pytest.raises(ValueError):
        threads_for([bad], 0)


@pytest.mark.parametrize("env, expected", [({}, 1), ({"NUMBA_NUM_THREADS": "2"}, 2)])
def test_explicit_numba_num_threads_wins(env, expected):
    code = ("from zipcoll.codecs.backend import machine_identity, share_machine_cores;"
            "print(share_machine_cores([machine_identity()] * 64, 0))")
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    run = subprocess.run([sys.executable, "-c", code], env={**environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) == expected
