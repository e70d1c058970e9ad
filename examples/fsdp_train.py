"""Sharded training with PyTorch FSDP2: gradients reduce-scattered (and weights all-gathered)
by zipcoll, compressed.

    source scripts/mpienv.sh                      # Open MPI from pip, on one machine
    mpiexec -n 4 python examples/fsdp_train.py --gradients int8 --weights int8
    mpiexec -n 4 python examples/fsdp_train.py --gradients int4      # + error feedback (always)
    mpiexec -n 4 python examples/fsdp_train.py --gradients none      # lossless through zipcoll
    mpiexec -n 4 python examples/fsdp_train.py --fsdp                # FSDP's own collectives

Needs torch and scikit-learn (`pip install -e ".[torch]" scikit-learn`). Every rank trains
on its own quarter of scikit-learn's bundled digits. Each layer is its own FSDP module
(`fully_shard`), so each rank holds a quarter of every weight; the process group (gloo)
only sets FSDP up, and `zipcoll.torch.fsdp_collectives` routes every module's
reduce-scatter (and, with --weights, its all-gather) through zipcoll over MPI.
"""
import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see README, "Training"

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import zipcoll.torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gradients", default="int8", help="codec, or none: lossless")
    parser.add_argument("--weights", default=None,
                        help="codec, or lossless (default: FSDP's own all-gather)")
    parser.add_argument("--algorithm", default="auto", help="ring, halving, hierarchical, ...")
    parser.add_argument("--fsdp", action="store_true", help="FSDP's own collectives only")
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
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    if not args.fsdp:
        gradients = None if args.gradients == "none" else args.gradients
        zipcoll.torch.fsdp_collectives(model, gradients=gradients, weights=args.weights,
                                       algorithm=args.algorithm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    batches = torch.Generator().manual_seed(comm.rank)
    for step in range(1, args.steps + 1):
        batch = torch.randint(len(x_mine), (32,), generator=batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x_mine[batch]), y_mine[batch])
        loss.backward()  # each layer's gradients reduce-scattered through zipcoll
        optimizer.step()  # on this rank's shard of every parameter
        if step % 50 == 0:
            with torch.no_grad():  # every rank runs forward: it all-gathers the weights
                accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
            if comm.rank == 0:
                print(f"step {step:4d}  loss {loss.item():.4f}  test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
