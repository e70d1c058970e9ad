"""Shared by the serial and the MPI tests.

- tests/arrays.py is importable as `arrays`.
- With ZIPCOLL_TEST_LOG=path (set by tests/run.py), each test's start and outcome are
  appended to that file as they happen, one JSON object a line, so a run that dies
  (a timeout's os._exit, a crashed rank) still tells what passed and what was running.
  The last line also holds pytest's own counts, which tests/run.py checks its own against.
- zipcoll's settings (ZIPCOLL_*, read once a process) are read again after every test, and
  `zipcoll_env(NAME=value, ...)` sets variables for one test, read at the next use.
"""
import json
import os
import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

_LOG = os.environ.get("ZIPCOLL_TEST_LOG")


@pytest.fixture(autouse=True)
def _settings_read_again():
    """What a test sets (zipcoll.configure, ZIPCOLL_* variables) ends with it."""
    yield
    settings = sys.modules.get("zipcoll.settings")
    if settings is not None:
        settings.reset()


@pytest.fixture
def zipcoll_env(monkeypatch):
    """zipcoll_env(ZIPCOLL_X="value", ...): set (None: unset) variables for this test; the
    settings read them at their next use."""
    from zipcoll import settings

    def set_variables(**variables: str | None) -> None:
        for name, value in variables.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        settings.forget()

    return set_variables


def _log(**entry) -> None:
    with open(_LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


if _LOG:

    def pytest_runtest_logstart(nodeid, location):
        _log(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(report):
        # counted as JUnit does: a test's call outcome; setup/teardown only when not passed
        if report.when == "call" or not report.passed:
            _log(event="report", nodeid=report.nodeid, when=report.when,
                 outcome=report.outcome)

    def pytest_collectreport(report):
        # a module that fails to import is an error, one that skips itself a skip (as pytest)
        if not report.passed:
            _log(event="report", nodeid=report.nodeid, when="collect", outcome=report.outcome)

    def pytest_sessionfinish(session, exitstatus):
        _log(event="finish", exitstatus=int(exitstatus), pytest_counts=_pytest_counts(session))


def _pytest_counts(session) -> dict | None:
    """pytest's own tallies (its summary line), so tests/run.py can check its counts."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return None
    return {key: sum(getattr(r, "count_towards_summary", True) for r in reports)
            for key, reports in reporter.stats.items()
            if key in ("passed", "failed", "skipped", "error", "xfailed", "xpassed")}
