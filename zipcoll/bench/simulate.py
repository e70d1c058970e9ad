"""zipcoll-bench simulate: data-parallel training on a cluster we do not have, by the cost model.

    zipcoll-bench simulate --params 25.6M --gpus 32 --network ib100 --compute-ms 253
    zipcoll-bench simulate --params 340M --gpus 256 --network eth10 --compute-ms 163 --codec int8
    zipcoll-bench simulate --shi                      # against Shi et al.'s published table
    zipcoll-bench simulate --model bert-base --gpus 32 --compute-ms 301 --codec powersgd:rank=4
    zipcoll-bench simulate --shi --codec powersgd:rank=4,pq=fp16

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

PowerSGD (``--codec powersgd:rank=R``, ``pq=CODEC`` for its factors) needs the model's
matrices: ``--model`` (resnet50, bert-base, bert-large: their tensors' shapes, built
here). Each 64 MiB bucket of tensors, in order, is one low-rank step
(``zipcoll.collectives.planning.lowrank``: its products, orthogonalizations and two
dependent all-reduce rounds, each run with the cheapest plan for its factors); a GPU
streams a matrix through a product at 750 GB/s (of 900 GB/s HBM2) or computes 14 TFLOP/s,
whichever binds, passes over it elementwise at 300 GB/s, and orthogonalizes a factor
(cuSOLVER's QR) at 20 GB/s + 100 us a call (assumed, as the rest).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass

from zipcoll.collectives.planning import (CodecSpeed, Link, PlanShape, Profile, Rate, Shape,
                                          codec_spec, predict, rank_plans)
from zipcoll.collectives.planning.lowrank import lowrank_cost, split
from zipcoll.collectives.planning.profile import LowRankSpeed, Product

FUSION_BYTES = 64 << 20
INTRA = {"nvlink": Link(3e-6, 1 / 100e9), "pcie": Link(5e-6, 1 / 10e9),
         "pcie-host": Link(10e-6, 1 / 5e9)}
NETWORKS = {"ib100": Link(3e-6, 1 / 11.5e9), "eth100": Link(15e-6, 1 / 9.5e9),
            "eth10": Link(30e-6, 1 / 1.16e9)}
_QUANTIZE = CodecSpeed(Rate(150e9, 10e-6), Rate(200e9, 10e-6), Rate(150e9, 10e-6))
GPU_CODECS = {**{c: _QUANTIZE for c in ("none", "fp16", "bf16", "int8", "int4", "int2", "qsgd",
                                         "terngrad", "sign", "randomk", "threshold")},
              "topk": CodecSpeed(Rate(10e9, 10e-6), Rate(200e9, 10e-6), Rate(100e9, 10e-6))}
GPU_LOWRANK = LowRankSpeed(Product(750e9, 14e12, 10e-6), elementwise_bytes_per_s=300e9,
                           orthogonalize_bytes_per_s=20e9, orthogonalize_overhead=100e-6)

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
                   GPU_CODECS, {}, f"simulated: {intra} inside nodes, {network} between",
                   lowrank=GPU_LOWRANK)


def resnet50_shapes() -> list[tuple]:
    """The tensors of torchvision's ResNet-50 (25.56 M parameters), in order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            for out, inp, k in ((planes, inplanes, 1), (planes, planes, 3), (4 * planes, planes, 1)):
                shapes += [(out, inp, k, k), (out,), (out,)]
            if block == 0:  # the downsampling shortcut
                shapes += [(4 * planes, inplanes, 1, 1), (4 * planes,), (4 * planes,)]
            inplanes = 4 * planes
    return shapes + [(1000, 2048), (1000,)]


def bert_shapes(layers: int, hidden: int, vocab: int = 30522, positions: int = 512) -> list[tuple]:
    """The tensors of BERT (Devlin et al.) with its pooler: 110 M (base), 335 M (large)."""
    shapes = [(vocab, hidden), (positions, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        shapes += [(hidden, hidden), (hidden,)] * 4  # query, key, value, attention output
        shapes += [(hidden,), (hidden,), (4 * hidden, hidden), (4 * hidden,),
                   (hidden, 4 * hidden), (hidden,), (hidden,), (hidden,)]
    return shapes + [(hidden, hidden), (hidden,)]


MODELS = {"resnet50": resnet50_shapes(), "bert-base": bert_shapes(12, 768),
          "bert-large": bert_shapes(24, 1024)}
SHI_MODELS = {"ResNet-50": "resnet50", "BERT-Base": "bert-base", "BERT-Large": "bert-large"}


def parameters(shapes: list[tuple]) -> int:
    return sum(math.prod(s) for s in shapes)


def powersgd_setting(codec: str | None) -> tuple[int, str | None] | None:
    """(rank, codec of P and Q) of a "powersgd:rank=R[,pq=CODEC]" spec; None for any other."""
    if codec is None or codec.partition(":")[0] != "powersgd":
        return None
    fields = dict(f.split("=", 1) for f in codec.partition(":")[2].split(",") if f)
    unknown = set(fields) - {"rank", "pq"}
    if unknown:
        raise ValueError(f"powersgd takes rank= and pq=, not {sorted(unknown)}")
    rank = fields.get("rank", "1")
    if not rank.isdigit() or int(rank) < 1:
        raise ValueError(f"powersgd's rank must be a positive integer, not {rank!r}")
    return int(rank), fields.get("pq")


@dataclass
class Iteration:
    """One simulated training iteration."""

    plan: PlanShape | str  # a str for PowerSGD: its rank and its factors' plan
    communication: float  # seconds of all-reduce per iteration
    iteration: float  # seconds
    efficiency: float  # compute / iteration


def buckets(nbytes: float) -> list[int]:
    """Horovod's fused buckets of a gradient of ``nbytes``."""
    full, rest = divmod(int(nbytes), FUSION_BYTES)
    return [FUSION_BYTES] * full + ([rest] if rest else [])


def tensor_buckets(shapes: list[tuple]) -> list[list[tuple]]:
    """The tensors in order, in buckets of up to 64 MiB of float32 (a larger one alone)."""
    out, current, size = [], [], 0
    for shape in shapes:
        nbytes = 4 * math.prod(shape)
        if current and size + nbytes > FUSION_BYTES:
            out.append(current)
            current, size = [], 0
        current.append(shape)
        size += nbytes
    return out + ([current] if current else [])


def powersgd_iteration(shapes: list[tuple], shape: Shape, profile: Profile, compute: float,
                       rank: int, pq: str | None, overlap: float = 0.0) -> Iteration:
    """One iteration with PowerSGD at ``rank`` on every bucket (factors coded with ``pq``)."""
    comm, plans = 0.0, set()
    for bucket in tensor_buckets(shapes):
        matrices, dense = split(bucket, rank)
        plan = cheapest(4 * (sum(r * (n + m) for n, m, r in matrices) + dense), shape, profile, pq)
        comm += lowrank_cost(bucket, rank, shape, profile, plan).total
        plans.add(str(plan))
    total = compute + max(0.0, comm - overlap * compute)
    return Iteration(f"powersgd r{rank} ({', '.join(sorted(plans))})", comm, total, compute / total)


def cheapest(nbytes: float, shape: Shape, profile: Profile, codec: str | None) -> PlanShape:
    """The cheapest plan but native for an all-reduce of ``nbytes`` (with ``codec``: compressed too)."""
    return next(plan for _, plan in rank_plans(int(nbytes), shape, profile, codec)
                if "native" not in (plan.algorithm, plan.inner))


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
    return cheapest(max(buckets(params * 4)), shape, profile, codec)


def cluster(gpus: int, per_node: int) -> Shape:
    """``gpus`` GPUs in nodes of ``per_node`` (the last node fuller ones first)."""
    per_node = min(per_node, gpus)
    return Shape(gpus, math.ceil(gpus / per_node), per_node)


def simulate(params: float, gpus: int, network: str, compute: float, codec: str | None = None,
             per_node: int = 8, intra: str = "nvlink", overlap: float = 0.0,
             step_us: float = 0.0, model: str | None = None) -> dict:
    """Baseline (flat ring) and best plan, lossless and with ``codec`` (PowerSGD: on
    ``model``'s tensors, whose count replaces ``params``)."""
    shape, profile = cluster(gpus, per_node), gpu_profile(network, intra, step_us)
    low_rank = powersgd_setting(codec)
    if model is not None:
        params = parameters(MODELS[model])
    elif low_rank is not None:
        raise ValueError("PowerSGD is priced on a model's matrices: give --model")
    rows = {"baseline (NCCL ring)": iteration(params, shape, profile, compute, PlanShape("ring"), overlap),
            "best lossless": iteration(params, shape, profile, compute,
                                       best_plan(params, shape, profile, None), overlap)}
    if low_rank is not None:
        rows[f"best with {codec}"] = powersgd_iteration(MODELS[model], shape, profile, compute,
                                                         *low_rank, overlap)
    elif codec is not None:
        rows[f"best with {codec_spec(codec)}"] = iteration(
            params, shape, profile, compute, best_plan(params, shape, profile, codec), overlap)
    return rows


def codec_label(codec: str) -> str:
    """The row name ``simulate`` gives a codec: its spec (PowerSGD's as given)."""
    return codec if powersgd_setting(codec) else codec_spec(codec)


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
        model = SHI_MODELS[name]
        rows = simulate(params, 32, "ib100", compute, None, per_node, intra, overlap)
        ring, best = rows["baseline (NCCL ring)"], rows["best lossless"]
        cells = []
        for codec in codecs:
            low_rank = powersgd_setting(codec) is not None
            with_codec = simulate(params, 32, "ib100", compute, codec, per_node, intra, overlap,
                                  model=model if low_rank else None)
            row = with_codec[f"best with {codec_label(codec)}"]
            cells.append(f"{row.plan} {row.efficiency:.0%}")
        lines.append(f"| {name} | {compute * 1e3:.0f} | {eff_pub:.1%} | {ring.efficiency:.1%} | "
                     f"{ring.communication * 1e3:.0f} | {100 * (ring.efficiency - eff_pub):+.1f} | "
                     f"{best.plan} {best.efficiency:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zipcoll-bench simulate", description=__doc__.split("\n")[0])
    p.add_argument("--params", type=parse_count, help="float32 parameters, e.g. 25.6M")
    p.add_argument("--model", choices=sorted(MODELS),
                   help="a model's tensors (their count replaces --params; PowerSGD needs them)")
    p.add_argument("--gpus", type=int, help="GPUs in all")
    p.add_argument("--network", choices=sorted(NETWORKS), default="ib100")
    p.add_argument("--compute-ms", type=float, help="forward + backward of one batch, ms")
    p.add_argument("--codec", default=None,
                   help="also price compressed plans with this codec (powersgd:rank=R[,pq=CODEC]: "
                        "PowerSGD, with --model or --shi)")
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
    try:
        powersgd_setting(args.codec)
    except ValueError as e:
        parser().error(str(e))
    if args.shi:
        print(shi_table(args.gpus_per_node, args.intra, args.overlap,
                        [args.codec] if args.codec else ["int8", "sign", "topk:ratio=0.01"]))
        return 0
    if args.model is not None:
        args.params = parameters(MODELS[args.model])
    if None in (args.params, args.gpus, args.compute_ms):
        parser().error("--params (or --model), --gpus and --compute-ms are needed (or --shi)")
    if powersgd_setting(args.codec) is not None and args.model is None:
        parser().error("--codec powersgd needs --model: PowerSGD is priced on a model's matrices")
    rows = simulate(args.params, args.gpus, args.network, args.compute_ms / 1e3, args.codec,
                    args.gpus_per_node, args.intra, args.overlap, args.step_us, args.model)
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
