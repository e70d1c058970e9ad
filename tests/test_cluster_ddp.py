"""DDP across emulated nodes (benchmarks/cluster), 2 nodes x 1 rank, no MASTER_ADDR anywhere.

zipcoll.torch.init_process_group() must find rank 0's address itself: with a default of
127.0.0.1, the rank on the other node dials its own loopback and never joins. Serial
pytest driving cluster.sh (needs root, iproute2, network namespaces and torch; skips
otherwise), with its own prefix ("zcd") and state dir.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cluster_smoke import CLUSTER, Cluster, _skip_reason

pytest.importorskip("torch")
PREFIX = "zcd"
pytestmark = pytest.mark.timeout(150)

DDP_STEP = """
    import os
    assert not any(v in os.environ for v in ("MASTER_ADDR", "MASTER_PORT")), "set by someone"
    import numpy as np
    import torch
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel as DDP
    import zipcoll.torch as ztorch

    comm = MPI.COMM_WORLD
    addr, _ = ztorch.rendezvous(comm)
    ztorch.init_process_group()
    torch.manual_seed(comm.rank)                   # DDP's broadcast must make them equal
    model = DDP(torch.nn.Linear(8, 4), gradient_as_bucket_view=True)
    model.register_comm_hook(*ztorch.ddp_comm_hook(algorithm="ring"))
    model(torch.randn(16, 8)).square().sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    gathered = comm.allgather(params)
    assert all(np.array_equal(gathered[0], p) for p in gathered), "replicas differ"
    if comm.rank == 0:
        print("ddp ok at", addr)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("cluster-ddp"), prefix=PREFIX, budget_s=140.0)
    for v in ("MASTER_ADDR", "MASTER_PORT"):
        c.env.pop(v, None)
    c.env.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")  # 2 ranks on shared cores
    try:
        up = c.sh("up", "2", "--rate", "1gbit", timeout=20)
        assert up.returncode == 0, up.stderr
        yield c
    finally:
        subprocess.run(["bash", str(CLUSTER), "down"], env=c.env, capture_output=True, timeout=20)


def test_ddp_starts_across_nodes_without_master_addr(cluster):
    script = Path(cluster.env["ZC_STATE_DIR"]) / "ddp_step.py"
    script.write_text(textwrap.dedent(DDP_STEP))
    res = cluster.sh("run", "-n", "2", "--ranks-per-node", "1", "-x", "OMP_WAIT_POLICY", "--",
                     sys.executable, "-m", "mpi4py", str(script), timeout=120)
    assert res.returncode == 0, f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    subnet = cluster.env.get("ZC_SUBNET", "198.18.0")
    assert f"ddp ok at {subnet}.1" in res.stdout, res.stdout   # node 0's own address
