"""zipcoll-bench codecs runs and reports every field (tiny sizes)."""
import json

from zipcoll.bench import codec_bench


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
