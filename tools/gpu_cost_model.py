#!/usr/bin/env python3
"""Predicted ResNet-18 DDP step time and scaling efficiency on GPUs (docs/PERFORMANCE.md).

A PREDICTION from a cost model, not a measurement: nothing here has run on a GPU. Every input is a
flag, so a person with hardware can put in what they measured and compare.

Usage: tools/gpu_cost_model.py [--compute_ms 25] [--backward_share 0.667] [--nvlink_busbw 200]
                               [--alpha_intra_us 5] [--alpha_net_us 30] [--net_efficiency 0.8]
                               [--gpus_per_node 8] [--bucket_cap_mb 25] [--first_bucket_cap_mb 1]
                               [--json]

The model, per training step of every GPU (weak scaling: batch 32 per GPU whatever the GPU count):
  - compute: forward + backward take --compute_ms; backward is --backward_share of it, spread over
    ResNet-18's layers in proportion to their multiply-accumulates (its parameters and MACs at
    224x224 are computed below from the architecture, as torchvision builds it with 1000 classes);
  - a gradient is ready when backward has passed its layer; DDP groups gradients in reverse
    registration order into buckets (the first closes at --first_bucket_cap_mb, the rest at
    --bucket_cap_mb, each once it reaches its cap, as dist/ddp/bucket_assignment.h does);
  - buckets are allreduced one after another on one stream, each starting when it is ready and the
    previous one is done; a ring allreduce of B bytes over n GPUs takes
        T = 2(n-1)/n * B / busbw + latency,   latency = 2(n-1) * alpha   (one node)
    and across k nodes 2(n-k) * alpha_intra + 2(k-1) * alpha_net (only the hops between nodes pay
    the network's latency); busbw is NVLink's inside one node and, across nodes, the node's NIC
    (line rate x --net_efficiency), the slower link of the ring;
  - exposed communication = max(0, end of the last allreduce - end of backward): what backward did
    not hide; step time = compute + exposed communication; efficiency = compute / step time.
Ignored: the optimizer step, data loading, NCCL kernels slowing compute, NCCL choosing trees or
NVLink SHARP for latency (the ring latency term is pessimistic at large n), stragglers.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_cost_model import buckets, pipeline, ring_seconds  # noqa: E402

FABRICS = (
    # name, NIC line rate between nodes in Gb/s (None: one NVLink node only)
    ("NVLink (one node)", None),
    ("8/node, 25 GbE", 25.0),
    ("8/node, 100 GbE", 100.0),
)
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BATCH = 32
IMAGE = 224


def resnet18_layers(num_classes=1000, image=IMAGE):
    """ResNet-18's layers in forward (= registration) order: (name, [(param, numel)], MACs/image)."""
    layers = []

    def conv(name, cin, cout, k, out_hw):
        numel = cout * cin * k * k
        layers.append((name, [(name + ".weight", numel)], numel * out_hw * out_hw))

    def bn(name, c):
        # Batch norm's compute is counted with its convolution's.
        layers.append((name, [(name + ".weight", c), (name + ".bias", c)], 0))

    hw = image // 2
    conv("conv1", 3, 64, 7, hw)
    bn("bn1", 64)
    hw //= 2  # max-pool
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            p = "layer%d.%d" % (stage, block)
            stride = 2 if (stage > 1 and block == 0) else 1
            out = hw // stride
            conv(p + ".conv1", cin, cout, 3, out)
            bn(p + ".bn1", cout)
            conv(p + ".conv2", cout, cout, 3, out)
            bn(p + ".bn2", cout)
            if stride != 1 or cin != cout:
                conv(p + ".downsample.0", cin, cout, 1, out)
                bn(p + ".downsample.1", cout)
            cin, hw = cout, out
    layers.append(("fc", [("fc.weight", 512 * num_classes), ("fc.bias", num_classes)],
                   512 * num_classes))
    return layers


def gradient_ready_times(layers, backward_ms):
    """(param, bytes, ms after backward starts when its gradient is ready), in reverse registration
    order (the order DDP buckets them)."""
    total_macs = sum(m for _, _, m in layers)
    t = 0.0
    out = []
    for _, params, macs in reversed(layers):
        t += backward_ms * macs / total_macs
        for name, numel in reversed(params):
            out.append((name, 4 * numel, t))
    return out


def allreduce_ms(nbytes, n, busbw_gbps, alpha_intra_us, alpha_net_us, gpus_per_node):
    """Ring allreduce time in ms; 0 for one GPU."""
    if n <= 1:
        return 0.0
    nodes = max(1, -(-n // gpus_per_node))
    latency_us = 2 * (n - nodes) * alpha_intra_us + 2 * (nodes - 1) * alpha_net_us
    return ring_seconds(nbytes, n, busbw_gbps * 1e9, latency_us * 1e-6) * 1e3


def busbw_for(n, nic_gbit, args):
    """Bus bandwidth in GB/s of a ring over n GPUs: NVLink inside a node, else the NIC's."""
    if n <= args.gpus_per_node or nic_gbit is None:
        return args.nvlink_busbw
    return min(args.nvlink_busbw, nic_gbit / 8.0 * args.net_efficiency)


def predict(args, n, nic_gbit):
    """One prediction: dict of the step's times (ms), efficiency and images/s."""
    backward_ms = args.compute_ms * args.backward_share
    forward_ms = args.compute_ms - backward_ms
    bs = buckets(gradient_ready_times(resnet18_layers(), backward_ms),
                 int(args.first_bucket_cap_mb * (1 << 20)), int(args.bucket_cap_mb * (1 << 20)))
    busbw = busbw_for(n, nic_gbit, args)
    comm, _, exposed = pipeline(
        [(ready, allreduce_ms(nbytes, n, busbw, args.alpha_intra_us, args.alpha_net_us,
                              args.gpus_per_node)) for nbytes, ready, _ in bs], backward_ms)
    exposed = exposed if n > 1 else 0.0
    step = forward_ms + backward_ms + exposed
    return {
        "gpus": n,
        "nodes": max(1, -(-n // args.gpus_per_node)),
        "busbw_GBps": busbw,
        "comm_ms": comm,
        "exposed_ms": exposed,
        "step_ms": step,
        "efficiency": args.compute_ms / step,
        "images_per_second": n * BATCH / step * 1e3,
    }


def cases(args):
    """(GPUs, fabric name, NIC Gb/s) of the table: NVLink up to one node, the networks beyond."""
    for n in GPU_COUNTS:
        for name, nic in FABRICS:
            if (nic is None) == (n <= args.gpus_per_node):
                yield n, name, nic


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compute_ms", type=float, default=25.0,
                   help="forward+backward of batch 32 at 224x224 on one GPU, ms")
    p.add_argument("--backward_share", type=float, default=2.0 / 3,
                   help="backward's share of compute (forward:backward 1:2)")
    p.add_argument("--nvlink_busbw", type=float, default=200.0, help="GB/s inside a node")
    p.add_argument("--alpha_intra_us", type=float, default=5.0, help="per ring step in a node")
    p.add_argument("--alpha_net_us", type=float, default=30.0, help="per ring step between nodes")
    p.add_argument("--net_efficiency", type=float, default=0.8,
                   help="busbw between nodes / NIC line rate")
    p.add_argument("--gpus_per_node", type=int, default=8)
    p.add_argument("--bucket_cap_mb", type=float, default=25.0)
    p.add_argument("--first_bucket_cap_mb", type=float, default=1.0)
    p.add_argument("--json", action="store_true", help="one JSON object instead of Markdown")
    args = p.parse_args(argv)
    if not 0 < args.backward_share < 1 or args.compute_ms <= 0 or args.nvlink_busbw <= 0:
        p.error("want 0 < --backward_share < 1, --compute_ms > 0, --nvlink_busbw > 0")
    return args


def markdown(args):
    layers = resnet18_layers()
    params = sum(n for _, ps, _ in layers for _, n in ps)
    macs = sum(m for _, _, m in layers)
    backward_ms = args.compute_ms * args.backward_share
    bs = buckets(gradient_ready_times(layers, backward_ms),
                 int(args.first_bucket_cap_mb * (1 << 20)), int(args.bucket_cap_mb * (1 << 20)))
    lines = [
        "PREDICTION (cost model, not measured): `tools/gpu_cost_model.py%s`" %
        "".join(" " + a for a in sys.argv[1:] if a != "--json"),
        "",
        "ResNet-18: %d parameters (%.1f MB fp32 gradients), %.2f GMAC per 224x224 image; "
        "compute %.1f ms per step of batch %d (backward %.1f ms); buckets (MiB, ready at ms of "
        "backward): %s." % (params, params * 4e-6, macs * 1e-9, args.compute_ms, BATCH,
                            backward_ms, ", ".join("%.1f @ %.1f" % (b / 2**20, t)
                                                   for b, t, _ in bs)),
        "",
        "| GPUs | nodes | fabric | busbw GB/s | allreduce ms | exposed ms | step ms | "
        "efficiency | images/s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, name, nic in cases(args):
        r = predict(args, n, nic)
        lines.append("| %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.0f |" % (
            n, r["nodes"], name, r["busbw_GBps"], r["comm_ms"], r["exposed_ms"],
            r["step_ms"], 100 * r["efficiency"], r["images_per_second"]))
    return "\n".join(lines)


def main(argv):
    args = parse_args(argv)
    if args.json:
        rows = [dict(predict(args, n, nic), fabric=name) for n, name, nic in cases(args)]
        print(json.dumps({"format": "dtrain.gpu_cost_model.v1", "prediction": True,
                          "inputs": vars(args), "rows": rows}))
    else:
        print(markdown(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
