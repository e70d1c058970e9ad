"""zipcoll-bench codecs runs and reports every field (tiny sizes)."""
import json

import numpy as np
import pytest

from zipcoll.bench import codec_bench
from zipcoll.codecs import get_codec


def test_sizes_like_osu():
    assert codec_bench.sizes("1K:4K") == [1024, 2048, 4096]
    assert codec_bench.sizes("64M") == [64 << 20]
    assert codec_bench._split("int8,topk:ratio=0.1,values=float16,sign") == [
        "int8", "topk:ratio=0.1,values=float16", "sign"]


def test_json_report(capsys):
    assert codec_bench.main(["-m", "4K:8K", "--codec", "int8,topk:k=5", "-i", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["command"].startswith("zipcoll-bench codecs") and report["machine"]["cores"]
    assert [(r["spec"], r["bytes"]) for r in report["rows"]] == [
        ("int8", 4096), ("topk:k=5", 4096), ("int8", 8192), ("topk:k=5", 8192)]
    assert all(r["encode_GBps"] > 0 and r["memcpy_GBps"] > 0 and r["ef_encode_GBps"] > 0
               and r["ef_two_pass_GBps"] > 0 for r in report["rows"])


def test_table(capsys):
    assert codec_bench.main(["-m", "4K", "--codec", "fp16", "-i", "1"]) == 0
    assert "fp16" in capsys.readouterr().out


def test_error_is_of_x_alone_after_the_feedback_steps(capsys):
    # the feedback columns encode x + residual into the same buffer; the error reported
    # is still that of x's own payload, and a variable-size payload still decodes
    codec_bench.main(["-m", "64K", "--codec", "sign,threshold:tau=1.5", "-i", "2", "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    x = np.random.default_rng(0).standard_normal(16384).astype(np.float32)
    for row in rows:
        codec = get_codec(row["spec"])
        y = codec.decode(codec.encode(x))
        assert row["rel_error"] == pytest.approx(np.linalg.norm(y - x) / np.linalg.norm(x))
