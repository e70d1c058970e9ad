"""Checkpoints with error feedback: the hook's residuals saved and loaded per rank.

A run of N steps is compared with one that stops at step K, saves model, optimizer and
hook state (`torch.save`, read back with `torch.load(weights_only=True)`), drops every
residual of this process, and resumes in a fresh DDP model with a fresh hook: the
parameters after step N are bit-identical. Without the hook's state the resumed run
differs (the residuals matter). `zipcoll.feedback.state_dict()` does the same for keys
given to `zipcoll.allreduce`.
"""

import io
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as in test_ddp_hook.py
torch = pytest.importorskip("torch")

from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll  # noqa: E402
import zipcoll.torch as ztorch  # noqa: E402
from arrays import differing_across_ranks, rank_data  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("torch_process_group")]

STEPS, STOP = 7, 3
HOOKS = {
    "sign-ef-ring": {"codec": "sign", "algorithm": "ring"},
    "int8-ef-twophase": {"codec": "int8", "algorithm": "twophase"},
    "int8-ef-tree-overlap": {"codec": "int8", "algorithm": "tree", "overlap": True},
}


@pytest.fixture(autouse=True)
def fresh_feedback():
    zipcoll.feedback.reset()
    yield
    zipcoll.feedback.reset()


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 12, generator=g)
    return x, (x[:, :4].sum(dim=1) > 0).long() + 2 * (x[:, 4] > 0).long()


class Run:
    """A DDP model with the hook, its optimizer, and the steps it has taken."""

    def __init__(self, hook_args: dict, checkpoint: bytes | None = None, hook_state=True):
        module = net()
        self.opt_state = None
        saved = None
        if checkpoint is not None:
            saved = torch.load(io.BytesIO(checkpoint), weights_only=True)
            module.load_state_dict(saved["model"])
        self.model = DDP(module, bucket_cap_mb=0.002)  # several buckets
        self.state, hook = ztorch.ddp_comm_hook(**hook_args)
        self.model.register_comm_hook(self.state, hook)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.step = 0
        if saved is not None:
            self.opt.load_state_dict(saved["optimizer"])
            if hook_state:
                self.state.load_state_dict(saved["hook"])
            self.step = saved["step"]

    def train_to(self, comm, last: int) -> None:
        while self.step < last:
            x, y = batch(comm.rank, self.step)
            self.opt.zero_grad()
            torch.nn.functional.cross_entropy(self.model(x), y).backward()
            self.opt.step()
            self.step += 1

    def checkpoint(self) -> bytes:
        out = io.BytesIO()
        torch.save({"model": self.model.module.state_dict(), "optimizer": self.opt.state_dict(),
                    "hook": self.state.state_dict(), "step": self.step}, out)
        return out.getvalue()

    def parameters(self) -> list[np.ndarray]:
        return [p.detach().numpy().copy() for p in self.model.parameters()]


@pytest.mark.parametrize("name", HOOKS)
def test_resumed_run_is_bit_identical(comm, name):
    whole = Run(HOOKS[name])
    whole.train_to(comm, STEPS)
    expected = whole.parameters()
    del whole
    zipcoll.feedback.reset()

    first = Run(HOOKS[name])
    first.train_to(comm, STOP)
    saved = first.checkpoint()
    held = zipcoll.feedback.nbytes()
    assert held > 0 or comm.size == 1  # one rank: nothing to encode
    del first
    zipcoll.feedback.reset()  # nothing carries over but the checkpoint

    resumed = Run(HOOKS[name], saved)
    assert zipcoll.feedback.nbytes() == 0  # the residuals wait for their buckets
    resumed.train_to(comm, STOP + 1)
    assert zipcoll.feedback.nbytes() == held
    resumed.train_to(comm, STEPS)
    got = resumed.parameters()
    assert not differing_across_ranks(comm, {f"p{i}": p for i, p in enumerate(got)})
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)

    if comm.size > 1:  # not vacuous: resuming without the residuals ends elsewhere
        zipcoll.feedback.reset()
        forgetful = Run(HOOKS[name], saved, hook_state=False)
        forgetful.train_to(comm, STEPS)
        assert any(not np.array_equal(a, b) for a, b in zip(forgetful.parameters(), expected))


def test_hook_state_is_plain_and_per_rank(comm):
    run = Run({"codec": "sign", "algorithm": "allgather"})  # encodes on one rank too
    run.train_to(comm, 2)
    state = run.state.state_dict()
    out = io.BytesIO()
    torch.save(state, out)
    back = torch.load(io.BytesIO(out.getvalue()), weights_only=True)
    assert back["feedback"]["rank"] == comm.rank and back["feedback"]["entries"]
    entry = back["feedback"]["entries"][0]
    assert all(isinstance(n, int) for n in entry["key"])  # parameter numbers, not ids
    assert all(isinstance(r, torch.Tensor) for r in entry["residuals"].values())
    back["feedback"]["rank"] = (comm.rank + 1) % (comm.size + 1)
    with pytest.raises(ValueError, match="per rank"):
        Run(HOOKS["sign-ef-ring"]).state.load_state_dict(back)


def test_feedback_store_round_trip(comm):
    """zipcoll.feedback.state_dict(): the next call after loading is the one the
    uninterrupted process would have made."""
    x = rank_data("float32", 1001, comm.rank)
    for _ in range(3):
        zipcoll.allreduce(x, algorithm="ring", codec="sign", key=("layer", 3), comm=comm)
    zipcoll.allreduce(x, algorithm="allgather", codec="feedback:int4", comm=comm)
    state = zipcoll.feedback.state_dict()
    keys = sorted(map(repr, zipcoll.feedback.keys()))
    want = zipcoll.allreduce(x, algorithm="ring", codec="sign", key=("layer", 3), comm=comm)
    zipcoll.feedback.reset()
    out = io.BytesIO()
    np.save(out, np.array([state], dtype=object), allow_pickle=True)  # any pickler
    zipcoll.feedback.load_state_dict(np.load(io.BytesIO(out.getvalue()),
                                             allow_pickle=True)[0])
    assert sorted(map(repr, zipcoll.feedback.keys())) == keys
    got = zipcoll.allreduce(x, algorithm="ring", codec="sign", key=("layer", 3), comm=comm)
    np.testing.assert_array_equal(got, want)
    fresh = zipcoll.allreduce(x, algorithm="ring", codec="sign", comm=comm)
    assert comm.size == 1 or not np.array_equal(fresh, want)  # the residuals mattered
