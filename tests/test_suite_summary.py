"""benchmarks/suite.py's summary checks: results far from their bound, and jumps in time."""
import importlib.util
import sys
from pathlib import Path

MiB = 1 << 20


def load_suite():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "suite.py"
    spec = importlib.util.spec_from_file_location("suite_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def row(size, ms, vs_bound=None):
    r = {"size": size, "avg_us": ms * 1e3}
    if vs_bound is not None:
        r["vs_bound"] = vs_bound
    return r


def test_check_text_names_far_results_and_jumps():
    suite = load_suite()
    record = {"combos": [
        {"combo": "ring", "codec": None,  # lossless: never listed as far from a bound
         "rows": [row(8 * MiB, 10, 2.0), row(16 * MiB, 20, 2.0)]},
        {"combo": "ring+sign", "codec": "sign",
         "rows": [row(8 * MiB, 1, 3.0), row(16 * MiB, 4, 1.2), row(32 * MiB, 9, 1.5),
                  row(512 * MiB, 30, 5.0)]},  # 512 MiB is outside 16-256 MiB
    ]}
    far, jumps = suite.check_text(record)[1:]
    assert far == "Compressed, 16-256 MiB, over 1.3x the bound: ring+sign 32M (1.50)."
    assert jumps == "Time over 3x the size below: ring+sign 16M (4.0x)."


def test_check_text_says_none():
    suite = load_suite()
    record = {"combos": [{"combo": "ring+int8", "codec": "int8",
                          "rows": [row(16 * MiB, 10, 1.1), row(32 * MiB, 20, 1.2)]}]}
    assert suite.check_text(record)[1:] == [
        "Compressed, 16-256 MiB, over 1.3x the bound: none.",
        "Time over 3x the size below: none."]


def test_auto_rows_are_bounded_by_the_plans_auto_ran():
    """auto and auto+CODEC combos: the bound of the plans its timed calls ran (`plans`,
    from Request.plan), weighted by their calls; a fixed combo's as before."""
    suite = load_suite()
    from zipcoll.collectives.planning import PlanShape, bounds
    from zipcoll.topologies import Topology

    speeds = {"int8": {"encode": 1.0, "decode": 2.0, "decode_add": 2.0}}
    plain = row(4 * MiB, 50)
    mixed = row(4 * MiB, 50)
    plain["plans"] = {"hierarchical:ring + int8": 10}
    mixed["plans"] = {"hierarchical:ring + int8": 3, "ring": 1}
    record = {"rate": "1gbit", "ranks": 4, "ranks_per_node": 1, "codec_speeds": speeds,
              "combos": [{"combo": "auto+int8", "algorithm": "auto", "codec": "int8",
                          "rows": [plain, mixed]},
                         {"combo": "ring", "algorithm": "ring", "codec": None,
                          "rows": [row(4 * MiB, 50)]}]}
    suite.add_bounds(record)
    topology = Topology.from_layout(4, 0, ranks_per_node=1)
    rate = 1e9 / 8 * suite.FRAME_PAYLOAD
    codec_speeds = {"int8": suite.CodecSpeed(suite.Rate(1e9), suite.Rate(2e9), suite.Rate(2e9))}
    coded = bounds(PlanShape("hierarchical", "ring", None, "int8"), 4 * MiB, topology, rate,
                   codec_speeds, 4)
    lossless = bounds(PlanShape("ring"), 4 * MiB, topology, rate, codec_speeds, 4)
    assert abs(plain["wire_ms"] - coded[0] * 1e3) < 1e-9
    assert abs(mixed["wire_ms"] - (3 * coded[0] + lossless[0]) / 4 * 1e3) < 1e-9
    assert abs(record["combos"][1]["rows"][0]["wire_ms"] - lossless[0] * 1e3) < 1e-9
    assert suite.plan_of("hierarchical:ring + intra int8, inter int8") == PlanShape(
        "hierarchical", "ring", "int8", "int8")


def test_sharded_combos_run_their_bench_beside_their_own_native():
    """rs:/ag: combos: their bench, no time budget, a table of their own beside their
    native, bounded by planning.sharded_bounds of the whole vector."""
    suite = load_suite()
    from zipcoll.collectives.planning import PlanShape, sharded_bounds
    from zipcoll.topologies import Topology

    rs, ag = suite.Combo.parse("rs:ring+int8"), suite.Combo.parse("ag:hierarchical:halving")
    assert (rs.bench, rs.algorithm, rs.codec, rs.label) == ("reduce-scatter", "ring", "int8",
                                                            "rs:ring+int8")
    assert (ag.bench, ag.algorithm, ag.codec) == ("allgather", "hierarchical:halving", None)
    assert suite.Combo.parse("hierarchical:ring+int8").bench == "allreduce"
    segment = suite.Segment((MiB,), None, None, 1.0)
    argv = suite.bench_argv(rs, segment, suite.Path("x.json"))
    assert argv[:2] == ["zipcoll-bench", "reduce-scatter"] and "--time-budget" not in argv
    assert "--time-budget" in suite.bench_argv(suite.Combo.parse("ring"), segment,
                                               suite.Path("x.json"))
    assert len(suite.expanded([suite.Combo.parse("sharded")])) == len(suite.SHARDED_COMBOS)

    speeds = {"int8": {"encode": 1.0, "decode": 2.0, "decode_add": 2.0}}
    rows = lambda: [dict(row(4 * MiB, 20), native_avg_us=80e3, speedup=4.0)]  # noqa: E731
    record = {"rate": "1gbit", "ranks": 4, "ranks_per_node": 2, "codec_speeds": speeds,
              "layout": "2x2", "description": "2 nodes x 2 ranks", "started": "t",
              "load_average_start": "0 0 0", "combos": [
                  {"combo": "ring", "collective": "allreduce", "algorithm": "ring",
                   "codec": None, "rows": rows(), "runs": []},
                  {"combo": "rs:ring+int8", "collective": "reduce-scatter", "algorithm": "ring",
                   "codec": "int8", "rows": rows(), "runs": []},
                  {"combo": "ag:ring+int8", "collective": "allgather", "algorithm": "ring",
                   "codec": "int8", "rows": rows(), "runs": []}]}
    suite.add_bounds(record)
    topology = Topology.from_layout(4, 0, ranks_per_node=2)
    rate = 1e9 / 8 * suite.FRAME_PAYLOAD
    codec_speeds = {"int8": suite.CodecSpeed(suite.Rate(1e9), suite.Rate(2e9), suite.Rate(2e9))}
    plan = PlanShape("ring", None, None, "int8")
    for combo, whole in ((record["combos"][1], 4 * MiB), (record["combos"][2], 16 * MiB)):
        kind = "reduce-scatter" if combo["collective"] == "reduce-scatter" else "all-gather"
        wire, codec = sharded_bounds(kind, plan, whole, topology, rate, codec_speeds, 4)
        assert abs(combo["rows"][0]["wire_ms"] - wire * 1e3) < 1e-9
        assert abs(combo["rows"][0]["codec_ms"] - codec * 1e3) < 1e-9
    text = suite.summary_text(record)
    for heading, native in (("### allreduce", "MPI Allreduce"),
                            ("### reduce-scatter", "MPI Reduce_scatter_block"),
                            ("### allgather", "MPI Allgather")):
        assert heading in text and f"| native ({native}) | 80.0 ms |" in text
    assert "| rs:ring+int8 | 4.00x |" in text


def test_an_allreduce_only_summary_has_no_collective_headings():
    suite = load_suite()
    record = {"rate": None, "ranks": 2, "ranks_per_node": 2, "layout": "1x2",
              "description": "1 node", "started": "t", "load_average_start": "0 0 0",
              "combos": [{"combo": "ring", "algorithm": "ring", "codec": None, "runs": [],
                          "rows": [dict(row(4 * MiB, 20), native_avg_us=40e3, speedup=2.0)]}]}
    text = suite.summary_text(record)
    assert "###" not in text and "| native (MPI Allreduce) | 40.0 ms |" in text


def test_untuned_auto_runs_auto_with_tuning_off_on_both_launchers():
    """auto:untuned[+CODEC]: the bench runs algorithm auto, every rank with ZIPCOLL_TUNE=0
    (mpiexec's -x on one node and through cluster.sh), and takes no learning calls."""
    suite = load_suite()
    combo = suite.Combo.parse("auto:untuned+int8")
    assert (combo.label, combo.codec, combo.untuned) == ("auto:untuned+int8", "int8", True)
    segment = suite.Segment((MiB,), None, None, 1.0)
    argv = suite.bench_argv(combo, segment, suite.Path("x.json"))
    assert argv[argv.index("--algorithm") + 1] == "auto" and "--learn-calls" not in argv
    assert "--learn-calls" in suite.bench_argv(suite.Combo.parse("auto+int8"), segment,
                                               suite.Path("x.json"))
    for layout in ("1x4", "2x2"):
        launched, line = suite.launch_argv(suite.Layout.parse(layout), argv, combo.mpi_env())
        assert "-x ZIPCOLL_TUNE=0" in line
        assert launched.index("ZIPCOLL_TUNE=0") < launched.index("zipcoll-bench")
    assert suite.Combo.parse("auto").mpi_env() == []
    assert suite.combo_plan({"algorithm": "auto:untuned", "codec": "int8"}) is None


def test_calibrated_auto_runs_with_the_layouts_profile_and_add_keeps_other_rows(tmp_path):
    """auto:calibrated: ZIPCOLL_PROFILE is the layout's profile in --profiles (autocheck.sh's
    names); --add replaces the rows of the combos it runs and keeps the others'."""
    suite = load_suite()
    combo = suite.Combo.parse("auto:calibrated+int8")
    assert combo.calibrated and combo.bench_algorithm == "auto"
    segment = suite.Segment((MiB,), None, None, 1.0)
    assert "--learn-calls" in suite.bench_argv(combo, segment, suite.Path("x.json"))
    for layout, rate, name in (("1x4", "shm", "1x4"), ("2x2", "1gbit", "2x2-1gbit")):
        target = suite.Target(suite.Layout.parse(layout), rate, tmp_path, [])
        profile = suite.layout_profile(target, tmp_path)
        assert profile == (tmp_path / f"{name}.profile.json").resolve()
        assert combo.mpi_env(profile) == ["-x", f"ZIPCOLL_PROFILE={profile}"]
    record = {"combos": [{"combo": "ring", "rows": [row(MiB, 1)]},
                         {"combo": "auto:calibrated", "rows": [row(MiB, 9)]}]}
    added = suite.added_to(record, ["auto:calibrated"])
    assert [c["combo"] for c in added["combos"]] == ["ring"]
    assert added["added"][0]["combos"] == ["auto:calibrated"]
