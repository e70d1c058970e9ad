"""Compute kernels of the codecs: one scalar rule (``rules``), two targets.

``cpu`` runs the rules in ``numba.njit`` loops, ``cuda`` in ``numba.cuda.jit`` kernels;
both modules expose the same functions with the same arguments, so a codec calls
``backend.kernels.block_encode(...)`` without knowing where the data lives.
"""
