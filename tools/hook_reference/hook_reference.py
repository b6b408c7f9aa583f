#!/usr/bin/python3
"""PyTorch's side of the communication-hook comparison (hook_reference.cc is ours).

  hook_reference.py run --configs='fp16;powersgd:rank=1,start=2' --steps=6 --output_dir=D
      PyTorch's DDP with Gloo, 2 processes, each configuration's hook registered with
      register_comm_hook (default_hooks.allreduce_hook, fp16_compress_hook, bf16_compress_hook,
      powerSGD_hook with PowerSGDState); writes what hook_reference.cc writes.
  hook_reference.py compare --configs=... --steps=6 --ours=D1 --theirs=D2 --tolerance=T
      Per configuration and step, the largest difference between the two runs' gradients relative
      to the step's largest gradient; exit 1 if any is above T, if the bucket layouts differ where
      they matter (PowerSGD), if the ranks of one run disagree, or if a hook other than allreduce
      is within 10 T of PyTorch's plain allreduce (so that T can tell hooks apart).

Both sides train the same model on the same data, defined by integer formulas that float32 holds
exactly, so no file has to carry them:
  layers   fc1 Linear(16, 32), fc2 Linear(32, 32), fc3 Linear(32, 32), fc4 Linear(32, 8),
           tanh between them
  weights  parameter k in registration order (fc1.weight = 0 .. fc4.bias = 7), element j of its
           row-major data: ((37 j + 101 k) mod 61 - 30) / 256
  input    rank r, step s (from 0), a 4 x 16 batch, element i: ((13 i + 7 r + 29 s) mod 23 - 11) / 8
  target   4 x 8, element i: ((5 i + 3 r + s) mod 9 - 4) / 4
  loss     ((output - target) ** 2).mean(); after each step p -= 0.1 * p.grad, gradients zeroed
  buckets  every bucket capped at 8400 bytes, the first too (PyTorch 1.13 caps the first with
           dist._DEFAULT_FIRST_BUCKET_BYTES, which is set to the same; PyTorch 2 caps it with an
           explicit bucket_cap_mb): {fc4, fc3, fc2}, {fc1} on both sides once PyTorch has rebuilt
           its buckets after the first step (before that it has one; PowerSGD starts later)

PyTorch 1.13's Gloo cannot allreduce bfloat16, and Debian's 2.14 neither bfloat16 nor float16
("Invalid scalar type"). Where it cannot, the bf16 (fp16) reference is bf16_compress_hook's
(fp16_compress_hook's) arithmetic with the sum carried as float32 (each rank's values widened,
summed, rounded back): for two ranks the very sum a bfloat16 (float16) allreduce would give, since
Gloo adds those types by rounding the float32 sum.
"""

import argparse
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

FIRST_BUCKET_BYTES = 8400
BUCKET_BYTES = 8400
LEARNING_RATE = 0.1
WORLD_SIZE = 2
# The compression hooks: the dtype each puts on the wire, and PyTorch's hook.
WIRE = {
    "fp16": (torch.float16, default_hooks.fp16_compress_hook),
    "bf16": (torch.bfloat16, default_hooks.bf16_compress_hook),
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 32)
        self.fc4 = nn.Linear(32, 8)

    def forward(self, x):
        return self.fc4(self.fc3(self.fc2(self.fc1(x).tanh()).tanh()).tanh())


def formula(n, a, b, m, c, d):
    return ((torch.arange(n, dtype=torch.long) * a + b) % m - c).to(torch.float32) / d


def make_net():
    net = Net()
    with torch.no_grad():
        for k, p in enumerate(net.parameters()):
            p.copy_(formula(p.numel(), 37, 101 * k, 61, 30, 256).view_as(p))
    return net


def batch(rank, step):
    x = formula(4 * 16, 13, 7 * rank + 29 * step, 23, 11, 8).view(4, 16)
    t = formula(4 * 8, 5, 3 * rank + step, 9, 4, 4).view(4, 8)
    return x, t


POWERSGD_KEYS = {
    "rank": ("matrix_approximation_rank", int),
    "start": ("start_powerSGD_iter", int),
    "min_rate": ("min_compression_rate", float),
    "error_feedback": ("use_error_feedback", lambda v: int(v) != 0),
    "warm_start": ("warm_start", lambda v: int(v) != 0),
    "epsilon": ("orthogonalization_epsilon", float),
    "seed": ("random_seed", int),
    "batch": ("batch_tensors_with_same_shape", lambda v: int(v) != 0),
}


def powersgd_options(config):
    options = {}
    _, _, rest = config.partition(":")
    for kv in filter(None, rest.split(",")):
        key, _, value = kv.partition("=")
        name, parse = POWERSGD_KEYS[key]
        options[name] = parse(value)
    return options


def gloo_sums(dtype):
    try:
        dist.all_reduce(torch.zeros(1, dtype=dtype))
        return True
    except RuntimeError:
        return False


def through_float32(dtype):
    """fp16_compress_hook or bf16_compress_hook (dtype) with the allreduce carried in float32 (see
    the file comment)."""

    def hook(process_group, bucket):
        compressed = bucket.buffer().to(dtype).div_(WORLD_SIZE)
        fut = dist.all_reduce(compressed.float(), async_op=True).get_future()

        def decompress(fut):
            buffer = bucket.buffer()
            buffer.copy_(fut.value()[0].to(dtype))
            return buffer

        return fut.then(decompress)

    return hook


def powersgd_in_order(state, bucket):
    """powerSGD_hook, each bucket's three allreduces finished before the next bucket starts.

    The hook issues a bucket's P and Q allreduces from completion callbacks, which can run before
    or after the training thread issues the next bucket's first allreduce: the ranks may issue
    them in different orders, and Gloo, which matches collectives by order, then fails ("op.
    preamble.length <= op.nbytes") or mixes them up. Waiting here only orders the same
    collectives; the arithmetic is the hook's own.
    """
    fut = powerSGD_hook.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


def hook_for(config, native):
    """(state, hook) as register_comm_hook takes them; native: the wire dtypes Gloo sums."""
    if config == "allreduce":
        return None, default_hooks.allreduce_hook
    if config in ("fp16", "bf16"):
        dtype, hook = WIRE[config]
        return None, hook if dtype in native else through_float32(dtype)
    if config.split(":")[0] == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, **powersgd_options(config))
        return state, powersgd_in_order
    raise ValueError("unknown config " + config)


def worker(rank, init_method, configs, steps, output_dir):
    # A bounded timeout: a rank that dies leaves the other failing within a minute, not waiting.
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=60))
    # Read by DDP's constructor: the cap of the first bucket when it rebuilds its buckets.
    dist._DEFAULT_FIRST_BUCKET_BYTES = FIRST_BUCKET_BYTES
    native = {dtype for dtype, _ in WIRE.values() if gloo_sums(dtype)}
    for config, (dtype, _) in WIRE.items():
        if rank == 0 and dtype not in native:
            print("NOTE: this PyTorch's Gloo cannot allreduce %s: the %s reference carries the sum "
                  "as float32 (see hook_reference.py)" % (dtype, config))
    for index, config in enumerate(configs):
        net = make_net()
        ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=BUCKET_BYTES / 2**20)
        state, hook = hook_for(config, native)
        # Each bucket's parameter names as the hook last saw them (after the rebuild).
        names = {p.data_ptr(): n for n, p in net.named_parameters()}
        layout = {}

        def recording(state, bucket, hook=hook, layout=layout, names=names):
            layout[bucket.index()] = sorted(names[p.data_ptr()] for p in bucket.parameters())
            return hook(state, bucket)

        ddp.register_comm_hook(state, recording)
        out = []
        for step in range(steps):
            x, t = batch(rank, step)
            loss = ((ddp(x) - t) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in net.parameters():
                    out.append(p.grad.reshape(-1).clone())
                    p.add_(p.grad, alpha=-LEARNING_RATE)
                    p.grad.zero_()
        prefix = os.path.join(output_dir, str(index))
        torch.cat(out).numpy().astype("<f4").tofile(prefix + ".rank%d.f32" % rank)
        if rank == 0:
            with open(prefix + ".buckets.txt", "w") as f:
                for i in sorted(layout):
                    f.write(",".join(layout[i]) + "\n")
    # Neither rank tears its connections down while the other may still use them.
    dist.barrier()
    dist.destroy_process_group()


def run(args):
    configs = [c for c in args.configs.split(";") if c]
    with tempfile.TemporaryDirectory() as tmp:
        init_method = "file://" + os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(init_method, configs, args.steps, args.output_dir),
                 nprocs=WORLD_SIZE)


def load(directory, index, rank, steps):
    import numpy as np
    path = os.path.join(directory, "%d.rank%d.f32" % (index, rank))
    data = np.fromfile(path, dtype="<f4").astype(np.float64)
    if data.size % steps:
        raise SystemExit("%s: %d floats, not a multiple of %d steps" % (path, data.size, steps))
    return data.reshape(steps, -1)


def largest_difference(a, b):
    """Over the steps: the largest |a - b| relative to the step's largest |b|, and absolute."""
    import numpy as np
    relative, absolute = 0.0, 0.0
    for step in range(a.shape[0]):
        diff = np.abs(a[step] - b[step]).max()
        relative = max(relative, diff / max(np.abs(b[step]).max(), 1e-30))
        absolute = max(absolute, diff)
    return relative, absolute


def compare(args):
    import numpy as np
    configs = [c for c in args.configs.split(";") if c]
    failed = 0
    for index, config in enumerate(configs):
        ours = [load(args.ours, index, r, args.steps) for r in range(WORLD_SIZE)]
        theirs = [load(args.theirs, index, r, args.steps) for r in range(WORLD_SIZE)]
        for name, run_ in (("ours", ours), ("theirs", theirs)):
            if not all(np.array_equal(run_[0], r) for r in run_[1:]):
                print("FAIL %s: the ranks of %s disagree" % (config, name))
                failed += 1
        if ours[0].shape != theirs[0].shape:
            print("FAIL %s: shapes %s and %s" % (config, ours[0].shape, theirs[0].shape))
            failed += 1
            continue
        worst, worst_abs = largest_difference(ours[0], theirs[0])
        status = "ok" if worst <= args.tolerance else "FAIL"
        failed += status == "FAIL"
        line = "%s %s: max |ours - pytorch| %.3g, %.3g of the step's largest gradient" % (
            status, config, worst_abs, worst)
        # A hook that changes nothing would pass too: each other hook must move the gradients
        # away from plain allreduce's by well over the tolerance.
        if config != "allreduce" and "allreduce" in configs:
            plain = load(args.theirs, configs.index("allreduce"), 0, args.steps)
            effect, _ = largest_difference(theirs[0], plain)
            if effect <= 10 * args.tolerance:
                line = "FAIL" + line[line.index(" "):]
                failed += status != "FAIL"
            line += " (%.3g from allreduce's)" % effect
        print(line)
        if config.startswith("powersgd"):
            with open(os.path.join(args.ours, "%d.buckets.txt" % index)) as f:
                ours_layout = f.read()
            with open(os.path.join(args.theirs, "%d.buckets.txt" % index)) as f:
                theirs_layout = f.read()
            if ours_layout != theirs_layout:
                print("FAIL %s: buckets differ:\n ours:\n%s pytorch:\n%s"
                      % (config, ours_layout, theirs_layout))
                failed += 1
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--configs", required=True)
    r.add_argument("--steps", type=int, default=6)
    r.add_argument("--output_dir", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--configs", required=True)
    c.add_argument("--steps", type=int, default=6)
    c.add_argument("--ours", required=True)
    c.add_argument("--theirs", required=True)
    c.add_argument("--tolerance", type=float, required=True)
    args = parser.parse_args()
    if args.command == "run":
        run(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
