"""Every Python example in README.md runs as written, on every world size."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_has_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("number", range(len(EXAMPLES)))
def test_readme_example_runs(number):
    code = compile(EXAMPLES[number], f"README.md python example {number + 1}", "exec")
    exec(code, {"__name__": "__main__"})
