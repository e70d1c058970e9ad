"""Shared by the serial and the MPI tests.

- tests/arrays.py is importable as `arrays`.
- With ZIPCOLL_TEST_LOG=path (set by tests/run.py), each test's start and outcome are
  appended to that file as they happen, one JSON object a line, so a run that dies
  (a timeout's os._exit, a crashed rank) still tells what passed and what was running.
"""
import json
import os
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

_LOG = os.environ.get("ZIPCOLL_TEST_LOG")


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
        if report.failed:
            _log(event="report", nodeid=report.nodeid, when="collect", outcome="failed")

    def pytest_sessionfinish(session, exitstatus):
        _log(event="finish", exitstatus=int(exitstatus))
