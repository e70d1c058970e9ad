"""zipcoll.torch.ddp_comm_hook under mpiexec: DDP (gloo process group) with zipcoll's all-reduce.

The process group only sets DDP up; the gradients go through zipcoll over MPI. Checked:
parameters bit-identical on every rank after every step (lossless and compressed); with a
lossless codec the trained parameters match DDP's own all-reduce within float rounding;
error-feedback keys follow the parameters through DDP's bucket rebuild.
"""

import os

import numpy as np
import pytest

# Before torch loads OpenMP (if nothing in this process has yet): spinning idle OpenMP
# threads take the core a waiting MPI peer needs when ranks outnumber cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll  # noqa: E402
import zipcoll.torch as ztorch  # noqa: E402
from arrays import differing_across_ranks  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("torch_process_group")]

STEPS = 6
BUCKET_MB = 0.001  # several buckets for this small model, once DDP has rebuilt them


class Net(torch.nn.Module):
    """Layers registered in another order than they run, two of the same size: DDP's
    rebuild after step 1 then moves parameters between buckets of equal size."""

    def __init__(self):
        super().__init__()
        self.last = torch.nn.Linear(16, 16)
        self.middle = torch.nn.Linear(16, 16)
        self.hidden = torch.nn.Linear(16, 16)
        self.first = torch.nn.Linear(12, 16)

    def forward(self, x):
        x = torch.relu(self.first(x))
        x = torch.relu(self.hidden(x))
        return self.last(torch.relu(self.middle(x)))


def make_model(hook_args=None, record=None, bucket_view=False) -> DDP:
    torch.manual_seed(0)  # the same initial parameters everywhere (DDP also broadcasts them)
    model = DDP(Net(), bucket_cap_mb=BUCKET_MB, gradient_as_bucket_view=bucket_view)
    if hook_args is not None:
        state, hook = ztorch.ddp_comm_hook(**hook_args)
        if record is not None:
            def recording(state, bucket: dist.GradBucket):
                params = bucket.parameters()
                record.append((bucket.index(), tuple(id(p) for p in params),
                               sum(p.numel() for p in params)))
                return hook(state, bucket)
            model.register_comm_hook(state, recording)
        else:
            model.register_comm_hook(state, hook)
        model.zipcoll_state = state
    return model


def batches(rank: int, steps: int = STEPS):
    """Each rank's own data: a fixed regression-ish classification task."""
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(32, 12, generator=g)
        yield x, (x[:, :4].sum(dim=1) > 0).long() + 2 * (x[:, 4] > 0).long()


def train(comm, model: DDP, steps: int = STEPS, check_ranks: bool = True) -> list[np.ndarray]:
    """SGD with momentum; asserts bit-identical parameters on every rank after every step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    for step, (x, y) in enumerate(batches(comm.rank, steps)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if check_ranks:
            params = {f"{n}@{step}": p.detach().numpy() for n, p in model.named_parameters()}
            assert not differing_across_ranks(comm, params), f"ranks differ after step {step}"
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner", "auto"])
def test_lossless_matches_ddps_own_allreduce(comm, algorithm, overlap):
    ours = train(comm, make_model({"algorithm": algorithm, "overlap": overlap}))
    theirs = train(comm, make_model(), check_ranks=False)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # summed in another order


HOOKS = {
    "int8-ring": {"codec": "int8", "algorithm": "ring", "error_feedback": False},
    "fp16-tree": {"codec": "fp16", "algorithm": "tree", "error_feedback": False},
    "sign-ef-twophase": {"codec": "sign", "algorithm": "twophase"},
    "topk-ef-allgather": {"codec": "topk:ratio=0.05", "algorithm": "allgather"},
    "randomk-ef-allgather": {"codec": "randomk:ratio=0.1", "algorithm": "allgather"},
    "int8-ring-overlap": {"codec": "int8", "algorithm": "ring", "error_feedback": False,
                          "overlap": True},
    "sign-ef-twophase-overlap": {"codec": "sign", "algorithm": "twophase", "overlap": True},
}


@pytest.mark.parametrize("name", HOOKS)
def test_compressed_parameters_bit_identical_every_step(comm, name):
    model = make_model(HOOKS[name])
    train(comm, model)  # asserts identity after each step
    lossless = train(comm, make_model({"algorithm": "ring"}), check_ranks=False)
    compressed = [p.detach().numpy() for p in model.parameters()]
    if comm.size > 1:  # compression changed something, but trained the same model roughly
        assert any(not np.array_equal(a, b) for a, b in zip(compressed, lossless))


@pytest.mark.parametrize("bucket_view", [False, True])
def test_mean_not_sum(comm, bucket_view):
    """The gradients after backward are the mean (checked against torch's own autograd),
    also when they are views into DDP's buckets, which the hook writes in place."""
    model = make_model({"algorithm": "ring"}, bucket_view=bucket_view)
    x, y = next(batches(comm.rank, 1))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    reference = Net()
    reference.load_state_dict(model.module.state_dict())
    mine = [torch.autograd.grad(torch.nn.functional.cross_entropy(reference(xr), yr),
                                list(reference.parameters()))
            for xr, yr in [next(batches(r, 1)) for r in range(comm.size)]]
    for i, p in enumerate(model.parameters()):
        mean = sum(g[i] for g in mine) / comm.size
        np.testing.assert_allclose(p.grad.numpy(), mean.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_as_bucket_views(comm):
    """gradient_as_bucket_view=True: lossless matches DDP's own all-reduce (also with views),
    and a compressed hook keeps the ranks bit-identical every step."""
    ours = train(comm, make_model({"algorithm": "ring"}, bucket_view=True))
    theirs = train(comm, make_model(bucket_view=True), check_ranks=False)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    train(comm, make_model(HOOKS["sign-ef-twophase"], bucket_view=True))


def test_overlap_finishes_every_bucket_in_the_last_hook(comm):
    """overlap=True: the hooks return unfinished futures, the last bucket's completes them
    all, and nothing is left in flight after backward."""
    futures = []
    state, hook = ztorch.ddp_comm_hook(codec="int8", algorithm="ring", overlap=True)
    model = make_model()

    def recording(state, bucket: dist.GradBucket):
        future = hook(state, bucket)
        futures.append((bucket.is_last(), future.done()))
        return future

    model.register_comm_hook(state, recording)
    train(comm, model, steps=3)
    assert len(futures) > 3 and futures[-1] == (True, True)
    assert all(not done for last, done in futures if not last)  # on the wire during backward
    assert not state.in_flight


def test_feedback_keys_follow_parameters_through_the_bucket_rebuild(comm):
    calls = []
    model = make_model({"codec": "sign", "algorithm": "ring"}, record=calls)
    train(comm, model, steps=4)
    state = model.zipcoll_state
    first, later = calls[0], calls[-len(state.keys):]  # step 0's first bucket; the last step
    # the rebuild happened: after step 1, bucket 0 holds other parameters than at step 0
    assert len(later) > 1 and first[1] != later[0][1]
    keys = [("zipcoll.torch", state.hook_id, ids) for _, ids, _ in later]
    assert [state.keys[index] for index, _, _ in later] == keys
    sizes = {size for _, _, size in later}
    assert len(sizes) < len(later)  # two buckets of one size: index+size would not tell them apart
    # residuals are held for today's buckets only: the pre-rebuild bucket's were freed
    mine = [k for k in zipcoll.feedback.keys() if k[:2] == ("zipcoll.torch", state.hook_id)]
    assert sorted(map(repr, mine)) == sorted(map(repr, keys))
    state.reset()
    assert not [k for k in zipcoll.feedback.keys() if k[:2] == ("zipcoll.torch", state.hook_id)]


def test_lossless_codec_keeps_no_residuals(comm):
    state, _ = ztorch.ddp_comm_hook(codec="none", algorithm="ring")
    assert not state.error_feedback
    assert ztorch.ddp_comm_hook(codec="int8")[0].error_feedback
    assert not ztorch.ddp_comm_hook(codec="int8", error_feedback=False)[0].error_feedback


def test_zipcoll_torch_is_importable_as_an_attribute():
    assert zipcoll.torch is ztorch
    assert ztorch.torch is torch  # `import torch` inside zipcoll.torch is PyTorch
