#!/usr/bin/python3
"""The training of //trainer:train, written in Python with PyTorch.

The reference users compare our C++ trainer against: the same data, model,
optimizer, schedule, sampler and measurements, done the way a PyTorch user
does them (torch.distributed + DistributedDataParallel, a TensorDataset behind
a DistributedSampler and a DataLoader), laid out as PyTorch's ImageNet example
(pytorch/examples, imagenet/main.py): main parses the flags and settles this
process's rank, main_worker joins the process group and runs the epochs,
train_one_epoch and validate do one epoch's training and validation, with an
AverageMeter and the example's progress lines. It writes --metrics_json in
our trainer's format (trainer/report/run_metrics.cc, "dtrain.metrics.v1"), plus
"implementation": "pytorch <version>", so the experiment tools read both.

    # one process (world size 1, still wrapped in DDP as ours is)
    experiments/pytorch_reference.py --metrics_json=/tmp/py.json
    # two ranks under our launcher (or torchrun)
    bazel-bin/tools/launch/launch --nproc_per_node=2 --master_port=29511 -- \\
        experiments/pytorch_reference.py --batch_size=64

DDP's communication hooks and knobs take train's flags and are PyTorch's own:
--comm_hook=allreduce|fp16|bf16|powersgd|local_sgd (--fp16_allreduce names
fp16) registers default_hooks.fp16_compress_hook or bf16_compress_hook,
powerSGD_hook with a PowerSGDState (--powersgd_rank, --powersgd_start_step,
--powersgd_min_compression_rate, --powersgd_error_feedback,
--powersgd_warm_start, --powersgd_seed), or post_localSGD_hook (global
averaging for --local_sgd_start_step steps, then none) with a
PeriodicModelAverager run after every optimizer step (--local_sgd_period).
--gradient_as_bucket_view and --static_graph are DDP's arguments (the second
not applied with --sync_gradients=false, where PyTorch 2.6 fails on it);
--gradient_as_bucket_view defaults to true here, as train's does (PyTorch's
own default is false), so that default runs compare like with like. The
metrics JSON's config records comm_hook, fp16_allreduce,
gradient_as_bucket_view and static_graph, as train's does. PyTorch 1.13's
Gloo cannot allreduce bfloat16, and Debian's 2.14 neither bfloat16 nor
float16: there --comm_hook=bf16 (fp16) with Gloo is refused (exit 2), and
--probe says so ("gloo_bfloat16" or "gloo_float16": false). With Gloo, PowerSGD
runs one bucket at a time (_one_bucket_at_a_time): left to itself, PyTorch's
hook sends two buckets' allreduces to the ranks in different orders there.

    bazel-bin/tools/launch/launch --nproc_per_node=2 --master_port=29512 -- \\
        experiments/pytorch_reference.py --comm_hook=powersgd \\
        --powersgd_rank=2 --powersgd_start_step=10

--zero=1 wraps the optimizer in PyTorch's ZeroRedundancyOptimizer
(parameters_as_bucket_view=True), as train's --zero=1 shards its state; the
metrics JSON then has each rank's optimizer_state_bytes and peak_rss_bytes,
as train's does (with or without --zero).

Needs Debian's python3-torch (PyTorch 1.13 on Debian 12, 2.6 on Debian 13,
2.14 on testing) and python3-torchvision (for --model=resnet18): run it with
/usr/bin/python3.

    # what this Python torch can do, as one JSON line (the scaling sweep
    # asks before planning PyTorch's NCCL, fp16 and bf16 runs)
    experiments/pytorch_reference.py --probe

Exit status: 0 when training finished, 1 when it failed (the message names
the rank), 2 for bad flags (or a hook or device this torch cannot run).
"""

import time

# Before anything else, torch's import included: startup_seconds counts from
# here, as ours counts from the start of main().
_START = time.time()

import argparse  # noqa: E402
import bisect  # noqa: E402
import dataclasses  # noqa: E402
import datetime  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402

PROG = "pytorch_reference"
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# data/transforms.h.
STATS = {"fashion-mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}
# trainer/report/run_metrics.cc StepHistogramBounds().
STEP_HISTOGRAM_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                         0.5, 1.0, 2.5, 5.0, 10.0]
# trainer/options/data_parallel_options.h kCommHooks (powersgd: PyTorch's).
COMM_HOOKS = ("allreduce", "fp16", "bf16", "powersgd", "local_sgd")
# The compression hooks and the dtype each puts on the wire.
WIRE_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


class FlagError(Exception):
    """A bad flag value: exit status 2."""


# --- Flags -------------------------------------------------------------------


def _bool(text):
    value = text.strip().lower()
    if value in ("true", "t", "yes", "y", "1"):
        return True
    if value in ("false", "f", "no", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"'{text}' is not true or false")


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0}


def _duration(text):
    """Abseil's duration syntax, as our --timeout takes it: 60s, 5m, 1h30m,
    1.5s, 500ms."""
    rest = text.strip()
    sign = 1.0
    if rest[:1] in "+-" and rest:
        sign = -1.0 if rest[0] == "-" else 1.0
        rest = rest[1:]
    if rest == "0":
        return 0.0
    total = 0.0
    if not rest:
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration")
    while rest:
        match = re.match(r"([0-9]*\.?[0-9]+)(ns|us|ms|s|m|h)", rest)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"'{text}' is not a duration (like 60s, 5m, 1h30m)")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        rest = rest[match.end():]
    return sign * total


def _parser():
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Data-parallel training of the tutorials' models in "
        "PyTorch: the reference for //trainer:train (same flags, same "
        "metrics JSON).")

    def flag(name, **kw):
        p.add_argument("--" + name, **kw)

    def bool_flag(name, help_text):
        p.add_argument("--" + name, type=_bool, nargs="?", const=True,
                       default=False, metavar="true|false", help=help_text)
        # Abseil's --noNAME spelling.
        p.add_argument("--no" + name, dest=name, action="store_false",
                       help=argparse.SUPPRESS)

    flag("model", default="convnet", help="convnet or resnet18.")
    bool_flag("small_input_stem",
              "ResNet-18 with a 3x3 stride-1 stem and no max-pool.")
    flag("dataset", default="fashion-mnist", help="fashion-mnist or mnist.")
    flag("data_dir", default="",
         help="Folder with the IDX files (default for fashion-mnist: "
         f"{FASHION_MNIST_DIR}).")
    flag("image_size", type=int, default=None,
         help="Resize images to this size (default: as stored).")
    flag("train_limit", type=int, default=None,
         help="Train on the first N examples only (default: all).")
    flag("val_limit", type=int, default=None,
         help="Validate on the first N test examples only (default: all).")
    flag("batch_size", type=int, default=None,
         help="Batch size per process (default 128 for convnet, 32 for "
         "resnet18).")
    flag("workers", type=int, default=0, help="DataLoader num_workers.")
    flag("epochs", type=int, default=None,
         help="Epochs (default 1 for convnet, 2 for resnet18).")
    flag("max_steps", type=int, default=0,
         help="Stop after this many steps (0: no limit).")
    bool_flag("skip_validation", "No validation pass.")
    flag("optimizer", default=None,
         help="sgd, adadelta, adam or adamw (default: adadelta for convnet, "
         "sgd for resnet18).")
    flag("lr", type=float, default=None,
         help="Learning rate (default 0.5 for adadelta, 0.1 for sgd, 0.001 "
         "for adam and adamw).")
    flag("momentum", type=float, default=None,
         help="SGD momentum (default 0.9).")
    flag("weight_decay", type=float, default=None,
         help="Weight decay (default 1e-4 for sgd, 0.01 for adamw, 0 for "
         "adadelta and adam).")
    flag("lr_step_epochs", type=int, default=30,
         help="Multiply the learning rate by --lr_gamma every N epochs.")
    flag("lr_gamma", type=float, default=0.1, help="See --lr_step_epochs.")
    flag("seed", type=int, default=0,
         help="Seed of weights, shuffling and dropout.")
    flag("dist_backend", default="gloo",
         help="gloo (CPU) or nccl (CUDA, with --device=cuda).")
    flag("dist_url", default="env://",
         help="env:// (default), tcp://HOST:PORT or file:///PATH.")
    flag("device", default="cpu", help="cpu, cuda (cuda:LOCAL_RANK) or "
         "cuda:N.")
    flag("timeout", type=_duration, default=300.0,
         help="Bounds the rendezvous and every collective (60s, 5m, ...).")
    flag("bucket_cap_mb", type=float, default=25.0,
         help="DDP gradient bucket size in MiB.")
    flag("comm_hook", default="allreduce",
         help="How DDP averages gradients, with PyTorch's own hooks: "
         "allreduce (none registered); fp16 or bf16 (default_hooks' "
         "fp16_compress_hook, bf16_compress_hook); powersgd (powerSGD_hook, "
         "--powersgd_*); local_sgd (post_localSGD_hook and a "
         "PeriodicModelAverager, --local_sgd_*).")
    bool_flag("fp16_allreduce", "Another name for --comm_hook=fp16.")
    flag("powersgd_rank", type=int, default=1,
         help="PowerSGDState's matrix_approximation_rank.")
    flag("powersgd_start_step", type=int, default=1000,
         help="PowerSGDState's start_powerSGD_iter: plain allreduce for this "
         "many steps first.")
    flag("powersgd_min_compression_rate", type=float, default=2.0,
         help="PowerSGDState's min_compression_rate.")
    bool_flag("powersgd_error_feedback", "PowerSGDState's use_error_feedback.")
    p.set_defaults(powersgd_error_feedback=True)
    bool_flag("powersgd_warm_start", "PowerSGDState's warm_start.")
    p.set_defaults(powersgd_warm_start=True)
    flag("powersgd_seed", type=int, default=0,
         help="PowerSGDState's random_seed.")
    flag("local_sgd_start_step", type=int, default=100,
         help="Post-local SGD: PostLocalSGDState's start_localSGD_iter and the "
         "averager's warmup_steps.")
    flag("local_sgd_period", type=int, default=4,
         help="Post-local SGD: the PeriodicModelAverager's period.")
    bool_flag("gradient_as_bucket_view",
              "DDP's gradient_as_bucket_view (default true, as train's; "
              "PyTorch's own default is false).")
    p.set_defaults(gradient_as_bucket_view=True)
    bool_flag("static_graph", "DDP's static_graph.")
    bool_flag("sync_gradients",
              "false: no gradient averaging (every step under no_sync(); "
              "the no-communication bound, not a way to train).")
    p.set_defaults(sync_gradients=True)
    flag("zero", type=int, default=0,
         help="1: PyTorch's ZeroRedundancyOptimizer (optimizer state "
         "sharded, parameters_as_bucket_view) around --optimizer; 0: none. "
         "PyTorch has no stage 2 outside FSDP: 2 is refused.")
    flag("intra_op_threads", type=int, default=1,
         help="torch.set_num_threads (and OpenBLAS's threads) per process.")
    flag("metrics_json", default="",
         help="Rank 0 writes per-epoch metrics and the configuration here.")
    flag("progress", default="auto",
         help="auto, bar, lines or none (auto and bar print lines too).")
    flag("print_freq", type=int, default=10,
         help="Batches between progress lines.")
    p.add_argument("--probe", action="store_true",
                   help="Print what this torch can do as one JSON line "
                   "(version, CUDA, devices, NCCL) and exit; trains nothing.")
    return p


def _resolve_and_validate(o):
    """trainer/train_options.cc ResolveDefaults + Validate, with its messages;
    FlagError names the flag."""
    def bad(field, why):
        raise FlagError(f"--{field}: {why}")

    if o.model not in ("convnet", "resnet18"):
        bad("model", f"unknown model '{o.model}'; known: convnet, resnet18")
    resnet = o.model == "resnet18"
    if o.optimizer is None:
        o.optimizer = "sgd" if resnet else "adadelta"
    sgd = o.optimizer == "sgd"
    adam = o.optimizer in ("adam", "adamw")
    if o.lr is None:
        o.lr = 0.1 if sgd else 1e-3 if adam else 0.5
    if o.momentum is None:
        o.momentum = 0.9 if sgd else 0.0
    if o.weight_decay is None:
        o.weight_decay = (1e-4 if sgd else 1e-2 if o.optimizer == "adamw"
                          else 0.0)
    if o.batch_size is None:
        o.batch_size = 32 if resnet else 128
    if o.epochs is None:
        o.epochs = 2 if resnet else 1

    if o.small_input_stem and not resnet:
        bad("small_input_stem", "only resnet18 has this stem")
    if o.dataset not in STATS:
        bad("dataset", f"unknown dataset '{o.dataset}'; known here: "
            "fashion-mnist, mnist (the C++ trainer also has stl10 and "
            "synthetic)")
    if o.dataset == "mnist" and not o.data_dir:
        bad("data_dir", "--dataset=mnist needs --data_dir with the MNIST IDX "
            "files (train-images-idx3-ubyte.gz, ...); the default is "
            "--dataset=fashion-mnist")
    for name in ("image_size", "train_limit", "val_limit"):
        value = getattr(o, name)
        if value is not None and value < 1:
            bad(name, f"{value} is not >= 1")
    if o.batch_size < 1:
        bad("batch_size", "must be >= 1 (per process)")
    if o.workers < 0:
        bad("workers", f"{o.workers} is not >= 0")
    if o.epochs < 1:
        bad("epochs", "must be >= 1")
    if o.max_steps < 0:
        bad("max_steps", f"{o.max_steps} is not >= 0")
    if o.optimizer not in ("sgd", "adadelta", "adam", "adamw"):
        bad("optimizer",
            f"unknown optimizer '{o.optimizer}'; known: adadelta, adam, "
            "adamw, sgd")
    if not (o.lr > 0) or not math.isfinite(o.lr):
        bad("lr", "must be a finite number > 0")
    if not (0 <= o.momentum < 1):
        bad("momentum", "must be in [0, 1)")
    if o.optimizer == "adadelta" and o.momentum != 0:
        bad("momentum", "Adadelta has no momentum; leave it unset")
    if adam and o.momentum != 0:
        bad("momentum", f"{'Adam' if o.optimizer == 'adam' else 'AdamW'} "
            "keeps its own moments (betas 0.9, 0.999); leave it unset")
    if not (o.weight_decay >= 0) or not math.isfinite(o.weight_decay):
        bad("weight_decay", "must be a finite number >= 0")
    if o.lr_step_epochs < 1:
        bad("lr_step_epochs", "must be >= 1")
    if not (o.lr_gamma > 0) or not math.isfinite(o.lr_gamma):
        bad("lr_gamma", "must be a finite number > 0")
    if o.dist_backend not in ("gloo", "nccl"):
        bad("dist_backend",
            f"unknown backend '{o.dist_backend}'; known: gloo, nccl")
    if not o.dist_url.startswith(("tcp://", "file://", "env://")):
        bad("dist_url",
            f"'{o.dist_url}' is not tcp://host:port, file:///path or env://")
    if not (o.timeout > 0):
        bad("timeout", "must be > 0")
    if o.device not in ("cpu", "cuda") and not re.fullmatch(r"cuda:[0-9]+",
                                                            o.device):
        bad("device", f"'{o.device}' is not cpu, cuda or cuda:N")
    if o.dist_backend == "nccl" and o.device == "cpu":
        bad("dist_backend", "nccl needs --device=cuda")
    if o.dist_backend == "gloo" and o.device != "cpu":
        bad("dist_backend", "the gloo backend here reduces CPU tensors; use "
            "nccl with --device=cuda")
    if not (o.bucket_cap_mb > 0) or not math.isfinite(o.bucket_cap_mb):
        bad("bucket_cap_mb", "must be a finite number > 0")
    # trainer/flags/data_parallel_flags.cc and
    # trainer/options/data_parallel_options.cc.
    if o.fp16_allreduce:
        if o.comm_hook not in ("allreduce", "fp16"):
            raise FlagError("--fp16_allreduce is --comm_hook=fp16; it cannot "
                            f"go with --comm_hook={o.comm_hook}")
        o.comm_hook = "fp16"
    if o.comm_hook not in COMM_HOOKS:
        bad("comm_hook", f"'{o.comm_hook}' is not one of "
            f"{', '.join(COMM_HOOKS)}")
    if o.powersgd_rank < 1:
        bad("powersgd_rank", "the matrix rank must be 1 or more")
    if o.powersgd_start_step < 0:
        bad("powersgd_start_step", "must be 0 or more")
    # What PyTorch's PowerSGDState itself refuses (a ValueError there).
    if (o.comm_hook == "powersgd" and o.powersgd_start_step < 2
            and (o.powersgd_error_feedback or o.powersgd_warm_start)):
        bad("powersgd_start_step", "must be at least 2 with error feedback or "
            "warm start (PyTorch's rule for start_powerSGD_iter)")
    if not 0 <= o.powersgd_seed <= 0xFFFFFFFF:
        bad("powersgd_seed", "must be in 0 .. 2^32 - 1 (numpy's seeds)")
    if not (o.powersgd_min_compression_rate >= 1) or not math.isfinite(
            o.powersgd_min_compression_rate):
        bad("powersgd_min_compression_rate",
            "must be a finite number of at least 1")
    if o.local_sgd_start_step < 0:
        bad("local_sgd_start_step", "must be 0 or more")
    if o.local_sgd_period < 1:
        bad("local_sgd_period", "must be 1 or more")
    if o.comm_hook != "allreduce" and not o.sync_gradients:
        bad("comm_hook", "a communication hook averages gradients; "
            "--sync_gradients=false averages none")
    if o.zero not in (0, 1):
        bad("zero", f"{o.zero} is not 0 or 1: PyTorch's "
            "ZeroRedundancyOptimizer shards the optimizer state only (stage "
            "1); its stage 2 is FSDP, which this reference does not run")
    if o.zero and not o.sync_gradients:
        bad("zero", "a sharded optimizer needs the averaged gradients of "
            "every rank; --sync_gradients=false averages none")
    if o.zero and o.comm_hook == "local_sgd":
        bad("zero", "post-local SGD averages parameters, which a sharded "
            "optimizer's ranks do not each hold whole in their state")
    if o.intra_op_threads < 1:
        bad("intra_op_threads", "must be >= 1")
    if o.progress not in ("auto", "bar", "lines", "none"):
        bad("progress", f"unknown style '{o.progress}'; known: auto, bar, "
            "lines, none")
    if o.print_freq < 1:
        bad("print_freq", "must be >= 1")
    return o


def _parse_flags(argv):
    args = _parser().parse_args(argv)  # exits 2 naming the flag on errors
    return _resolve_and_validate(args)


# --- Data ----------------------------------------------------------------------


def _idx_paths(directory, name):
    """data/mnist.cc: <name>.gz, <name>, and the dotted spelling of some
    mirrors (train-images.idx3-ubyte)."""
    dotted = name[:name.rfind("-idx")] + "." + name[name.rfind("-idx") + 1:]
    return [os.path.join(directory, n)
            for n in (name + ".gz", name, dotted, dotted + ".gz")]


def _read_idx(directory, name):
    import numpy as np
    tried = _idx_paths(directory, name)
    for path in tried:
        if os.path.exists(path):
            break
    else:
        raise FileNotFoundError(
            f"{name}: none of {', '.join(tried)} exists (Fashion-MNIST: "
            "apt-get install dataset-fashion-mnist)")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, dtype, rank = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    count = 1
    for d in dims:
        count *= d
    body = raw[4 + 4 * rank:]
    if len(body) != count:
        raise ValueError(f"{path}: {len(body)} data bytes, the header says "
                         f"{count}")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _load_split(directory, train):
    import numpy as np
    import torch
    prefix = "train" if train else "t10k"
    images = _read_idx(directory, f"{prefix}-images-idx3-ubyte")
    labels = _read_idx(directory, f"{prefix}-labels-idx1-ubyte")
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{directory}: {prefix} images {images.shape} and "
                         f"labels {labels.shape} do not match")
    if labels.size and labels.max() >= 10:
        raise ValueError(f"{directory}: {prefix} label {labels.max()} is not "
                         "in [0, 10)")
    x = torch.from_numpy(images.copy()).unsqueeze(1)  # [N, 1, H, W] uint8
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def _prepare(images, args):
    """The deterministic transforms, once over the whole split, as our loader
    precomputes them: Resize (uint8 -> uint8, rounded half to even like
    torchvision), grayscale to 3 channels for ResNet-18, ToTensor's /255 and
    Normalize (torchvision's float32 sub_ then div_)."""
    import torch
    import torch.nn.functional as F
    if args.image_size is not None and tuple(images.shape[2:]) != (
            args.image_size, args.image_size):
        chunks = []
        for chunk in images.split(1024):  # bounds the float temporaries
            resized = F.interpolate(chunk.float(),
                                    size=(args.image_size, args.image_size),
                                    mode="bilinear", align_corners=False,
                                    antialias=False)
            chunks.append(resized.round_().clamp_(0, 255).to(torch.uint8))
        images = torch.cat(chunks) if chunks else images.new_empty(
            (0, images.shape[1], args.image_size, args.image_size))
    mean, std = STATS[args.dataset]
    x = images.to(torch.float32).div_(255)
    x.sub_(torch.tensor([mean], dtype=torch.float32).view(1, -1, 1, 1))
    x.div_(torch.tensor([std], dtype=torch.float32).view(1, -1, 1, 1))
    if args.model == "resnet18" and x.shape[1] == 1:
        # The same values per channel as normalising the repeated bytes.
        x = x.repeat(1, 3, 1, 1)
    return x


def load_datasets(args, worker):
    """Both splits decoded and transformed once, every rank the whole set
    (the sampler picks each rank's share): the train and validation
    TensorDatasets and a line describing them."""
    from torch.utils.data import TensorDataset
    directory = args.data_dir or FASHION_MNIST_DIR
    train_x, train_y = _load_split(directory, True)
    val_x, val_y = _load_split(directory, False)
    if args.train_limit is not None:
        train_x, train_y = (train_x[:args.train_limit],
                            train_y[:args.train_limit])
    if args.val_limit is not None:
        val_x, val_y = val_x[:args.val_limit], val_y[:args.val_limit]
    train_x = _prepare(train_x, args)
    val_x = _prepare(val_x, args)
    shape = tuple(train_x.shape[1:])
    description = (f"{args.dataset} from {directory}: {len(train_y)} train, "
                   f"{len(val_y)} test, {shape[0]}x{shape[1]}x{shape[2]}")
    worker.say(f"data: {description}")
    return (TensorDataset(train_x, train_y), TensorDataset(val_x, val_y),
            description)


def make_loaders(args, worker, train_set, val_set):
    """A DistributedSampler and a DataLoader per split: the training one
    shuffled by --seed and the epoch, the validation one in order."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    pin = worker.device.type == "cuda"
    train_sampler = DistributedSampler(train_set,
                                       num_replicas=worker.world_size,
                                       rank=worker.rank, shuffle=True,
                                       seed=args.seed, drop_last=False)
    val_sampler = DistributedSampler(val_set, num_replicas=worker.world_size,
                                     rank=worker.rank, shuffle=False,
                                     drop_last=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size,
                              sampler=train_sampler, num_workers=args.workers,
                              pin_memory=pin)
    val_loader = DataLoader(val_set, batch_size=args.batch_size,
                            sampler=val_sampler, num_workers=args.workers,
                            pin_memory=pin)
    return train_loader, val_loader


# --- Models ------------------------------------------------------------------


def _convnet_class(torch, nn, F):
    class ConvNet(nn.Module):
        """The book's ConvNet (models/convnet.h), layers created in the same
        order."""

        def __init__(self, in_channels=1, num_classes=10, image_size=28):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 16, 3, 1)
            self.conv2 = nn.Conv2d(16, 32, 3, 1)
            self.dropout1 = nn.Dropout2d(0.10)
            self.dropout2 = nn.Dropout(0.25)
            side = (image_size - 4) // 2
            self.fc1 = nn.Linear(32 * side * side, 64)
            self.fc2 = nn.Linear(64, num_classes)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.dropout2(x)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    return ConvNet


def _make_model(args, in_channels, image_size):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if args.model == "convnet":
        if image_size < 6:
            raise ValueError(f"ConvNet: image_size must be at least 6, got "
                             f"{image_size}")
        return _convnet_class(torch, nn, F)(in_channels, 10, image_size)
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    if args.small_input_stem:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1,
                                bias=False)
        # torchvision initialises its convolutions this way in __init__; the
        # replacement gets the same (our models/resnet.cc does too).
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out",
                                nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


def create_model(args, worker, in_channels, image_size):
    """The model on this rank's device. Every rank builds the same initial
    weights (DDP broadcasts rank 0's anyway); afterwards the global generator
    is seeded per rank, so that dropout draws differ between ranks, as ours
    (seeded per rank and step)."""
    import torch
    torch.manual_seed(args.seed)
    model = _make_model(args, in_channels, image_size).to(worker.device)
    torch.manual_seed(args.seed + worker.rank)
    return model


def create_optimizer(args, model):
    import torch
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        kinds = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
                 "adamw": torch.optim.AdamW, "adadelta": torch.optim.Adadelta}
        extra = {"momentum": args.momentum} if args.optimizer == "sgd" else {}
        return ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=kinds[args.optimizer],
            parameters_as_bucket_view=True, lr=args.lr,
            weight_decay=args.weight_decay, **extra)
    if args.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr,
                               momentum=args.momentum,
                               weight_decay=args.weight_decay)
    if args.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=args.lr,
                                weight_decay=args.weight_decay)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=args.lr,
                                 weight_decay=args.weight_decay)
    return torch.optim.Adadelta(model.parameters(), lr=args.lr,
                                weight_decay=args.weight_decay)


def _lr_at(args, epoch):
    """Step decay: --lr times --lr_gamma every --lr_step_epochs epochs."""
    return args.lr * math.pow(args.lr_gamma, epoch // args.lr_step_epochs)


def adjust_learning_rate(optimizer, epoch, args):
    """Sets the epoch's learning rate (_lr_at) on every group; returns it."""
    lr = _lr_at(args, epoch)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


# --- Helpers -----------------------------------------------------------------


class AverageMeter:
    """The tutorials' AverageMeter (trainer/report/meters.h)."""

    def __init__(self):
        self.last = 0.0
        self.sum = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.last = value
        self.sum += value * n
        self.count += n

    @property
    def avg(self):
        return self.sum / self.count if self.count else 0.0


def _topk_correct(output, labels, ks):
    """Correct counts for each k (trainer/report/meters.cc TopKCorrect)."""
    import torch
    with torch.no_grad():
        if output.shape[0] == 0:
            return [0 for _ in ks]
        classes = output.shape[1]
        max_k = max(1, max(min(k, classes) for k in ks))
        _, top = output.topk(max_k, 1, True, True)
        hits = top.eq(labels.view(-1, 1))
        return [int(hits[:, :max(1, min(k, classes))].sum().item())
                for k in ks]


def _progress_line(epoch, batch, batches, batch_time, data_time, losses, top1,
                   top5, rate):
    """The ImageNet example's progress line (its ProgressMeter), with the
    global samples/s."""
    return (f"Epoch: [{epoch}][{batch}/{batches}]  "
            f"Time {batch_time.last:.3f} ({batch_time.avg:.3f})  "
            f"Data {data_time.last:.3f} ({data_time.avg:.3f})  "
            f"Loss {losses.last:.4f} ({losses.avg:.4f})  "
            f"Prec@1 {top1.last:.3f} ({top1.avg:.3f})  "
            f"Prec@5 {top5.last:.3f} ({top5.avg:.3f})  "
            f"{_thousands(rate)} samples/s")


def _percentile(values, p):
    """numpy's default (linear) percentile, as trainer/report/meters.cc."""
    if not values:
        return 0.0
    v = sorted(values)
    rank = min(max(p, 0.0), 100.0) / 100.0 * (len(v) - 1)
    lo = int(math.floor(rank))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def _step_histogram(step_seconds):
    counts = [0] * (len(STEP_HISTOGRAM_BOUNDS) + 1)
    for s in step_seconds:
        counts[bisect.bisect_left(STEP_HISTOGRAM_BOUNDS, s)] += 1
    return counts


def _thousands(value):
    return f"{int(round(value)):,}"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _finite(x):
    # nlohmann writes non-finite doubles as null.
    return x if x is None or math.isfinite(x) else None


def _write_json_atomically(path, value):
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False,
                      allow_nan=False) + "\n"
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory,
                       f".{os.path.basename(path)}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _set_blas_threads(n):
    """base/compute_threads.cc: Debian's PyTorch multiplies matrices with
    OpenBLAS, whose own thread pool torch.set_num_threads does not reach."""
    import ctypes
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
            lib.openblas_set_num_threads(ctypes.c_int(n))
            return
        except (OSError, AttributeError):
            continue


def _all_reduce(values, op, device):
    """The values reduced over all ranks as float64, back as a list."""
    import torch
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return t.tolist()


# --- Training ----------------------------------------------------------------


@dataclasses.dataclass
class Worker:
    """This process's place in the job (the launcher's RANK and WORLD_SIZE),
    the device it trains on, and where rank 0 prints its progress."""
    rank: int
    world_size: int
    device: object  # torch.device
    log: object  # a text stream

    @property
    def is_main(self):
        return self.rank == 0

    def say(self, line):
        if self.is_main:
            print(line, file=self.log, flush=True)


@dataclasses.dataclass
class TrainState:
    """What one epoch hands the next, and the metrics JSON reports."""
    global_step: int = 0
    best_top1: float = 0.0
    startup_seconds: float = 0.0
    epochs: list = dataclasses.field(default_factory=list)


def _device(args, local_rank):
    """--device on this rank: cpu, or the CUDA device (cuda: LOCAL_RANK's),
    made current."""
    import torch
    if args.device == "cpu":
        return torch.device("cpu")
    index = local_rank if args.device == "cuda" else int(args.device[5:])
    if index >= torch.cuda.device_count():
        raise RuntimeError(f"--device={args.device}: device {index} "
                           f"requested (local rank {local_rank}) but only "
                           f"{torch.cuda.device_count()} visible")
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device


def _config(args, worker):
    """The resolved flags as the metrics JSON's "config"."""
    return {
        "model": args.model,
        "small_input_stem": args.small_input_stem,
        "dataset": args.dataset,
        "data_dir": args.data_dir,
        "image_size": args.image_size,
        "train_limit": args.train_limit,
        "val_limit": args.val_limit,
        "batch_size": args.batch_size,
        "workers": args.workers,
        # DistributedSampler pads: the reference always has even batches.
        "even_batches": True,
        "divide_by_initial_world_size": True,
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "optimizer": args.optimizer,
        "lr": float(args.lr),
        "momentum": float(args.momentum),
        "weight_decay": float(args.weight_decay),
        "lr_step_epochs": args.lr_step_epochs,
        "lr_gamma": float(args.lr_gamma),
        "seed": args.seed,
        "dist_backend": args.dist_backend,
        "dist_url": args.dist_url,
        "device": args.device,
        "bucket_cap_mb": float(args.bucket_cap_mb),
        "fp16_allreduce": args.comm_hook == "fp16",
        "comm_hook": args.comm_hook,
        "gradient_as_bucket_view": args.gradient_as_bucket_view,
        "static_graph": args.static_graph,
        "powersgd_rank": args.powersgd_rank,
        "powersgd_start_step": args.powersgd_start_step,
        "powersgd_min_compression_rate":
            float(args.powersgd_min_compression_rate),
        "powersgd_error_feedback": args.powersgd_error_feedback,
        "powersgd_warm_start": args.powersgd_warm_start,
        "powersgd_seed": args.powersgd_seed,
        "local_sgd_start_step": args.local_sgd_start_step,
        "local_sgd_period": args.local_sgd_period,
        "sync_gradients": args.sync_gradients,
        "zero": args.zero,
        "intra_op_threads": args.intra_op_threads,
        "timeout_seconds": float(args.timeout),
        "world_size": worker.world_size,
    }


def _write_metrics(args, worker, run, state):
    """Rank 0 (re)writes --metrics_json: `run`'s fixed fields and the state's
    epochs so far."""
    if not worker.is_main or not args.metrics_json:
        return
    _write_json_atomically(args.metrics_json, {
        **run,
        "epochs": state.epochs,
        "best_top1": state.best_top1,
        "global_step": state.global_step,
        "resumed_from": "",
        "startup_seconds": state.startup_seconds,
        "wall_seconds": time.time() - _START,
    })


def main_worker(args, log):
    """One rank's training, as the ImageNet example's main_worker: this
    rank's threads and device, the process group joined, train_and_validate,
    the group left."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.intra_op_threads)
    _set_blas_threads(args.intra_op_threads)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    worker = Worker(rank=int(os.environ["RANK"]),
                    world_size=int(os.environ["WORLD_SIZE"]),
                    device=_device(args, local_rank), log=log)

    init = {"backend": args.dist_backend, "init_method": args.dist_url,
            "timeout": datetime.timedelta(seconds=args.timeout)}
    if not args.dist_url.startswith("env://"):
        init.update(rank=worker.rank, world_size=worker.world_size)
    dist.init_process_group(**init)
    try:
        result = train_and_validate(args, worker)
        # Ranks that never synchronised (--sync_gradients=false) finish apart;
        # without this, rank 0 (which serves the store) can leave while another
        # is still tearing down its Gloo group, which PyTorch 2.6 answers with
        # std::terminate.
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


def train_and_validate(args, worker):
    """The data, model, optimizer and DDP; then per epoch train_one_epoch,
    validate, and the metrics JSON rewritten. Returns the exit status."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    train_set, val_set, description = load_datasets(args, worker)
    shape = tuple(train_set.tensors[0].shape[1:])
    model = create_model(args, worker, shape[0], shape[1])
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = create_optimizer(args, model)
    train_loader, val_loader = make_loaders(args, worker, train_set, val_set)

    # Without gradient sync nothing else communicates either (as ours). Nor
    # is the graph static then: PyTorch 2.6's DDP fails every step under
    # no_sync() with static_graph ("expect_autograd_hooks_ INTERNAL ASSERT
    # FAILED"), and a run that averages nothing has no allreduces for it to
    # prepare.
    device = worker.device
    static_graph = args.static_graph and args.sync_gradients
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=args.bucket_cap_mb,
        broadcast_buffers=args.sync_gradients,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
        static_graph=static_graph)
    averager = register_comm_hook(ddp, args)
    worker.say(
        f"{args.model}: {parameters} parameters, {device}, world size "
        f"{worker.world_size} ({args.dist_backend}), batch {args.batch_size} "
        f"per process (global {args.batch_size * worker.world_size}), bucket "
        f"cap {args.bucket_cap_mb:g} MiB{_comm_hook_summary(args)}"
        + ("" if args.sync_gradients
           else ", gradient sync OFF (no-communication bound)")
        + (", --static_graph not applied without gradient sync"
           if args.static_graph and not args.sync_gradients else ""))

    run = {
        "format": "dtrain.metrics.v1",
        "implementation": "pytorch " + torch.__version__,
        "config": _config(args, worker),
        "backend": args.dist_backend,
        "device": str(device),
        "data": description,
        "parameters": parameters,
    }
    state = TrainState()
    for epoch in range(args.epochs):
        if args.max_steps > 0 and state.global_step >= args.max_steps:
            break
        train_loader.sampler.set_epoch(epoch)
        lr = adjust_learning_rate(optimizer, epoch, args)
        worker.say(f"Begin training epoch {epoch + 1}/{args.epochs} "
                   f"(lr {lr:g})")
        m, stopped = train_one_epoch(train_loader, ddp, optimizer, epoch,
                                     state, worker, args, averager)
        worker.say(
            f"epoch {epoch + 1}: loss {m['train_loss']:.4f}  top1 "
            f"{m['train_top1']:.2f}%  top5 {m['train_top5']:.2f}%  "
            f"{m['epoch_seconds']:.1f} s  {m['samples_per_second']:.0f} "
            f"samples/s  (data {m['data_seconds']:.2f} s, exposed "
            "communication not measured)")
        if not args.skip_validation:
            # No DDP collectives while ranks count differently: the module.
            m.update(validate(val_loader, ddp.module, worker))
            state.best_top1 = max(state.best_top1, m["val_top1"])
            worker.say(
                f" * validation: loss {m['val_loss']:.4f}  Prec@1 "
                f"{m['val_top1']:.3f}  Prec@5 {m['val_top5']:.3f}  (best "
                f"Prec@1 {state.best_top1:.3f}, {m['val_seconds']:.1f} s)")
        for key in m:
            if isinstance(m[key], float):
                m[key] = _finite(m[key])
        m["ddp_timeline"] = _ddp_timeline(ddp) if args.sync_gradients else None
        state.epochs.append(m)
        _write_metrics(args, worker, run, state)
        if stopped:
            worker.say(f"stopped at --max_steps={args.max_steps}")
            break
    run.update(_memory(optimizer, worker))
    _write_metrics(args, worker, run, state)
    return 0


def _memory(optimizer, worker):
    """Per rank, as train's metrics: the bytes of optimizer state the rank
    keeps (with ZeroRedundancyOptimizer, its local optimizer's) and its peak
    resident memory (ru_maxrss). A collective."""
    import resource
    import torch
    import torch.distributed as dist
    local = getattr(optimizer, "optim", optimizer)
    state = 0
    for per_param in local.state.values():
        for value in per_param.values():
            if torch.is_tensor(value):
                state += value.numel() * value.element_size()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine = [0.0] * (2 * worker.world_size)
    mine[worker.rank] = state
    mine[worker.world_size + worker.rank] = rss
    every = _all_reduce(mine, dist.ReduceOp.SUM, worker.device)
    return {
        "optimizer_state_bytes": [int(v) for v in every[:worker.world_size]],
        "peak_rss_bytes": [int(v) for v in every[worker.world_size:]],
    }


def register_comm_hook(ddp, args):
    """--comm_hook on `ddp`, with PyTorch's own hooks and their states on the
    default group. Returns the model averager that post-local SGD runs after
    every optimizer step, None for the other hooks."""
    if args.comm_hook == "allreduce":
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if args.comm_hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.comm_hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.powersgd_start_step,
            min_compression_rate=args.powersgd_min_compression_rate,
            use_error_feedback=args.powersgd_error_feedback,
            warm_start=args.powersgd_warm_start,
            random_seed=args.powersgd_seed)
        hook = powerSGD_hook.powerSGD_hook
        if args.dist_backend == "gloo":
            hook = _one_bucket_at_a_time(hook)
        ddp.register_comm_hook(state, hook)
    elif args.comm_hook == "local_sgd":
        from torch.distributed.algorithms.ddp_comm_hooks import (
            post_localSGD_hook)
        from torch.distributed.algorithms.model_averaging import averagers
        # Global gradient averaging for the first steps, then none (no
        # subgroup allreduce: post_local_gradient_allreduce=False, as ours);
        # from then on the averager averages the parameters every period.
        state = post_localSGD_hook.PostLocalSGDState(
            process_group=None, subgroup=None,
            start_localSGD_iter=args.local_sgd_start_step,
            post_local_gradient_allreduce=False)
        ddp.register_comm_hook(state, post_localSGD_hook.post_localSGD_hook)
        return averagers.PeriodicModelAverager(
            period=args.local_sgd_period,
            warmup_steps=args.local_sgd_start_step)
    return None


def _one_bucket_at_a_time(hook):
    """`hook` (PyTorch's powerSGD_hook) finished for each bucket before DDP
    hands it the next. The hook issues its later allreduces (P, then Q) from
    future callbacks, on Gloo's worker threads, while backward goes on issuing
    the next bucket's: with Gloo and more than one bucket (the ConvNet has
    two) they reach the ranks in different orders, and PyTorch 1.13 aborts
    ("op.preamble.length <= op.nbytes" in gloo's tcp pair) or, without warm
    start, fails with a KeyError. Waiting keeps every rank's collectives in
    one order, at the cost of overlapping the compressed buckets'
    communication with backward."""
    def ordered(state, bucket):  # DDP checks the name "bucket"
        fut = hook(state, bucket)
        fut.wait()
        return fut
    return ordered


def _comm_hook_summary(args):
    """trainer/run_parts.cc CommHookSummary."""
    if args.comm_hook == "fp16":
        return " (float16 on the wire)"
    if args.comm_hook == "bf16":
        return " (bfloat16 on the wire)"
    if args.comm_hook == "powersgd":
        return (f" (PowerSGD rank {args.powersgd_rank} from step "
                f"{args.powersgd_start_step})")
    if args.comm_hook == "local_sgd":
        return (f" (post-local SGD from step {args.local_sgd_start_step}, "
                f"parameters averaged every {args.local_sgd_period} steps)")
    return ""


def train_one_epoch(train_loader, model, optimizer, epoch, state, worker,
                    args, averager=None):
    """One epoch of `model` (DDP), up to --max_steps in all, with the ImageNet
    example's progress lines on rank 0; `averager` (post-local SGD's) averages
    the parameters after each optimizer step. Returns the epoch's metrics (the
    trainer's per-epoch fields, validation empty) and whether --max_steps
    stopped it early."""
    import torch.nn.functional as F

    model.train()
    batch_time, data_time = AverageMeter(), AverageMeter()
    losses, top1, top5 = AverageMeter(), AverageMeter(), AverageMeter()
    step_seconds = []
    correct1 = correct5 = examples = 0
    loss_sum = 0.0
    limit = (args.max_steps - state.global_step if args.max_steps > 0
             else len(train_loader))
    batches = min(len(train_loader), limit)
    lines = worker.is_main and args.progress != "none"
    epoch_start = time.perf_counter()
    end = epoch_start
    b = -1
    for b, (images, labels) in enumerate(train_loader):
        got = time.perf_counter()
        data_time.update(got - end)
        images = images.to(worker.device, non_blocking=True)
        labels = labels.to(worker.device, non_blocking=True)
        n = labels.shape[0]

        optimizer.zero_grad()
        if args.sync_gradients:
            output = model(images)
            loss = F.cross_entropy(output, labels)
            loss.backward()
        else:
            with model.no_sync():
                output = model(images)
                loss = F.cross_entropy(output, labels)
                loss.backward()
        optimizer.step()
        if averager is not None:
            averager.average_parameters(model.parameters())
        state.global_step += 1
        if not state.startup_seconds:
            state.startup_seconds = time.time() - _START

        loss_value = loss.item()
        c1, c5 = _topk_correct(output, labels, (1, 5))
        loss_sum += loss_value * n
        correct1 += c1
        correct5 += c5
        examples += n
        losses.update(loss_value, n)
        top1.update(100.0 * c1 / n, n)
        top5.update(100.0 * c5 / n, n)
        now = time.perf_counter()
        batch_time.update(now - end)
        step_seconds.append(now - got)
        end = now
        if lines and (b % args.print_freq == 0 or b + 1 == batches):
            rate = examples * worker.world_size / (now - epoch_start)
            print(_progress_line(epoch, b, batches, batch_time, data_time,
                                 losses, top1, top5, rate),
                  file=worker.log, flush=True)
        if b + 1 >= batches:
            break
    stopped = (args.max_steps > 0 and state.global_step >= args.max_steps
               and b + 1 < len(train_loader))
    totals = [loss_sum, correct1, correct5, examples]
    return _epoch_metrics(epoch, _lr_at(args, epoch), totals,
                          end - epoch_start, data_time.sum, step_seconds,
                          worker), stopped


def _epoch_metrics(epoch, lr, totals, seconds, data_seconds, step_seconds,
                   worker):
    """An epoch's metrics over all ranks (trainer/report/run_metrics.cc's fields):
    totals ([loss sum, top-1 correct, top-5 correct, examples]) summed, the
    epoch's and the data's seconds the slowest rank's; the step times are
    this rank's."""
    import torch.distributed as dist

    # PyTorch's DDP overlaps its allreduces with backward inside C++ and
    # does not expose how long a step waited for them: not measurable
    # from outside, so 0 (ours measures it in dist/ddp).
    exposed = 0.0
    sums = _all_reduce(totals, dist.ReduceOp.SUM, worker.device)
    maxima = _all_reduce([seconds, data_seconds, exposed], dist.ReduceOp.MAX,
                         worker.device)
    total = max(1.0, sums[3])
    step_sum = 0.0
    for s in step_seconds:
        step_sum += s
    return {
        "epoch": epoch,
        "steps": len(step_seconds),
        "samples": int(sums[3]),
        "lr": lr,
        "epoch_seconds": maxima[0],
        "samples_per_second": sums[3] / maxima[0] if maxima[0] > 0 else 0.0,
        "train_loss": sums[0] / total,
        "train_top1": 100.0 * sums[1] / total,
        "train_top5": 100.0 * sums[2] / total,
        "data_seconds": maxima[1],
        "exposed_communication_seconds": maxima[2],
        "step_seconds_mean": step_sum / len(step_seconds)
        if step_seconds else 0.0,
        "step_seconds_p50": _percentile(step_seconds, 50),
        "step_seconds_p90": _percentile(step_seconds, 90),
        "step_seconds_max": _percentile(step_seconds, 100),
        "step_seconds_histogram": {
            "bounds": STEP_HISTOGRAM_BOUNDS,
            "counts": _step_histogram(step_seconds),
            "sum": step_sum,
        },
        "val_loss": None,
        "val_top1": None,
        "val_top5": None,
        "val_seconds": 0.0,
    }


def validate(val_loader, model, worker):
    """Loss, top-1 and top-5 over the whole validation split, every example
    counted once across the ranks; `model` is the bare module (no DDP
    collectives). Returns the metrics' val_* fields."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    start = time.perf_counter()
    model.eval()
    n_total = len(val_loader.dataset)
    loss_sum = 0.0
    correct1 = correct5 = examples = 0
    position = 0  # this rank's examples before the batch
    with torch.no_grad():
        for images, labels in val_loader:
            # DistributedSampler pads the last round with repeats: rank r's
            # i-th example is global slot r + i * world_size, and slots past
            # the end are the repeats, left out so every test example counts
            # exactly once.
            count = labels.shape[0]
            keep = [j for j in range(count)
                    if worker.rank + (position + j) * worker.world_size
                    < n_total]
            position += count
            if not keep:
                continue
            if len(keep) < count:
                index = torch.tensor(keep, dtype=torch.long)
                images = images.index_select(0, index)
                labels = labels.index_select(0, index)
            images = images.to(worker.device, non_blocking=True)
            labels = labels.to(worker.device, non_blocking=True)
            output = model(images)
            loss_sum += F.cross_entropy(output, labels,
                                        reduction="sum").item()
            c1, c5 = _topk_correct(output, labels, (1, 5))
            correct1 += c1
            correct5 += c5
            examples += labels.shape[0]
    sums = _all_reduce([loss_sum, correct1, correct5, examples],
                       dist.ReduceOp.SUM, worker.device)
    total = max(1.0, sums[3])
    seconds = time.perf_counter() - start
    if int(sums[3]) != n_total:
        raise RuntimeError(f"validation counted {sums[3]} examples, "
                           f"expected {n_total}")
    return {
        "val_loss": sums[0] / total,
        "val_top1": 100.0 * sums[1] / total,
        "val_top5": 100.0 * sums[2] / total,
        "val_seconds": seconds,
    }


def _ddp_timeline(ddp):
    """PyTorch DDP's own timing of backward, as its reducer samples it (the
    first ten iterations, then every hundredth), averaged over the run so far,
    in the fields of the trainer's ddp_timeline it has (docs/FORMATS.md).
    Its backward starts at the end of forward; the trainer's at the first
    gradient hook."""
    try:
        d = ddp._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return None

    def seconds(key):
        v = d.get(key)
        return v / 1e9 if isinstance(v, int) and v > 0 else None

    sizes = d.get("rebuilt_bucket_sizes") or d.get("bucket_sizes") or ""
    return {
        "source": "torch DDP logging data",
        "backward_seconds": seconds("avg_backward_compute_time"),
        "communication_seconds": seconds("avg_backward_comm_time"),
        "overlap_seconds": seconds("avg_backward_compute_comm_overlap_time"),
        "buckets": [{"bytes": int(x)} for x in str(sizes).split(",")
                    if x.strip()],
    }


def _gloo_allreduces(dtype_name):
    """Whether this torch's Gloo can sum tensors of torch.<dtype_name>
    (1.13's cannot sum bfloat16, 2.14's as Debian builds it neither bfloat16
    nor float16: "Invalid scalar type"), tried on a process group of this
    process alone. True where the trial itself cannot run: the training then
    tells."""
    import torch
    import torch.distributed as dist
    try:
        group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1,
                                      datetime.timedelta(seconds=30))
    except Exception:  # noqa: BLE001 -- no trial possible here
        return True
    try:
        group.allreduce([torch.zeros(1, dtype=getattr(torch, dtype_name))]
                        ).wait()
    except RuntimeError:
        return False
    except Exception:  # noqa: BLE001 -- another API: no answer
        return True
    return True


def _probe():
    """Prints {"torch", "cuda", "cuda_devices", "nccl", "gloo_float16",
    "gloo_bfloat16"}: whether this torch can run the NCCL comparison (a
    CPU-only build answers cuda null), and whether its Gloo takes
    --comm_hook=fp16 and --comm_hook=bf16."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"{PROG}: cannot import torch (apt-get install python3-torch): "
              f"{e}", file=sys.stderr)
        return 1
    print(json.dumps({
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cuda_devices": torch.cuda.device_count(),
        "nccl": bool(dist.is_available() and dist.is_nccl_available()),
        "gloo_float16": bool(dist.is_available()
                             and _gloo_allreduces("float16")),
        "gloo_bfloat16": bool(dist.is_available()
                              and _gloo_allreduces("bfloat16")),
    }), flush=True)
    return 0


def main(argv):
    """The flags parsed, this process's place in the job settled, then
    main_worker; returns the exit status. Our launcher (or torchrun) starts
    one process per rank, as the ImageNet example's main spawns them."""
    try:
        args = _parse_flags(argv)
    except FlagError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2

    # One process alone: a world of one, still in a process group and DDP as
    # ours is, meeting on a free local port.
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(_free_port())
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    try:
        rank = int(os.environ["RANK"])
        int(os.environ["WORLD_SIZE"])
        int(os.environ["LOCAL_RANK"])
    except ValueError as e:
        print(f"{PROG}: the launcher's RANK/WORLD_SIZE/LOCAL_RANK: {e}",
              file=sys.stderr)
        return 2
    # OpenMP and OpenBLAS size their pools when torch loads; our launcher
    # (and torchrun, for OpenMP) set these too.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.intra_op_threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.intra_op_threads))
    # PyTorch 2.4+ serves env:// and tcp:// stores through libuv by default,
    # and Debian 13's PyTorch 2.6 is built without it ("use_libuv was
    # requested but PyTorch was build without libuv support"). The store only
    # carries the rendezvous, so the classic backend costs the training nothing;
    # PyTorch 1.13 ignores the variable.
    os.environ.setdefault("USE_LIBUV", "0")

    if args.probe:
        return _probe()
    import torch
    import torch.distributed as dist
    if args.dist_backend == "nccl" or args.device != "cpu":
        if not torch.cuda.is_available() or not dist.is_nccl_available():
            print(f"{PROG}: --dist_backend={args.dist_backend} "
                  f"--device={args.device}: no CUDA device is usable (this "
                  f"PyTorch {torch.__version__} has no CUDA or NCCL, or no GPU "
                  "is visible); train with --device=cpu --dist_backend=gloo",
                  file=sys.stderr)
            return 2
    wire = WIRE_DTYPES.get(args.comm_hook)
    if (wire and args.dist_backend == "gloo"
            and not _gloo_allreduces(wire)):
        print(f"{PROG}: --comm_hook={args.comm_hook}: the Gloo of this "
              f"PyTorch {torch.__version__} cannot allreduce {wire} tensors "
              "(\"Invalid scalar type\"); use --dist_backend=nccl, or "
              "another hook", file=sys.stderr)
        return 2
    if args.model == "resnet18":
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            print(f"{PROG}: --model=resnet18 needs torchvision "
                  f"(apt-get install python3-torchvision): {e}",
                  file=sys.stderr)
            return 2
    try:
        return main_worker(args, sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: [rank {rank}] interrupted", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- any failure: exit 1, rank named
        print(f"{PROG}: [rank {rank}] {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
