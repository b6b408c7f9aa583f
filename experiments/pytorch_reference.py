#!/usr/bin/python3
"""The training of //trainer:train, written in Python with PyTorch.

The reference users compare our C++ trainer against: the same data, model,
optimizer, schedule, sampler and measurements, done the way a PyTorch user
does them (torch.distributed + DistributedDataParallel, a TensorDataset behind
a DistributedSampler and a DataLoader). It writes --metrics_json in our
trainer's format (trainer/run_metrics.cc, "dtrain.metrics.v1"), plus
"implementation": "pytorch <version>", so the experiment tools read both.

    # one process (world size 1, still wrapped in DDP as ours is)
    experiments/pytorch_reference.py --metrics_json=/tmp/py.json
    # two ranks under our launcher (or torchrun)
    bazel-bin/tools/launch/launch --nproc_per_node=2 --master_port=29511 -- \\
        experiments/pytorch_reference.py --batch_size=64

Needs Debian's python3-torch (PyTorch 1.13 on Debian 12, 2.6 on Debian 13) and
python3-torchvision (for --model=resnet18): run it with /usr/bin/python3.

    # what this Python torch can do, as one JSON line (the scaling sweep
    # asks before planning PyTorch's NCCL runs)
    experiments/pytorch_reference.py --probe

Exit status: 0 when training finished, 1 when it failed (the message names
the rank), 2 for bad flags.
"""

import time

# Before anything else, torch's import included: startup_seconds counts from
# here, as ours counts from the start of main().
_START = time.time()

import argparse  # noqa: E402
import bisect  # noqa: E402
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
# trainer/run_metrics.cc StepHistogramBounds().
STEP_HISTOGRAM_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                         0.5, 1.0, 2.5, 5.0, 10.0]


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
         help="sgd or adadelta (default: adadelta for convnet, sgd for "
         "resnet18).")
    flag("lr", type=float, default=None,
         help="Learning rate (default 0.5 for adadelta, 0.1 for sgd).")
    flag("momentum", type=float, default=None,
         help="SGD momentum (default 0.9).")
    flag("weight_decay", type=float, default=None,
         help="Weight decay (default 1e-4 for sgd, 0 for adadelta).")
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
    bool_flag("sync_gradients",
              "false: no gradient averaging (every step under no_sync(); "
              "the no-communication bound, not a way to train).")
    p.set_defaults(sync_gradients=True)
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
    if o.lr is None:
        o.lr = 0.1 if sgd else 0.5
    if o.momentum is None:
        o.momentum = 0.9 if sgd else 0.0
    if o.weight_decay is None:
        o.weight_decay = 1e-4 if sgd else 0.0
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
    if o.optimizer not in ("sgd", "adadelta"):
        bad("optimizer",
            f"unknown optimizer '{o.optimizer}'; known: adadelta, sgd")
    if not (o.lr > 0) or not math.isfinite(o.lr):
        bad("lr", "must be a finite number > 0")
    if not (0 <= o.momentum < 1):
        bad("momentum", "must be in [0, 1)")
    if o.optimizer == "adadelta" and o.momentum != 0:
        bad("momentum", "Adadelta has no momentum; leave it unset")
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


def _read_idx(directory, name, np):
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


def _load_split(directory, train, np, torch):
    prefix = "train" if train else "t10k"
    images = _read_idx(directory, f"{prefix}-images-idx3-ubyte", np)
    labels = _read_idx(directory, f"{prefix}-labels-idx1-ubyte", np)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{directory}: {prefix} images {images.shape} and "
                         f"labels {labels.shape} do not match")
    if labels.size and labels.max() >= 10:
        raise ValueError(f"{directory}: {prefix} label {labels.max()} is not "
                         "in [0, 10)")
    x = torch.from_numpy(images.copy()).unsqueeze(1)  # [N, 1, H, W] uint8
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def _prepare(images, o, torch, F):
    """The deterministic transforms, once over the whole split, as our loader
    precomputes them: Resize (uint8 -> uint8, rounded half to even like
    torchvision), grayscale to 3 channels for ResNet-18, ToTensor's /255 and
    Normalize (torchvision's float32 sub_ then div_)."""
    if o.image_size is not None and tuple(images.shape[2:]) != (
            o.image_size, o.image_size):
        chunks = []
        for chunk in images.split(1024):  # bounds the float temporaries
            resized = F.interpolate(chunk.float(),
                                    size=(o.image_size, o.image_size),
                                    mode="bilinear", align_corners=False,
                                    antialias=False)
            chunks.append(resized.round_().clamp_(0, 255).to(torch.uint8))
        images = torch.cat(chunks) if chunks else images.new_empty(
            (0, images.shape[1], o.image_size, o.image_size))
    mean, std = STATS[o.dataset]
    x = images.to(torch.float32).div_(255)
    x.sub_(torch.tensor([mean], dtype=torch.float32).view(1, -1, 1, 1))
    x.div_(torch.tensor([std], dtype=torch.float32).view(1, -1, 1, 1))
    if o.model == "resnet18" and x.shape[1] == 1:
        # The same values per channel as normalising the repeated bytes.
        x = x.repeat(1, 3, 1, 1)
    return x


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


def _make_model(o, in_channels, image_size, torch, nn, F):
    if o.model == "convnet":
        if image_size < 6:
            raise ValueError(f"ConvNet: image_size must be at least 6, got "
                             f"{image_size}")
        return _convnet_class(torch, nn, F)(in_channels, 10, image_size)
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    if o.small_input_stem:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1,
                                bias=False)
        # torchvision initialises its convolutions this way in __init__; the
        # replacement gets the same (our models/resnet.cc does too).
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out",
                                nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


# --- Helpers -----------------------------------------------------------------


class AverageMeter:
    """The tutorials' AverageMeter (trainer/meters.h)."""

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


def _topk_correct(output, labels, ks, torch):
    """Correct counts for each k (trainer/meters.cc TopKCorrect)."""
    with torch.no_grad():
        if output.shape[0] == 0:
            return [0 for _ in ks]
        classes = output.shape[1]
        max_k = max(1, max(min(k, classes) for k in ks))
        _, top = output.topk(max_k, 1, True, True)
        hits = top.eq(labels.view(-1, 1))
        return [int(hits[:, :max(1, min(k, classes))].sum().item())
                for k in ks]


def _percentile(values, p):
    """numpy's default (linear) percentile, as trainer/meters.cc."""
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


# --- Training ----------------------------------------------------------------


def train(o, log):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(o.intra_op_threads)
    _set_blas_threads(o.intra_op_threads)

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    rank0 = rank == 0

    def say(line):
        if rank0:
            print(line, file=log, flush=True)

    if o.device == "cpu":
        device = torch.device("cpu")
    else:
        index = local_rank if o.device == "cuda" else int(o.device[5:])
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"--device={o.device}: device {index} "
                               f"requested (local rank {local_rank}) but only "
                               f"{torch.cuda.device_count()} visible")
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)

    init = {"backend": o.dist_backend, "init_method": o.dist_url,
            "timeout": datetime.timedelta(seconds=o.timeout)}
    if not o.dist_url.startswith("env://"):
        init.update(rank=rank, world_size=world_size)
    dist.init_process_group(**init)
    try:
        result = _train_in_group(o, log, say, rank, world_size, rank0, device,
                                 np, torch, dist, nn, F,
                                 DistributedDataParallel, DataLoader,
                                 TensorDataset, DistributedSampler)
        # Ranks that never synchronised (--sync_gradients=false) finish apart;
        # without this, rank 0 (which serves the store) can leave while another
        # is still tearing down its Gloo group, which PyTorch 2.6 answers with
        # std::terminate.
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


def _train_in_group(o, log, say, rank, world_size, rank0, device, np, torch,
                    dist, nn, F, DistributedDataParallel, DataLoader,
                    TensorDataset, DistributedSampler):
    # Data: both splits decoded and transformed once, every rank the whole
    # set; the sampler picks each rank's share.
    directory = o.data_dir or FASHION_MNIST_DIR
    train_x, train_y = _load_split(directory, True, np, torch)
    val_x, val_y = _load_split(directory, False, np, torch)
    if o.train_limit is not None:
        train_x, train_y = train_x[:o.train_limit], train_y[:o.train_limit]
    if o.val_limit is not None:
        val_x, val_y = val_x[:o.val_limit], val_y[:o.val_limit]
    train_x = _prepare(train_x, o, torch, F)
    val_x = _prepare(val_x, o, torch, F)
    shape = tuple(train_x.shape[1:])
    description = (f"{o.dataset} from {directory}: {len(train_y)} train, "
                   f"{len(val_y)} test, {shape[0]}x{shape[1]}x{shape[2]}")
    say(f"data: {description}")

    # Every rank builds the same initial weights (DDP broadcasts rank 0's
    # anyway).
    torch.manual_seed(o.seed)
    model = _make_model(o, shape[0], shape[1], torch, nn, F).to(device)
    # Dropout draws differ between ranks, as ours (seeded per rank and step).
    torch.manual_seed(o.seed + rank)
    parameters = sum(p.numel() for p in model.parameters())
    if o.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=o.lr,
                                    momentum=o.momentum,
                                    weight_decay=o.weight_decay)
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=o.lr,
                                         weight_decay=o.weight_decay)

    pin = device.type == "cuda"
    train_set = TensorDataset(train_x, train_y)
    val_set = TensorDataset(val_x, val_y)
    train_sampler = DistributedSampler(train_set, num_replicas=world_size,
                                       rank=rank, shuffle=True, seed=o.seed,
                                       drop_last=False)
    val_sampler = DistributedSampler(val_set, num_replicas=world_size,
                                     rank=rank, shuffle=False, drop_last=False)
    train_loader = DataLoader(train_set, batch_size=o.batch_size,
                              sampler=train_sampler, num_workers=o.workers,
                              pin_memory=pin)
    val_loader = DataLoader(val_set, batch_size=o.batch_size,
                            sampler=val_sampler, num_workers=o.workers,
                            pin_memory=pin)

    # Without gradient sync nothing else communicates either (as ours).
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=o.bucket_cap_mb, broadcast_buffers=o.sync_gradients)
    say(f"{o.model}: {parameters} parameters, {device}, world size "
        f"{world_size} ({o.dist_backend}), batch {o.batch_size} per process "
        f"(global {o.batch_size * world_size}), bucket cap "
        f"{o.bucket_cap_mb:g} MiB"
        + ("" if o.sync_gradients
           else ", gradient sync OFF (no-communication bound)"))

    config = {
        "model": o.model,
        "small_input_stem": o.small_input_stem,
        "dataset": o.dataset,
        "data_dir": o.data_dir,
        "image_size": o.image_size,
        "train_limit": o.train_limit,
        "val_limit": o.val_limit,
        "batch_size": o.batch_size,
        "workers": o.workers,
        "epochs": o.epochs,
        "max_steps": o.max_steps,
        "optimizer": o.optimizer,
        "lr": float(o.lr),
        "momentum": float(o.momentum),
        "weight_decay": float(o.weight_decay),
        "lr_step_epochs": o.lr_step_epochs,
        "lr_gamma": float(o.lr_gamma),
        "seed": o.seed,
        "dist_backend": o.dist_backend,
        "dist_url": o.dist_url,
        "device": o.device,
        "bucket_cap_mb": float(o.bucket_cap_mb),
        "sync_gradients": o.sync_gradients,
        "intra_op_threads": o.intra_op_threads,
        "timeout_seconds": float(o.timeout),
        "world_size": world_size,
    }
    state = {"global_step": 0, "best_top1": 0.0, "startup_seconds": 0.0,
             "epochs": []}

    def write_metrics():
        if not rank0 or not o.metrics_json:
            return
        _write_json_atomically(o.metrics_json, {
            "format": "dtrain.metrics.v1",
            "implementation": "pytorch " + torch.__version__,
            "config": config,
            "backend": o.dist_backend,
            "device": str(device),
            "data": description,
            "parameters": parameters,
            "epochs": state["epochs"],
            "best_top1": state["best_top1"],
            "global_step": state["global_step"],
            "resumed_from": "",
            "startup_seconds": state["startup_seconds"],
            "wall_seconds": time.time() - _START,
        })

    def all_reduce(values, op):
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return t.tolist()

    def train_epoch(epoch):
        ddp.train()
        batch_time, data_time = AverageMeter(), AverageMeter()
        loss_meter, top1, top5 = AverageMeter(), AverageMeter(), AverageMeter()
        step_seconds = []
        correct1 = correct5 = examples = 0
        loss_sum = 0.0
        limit = (o.max_steps - state["global_step"] if o.max_steps > 0
                 else len(train_loader))
        batches = min(len(train_loader), limit)
        lines = rank0 and o.progress != "none"
        epoch_start = time.perf_counter()
        end = epoch_start
        b = -1
        for b, (images, labels) in enumerate(train_loader):
            got = time.perf_counter()
            data_time.update(got - end)
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            n = labels.shape[0]

            optimizer.zero_grad()
            if o.sync_gradients:
                output = ddp(images)
                loss = F.cross_entropy(output, labels)
                loss.backward()
            else:
                with ddp.no_sync():
                    output = ddp(images)
                    loss = F.cross_entropy(output, labels)
                    loss.backward()
            optimizer.step()
            state["global_step"] += 1
            if not state["startup_seconds"]:
                state["startup_seconds"] = time.time() - _START

            loss_value = loss.item()
            c1, c5 = _topk_correct(output, labels, (1, 5), torch)
            loss_sum += loss_value * n
            correct1 += c1
            correct5 += c5
            examples += n
            loss_meter.update(loss_value, n)
            top1.update(100.0 * c1 / n, n)
            top5.update(100.0 * c5 / n, n)
            now = time.perf_counter()
            batch_time.update(now - end)
            step_seconds.append(now - got)
            end = now
            if lines and (b % o.print_freq == 0 or b + 1 == batches):
                rate = examples * world_size / (now - epoch_start)
                print(f"Epoch: [{epoch}][{b}/{batches}]  "
                      f"Time {batch_time.last:.3f} ({batch_time.avg:.3f})  "
                      f"Data {data_time.last:.3f} ({data_time.avg:.3f})  "
                      f"Loss {loss_meter.last:.4f} ({loss_meter.avg:.4f})  "
                      f"Prec@1 {top1.last:.3f} ({top1.avg:.3f})  "
                      f"Prec@5 {top5.last:.3f} ({top5.avg:.3f})  "
                      f"{_thousands(rate)} samples/s", file=log, flush=True)
            if b + 1 >= batches:
                break
        stopped = (o.max_steps > 0 and state["global_step"] >= o.max_steps
                   and b + 1 < len(train_loader))
        seconds = end - epoch_start

        # PyTorch's DDP overlaps its allreduces with backward inside C++ and
        # does not expose how long a step waited for them: not measurable
        # from outside, so 0 (ours measures it in dist/ddp).
        exposed = 0.0
        sums = all_reduce([loss_sum, correct1, correct5, examples],
                          dist.ReduceOp.SUM)
        maxima = all_reduce([seconds, data_time.sum, exposed],
                            dist.ReduceOp.MAX)
        total = max(1.0, sums[3])
        step_sum = 0.0
        for s in step_seconds:
            step_sum += s
        m = {
            "epoch": epoch,
            "steps": len(step_seconds),
            "samples": int(sums[3]),
            "lr": lr_at(epoch),
            "epoch_seconds": maxima[0],
            "samples_per_second": sums[3] / maxima[0] if maxima[0] > 0
            else 0.0,
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
        return m, stopped

    def validate(m):
        start = time.perf_counter()
        net = ddp.module  # no DDP collectives while ranks count differently
        net.eval()
        n_total = len(val_set)
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
                        if rank + (position + j) * world_size < n_total]
                position += count
                if not keep:
                    continue
                if len(keep) < count:
                    index = torch.tensor(keep, dtype=torch.long)
                    images = images.index_select(0, index)
                    labels = labels.index_select(0, index)
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                output = net(images)
                loss_sum += F.cross_entropy(output, labels,
                                            reduction="sum").item()
                c1, c5 = _topk_correct(output, labels, (1, 5), torch)
                correct1 += c1
                correct5 += c5
                examples += labels.shape[0]
        sums = all_reduce([loss_sum, correct1, correct5, examples],
                          dist.ReduceOp.SUM)
        total = max(1.0, sums[3])
        m["val_loss"] = sums[0] / total
        m["val_top1"] = 100.0 * sums[1] / total
        m["val_top5"] = 100.0 * sums[2] / total
        m["val_seconds"] = time.perf_counter() - start
        if int(sums[3]) != n_total:
            raise RuntimeError(f"validation counted {sums[3]} examples, "
                               f"expected {n_total}")

    def lr_at(epoch):
        return o.lr * math.pow(o.lr_gamma, epoch // o.lr_step_epochs)

    for epoch in range(o.epochs):
        if o.max_steps > 0 and state["global_step"] >= o.max_steps:
            break
        train_sampler.set_epoch(epoch)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(epoch)
        say(f"Begin training epoch {epoch + 1}/{o.epochs} "
            f"(lr {lr_at(epoch):g})")
        m, stopped = train_epoch(epoch)
        say(f"epoch {epoch + 1}: loss {m['train_loss']:.4f}  top1 "
            f"{m['train_top1']:.2f}%  top5 {m['train_top5']:.2f}%  "
            f"{m['epoch_seconds']:.1f} s  {m['samples_per_second']:.0f} "
            f"samples/s  (data {m['data_seconds']:.2f} s, exposed "
            "communication not measured)")
        if not o.skip_validation:
            validate(m)
            state["best_top1"] = max(state["best_top1"], m["val_top1"])
            say(f" * validation: loss {m['val_loss']:.4f}  Prec@1 "
                f"{m['val_top1']:.3f}  Prec@5 {m['val_top5']:.3f}  (best "
                f"Prec@1 {state['best_top1']:.3f}, {m['val_seconds']:.1f} s)")
        for key in m:
            if isinstance(m[key], float):
                m[key] = _finite(m[key])
        m["ddp_timeline"] = _ddp_timeline(ddp) if o.sync_gradients else None
        state["epochs"].append(m)
        write_metrics()
        if stopped:
            say(f"stopped at --max_steps={o.max_steps}")
            break
    write_metrics()
    return 0


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


def _probe():
    """Prints {"torch", "cuda", "cuda_devices", "nccl"}: whether this torch
    can run the NCCL comparison (a CPU-only build answers cuda null)."""
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
    }), flush=True)
    return 0


def main(argv):
    try:
        o = _parse_flags(argv)
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
    os.environ.setdefault("OMP_NUM_THREADS", str(o.intra_op_threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(o.intra_op_threads))
    # PyTorch 2.4+ serves env:// and tcp:// stores through libuv by default,
    # and Debian 13's PyTorch 2.6 is built without it ("use_libuv was
    # requested but PyTorch was build without libuv support"). The store only
    # carries the rendezvous, so the classic backend costs the training nothing;
    # PyTorch 1.13 ignores the variable.
    os.environ.setdefault("USE_LIBUV", "0")

    if o.probe:
        return _probe()
    import torch
    import torch.distributed as dist
    if o.dist_backend == "nccl" or o.device != "cpu":
        if not torch.cuda.is_available() or not dist.is_nccl_available():
            print(f"{PROG}: --dist_backend={o.dist_backend} "
                  f"--device={o.device}: no CUDA device is usable (this "
                  f"PyTorch {torch.__version__} has no CUDA or NCCL, or no GPU "
                  "is visible); train with --device=cpu --dist_backend=gloo",
                  file=sys.stderr)
            return 2
    if o.model == "resnet18":
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            print(f"{PROG}: --model=resnet18 needs torchvision "
                  f"(apt-get install python3-torchvision): {e}",
                  file=sys.stderr)
            return 2
    try:
        return train(o, sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: [rank {rank}] interrupted", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- any failure: exit 1, rank named
        print(f"{PROG}: [rank {rank}] {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
