"""The layers of docs/architecture.md hold: `lint-imports` with pyproject.toml's contracts,
and no module but transport.py calls mpi4py's communication functions (no MPI run)."""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# mpi4py's communication functions: point to point, collectives (buffer and pickle
# forms), communicator creation and freeing. Queries (Get_rank, Get_attr, Get_size) and
# requests' own methods (Wait, Test) are not among them.
COMMUNICATION = {
    "Send", "Recv", "Isend", "Irecv", "Sendrecv", "send", "recv", "isend", "irecv",
    "sendrecv", "Bcast", "Ibcast", "bcast", "Gather", "Igather", "Gatherv", "gather",
    "Allgather", "Iallgather", "Allgatherv", "Iallgatherv", "allgather", "Scatter",
    "scatter", "Alltoall", "Ialltoall", "Alltoallv", "alltoall", "Reduce", "Ireduce",
    "reduce", "Allreduce", "Iallreduce", "allreduce", "Barrier", "Ibarrier", "barrier",
    "Split", "Split_type", "Dup", "Idup", "Create", "Create_group", "Free",
}
# transport.py moves the library's data and makes its communicators; the benchmark tools
# (zipcoll/bench) time MPI's own calls beside zipcoll's and line their ranks up with them.
ALLOWED = {ROOT / "zipcoll" / "transport.py"}
TOOLS = ROOT / "zipcoll" / "bench"


def test_imports_follow_the_layers():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def communication_calls(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """`file:line: call` for each call of a method named like an MPI communication function
    on a communicator-looking receiver (comm, MPI.COMM_WORLD, self.comm, ...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in COMMUNICATION and "comm" in ast.unparse(node.func.value).lower():
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_only_transport_calls_mpis_communication_functions():
    calls = [call for path in sorted((ROOT / "zipcoll").rglob("*.py"))
             if path not in ALLOWED and TOOLS not in path.parents
             for call in communication_calls(path)]
    assert not calls, "\n".join(calls)


def test_the_communication_check_can_fail(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(comm):\n    return comm.bcast(1, root=0), comm.Get_rank()\n")
    assert communication_calls(sample, tmp_path) == ["sample.py:2: comm.bcast"]
