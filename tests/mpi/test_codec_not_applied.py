"""A codec that algorithm="auto" does not apply is never dropped silently.

On one node the cost model prices compression dearer than sending raw values, so auto
sends lossless; it says so with one zipcoll.CodecNotApplied warning per communicator,
the same text on every rank, naming the prices and how to force the codec. Naming an
algorithm applies the codec, with no warning.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll

pytestmark = pytest.mark.mpi

COUNT = 1 << 14


def _data(comm):
    return np.random.default_rng(comm.Get_rank()).standard_normal(COUNT).astype(np.float32)


def _calls(comm, times, **kwargs):
    """(results, CodecNotApplied warnings) of `times` all-reduces on `comm`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning given, not Python's once per place
        results = [zipcoll.allreduce(_data(comm), comm=comm, **kwargs) for _ in range(times)]
    return results, [w for w in caught if issubclass(w.category, zipcoll.CodecNotApplied)]


def _exact(comm):
    return comm.allreduce(_data(comm).astype(np.float64))


@pytest.fixture
def fresh(comm):
    dup = comm.Dup()
    yield dup
    dup.Free()


def test_auto_on_one_node_warns_once_per_communicator(comm, fresh):
    if comm.Get_size() == 1:
        pytest.skip("one rank sends nothing: nothing to compress")
    results, caught = _calls(fresh, 3, codec="int8")
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "'int8' not applied" in text and "algorithm='" in text
    assert f"1 node x {comm.Get_size()} ranks" in text and "profile:" in text
    assert all(t == text for t in comm.allgather(text))  # decided alike on every rank
    assert all(np.allclose(r, _exact(comm), rtol=1e-5, atol=1e-5) for r in results)
    other = fresh.Dup()
    try:
        _, again = _calls(other, 2, codec="int8")
    finally:
        other.Free()
    assert len(again) == 1  # once per communicator, not once per process


def test_the_suggested_algorithm_applies_the_codec(comm, fresh):
    if comm.Get_size() == 1:
        pytest.skip("one rank sends nothing: nothing to compress")
    _, caught = _calls(fresh, 1, codec="int8")
    algorithm = str(caught[0].message).split("algorithm='")[1].split("'")[0]
    (forced,), none = _calls(fresh, 1, codec="int8", algorithm=algorithm)
    assert none == []
    assert np.abs(forced - _exact(comm)).max() > 0  # int8's rounding: the codec ran


def test_no_warning_without_a_codec_or_when_it_is_applied(comm, fresh):
    _, caught = _calls(fresh, 2)
    assert caught == []
    _, caught = _calls(fresh, 2, codec="int8", algorithm="ring")
    assert caught == []


def test_one_rank_has_nothing_to_compress():
    one = MPI.COMM_SELF.Dup()
    try:
        _, caught = _calls(one, 1, codec="int8")
    finally:
        one.Free()
    assert caught == []
