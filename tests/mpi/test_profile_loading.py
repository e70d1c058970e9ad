"""$ZIPCOLL_PROFILE that one rank (or every rank) cannot load: the same ProfileError on every
rank, at once, before any data moves; nobody waits for the rank that failed."""
import json
import time

import numpy as np
import pytest

import zipcoll
from zipcoll.collectives.planning import DEFAULT_PROFILE, PROFILE_ENV, ProfileError, shared_profile

pytestmark = pytest.mark.mpi

BAD = {
    "missing": None,
    "not JSON": "{ this is not json",
    "not a profile": json.dumps({"intra": {"alpha": 1e-6}}),
    "a list": "[1, 2]",
}


def profile_file(tmp_path, rank, kind):
    """A good profile, or a bad one of `kind`, at a path of this rank's own."""
    path = tmp_path / f"profile-rank{rank}-{kind or 'good'}.json".replace(" ", "-")
    if kind is None:
        DEFAULT_PROFILE.save(str(path))
    elif BAD[kind] is not None:
        path.write_text(BAD[kind])
    return str(path)


def failing_ranks(comm, where):
    return {"rank 0": {0}, "last rank": {comm.size - 1}, "every rank": set(range(comm.size))}[where]


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("where", ["rank 0", "last rank", "every rank"])
def test_a_profile_one_rank_cannot_load_fails_every_rank_alike(comm, tmp_path, zipcoll_env,
                                                                kind, where):
    bad = comm.rank in failing_ranks(comm, where)
    baseline = first_call_seconds(comm, tmp_path, zipcoll_env)  # with a readable profile
    zipcoll_env(**{PROFILE_ENV: profile_file(tmp_path, comm.rank, kind if bad else None)})
    fresh = comm.Dup()  # no profile cached on it yet
    x = np.arange(16, dtype=np.float32)
    try:
        start = time.monotonic()
        # a missing file is a bad setting (zipcoll.settings: a path names a readable file),
        # refused at the communicator's first use; the others fail loading the profile
        with pytest.raises(ProfileError if BAD[kind] else ValueError) as raised:
            zipcoll.allreduce(x, comm=fresh)  # auto: its first call loads the profile
        elapsed = time.monotonic() - start
        text = str(raised.value)
        assert np.array_equal(x, np.arange(16, dtype=np.float32))  # no data moved
        first = min(failing_ranks(comm, where))
        assert f"rank {first}" in text and PROFILE_ENV in text
        assert comm.allgather(text) == [text] * comm.size
        # what the failure adds to a communicator's first call (its duplicate, topology):
        # under a second, on every rank
        assert elapsed < baseline + 1.0, (elapsed, baseline)
        # the next call tries again, alike everywhere; with the file repaired it runs
        zipcoll_env(**{PROFILE_ENV: profile_file(tmp_path, comm.rank, None)})
        assert np.array_equal(zipcoll.allreduce(x, comm=fresh), x * comm.size)
    finally:
        fresh.Free()


def first_call_seconds(comm, tmp_path, zipcoll_env) -> float:
    """Seconds of a first call on a new communicator whose profile every rank reads."""
    zipcoll_env(**{PROFILE_ENV: profile_file(tmp_path, comm.rank, None)})
    fresh = comm.Dup()
    try:
        start = time.monotonic()
        zipcoll.allreduce(np.ones(16, np.float32), comm=fresh)
        return time.monotonic() - start
    finally:
        fresh.Free()


def test_loading_alone_fails_within_a_second(comm, tmp_path):
    path = profile_file(tmp_path, comm.rank, "not JSON" if comm.rank == comm.size - 1 else None)
    zipcoll.configure(profile=path)
    fresh = comm.Dup()
    try:
        start = time.monotonic()
        with pytest.raises(ProfileError):
            shared_profile(fresh)
        assert time.monotonic() - start < 1.0
    finally:
        fresh.Free()


def test_explain_with_a_path_one_rank_cannot_read_fails_every_rank(comm, tmp_path):
    path = profile_file(tmp_path, comm.rank, "missing" if comm.rank == comm.size - 1 else None)
    with pytest.raises(ProfileError) as raised:
        zipcoll.explain(1 << 20, comm=comm, profile=path)
    text = str(raised.value)
    assert f"rank {comm.size - 1} of {comm.size}" in text and "FileNotFoundError" in text
    assert comm.allgather(text) == [text] * comm.size
