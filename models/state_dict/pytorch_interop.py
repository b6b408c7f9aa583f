"""PyTorch's side of the interop test (pytorch_interop_test.sh), run with
Debian's python3-torch and python3-torchvision (/usr/bin/python3):

  pytorch_interop.py write MODEL DIR     random weights (and batch-norm
      statistics) saved as DIR/w.pt (torch.save) and, where python3-safetensors
      is installed, DIR/w.safetensors; an input DIR/x.pt; the model's
      evaluation-mode output on it, DIR/y_python.pt
  pytorch_interop.py logits MODEL WEIGHTS INPUT OUT
      WEIGHTS (from the project's train) loaded with strict=True, the output
      on INPUT written to OUT
  pytorch_interop.py compare A B         exits 1 unless the two "logits" agree
      to float tolerance

The models are the ones the experiment runner's PyTorch reference trains:
the book's ConvNet (its definition is imported from there) and torchvision's
ResNet-18, for Fashion-MNIST-sized input (1 channel for the ConvNet,
3 for ResNet-18, 28 pixels)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "experiments"))
import pytorch_reference  # noqa: E402

CHANNELS = {"convnet": 1, "resnet18": 3}


def has_safetensors():
    try:
        import safetensors.torch  # noqa: F401
        return True
    except ImportError:
        return False


def make(model):
    if model == "convnet":
        return pytorch_reference._convnet_class(torch, nn, F)(1, 10, 28)
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


def load(path):
    if path.endswith(".safetensors"):
        import safetensors.torch
        return safetensors.torch.load_file(path)
    # weights_only: the restricted unpickler, what a careful user runs.
    return torch.load(path, map_location="cpu", weights_only=True)


def logits(m, x):
    m.eval()
    with torch.no_grad():
        return m(x)


def write(model, directory):
    torch.manual_seed(1)
    m = make(model)
    for name, buf in m.named_buffers():
        # Statistics unlike a fresh model's, so that loading them matters.
        if name.endswith("running_mean"):
            buf.uniform_(-0.5, 0.5)
        elif name.endswith("running_var"):
            buf.uniform_(0.5, 2.0)
        elif name.endswith("num_batches_tracked"):
            buf.fill_(17)
    sd = m.state_dict()
    torch.save(sd, os.path.join(directory, "w.pt"))
    if has_safetensors():
        import safetensors.torch
        safetensors.torch.save_file(
            {k: v.contiguous() for k, v in sd.items()},
            os.path.join(directory, "w.safetensors"))
    x = torch.randn(4, CHANNELS[model], 28, 28)
    torch.save({"input": x}, os.path.join(directory, "x.pt"))
    torch.save({"logits": logits(m, x)},
               os.path.join(directory, "y_python.pt"))


def python_logits(model, weights, input_path, out):
    m = make(model)
    m.load_state_dict(load(weights), strict=True)
    x = load(input_path)["input"]
    torch.save({"logits": logits(m, x)}, out)


def compare(a, b):
    ya, yb = load(a)["logits"], load(b)["logits"]
    if ya.shape != yb.shape:
        print(f"shapes differ: {tuple(ya.shape)} and {tuple(yb.shape)}")
        return 1
    diff = (ya - yb).abs().max().item()
    scale = max(ya.abs().max().item(), 1.0)
    print(f"max |difference| {diff:.3g} (largest logit {scale:.3g})")
    return 0 if diff <= 1e-4 * scale else 1


def main(argv):
    if len(argv) == 4 and argv[1] == "write":
        write(argv[2], argv[3])
        return 0
    if len(argv) == 6 and argv[1] == "logits":
        python_logits(*argv[2:])
        return 0
    if len(argv) == 4 and argv[1] == "compare":
        return compare(argv[2], argv[3])
    if len(argv) == 2 and argv[1] == "has-safetensors":
        return 0 if has_safetensors() else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
