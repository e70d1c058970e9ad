"""Shared by the serial and the MPI tests: make tests/arrays.py importable as `arrays`."""
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
