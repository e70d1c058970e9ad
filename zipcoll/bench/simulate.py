"""zipcoll-bench simulate: data-parallel training on a cluster we do not have, by the cost model.

    zipcoll-bench simulate --params 25.6M --gpus 32 --network ib100 --compute-ms 253
    zipcoll-bench simulate --params 340M --gpus 256 --network eth10 --compute-ms 163 --codec int8
    zipcoll-bench simulate --shi                      # against Shi et al.'s published table

One iteration = compute (forward + backward of one batch) + the all-reduce of every
float32 gradient, in Horovod-style fused buckets (64 MiB, HOROVOD_FUSION_THRESHOLD's
default), each priced by ``zipcoll.collectives.planning`` on the cluster below:

    iteration = compute + max(0, communication - overlap x compute)
    efficiency = compute / iteration     (= samples/s / (GPUs x one GPU's samples/s))

The baseline is what Horovod runs on NCCL: one flat ring over all GPUs. "best" is the
cheapest plan the model finds (lossless; with --codec, also the compressed plans).

The cluster (nothing here was measured; each figure says where it comes from):
- nodes of --gpus-per-node GPUs (default 8); intra links by --intra:
  nvlink: 100 GB/s a direction, 3 us (V100 NVLink2 ring; nccl-tests busbw 130+ GB/s on 8 GPUs),
  pcie: 10 GB/s, 5 us (PCIe 3.0 x16 peer-to-peer through a switch),
  pcie-host: 5 GB/s, 10 us (no peer-to-peer, e.g. GeForce cards: staged through host memory);
- networks: ib100: 11.5 GB/s, 3 us (EDR InfiniBand, RDMA: 92% of 12.5 GB/s);
  eth100: 9.5 GB/s, 15 us (100 GbE with TCP); eth10: 1.16 GB/s, 30 us (10 GbE: the 9.3
  Gbit/s of TCP goodput measured on the emulated cluster, benchmarks/cluster/README.md);
- a GPU reduces at 300 GB/s (an HBM2 add: two reads and a write); quantizing codecs
  run at 150 GB/s (memory-bound kernels), top-k selection at 10 GB/s, 10 us a kernel;
- no Python per step: the schedules as a GPU library (NCCL) runs them (--step-us to add).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass

from zipcoll.collectives.planning import (CodecSpeed, Link, PlanShape, Profile, Rate, Shape,
                                          codec_spec, predict, rank_plans)

FUSION_BYTES = 64 << 20
INTRA = {"nvlink": Link(3e-6, 1 / 100e9), "pcie": Link(5e-6, 1 / 10e9),
         "pcie-host": Link(10e-6, 1 / 5e9)}
NETWORKS = {"ib100": Link(3e-6, 1 / 11.5e9), "eth100": Link(15e-6, 1 / 9.5e9),
            "eth10": Link(30e-6, 1 / 1.16e9)}
_QUANTIZE = CodecSpeed(Rate(150e9, 10e-6), Rate(200e9, 10e-6), Rate(150e9, 10e-6))
GPU_CODECS = {**{c: _QUANTIZE for c in ("none", "fp16", "bf16", "int8", "int4", "int2", "qsgd",
                                         "terngrad", "sign", "randomk", "threshold")},
              "topk": CodecSpeed(Rate(10e9, 10e-6), Rate(200e9, 10e-6), Rate(100e9, 10e-6))}

# Shi et al., "A Quantitative Survey of Communication Optimizations in Distributed Deep
# Learning" (IEEE Network 2021): 32 GPUs, 100 Gb/s InfiniBand, Horovod (BSP, all-to-all).
SHI = [  # model, parameters, batch per GPU, one GPU's samples/s, 32 GPUs' samples/s
    ("ResNet-50", 25.6e6, 64, 253.1, 7127),
    ("BERT-Base", 110e6, 64, 212.8, 4184),
    ("BERT-Large", 340e6, 8, 49.0, 375),
]


def gpu_profile(network: str, intra: str = "nvlink", step_us: float = 0.0) -> Profile:
    """The cost profile of a GPU cluster: `network` between nodes, `intra` inside them."""
    return Profile(INTRA[intra], NETWORKS[network], Rate(300e9), step_us * 1e-6, 20e-6,
                   GPU_CODECS, {}, f"simulated: {intra} inside nodes, {network} between")


@dataclass
class Iteration:
    """One simulated training iteration."""

    plan: PlanShape
    communication: float  # seconds of all-reduce per iteration
    iteration: float  # seconds
    efficiency: float  # compute / iteration


def buckets(nbytes: float) -> list[int]:
    """Horovod's fused buckets of a gradient of ``nbytes``."""
    full, rest = divmod(int(nbytes), FUSION_BYTES)
    return [FUSION_BYTES] * full + ([rest] if rest else [])


def iteration(params: float, shape: Shape, profile: Profile, compute: float, plan: PlanShape,
              overlap: float = 0.0) -> Iteration:
    """The time of one iteration running `plan` on every bucket of float32 gradients."""
    comm = sum(predict(plan, b, shape, profile) for b in buckets(params * 4))
    total = compute + max(0.0, comm - overlap * compute)
    return Iteration(plan, comm, total, compute / total)


def best_plan(params: float, shape: Shape, profile: Profile, codec: str | None) -> PlanShape:
    """zipcoll's cheapest schedule for the largest bucket (with `codec`: compressed ones too).

    "native" (the MPI library's own) is left out: on a GPU cluster it would be NCCL,
    which is the baseline.
    """
    largest = max(buckets(params * 4))
    return next(plan for _, plan in rank_plans(largest, shape, profile, codec)
                if "native" not in (plan.algorithm, plan.inner))


def cluster(gpus: int, per_node: int) -> Shape:
    """``gpus`` GPUs in nodes of ``per_node`` (the last node fuller ones first)."""
    per_node = min(per_node, gpus)
    return Shape(gpus, math.ceil(gpus / per_node), per_node)


def simulate(params: float, gpus: int, network: str, compute: float, codec: str | None = None,
             per_node: int = 8, intra: str = "nvlink", overlap: float = 0.0,
             step_us: float = 0.0) -> dict:
    """Baseline (flat ring) and best plan, lossless and with ``codec``."""
    shape, profile = cluster(gpus, per_node), gpu_profile(network, intra, step_us)
    rows = {"baseline (NCCL ring)": iteration(params, shape, profile, compute, PlanShape("ring"), overlap),
            "best lossless": iteration(params, shape, profile, compute,
                                       best_plan(params, shape, profile, None), overlap)}
    if codec is not None:
        rows[f"best with {codec_spec(codec)}"] = iteration(
            params, shape, profile, compute, best_plan(params, shape, profile, codec), overlap)
    return rows


def parse_count(text: str) -> float:
    """25.6M, 340M, 1.5G, 1e9 -> a number."""
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9}
    text = text.strip().upper()
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def shi_table(per_node: int, intra: str, overlap: float, codecs: list[str]) -> str:
    """Markdown: predicted against published efficiencies for Shi et al.'s three models."""
    lines = [f"Cluster: 32 GPUs, {per_node} a node, {intra} inside nodes, ib100 between; "
             f"overlap {overlap:g}.", "",
             "| model | compute ms | published eff. | predicted eff. (ring) | comm ms | gap (points) | "
             "best lossless | " + " | ".join(f"{c}: plan, eff." for c in codecs) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(codecs)]
    for name, params, batch, single, published in SHI:
        compute = batch / single
        eff_pub = published / (32 * single)
        rows = simulate(params, 32, "ib100", compute, None, per_node, intra, overlap)
        ring, best = rows["baseline (NCCL ring)"], rows["best lossless"]
        cells = []
        for codec in codecs:
            with_codec = simulate(params, 32, "ib100", compute, codec, per_node, intra, overlap)
            row = with_codec[f"best with {codec_spec(codec)}"]
            cells.append(f"{row.plan} {row.efficiency:.0%}")
        lines.append(f"| {name} | {compute * 1e3:.0f} | {eff_pub:.1%} | {ring.efficiency:.1%} | "
                     f"{ring.communication * 1e3:.0f} | {100 * (ring.efficiency - eff_pub):+.1f} | "
                     f"{best.plan} {best.efficiency:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipcoll-bench simulate", description=__doc__.split("\n")[0])
    p.add_argument("--params", type=parse_count, help="float32 parameters, e.g. 25.6M")
    p.add_argument("--gpus", type=int, help="GPUs in all")
    p.add_argument("--network", choices=sorted(NETWORKS), default="ib100")
    p.add_argument("--compute-ms", type=float, help="forward + backward of one batch, ms")
    p.add_argument("--codec", default=None, help="also price compressed plans with this codec")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--intra", choices=sorted(INTRA), default="nvlink")
    p.add_argument("--overlap", type=float, default=0.0,
                   help="fraction of compute communication can hide behind (0: none, BSP)")
    p.add_argument("--step-us", type=float, default=0.0, help="extra seconds a schedule step costs, us")
    p.add_argument("--shi", action="store_true", help="Shi et al.'s 32-GPU table, predicted against published")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.shi:
        print(shi_table(args.gpus_per_node, args.intra, args.overlap,
                        [args.codec] if args.codec else ["int8", "sign", "topk:ratio=0.01"]))
        return 0
    if None in (args.params, args.gpus, args.compute_ms):
        parser().error("--params, --gpus and --compute-ms are needed (or --shi)")
    rows = simulate(args.params, args.gpus, args.network, args.compute_ms / 1e3, args.codec,
                    args.gpus_per_node, args.intra, args.overlap, args.step_us)
    if args.json:
        json.dump({k: {"plan": str(v.plan), "communication_s": v.communication,
                       "iteration_s": v.iteration, "efficiency": v.efficiency}
                   for k, v in rows.items()}, sys.stdout, indent=1)
        print()
        return 0
    shape = cluster(args.gpus, args.gpus_per_node)
    print(f"# {args.params:.4g} float32 parameters, {args.gpus} GPUs ({shape.nodes} nodes of "
          f"{shape.per_node}, {args.intra}), {args.network}, compute {args.compute_ms:g} ms")
    print(f"{'':<24} {'comm ms':>9} {'iter ms':>9} {'efficiency':>10}  plan")
    for name, row in rows.items():
        print(f"{name:<24} {row.communication * 1e3:>9.1f} {row.iteration * 1e3:>9.1f} "
              f"{row.efficiency:>10.1%}  {row.plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
