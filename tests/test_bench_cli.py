"""zipcoll-bench's top level: --help describes every subcommand; a wrong one exits 2."""
import subprocess
import sys

from zipcoll.bench import COMMANDS


def bench(*args):
    return subprocess.run([sys.executable, "-m", "zipcoll.bench", *args], capture_output=True,
                          text=True, timeout=60)


def test_help_lists_and_describes_every_command_on_stdout():
    for flag in ("-h", "--help"):
        done = bench(flag)
        assert done.returncode == 0 and done.stderr == ""
        for name, (_, summary) in COMMANDS.items():
            assert f"  {name}" in done.stdout and summary in done.stdout


def test_unknown_or_missing_command_exits_2_with_usage_on_stderr():
    for args in (["nonsense"], []):
        done = bench(*args)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith("usage: zipcoll-bench {allreduce,")


def test_every_command_module_has_a_main():
    import importlib

    for module, _ in COMMANDS.values():
        assert callable(importlib.import_module(module).main)


def test_allreduce_header_explains_every_column():
    from zipcoll.bench.allreduce_bench import legend_lines, table_columns

    legend = " ".join(legend_lines(True, True, True)).lower()
    for column in table_columns(True, True, True):
        term = column.title.replace("(us)", "").replace("(GB/s)", "").lower()  # keeps "wire(b)"
        assert term in legend or f"{term.split()[-1]}:" in legend, column.title
