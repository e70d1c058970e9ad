"""The DDP hook on a bfloat16 model: buckets of bfloat16 gradients, averaged in float32 and
rounded once (test_bfloat16.py checks the rounding). Checked: parameters stay bfloat16 and
bit-identical on every rank after every step, lossless and int8 (with and without error
feedback) and sign with feedback, and the loss falls."""

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as in test_ddp_hook.py
torch = pytest.importorskip("torch")

from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll.torch as ztorch  # noqa: E402
from arrays import differing_across_ranks  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("torch_process_group")]

STEPS = 8


def make_model(hook_args: dict) -> DDP:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4)).to(torch.bfloat16)
    model = DDP(net, bucket_cap_mb=0.001, gradient_as_bucket_view=True)
    model.register_comm_hook(*ztorch.ddp_comm_hook(**hook_args))
    return model


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(64, 12, generator=g)
    return x.to(torch.bfloat16), (x[:, :4].sum(dim=1) > 0).long() + 2 * (x[:, 4] > 0).long()


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).view(torch.int16).numpy()


@pytest.mark.parametrize("hook_args", [
    {"algorithm": "ring"}, {"algorithm": "auto"},
    {"algorithm": "ring", "codec": "int8", "error_feedback": False},
    {"algorithm": "ring", "codec": "int8"},
    {"algorithm": "allgather", "codec": "sign", "overlap": True},
], ids=["lossless-ring", "lossless-auto", "int8", "int8-ef", "sign-ef-overlap"])
def test_bf16_model_trains_bit_identical(comm, hook_args):
    model = make_model(hook_args)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(STEPS):
        x, y = batch(comm.rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(float(comm.allreduce(loss.item())) / comm.size)
        params = {f"{n}@{step}": bits(p) for n, p in model.named_parameters()}
        assert all(p.dtype == torch.bfloat16 for p in model.parameters())
        assert not differing_across_ranks(comm, params), f"ranks differ after step {step}"
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
