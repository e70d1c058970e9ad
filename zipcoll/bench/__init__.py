"""zipcoll-bench: benchmark subcommands, registered in one table.

    zipcoll-bench allreduce -m 1K:64M --algorithm ring
    zipcoll-bench codecs -m 1M:256M
"""
from __future__ import annotations

import importlib
import sys

# subcommand -> module whose main(argv) runs it; imported lazily so one slow import
# (numba kernels, MPI) does not tax the others.
COMMANDS = {
    "allreduce": "zipcoll.bench.allreduce_bench",
    "codecs": "zipcoll.bench.codec_bench",
    "plot": "zipcoll.bench.plot",
    "calibrate": "zipcoll.bench.calibrate",
    "simulate": "zipcoll.bench.simulate",
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``zipcoll-bench COMMAND ...`` to the command's module."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: zipcoll-bench {%s} [options]" % ",".join(COMMANDS), file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]])
    return module.main(argv[1:]) or 0
