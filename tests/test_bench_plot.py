"""zipcoll-bench plot: reading suite and bench JSON, and writing the PNGs (serial)."""
import json
import sys

import pytest

from zipcoll.bench import plot

SIZES = [4096 << i for i in range(6)]


def _rows(scale: float, native_us: float = 100.0, ratio: float | None = None) -> list[dict]:
    rows = []
    for i, size in enumerate(SIZES):
        avg, native = scale * native_us * 2 ** i, native_us * 2 ** i
        rows.append({"size": size, "avg_us": avg, "native_avg_us": native,
                     "busbw_gbs": plot.busbw(size, avg * 1e-6, 4), "speedup": native / avg,
                     "compression_ratio": ratio, "rel_error": 1e-3 if ratio else 5e-8,
                     "validation": "PASS"})
    return rows


def _bench(algorithm: str, codec: str | None, scale: float, native_us: float = 100.0) -> dict:
    return {"benchmark": "zipcoll-bench allreduce", "ranks": 4, "algorithm": algorithm,
            "codec": codec, "dtype": "float32", "op": "sum", "zipcoll": "0.1.0",
            "mpi_library": "Open MPI v5.0.11", "hosts": ["a", "b"],
            "rows": _rows(scale, native_us, 3.9 if codec else None)}


def _suite() -> dict:
    combos = [dict(_bench("ring", None, 1.2), combo="ring"),
              dict(_bench("hierarchical", "int8", 0.5, native_us=120.0), combo="hierarchical+int8")]
    return {"suite": "benchmarks/suite.py", "layout": "2x2", "nodes": 2, "ranks_per_node": 2,
            "ranks": 4, "rate": "1gbit", "description": "2 nodes x 2 ranks, 1gbit links",
            "started": "2026-11-30T05:00:00+00:00", "load_average_start": "1.0 1.0 1.0",
            "combos": combos}


@pytest.fixture
def suite_json(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(_suite()))
    return path


def test_load_suite_series_and_title(suite_json):
    figs = plot.load([suite_json])
    assert [s.label for s in figs.series] == ["ring", "hierarchical+int8"]
    assert [s.lossy for s in figs.series] == [False, True]
    assert figs.title == "Allreduce, 2 nodes x 2 ranks, 1gbit links (4 ranks)"
    assert "Open MPI v5.0.11" in figs.subtitle and "load avg 1.0 1.0 1.0" in figs.subtitle


def test_native_is_the_median_over_runs_with_its_range(suite_json):
    sizes, median, low, high = plot.native_points(plot.load([suite_json]).series)
    assert sizes == SIZES
    assert median[0] == pytest.approx(110e-6)           # runs timed 100 and 120 us
    assert (low[0], high[0]) == pytest.approx((100e-6, 120e-6))


def test_load_bench_files_and_lists(tmp_path):
    one, many = tmp_path / "one.json", tmp_path / "many.json"
    one.write_text(json.dumps(_bench("ring", None, 1.0)))
    many.write_text(json.dumps([_bench("ring", None, 2.0), _bench("tree", None, 3.0)]))
    figs = plot.load([one, many])
    assert [s.label for s in figs.series] == ["ring #1", "ring #2", "tree"]
    assert figs.title == "Allreduce, 4 ranks, 2 node(s)"


def test_rejects_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="neither"):
        plot.load([path])
    assert plot.main([str(path)]) == 2


def test_writes_pngs(suite_json, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    assert plot.main([str(suite_json), "-o", str(out), "--name", "x"]) == 0
    printed = capsys.readouterr().out.split()
    for key in ("time", "busbw", "speedup"):
        png = out / f"x-{key}.png"
        assert str(png) in printed
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 10_000


def test_default_output_beside_the_input(suite_json):
    pytest.importorskip("matplotlib")
    assert plot.main([str(suite_json)]) == 0
    assert (suite_json.parent / "suite-time.png").exists()


def test_missing_matplotlib_names_the_extra(suite_json, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    assert plot.main([str(suite_json)]) == 2
    assert "zipcoll[plot]" in capsys.readouterr().err


def test_registered_as_subcommand():
    from zipcoll.bench import COMMANDS
    assert COMMANDS["plot"][0] == "zipcoll.bench.plot"
