"""What the tools and error messages tell a user matches what the library accepts."""
from __future__ import annotations

import pytest

import zipcoll
from zipcoll.codecs import ErrorFeedback, get_codec


def test_zipcoll_info_lists_feedback_as_a_wrapper():
    from zipcoll.info import report

    lines = dict(report())
    assert "\x00" not in lines["MPI library"]  # Open MPI ends the string with a NUL
    codecs = lines["codecs"].split(", ")
    assert "feedback" not in codecs
    assert "feedback:X (error feedback around codec X)" in codecs
    assert isinstance(get_codec("feedback:sign"), ErrorFeedback)


def test_zipcoll_info_names_the_cuda_target_and_cupy():
    import importlib.util

    from zipcoll.info import report

    lines = dict(report())
    numba_cuda = importlib.util.find_spec("numba_cuda") is not None
    assert lines["CUDA target"].startswith("numba-cuda 0." if numba_cuda else "Numba's built-in")
    assert lines["GPUs"].startswith(("none", "0: ", "CUDA simulator"))
    assert lines["cupy"] == ("not installed" if importlib.util.find_spec("cupy") is None
                             else importlib.import_module("cupy").__version__)


def test_bare_feedback_says_how_to_write_it():
    with pytest.raises(ValueError, match="feedback:X"):
        get_codec("feedback")


def test_explain_names_the_layout_and_profile_and_marks_idle_codecs():
    from zipcoll.collectives.planning import DEFAULT_PROFILE, Shape

    ranking = zipcoll.explain(4 << 20, codec="int8", topology=Shape(4, 1, 4),
                              profile=DEFAULT_PROFILE)
    text = str(ranking)
    assert "on 1 node x 4 ranks" in text
    assert "profile: defaults" in text and "GB/s" in text
    idle = [line for line in text.splitlines() if "codec not applied" in line]
    assert idle and all("hierarchical" in line for line in idle)  # the inter level: 1 node
    across = str(zipcoll.explain(4 << 20, codec="int8", topology=Shape(8, 2, 4),
                                 profile=DEFAULT_PROFILE))
    assert "on 2 nodes x 4 ranks" in across and "codec not applied" not in across
