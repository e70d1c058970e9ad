"""Where zipcoll.torch.init_process_group's rank 0 listens (serial, one rank: COMM_SELF).

Across real nodes it is tested on the emulated cluster (tests/test_cluster_ddp.py).
"""
import socket

import pytest

pytest.importorskip("torch")
from mpi4py import MPI  # noqa: E402

import zipcoll.torch as ztorch  # noqa: E402


@pytest.fixture(autouse=True)
def no_rendezvous_env(monkeypatch):
    for v in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(v, raising=False)


def test_one_host_listens_on_loopback_at_a_free_port():
    addr, port = ztorch.rendezvous(MPI.COMM_SELF)
    assert addr == "127.0.0.1"
    with socket.socket() as s:
        s.bind((addr, port))  # free: rank 0 only looked it up


def test_master_addr_and_port_override(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    monkeypatch.setenv("MASTER_PORT", "29511")
    assert ztorch.rendezvous(MPI.COMM_SELF) == ("10.1.2.3", 29511)
    assert ztorch.rendezvous(MPI.COMM_SELF, "node7", 1234) == ("node7", 1234)


def test_reachable_address_is_not_loopback():
    addr = ztorch.reachable_address()
    socket.inet_aton(addr)  # an IPv4 address
    assert not addr.startswith("127."), addr


def test_gloo_socket_ifname_picks_the_interface(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert ztorch.reachable_address() == "127.0.0.1"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-if0")
    with pytest.raises(RuntimeError, match="no-such-if0"):
        ztorch.reachable_address()
