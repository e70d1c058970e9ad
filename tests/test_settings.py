"""zipcoll.settings: one rule a kind of value, one table of every variable, configure and
reset; and ranks started with different or bad settings (mpiexec, a variable per rank)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import zipcoll
from run import mpi_env
from zipcoll import settings
from zipcoll.settings import BY_NAME, VARIABLES

REPO = Path(__file__).resolve().parents[1]
# a value each kind refuses
BAD = {"bool": "maybe", "int": "-1", "grid": "2by2", "path": "/no/such/profile.json"}


def by_env(variable) -> str:
    return variable.env


# -- the rules ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["1", "true", "TRUE", "Yes", "on", " ON "])
def test_true(text):
    assert settings.parse(BY_NAME["check"], text) is True


@pytest.mark.parametrize("text", ["0", "false", "False", "NO", "off", " Off "])
def test_false(text):
    assert settings.parse(BY_NAME["check"], text) is False


@pytest.mark.parametrize("text", ["2", "maybe", "y", "enable", "1.0", "-"])
def test_not_a_boolean(text):
    with pytest.raises(ValueError, match=r"ZIPCOLL_CHECK=.*expected 1/0, true/false, "
                                         r"yes/no or on/off \(any case\)"):
        settings.parse(BY_NAME["check"], text)


@pytest.mark.parametrize("text, value", [("4096", 4096), ("4K", 4096), ("256k", 256 << 10),
                                         ("4M", 4 << 20), ("4MiB", 4 << 20), ("4 MB", 4 << 20),
                                         ("1G", 1 << 30), (" 12 ", 12)])
def test_integers_and_sizes(text, value):
    assert settings.parse(BY_NAME["slice_bytes"], text) == value


@pytest.mark.parametrize("text", ["-1", "0", "+4", "1.5M", "4T", "4 M B", "0x10", "abc", "4e6"])
def test_not_an_integer_of_the_range(text):
    with pytest.raises(ValueError, match=r"ZIPCOLL_SLICE_BYTES=.*expected an integer >= 1"):
        settings.parse(BY_NAME["slice_bytes"], text)


def test_each_integers_least_value():
    assert settings.parse(BY_NAME["tag_blocks"], "2") == 2
    with pytest.raises(ValueError, match="ZIPCOLL_TAG_BLOCKS='1': expected an integer >= 2"):
        settings.parse(BY_NAME["tag_blocks"], "1")
    assert settings.parse(BY_NAME["scratch_bytes"], "0") == 0


@pytest.mark.parametrize("variable", VARIABLES, ids=by_env)
def test_a_bad_value_of_each_variable_is_a_value_error_naming_it(zipcoll_env, variable):
    zipcoll_env(**{variable.env: BAD[variable.kind]})
    with pytest.raises(ValueError) as info:
        settings.current()
    assert str(info.value) == (f"{variable.env}={BAD[variable.kind]!r}: "
                               f"expected {variable.accepts()}")
    assert getattr(settings.get(), variable.name) == variable.default  # get(): never raises


@pytest.mark.parametrize("variable", VARIABLES, ids=by_env)
def test_a_bad_value_fails_the_first_call(zipcoll_env, variable):
    zipcoll_env(**{variable.env: BAD[variable.kind]})
    comm = MPI.COMM_SELF.Dup()
    try:
        with pytest.raises(ValueError) as info:
            zipcoll.allreduce(np.ones(4), comm=comm, algorithm="ring")
    finally:
        comm.Free()
    assert type(info.value) is ValueError
    assert f"rank 0: {variable.env}={BAD[variable.kind]!r}: expected" in str(info.value)


def test_unset_and_empty_are_the_defaults(zipcoll_env):
    zipcoll_env(**{v.env: None for v in VARIABLES})
    unset = settings.get()
    zipcoll_env(**{v.env: "" for v in VARIABLES})
    assert settings.current() == unset
    assert all(getattr(unset, v.name) == v.default for v in VARIABLES)
    assert unset.changed == "defaults"


def test_read_once_then_again_on_reload(zipcoll_env, monkeypatch):
    zipcoll_env(ZIPCOLL_SLICE_BYTES="8K")
    assert settings.get().slice_bytes == 8192
    monkeypatch.setenv("ZIPCOLL_SLICE_BYTES", "16K")
    assert settings.get().slice_bytes == 8192  # read at the first use only
    assert settings.reload().slice_bytes == 16384


# -- configure ----------------------------------------------------------------------------

def test_configure_wins_over_the_environment_until_none_or_reset(zipcoll_env):
    zipcoll_env(ZIPCOLL_SLICE_BYTES="8K", ZIPCOLL_CHECK="1")
    assert zipcoll.configure(slice_bytes="1M", check=False).slice_bytes == 1 << 20
    assert not zipcoll.collectives.api.checks_enabled()
    assert zipcoll.configure(slice_bytes=4096).slice_bytes == 4096
    assert zipcoll.configure(slice_bytes=None).slice_bytes == 8192  # the environment's
    assert settings.get().check is False
    settings.reset()
    assert settings.get().check is True


@pytest.mark.parametrize("name, value", [("slice_bytes", -1), ("slice_bytes", "lots"),
                                         ("slice_bytes", True), ("check", 1), ("check", "2"),
                                         ("grid", (2, 0)), ("tag_blocks", 1),
                                         ("profile", "/no/such/file")])
def test_configure_refuses_what_the_variable_refuses(name, value):
    before = settings.get()
    with pytest.raises(ValueError, match=rf"zipcoll.configure\({name}=.*expected"):
        zipcoll.configure(**{name: value})
    assert settings.get() == before


def test_configure_takes_python_values(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text("{}")
    got = zipcoll.configure(grid=[4, 2], profile=profile, cuda_aware="off", max_count="1K")
    assert (got.grid, got.profile, got.cuda_aware, got.max_count) == ((4, 2), str(profile),
                                                                       False, 1024)


def test_configure_names_the_settings_it_has():
    with pytest.raises(TypeError, match="no setting slice_size; settings: abort_on_error"):
        zipcoll.configure(slice_size=4096)


def test_the_code_follows_the_settings_that_must_agree_only():
    base = settings.get().code
    assert zipcoll.configure(scratch_bytes="1M", abort_on_error=False).code == base
    changed = zipcoll.configure(pipeline_window=3)
    assert changed.code != base and changed.changed == "ZIPCOLL_PIPELINE_WINDOW=3"


# -- one table, one reader ----------------------------------------------------------------

def test_every_variable_has_one_row_in_the_table():
    text = (REPO / "docs" / "settings.md").read_text()
    assert settings.markdown() in text, "docs/settings.md: paste settings.markdown()"
    rows = re.findall(r"^\| `(ZIPCOLL_\w+)` \|", text, re.M)
    assert sorted(rows) == sorted(v.env for v in VARIABLES)
    assert "docs/settings.md" in (REPO / "README.md").read_text()


def test_only_the_settings_module_reads_zipcoll_variables():
    readers = [str(path.relative_to(REPO)) for path in (REPO / "zipcoll").rglob("*.py")
               if path.name != "settings.py"
               and re.search(r"(environ|getenv)\W[^\n]*ZIPCOLL_", path.read_text())]
    assert readers == []
    written = set(re.findall(r"ZIPCOLL_[A-Z_]+[A-Z]", "\n".join(
        path.read_text() for path in (REPO / "zipcoll").rglob("*.py"))))
    assert written - {v.env for v in VARIABLES} == set()  # no variable the table lacks


def test_zipcoll_info_prints_every_setting_and_its_source(zipcoll_env):
    from zipcoll.info import report

    zipcoll_env(ZIPCOLL_SLICE_BYTES="4K", ZIPCOLL_TAG_BLOCKS="bad")
    zipcoll.configure(check=False)
    lines = dict(report())
    assert lines["ZIPCOLL_SLICE_BYTES"] == "4096 (environment)"
    assert lines["ZIPCOLL_CHECK"] == "0 (zipcoll.configure)"
    assert lines["ZIPCOLL_PIPELINE_WINDOW"] == "8 (default)"
    assert lines["ZIPCOLL_TAG_BLOCKS"].startswith("ZIPCOLL_TAG_BLOCKS='bad': expected an integer")


# -- ranks started with different or bad settings ----------------------------------------

CHILD = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    import zipcoll

    zipcoll.abort_on_error(False)
    try:
        zipcoll.allreduce(np.ones(64, np.float32), algorithm="ring")
        outcome = "ok"
    except Exception as error:
        outcome = type(error).__name__ + ": " + str(error).replace("\\n", " | ")
    print(MPI.COMM_WORLD.rank, outcome, flush=True)
""")


def run_ranks(tmp_path, variables: list[dict[str, str]]) -> list[str]:
    """Each rank's outcome of one all-reduce, rank i started with `variables[i]` set."""
    env = mpi_env()
    if shutil.which("mpiexec", path=env["PATH"]) is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    command = ["mpiexec"]
    for rank, own in enumerate(variables):
        command += [":"] * (rank > 0) + ["-n", "1", "env", *(f"{k}={v}" for k, v in own.items()),
                                          sys.executable, str(script)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if line[:1].isdigit())
    assert [line.split()[0] for line in lines] == [str(r) for r in range(len(variables))], lines
    return [line.split(" ", 1)[1] for line in lines]


@pytest.mark.timeout(240)
def test_ranks_started_with_different_settings_all_raise_mismatch(tmp_path):
    rank0 = {"ZIPCOLL_SLICE_BYTES": "4K", "ZIPCOLL_TAG_BLOCKS": "4", "ZIPCOLL_CHECK": "0",
             "ZIPCOLL_PIPELINE_WINDOW": "2"}
    outcomes = run_ranks(tmp_path, [rank0, {"ZIPCOLL_SCRATCH_BYTES": "1M"}])
    named = ["ZIPCOLL_SLICE_BYTES: 4096 on rank 0; 2097152 on rank 1",
             "ZIPCOLL_TAG_BLOCKS: 4 on rank 0; unset on rank 1",
             "ZIPCOLL_CHECK: 0 on rank 0; 1 on rank 1",
             "ZIPCOLL_PIPELINE_WINDOW: 2 on rank 0; 8 on rank 1"]
    for outcome in outcomes:
        assert outcome.startswith("MismatchError: ranks disagree on settings"), outcome
        assert all(line in outcome for line in named), outcome
        assert "SCRATCH" not in outcome  # a setting each rank may have its own of


@pytest.mark.timeout(240)
def test_a_bad_value_on_one_rank_is_the_same_value_error_on_every_rank(tmp_path):
    outcomes = run_ranks(tmp_path, [{}, {"ZIPCOLL_STAGING_IN_FLIGHT": "two"}])
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0].startswith("ValueError: ") and \
        "rank 1: ZIPCOLL_STAGING_IN_FLIGHT='two': expected an integer >= 1" in outcomes[0]
