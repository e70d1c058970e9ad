"""tests/run.py counts each test once, as pytest does, and fails a run whose log says otherwise.

Each test runs pytest in a subprocess on generated test files, with tests/conftest.py
(which writes the ZIPCOLL_TEST_LOG that tests/run.py reads) beside them.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("zipcoll_test_runner", TESTS / "run.py")
runner = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # for dataclasses
_spec.loader.exec_module(runner)

EVERY_OUTCOME = '''
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup fails")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown fails")

def test_passes(): pass
def test_fails(): assert False
def test_skips(): pytest.skip("no reason")
@pytest.mark.xfail(reason="known")
def test_xfails(): assert False
@pytest.mark.xfail(reason="known")
def test_xpasses(): pass
def test_setup_error(broken_setup): pass
def test_teardown_error(broken_teardown): pass
@pytest.mark.parametrize("n", range(3))
def test_parametrized(n): pass
'''
SKIPS_ITSELF = 'import pytest\npytest.skip("whole module", allow_module_level=True)\n'
FAILS_TO_IMPORT = 'import a_module_that_does_not_exist\n'
# the bug this guards against: a test that runs pytest again, inheriting ZIPCOLL_TEST_LOG
RUNS_PYTEST_AGAIN = '''
import os, subprocess, sys

def test_runs_pytest_again():
    inner = os.path.join(os.path.dirname(__file__), "inner_cases.py")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", inner],
                   check=True, capture_output=True)
'''
INNER = "def test_one(): pass\ndef test_two(): pass\ndef test_three(): pass\n"


def run_pytest(folder: Path, files: dict[str, str], *args: str) -> tuple[str, Path]:
    """pytest's stdout, and the test log, of one run over generated files in `folder`."""
    shutil.copy(TESTS / "conftest.py", folder / "conftest.py")
    for name, text in files.items():
        (folder / name).write_text(text)
    log = folder / "log.jsonl"
    env = dict(os.environ, ZIPCOLL_TEST_LOG=str(log))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--color=no", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)
    return done.stdout, log


def summary_counts(stdout: str) -> dict[str, int]:
    """pytest's last line, '1 failed, 5 passed, ... in 0.1s', as {word: count}."""
    last = stdout.strip().splitlines()[-1]
    counts = {"error" if word == "errors" else word: int(n)
              for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0])}
    return {word: n for word, n in counts.items() if not word.startswith("warning")}


def test_counts_equal_pytest_summary_for_every_outcome(tmp_path):
    stdout, log = run_pytest(tmp_path, {"test_every_outcome.py": EVERY_OUTCOME,
                                        "test_skips_itself.py": SKIPS_ITSELF,
                                        "test_fails_to_import.py": FAILS_TO_IMPORT},
                             "--continue-on-collection-errors")
    pytest_says = summary_counts(stdout)
    assert pytest_says == {"failed": 1, "passed": 5, "skipped": 2, "xfailed": 1, "xpassed": 1,
                           "error": 3}, stdout
    outcome, finish, running = runner.read_log("serial", log)
    assert finish is not None and running == ""
    assert (outcome.passed, outcome.failed, outcome.skipped, outcome.errors) == (6, 1, 3, 3)
    assert runner.miscount(outcome, finish) == ""


def test_a_nested_pytest_writing_into_the_log_is_reported(tmp_path):
    stdout, log = run_pytest(tmp_path, {"test_nested.py": RUNS_PYTEST_AGAIN,
                                        "inner_cases.py": INNER}, "test_nested.py")
    assert summary_counts(stdout) == {"passed": 1}, stdout
    outcome, finish, _ = runner.read_log("serial", log)
    assert outcome.passed == 4  # the inner run's three tests got into the log
    assert runner.miscount(outcome, finish) == (
        "the test log counts 4 passed, 0 failed, 0 skipped but pytest counted "
        "1 passed, 0 failed, 0 skipped")
