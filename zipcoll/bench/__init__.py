"""zipcoll-bench: benchmark subcommands, registered in one table.

    zipcoll-bench --help
    zipcoll-bench allreduce -m 1K:64M --algorithm ring
    zipcoll-bench codecs -m 1M:256M
"""
from __future__ import annotations

import importlib
import sys

# subcommand -> (module whose main(argv) runs it, one line for --help); modules are
# imported lazily so one slow import (numba kernels, MPI) does not tax the others.
COMMANDS = {
    "allreduce": ("zipcoll.bench.allreduce_bench",
                  "OSU's latency table of one algorithm/codec beside MPI's own Allreduce"),
    "codecs": ("zipcoll.bench.codec_bench",
               "encode / decode / decode_add throughput of each codec beside a memory copy"),
    "plot": ("zipcoll.bench.plot",
             "PNG plots of time, bus bandwidth and speedup from suite or allreduce JSON"),
    "calibrate": ("zipcoll.bench.calibrate",
                  "measure links, reductions, native and codec speeds: a cost-model profile"),
    "simulate": ("zipcoll.bench.simulate",
                 "predicted data-parallel step time and scaling on clusters we do not have"),
    "autocheck": ("zipcoll.bench.autocheck",
                  "algorithm='auto' beside every plan it could have picked, measured"),
    "reduce-scatter": ("zipcoll.bench.reduce_scatter_bench",
                       "OSU's reduce-scatter table of one algorithm/codec beside MPI's own"),
    "allgather": ("zipcoll.bench.allgather_bench",
                  "OSU's all-gather table of one algorithm/codec beside MPI's own"),
}


def usage() -> str:
    """The top-level help: every subcommand and what it does."""
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: zipcoll-bench {{{','.join(COMMANDS)}}} [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "zipcoll-bench COMMAND --help lists a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``zipcoll-bench COMMAND ...`` to the command's module."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        problem = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"{usage()}\n\nzipcoll-bench: error: {problem}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0
