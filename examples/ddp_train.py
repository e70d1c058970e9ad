"""Data-parallel training with PyTorch DDP, gradients all-reduced (and compressed) by zipcoll.

    source scripts/mpienv.sh                      # Open MPI from pip, on one machine
    mpiexec -n 4 python examples/ddp_train.py --codec int8 --algorithm ring
    mpiexec -n 4 python examples/ddp_train.py --codec sign --algorithm allgather   # + error feedback
    mpiexec -n 4 python examples/ddp_train.py                                      # lossless

Needs torch and scikit-learn (`pip install -e ".[torch]" scikit-learn`). Every rank trains
on its own quarter of scikit-learn's bundled digits; the process group (gloo) only sets
DDP up, and each gradient bucket is averaged over MPI by zipcoll's communication hook.
"""
import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see README, "Training"

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll.torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codec", default=None, help="e.g. int8, int4, sign, topk:ratio=0.01")
    parser.add_argument("--algorithm", default="ring", help="zipcoll schedule (auto: by topology)")
    parser.add_argument("--no-error-feedback", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    zipcoll.torch.init_process_group(comm)  # gloo, rank and world size from MPI

    x, y = load_digits(return_X_y=True)
    x = torch.tensor((x - x.mean(0)) / (x.std(0) + 1e-6), dtype=torch.float32)
    y = torch.tensor(y)
    test = torch.arange(len(x)) % 5 == 0  # every fifth image is held out
    x_test, y_test = x[test], y[test]
    x_mine, y_mine = x[~test][comm.rank::comm.size], y[~test][comm.rank::comm.size]

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    model = DDP(net, gradient_as_bucket_view=True)  # gradients live in the buckets: no copies
    state, hook = zipcoll.torch.ddp_comm_hook(codec=args.codec, algorithm=args.algorithm,
                                              error_feedback=not args.no_error_feedback)
    model.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    batches = torch.Generator().manual_seed(comm.rank)
    for step in range(1, args.steps + 1):
        batch = torch.randint(len(x_mine), (32,), generator=batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x_mine[batch]), y_mine[batch])
        loss.backward()  # the hook averages each gradient bucket through zipcoll
        optimizer.step()
        if comm.rank == 0 and step % 50 == 0:
            with torch.no_grad():
                accuracy = (net(x_test).argmax(1) == y_test).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.3f}  test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
