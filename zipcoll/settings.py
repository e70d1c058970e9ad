"""Every ZIPCOLL_* setting: read from the environment once, at first use, by one rule a kind.

    >>> zipcoll.settings.get().slice_bytes   # ZIPCOLL_SLICE_BYTES=4M: 4194304  # doctest: +SKIP
    >>> zipcoll.configure(check=False)       # wins over the environment     # doctest: +SKIP

Rules: a boolean is 1/0, true/false, yes/no or on/off (any case); an integer is digits,
optionally with K, M or G (powers of 1024: 256K, 4M, also written 4MiB); a grid is "XxY";
a path names a readable file; an empty variable is an unset one. docs/settings.md has the table of every variable.

A bad value does not raise where it is read (`get`), so that no rank raises alone before
the others know: it keeps its default, is listed in `Settings.errors`, and every call
raises it as a ValueError on every rank (at a communicator's first use, whose settings
exchange also finds ranks that disagree: see collectives/agreement.py). `current()`
raises at once, for a caller outside a collective.
"""
from __future__ import annotations

import functools
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Variable:
    """One setting: `name` is its attribute (and configure's keyword); ZIPCOLL_ + NAME its
    variable; `agree`: whether every rank of a communicator must have the same value."""

    name: str
    kind: str  # "bool", "int", "grid" or "path"
    default: Any
    agree: bool
    meaning: str
    least: int = 0  # an int's smallest value
    unset: str = ""  # what no value means, where the default is None

    @property
    def env(self) -> str:
        return "ZIPCOLL_" + self.name.upper()

    def accepts(self) -> str:
        """What the variable takes, in words (for errors and the table)."""
        return {"bool": "1/0, true/false, yes/no or on/off (any case)",
                "int": f"an integer >= {self.least}, digits or with K, M or G (256K, 4M)",
                "grid": "'XxY', two positive integers, e.g. '4x2'",
                "path": "the path of a readable file"}[self.kind]

    def shown(self, value: Any) -> str:
        """`value` as the variable would be written ("unset" for None)."""
        if value is None:
            return "unset"
        if self.kind == "bool":
            return "1" if value else "0"
        if self.kind == "grid":
            return f"{value[0]}x{value[1]}"
        return str(value)


VARIABLES = (
    Variable("abort_on_error", "bool", True, False,
             "an uncaught exception on one rank aborts the MPI job"),
    Variable("check", "bool", True, True,
             "the agreement check before every call (0: off, for raw speed)"),
    Variable("cuda_aware", "bool", None, True,
             "MPI reads GPU memory itself (0: GPU data is staged through host memory)",
             unset="ask the MPI library"),
    Variable("feedback_idle_calls", "int", 10000, True,
             "error feedback drops a key unused in this many look-ups", least=1),
    Variable("grid", "grid", None, True,
             "a 2-D grid of Y rows of X ranks, for the torus", unset="nodes as rows"),
    Variable("max_count", "int", 2**31 - 1, True,
             "most items in one MPI call; larger messages go in chunks", least=2),
    Variable("pipeline_window", "int", 8, True, "most slices of a call in flight", least=1),
    Variable("profile", "path", None, False,
             "the cost model's profile (zipcoll-bench calibrate); rank 0's is used",
             unset="the defaults"),
    Variable("ranks_per_node", "int", None, True,
             "emulate nodes of this many consecutive ranks", least=1,
             unset="shared-memory domains"),
    Variable("scratch_bytes", "int", 64 << 20, False,
             "scratch memory kept between calls (the process's pool)"),
    Variable("slice_bytes", "int", 2 << 20, True,
             "a call's slice size (a flat schedule's grows beyond 8 ranks)", least=1),
    Variable("staging_chunk_bytes", "int", 4 << 20, True,
             "GPU data staged through host memory moves in chunks of at most this", least=1),
    Variable("staging_in_flight", "int", 2, True,
             "pinned host buffers a staged call uses at once", least=1),
    Variable("tag_blocks", "int", None, True,
             "tag blocks used in turn (lower: to test the wrap)", least=2,
             unset="as many as MPI_TAG_UB allows"),
    Variable("tune", "bool", True, True,
             "algorithm='auto' times its best few plans on the job's first calls of each "
             "size (0: the cost model alone; off too where the check is off)"),
)
BY_NAME = {v.name: v for v in VARIABLES}
_BOOLS = {"1": True, "true": True, "yes": True, "on": True,
          "0": False, "false": False, "no": False, "off": False}
_INT = re.compile(r"(\d+)\s*([kmg]?)(?:i?b)?")
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse(variable: Variable, text: str) -> Any:
    """The value `text` gives `variable`; ValueError naming the variable and what it takes."""
    value = _parsed(variable.kind, text.strip())
    if value is None or variable.kind == "int" and value < variable.least:
        raise ValueError(f"{variable.env}={text!r}: expected {variable.accepts()}")
    return value


def _parsed(kind: str, text: str) -> Any:
    if kind == "path":
        return text if os.path.isfile(text) and os.access(text, os.R_OK) else None
    text = text.lower()
    if kind == "bool":
        return _BOOLS.get(text)
    if kind == "int":
        found = _INT.fullmatch(text)
        return int(found[1]) * _SCALE[found[2]] if found else None
    if kind == "grid":
        parts = text.split("x")
        ok = len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts)
        return (int(parts[0]), int(parts[1])) if ok else None
    raise AssertionError(kind)


@dataclass(frozen=True)
class Settings:
    """The value of every setting (see VARIABLES); `errors`: variable -> why its value was
    refused (that setting then has its default)."""

    abort_on_error: bool
    check: bool
    cuda_aware: bool | None
    feedback_idle_calls: int
    grid: tuple[int, int] | None
    max_count: int
    pipeline_window: int
    profile: str | None
    ranks_per_node: int | None
    scratch_bytes: int
    slice_bytes: int
    staging_chunk_bytes: int
    staging_in_flight: int
    tag_blocks: int | None
    tune: bool
    errors: dict[str, str] = field(default_factory=dict, compare=False)

    def agreeing(self) -> dict[str, str]:
        """The settings every rank must agree on, as written: variable -> value."""
        return {v.env: v.shown(getattr(self, v.name)) for v in VARIABLES if v.agree}

    @functools.cached_property
    def code(self) -> int:
        """A number for `agreeing()`, alike on every rank with the same settings (the
        agreement check compares it on every call)."""
        return zlib.crc32(repr(sorted(self.agreeing().items())).encode()) & 0x7FFFFFFF

    @functools.cached_property
    def changed(self) -> str:
        """The agreeing settings not at their defaults, as NAME=value ("defaults" if none)."""
        changed = [f"{v.env}={v.shown(getattr(self, v.name))}" for v in VARIABLES
                   if v.agree and getattr(self, v.name) != v.default]
        return " ".join(changed) or "defaults"

    def raise_errors(self) -> None:
        """ValueError if a variable's value was refused."""
        if self.errors:
            raise ValueError("; ".join(self.errors.values()))


_overrides: dict[str, Any] = {}
_current: Settings | None = None


def get() -> Settings:
    """The settings in force (the environment, read at the first call, and `configure`'s);
    never raises: a refused value is in `errors`."""
    return _current or _load()


def current() -> Settings:
    """`get()`, raising a ValueError that names any variable whose value was refused."""
    settings = get()
    settings.raise_errors()
    return settings


def _load() -> Settings:
    global _current
    values, errors = {}, {}
    for variable in VARIABLES:
        text = os.environ.get(variable.env, "")
        values[variable.name] = variable.default
        if variable.name in _overrides:
            values[variable.name] = _overrides[variable.name]
        elif text.strip():
            try:
                values[variable.name] = parse(variable, text)
            except ValueError as refused:
                errors[variable.env] = str(refused)
    _current = Settings(**values, errors=errors)
    return _current


def configure(**overrides: Any) -> Settings:
    """Set settings for this process, over the environment; the settings now in force.

    Keywords are the settings' names (`zipcoll.settings.VARIABLES`), in lower case:
    ``zipcoll.configure(slice_bytes="4M", check=False)``. A value is a string (read by
    the variable's rule) or a Python value (an int, a bool, (X, Y)); None goes back to the
    environment's. Call it alike on every rank, between calls: settings that must agree
    are compared by the next call on each communicator (checked or not, once after a
    change). ``tag_blocks`` applies to communicators first used after it.
    """
    unknown = sorted(set(overrides) - set(BY_NAME))
    if unknown:
        raise TypeError(f"zipcoll.configure() has no setting {', '.join(unknown)}; "
                        f"settings: {', '.join(BY_NAME)}")
    checked = {name: _checked(BY_NAME[name], value) for name, value in overrides.items()}
    for name, value in checked.items():
        if value is None:
            _overrides.pop(name, None)
        else:
            _overrides[name] = value
    return reload()


def _checked(variable: Variable, value: Any) -> Any:
    """`value` for `variable` (configure's keyword), by the same rule as the variable's."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse(variable, value)
        except ValueError as refused:
            raise ValueError(f"zipcoll.configure({variable.name}={value!r}): "
                             f"expected {variable.accepts()}") from refused
    fits = {"bool": isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool)
            and value >= variable.least,
            "grid": isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(n, int) and n > 0 for n in value),
            "path": isinstance(value, os.PathLike)}[variable.kind]
    if variable.kind == "path" and fits:
        return _checked(variable, os.fspath(value))
    if not fits:
        raise ValueError(f"zipcoll.configure({variable.name}={value!r}): "
                         f"expected {variable.accepts()}")
    return tuple(value) if variable.kind == "grid" else value


def reload() -> Settings:
    """Read the environment again (keeping `configure`'s values); the settings now in force."""
    forget()
    return get()


def forget() -> None:
    """Let the next `get` read the environment again (keeping `configure`'s values)."""
    global _current
    _current = None


def reset() -> None:
    """Forget `configure`'s values; the environment is read again at the next use (tests)."""
    _overrides.clear()
    forget()


def table() -> list[tuple[str, str]]:
    """(variable, value in force) of every setting, for zipcoll-info."""
    settings = get()
    return [(v.env, settings.errors.get(v.env) or _in_force(v, settings)) for v in VARIABLES]


def markdown() -> str:
    """The table of every variable, as docs/settings.md shows it."""
    rows = ["| variable | takes | default | must agree across ranks | what it does |",
            "|---|---|---|---|---|"]
    for v in VARIABLES:
        default = v.unset if v.default is None else _short(v.default)
        rows.append(f"| `{v.env}` | {v.accepts()} | {default} | "
                    f"{'yes' if v.agree else 'no'} | {v.meaning} |")
    return "\n".join(rows)


def _short(value: Any) -> str:
    """A default as written in the table: 4M for 4194304."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 << 20 or value % (1 << 20):
        return str(int(value) if isinstance(value, bool) else value)
    return f"{value >> 20}M"


def _in_force(variable: Variable, settings: Settings) -> str:
    given = variable.name in _overrides and "zipcoll.configure" or \
        os.environ.get(variable.env, "").strip() and "environment" or "default"
    return f"{variable.shown(getattr(settings, variable.name))} ({given})"


__all__ = ["Settings", "VARIABLES", "Variable", "configure", "current", "forget", "get",
           "markdown", "parse", "reload", "reset", "table"]
