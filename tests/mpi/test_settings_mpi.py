"""Settings across ranks: a bad value is the same ValueError on every rank, and settings
that must agree but differ are a MismatchError on every rank naming them, at a
communicator's first call (checked or not) and at later calls; never a hang.

Each test sets this rank's variables (tests/conftest.py's `zipcoll_env`) and makes its
first call on a fresh duplicate of the world, whose first use compares the settings.
"""
from __future__ import annotations

import numpy as np
import pytest

import zipcoll
from zipcoll.errors import MismatchError
from zipcoll.settings import VARIABLES

# a value each kind refuses
BAD = {"bool": "maybe", "int": "-1", "grid": "2by2", "path": "/no/such/profile.json"}
AGREEING = [v for v in VARIABLES if v.agree]


def good_values(size: int) -> dict[str, tuple[str, str]]:
    """Two values each setting that must agree takes (rank 0's, the others')."""
    return {"check": ("0", "1"), "cuda_aware": ("0", "1"), "feedback_idle_calls": ("5", "6"),
            "grid": (f"1x{size}", f"{size}x1"), "max_count": ("1000", "2000"),
            "pipeline_window": ("2", "3"), "ranks_per_node": ("1", "2"),
            "slice_bytes": ("4K", "8K"), "staging_chunk_bytes": ("4K", "8K"),
            "staging_in_flight": ("1", "3"), "tag_blocks": ("4", "8"),
            "tune": ("0", "1")}


def first_call_error(comm) -> BaseException | None:
    """What the first call on a fresh duplicate of `comm` raised (None: it did not)."""
    fresh = comm.Dup()
    try:
        zipcoll.allreduce(np.ones(8, np.float32), comm=fresh, algorithm="ring")
    except Exception as error:  # asserted once every rank's calls are made
        return error
    finally:
        fresh.Free()
    return None


def test_every_setting_that_must_agree_is_tested(comm):
    assert sorted(good_values(comm.size)) == sorted(v.name for v in AGREEING)


@pytest.mark.parametrize("variable", VARIABLES, ids=lambda v: v.env)
def test_one_ranks_bad_value_is_a_value_error_on_every_rank(comm, zipcoll_env, variable):
    culprit = comm.size - 1
    if comm.rank == culprit:
        zipcoll_env(**{variable.env: BAD[variable.kind]})
    error = first_call_error(comm)
    zipcoll_env(**{variable.env: None})
    after = first_call_error(comm)
    assert type(error) is ValueError, repr(error)
    assert f"rank {culprit}: {variable.env}={BAD[variable.kind]!r}: expected" in str(error)
    assert after is None, repr(after)


@pytest.mark.parametrize("variable", AGREEING, ids=lambda v: v.env)
def test_a_setting_differing_across_ranks_is_a_mismatch_on_every_rank(comm, zipcoll_env,
                                                                      variable):
    if comm.size == 1:
        pytest.skip("needs two ranks to differ")
    mine, others = good_values(comm.size)[variable.name]
    zipcoll_env(**{variable.env: mine if comm.rank == 0 else others})
    error = first_call_error(comm)
    zipcoll_env(**{variable.env: None})
    after = first_call_error(comm)
    assert isinstance(error, MismatchError), repr(error)
    shown = variable.shown
    line = (f"{variable.env}: {shown(zipcoll.settings.parse(variable, mine))} on rank 0; "
            f"{shown(zipcoll.settings.parse(variable, others))} on rank")
    assert line in str(error), str(error)
    assert after is None, repr(after)


def next_call_error(comm, change: dict) -> tuple[BaseException | None, np.ndarray]:
    """After a first call on a fresh duplicate, `change` configured on rank 0 only: what
    the next call raised, and the result of one more once rank 0 is back to the others."""
    x = np.ones(8, np.float32)
    fresh = comm.Dup()
    try:
        zipcoll.allreduce(x, comm=fresh, algorithm="ring")  # the first use: settings agree
        if comm.rank == 0:
            zipcoll.configure(**change)
        error = None
        try:
            zipcoll.allreduce(x, comm=fresh, algorithm="native")
        except Exception as raised:  # asserted once every rank's calls are made
            error = raised
        zipcoll.configure(**{name: None for name in change})
        return error, zipcoll.allreduce(x, comm=fresh, algorithm="ring")
    finally:
        fresh.Free()


@pytest.mark.parametrize("change, named", [
    ({"slice_bytes": "4K"}, "ZIPCOLL_SLICE_BYTES=4096"),
    ({"pipeline_window": 3, "tag_blocks": 4}, "ZIPCOLL_PIPELINE_WINDOW=3 ZIPCOLL_TAG_BLOCKS=4"),
    # the rank whose check is off runs the agreement once (its settings changed), which
    # the others' checked call meets: no hang
    ({"check": False}, "ZIPCOLL_CHECK=0"),
], ids=["slice_bytes", "window_and_tags", "check"])
def test_configure_on_one_rank_after_the_first_call_is_a_mismatch_at_the_next(comm, change,
                                                                              named):
    if comm.size == 1:
        pytest.skip("needs two ranks to differ")
    error, got = next_call_error(comm, change)
    assert isinstance(error, MismatchError), repr(error)
    assert f"{named} on rank 0; defaults on rank" in str(error), str(error)
    np.testing.assert_array_equal(got, np.full(8, comm.size, np.float32))


def test_check_off_everywhere_agrees_once_after_a_change(comm):
    x = np.ones(8, np.float32)
    fresh = comm.Dup()
    try:
        zipcoll.configure(check=False)
        zipcoll.allreduce(x, comm=fresh, algorithm="ring")  # first use: compared anyway
        zipcoll.configure(slice_bytes="64K")  # alike on every rank: agreed once, then not
        got = [zipcoll.allreduce(x, comm=fresh, algorithm="ring") for _ in range(3)]
    finally:
        fresh.Free()
    for result in got:
        np.testing.assert_array_equal(result, x * comm.size)
