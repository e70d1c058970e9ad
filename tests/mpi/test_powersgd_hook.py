"""zipcoll.torch.powersgd_hook under mpiexec: PowerSGD over zipcoll beside PyTorch's own hook.

Checked: the same settings and seed train the same parameters as PyTorch's powerSGD_hook
(gloo) within float rounding, for an MLP and a small CNN; parameters bit-identical on
every rank after every step; the state follows parameters through DDP's bucket rebuild
(PowerSGD from iteration 0); gradient accumulation under no_sync(); a checkpoint of the
hook's state resumes the same run bit for bit; one rank's bad argument fails every rank.
"""

import io
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see test_ddp_hook.py
torch = pytest.importorskip("torch")

from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as theirs  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll  # noqa: E402
import zipcoll.torch as ztorch  # noqa: E402
from arrays import differing_across_ranks  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("torch_process_group")]

BUCKET_MB = 0.01  # several buckets, rebuilt after the first iteration
# PyTorch's hook on gloo starts each bucket's next all-reduce from a future's callback, on
# whichever thread completes it: with two buckets the ranks can post them in different
# orders (gloo then aborts, "Received data size doesn't match"). One bucket each, to compare.
ONE_BUCKET_MB = 25


class MLP(torch.nn.Module):
    """Matrices that PowerSGD compresses, two of one shape (batched together), a small one
    it sends exactly (the min_compression_rate rule) and biases (1-D: exactly)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(24, 48)
        self.hidden = torch.nn.Linear(48, 48)
        self.again = torch.nn.Linear(48, 48)
        self.last = torch.nn.Linear(48, 3)

    def forward(self, x):
        x = torch.relu(self.hidden(torch.relu(self.first(x))))
        return self.last(torch.relu(self.again(x)))


class CNN(torch.nn.Module):
    """Conv weights (4-D: dim 0 x the rest) and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.head = torch.nn.Linear(16 * 4 * 4, 3)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


NETS = {"mlp": MLP, "cnn": CNN}


def batches(net: str, rank: int, steps: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(16, 24, generator=g) if net == "mlp" else torch.randn(16, 1, 16, 16, generator=g)
        flat = x.flatten(1)
        yield x.to(dtype), (flat[:, :4].sum(dim=1) > 0).long() + (flat[:, 5] > 0.5).long()


def make_model(net: str, hook=None, bucket_mb=BUCKET_MB, dtype=torch.float32) -> DDP:
    torch.manual_seed(0)
    model = DDP(NETS[net]().to(dtype), bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True)
    if hook is not None:
        model.register_comm_hook(*hook)
    return model


def train(comm, model: DDP, net: str, steps: int, check_ranks: bool = True, accumulate: int = 1,
          start: int = 0, dtype=torch.float32) -> list[np.ndarray]:
    """SGD with momentum; asserts bit-identical parameters on every rank after each step.
    `accumulate`: micro-batches a step, all but the last under no_sync()."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = list(batches(net, comm.rank, (start + steps) * accumulate, dtype))[start * accumulate:]
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = data[step * accumulate + micro]
            if micro + 1 < accumulate:
                with model.no_sync():
                    torch.nn.functional.cross_entropy(model(x), y).backward()
            else:
                torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if check_ranks:
            params = {f"{n}@{step}": p.detach().numpy() for n, p in model.named_parameters()}
            assert not differing_across_ranks(comm, params), f"ranks differ after step {step}"
    return [p.detach().numpy().copy() for p in model.parameters()]


def pytorch_hook(**settings):
    return theirs.PowerSGDState(process_group=None, **settings), theirs.powerSGD_hook


CASES = {  # name: (net, settings); PyTorch needs start_powerSGD_iter >= 2 with these
    "mlp-rank1": ("mlp", dict(matrix_approximation_rank=1, start_powerSGD_iter=2)),
    "mlp-rank4-batched": ("mlp", dict(matrix_approximation_rank=4, start_powerSGD_iter=3,
                                      batch_tensors_with_same_shape=True)),
    "mlp-rank2-cold": ("mlp", dict(matrix_approximation_rank=2, start_powerSGD_iter=2,
                                   warm_start=False, random_seed=7)),
    "cnn-rank2": ("cnn", dict(matrix_approximation_rank=2, start_powerSGD_iter=2)),
    "cnn-rank4-eps": ("cnn", dict(matrix_approximation_rank=4, start_powerSGD_iter=2,
                                  orthogonalization_epsilon=1e-8, min_compression_rate=1)),
}


def run_both(comm, net: str, settings: dict, steps: int, dtype, **ours) -> tuple:
    """(ours, PyTorch's, plain DDP's) parameters after `steps` of the same training."""
    hook = ztorch.powersgd_hook(**settings, algorithm="ring", **ours)
    common = dict(steps=steps, dtype=dtype)
    mine = train(comm, make_model(net, hook, ONE_BUCKET_MB, dtype), net, **common)
    reference = train(comm, make_model(net, pytorch_hook(**settings), ONE_BUCKET_MB, dtype), net,
                      check_ranks=False, **common)
    plain = train(comm, make_model(net, None, ONE_BUCKET_MB, dtype), net, check_ranks=False,
                  **common)
    return mine, reference, plain


@pytest.mark.parametrize("case, overlap", [(case, False) for case in CASES]
                         + [("mlp-rank4-batched", True), ("cnn-rank2", True)])
def test_matches_pytorchs_powersgd_hook(comm, case, overlap):
    """In float64, 50 steps: another BLAS and summation order round differently, and
    power iteration amplifies that (in float32, 1e-8 at step 20 grows to 1e-4 by step
    50); float64's rounding stays far below any difference of method (1e-4 here)."""
    net, settings = CASES[case]
    ours, reference, plain = run_both(comm, net, settings, 50, torch.float64, overlap=overlap)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)
    assert any(not np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(ours, plain))


@pytest.mark.parametrize("case", ["mlp-rank1", "cnn-rank4-eps"])
def test_matches_pytorchs_powersgd_hook_in_float32(comm, case):
    net, settings = CASES[case]
    ours, reference, _ = run_both(comm, net, settings, 20, torch.float32)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8"])
def test_codec_on_p_and_q_keeps_ranks_identical(comm, codec):
    state, hook = ztorch.powersgd_hook(2, start_powerSGD_iter=1, codec=codec, algorithm="ring")
    train(comm, make_model("cnn", (state, hook)), "cnn", 8)
    rate, before, after = state.powersgd.compression_stats()
    assert rate > 1 and after < before


def test_state_follows_parameters_through_the_rebuild(comm):
    """From iteration 0 (PyTorch refuses this): DDP rebuilds its buckets after it, and
    each matrix's Q and residual are the parameter's, whichever bucket holds it."""
    state, hook = ztorch.powersgd_hook(2, start_powerSGD_iter=0, algorithm="ring")
    seen = []
    model = make_model("mlp")

    def recording(state, bucket):
        seen.append((state.iter, tuple(state.numbers_of(tuple(id(p) for p in bucket.parameters())))))
        return hook(state, bucket)

    model.register_comm_hook(state, recording)
    train(comm, model, "mlp", 4)
    first = [b for i, b in seen if i == 0]
    later = [b for i, b in seen if i == 3]
    assert first != later  # rebuilt
    weights = {n for b in later for n in b if state.powersgd.qs.get(n) is not None}
    assert len(weights) == 3 and set(state.powersgd.residuals) == weights  # the last is small
    assert set(state.powersgd.qs) == weights  # no bucket-index entries


def test_no_sync_accumulation_matches_pytorch(comm):
    settings = dict(matrix_approximation_rank=2, start_powerSGD_iter=2)
    ours = train(comm, make_model("mlp", ztorch.powersgd_hook(**settings, algorithm="ring"),
                                  ONE_BUCKET_MB), "mlp", 20, accumulate=3)
    reference = train(comm, make_model("mlp", pytorch_hook(**settings), ONE_BUCKET_MB), "mlp",
                      20, check_ranks=False, accumulate=3)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("overlap", [False, True])
def test_checkpoint_resumes_the_same_run(comm, overlap):
    """Save after 6 steps (model, optimizer, hook state, one file a rank), resume in a
    fresh DDP: the next 6 steps give the uninterrupted run's parameters, bit for bit."""
    settings = dict(matrix_approximation_rank=2, start_powerSGD_iter=2, algorithm="ring",
                    codec="fp16", overlap=overlap)
    whole = train(comm, make_model("mlp", ztorch.powersgd_hook(**settings)), "mlp", 12)

    state, hook = ztorch.powersgd_hook(**settings)
    model = make_model("mlp", (state, hook))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = list(batches("mlp", comm.rank, 12))
    for x, y in data[:6]:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    saved = io.BytesIO()
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                "hook": state.state_dict()}, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)

    state, hook = ztorch.powersgd_hook(**settings)
    state.load_state_dict(loaded["hook"])
    model = make_model("mlp", (state, hook))
    model.module.load_state_dict(loaded["model"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt.load_state_dict(loaded["opt"])
    for step, (x, y) in enumerate(data[6:]):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        params = {f"{n}@{step}": p.detach().numpy() for n, p in model.named_parameters()}
        assert not differing_across_ranks(comm, params)
    for a, b in zip(whole, model.parameters()):
        np.testing.assert_array_equal(a, b.detach().numpy())


def test_bad_argument_on_one_rank_fails_every_rank(comm):
    """A rank whose state has another rank fails with the others, before data moves."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    rank = 4 if comm.rank == comm.size - 1 else 2
    model = make_model("mlp", ztorch.powersgd_hook(rank, start_powerSGD_iter=0, algorithm="ring"))
    x, y = next(batches("mlp", comm.rank, 1))
    with pytest.raises(zipcoll.MismatchError):
        torch.nn.functional.cross_entropy(model(x), y).backward()


def test_arguments_checked():
    with pytest.raises(ValueError):
        ztorch.powersgd_hook(0)
    with pytest.raises(ValueError):
        ztorch.powersgd_hook(start_powerSGD_iter=-1)
    with pytest.raises(ValueError):
        ztorch.powersgd_hook(codec="nonesuch")


def test_overlap_returns_unfinished_futures(comm):
    """overlap=True: each bucket's rounds are on the wire while backward goes on, the
    last bucket's hook completes every future, and nothing is left in flight."""
    state, hook = ztorch.powersgd_hook(2, start_powerSGD_iter=1, algorithm="ring", overlap=True)
    futures = []

    def recording(state, bucket):
        future = hook(state, bucket)
        futures.append((state.iter, bucket.is_last(), future.done()))
        return future

    model = make_model("cnn", bucket_mb=0.002)  # a bucket a layer or so
    model.register_comm_hook(state, recording)
    train(comm, model, "cnn", 4)
    compressed = [(last, done) for it, last, done in futures if it >= 1]
    assert sum(not last for last, _ in compressed) > 3  # buckets before the last
    assert all(done == last for last, done in compressed)
    assert not state.in_flight and not state.powersgd.in_flight
