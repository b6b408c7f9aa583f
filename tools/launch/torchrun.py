#!/usr/bin/python3
"""torchrun with the workarounds Debian's PyTorch needs, then torchrun itself
(torch.distributed.run.main), unchanged otherwise:

  tools/launch/torchrun.py --nproc_per_node=2 --no_python \
      bazel-bin/trainer/train --epochs=1

It runs under Debian's /usr/bin/python3 (the line above), whose python3-torch
(installed by tools/setup.sh) it wraps: a `python3` first on PATH from pyenv
or a virtualenv usually has no torch, and `python3 torchrun.py` with one stops
saying so and naming /usr/bin/python3.

- Debian 13 (PyTorch 2.6) is built without libuv, but torchrun's agent
  creates its TCPStore with libuv, the default since PyTorch 2.4, and fails in
  every rendezvous mode with "use_libuv was requested but PyTorch was build
  without libuv support". The agent's stores are made without it here.
- Debian 12 (PyTorch 1.13) on Python 3.11: reading --redirects/--tee fails
  before any worker starts ("'NoneType' object has no attribute 'get'",
  pytorch#92319), since enum iteration no longer yields the zero flag. The
  parsing is done right here.

With a PyTorch built with libuv, on Python <= 3.10, plain torchrun needs
neither."""
import os
import re
import sys

try:
    import torch  # noqa: F401
except ImportError as e:
    _me = os.path.relpath(__file__)
    if _me.startswith(".."):
        _me = os.path.abspath(__file__)
    if sys.executable == "/usr/bin/python3":
        _fix = ("Install Debian's python3-torch (tools/setup.sh does), or run "
                "a torchrun of your own PyTorch")
    else:
        _fix = (f"Run it with Debian's /usr/bin/python3, which has "
                f"python3-torch (installed by tools/setup.sh): {_me} ... "
                f"does so, as does /usr/bin/python3 {_me} ...")
    # Exit status 2, as torchrun's own usage errors.
    sys.stderr.write(f"torchrun.py: {sys.executable} cannot import torch "
                     f"({e}). {_fix}\n")
    sys.exit(2)
import torch.distributed as dist  # noqa: E402

if hasattr(dist, "TCPStore"):
    _TCPStore = dist.TCPStore
    if "use_libuv" in (_TCPStore.__init__.__doc__ or ""):

        class TCPStore(_TCPStore):
            """The agent's store, without libuv unless asked for."""

            def __init__(self, *args, **kwargs):
                kwargs.setdefault("use_libuv", False)
                super().__init__(*args, **kwargs)

        # Before torch.distributed.run imports the rendezvous modules, which
        # bind the name at import.
        dist.TCPStore = TCPStore

from torch.distributed.elastic.multiprocessing import api  # noqa: E402

if not api.Std.from_str("0") is api.Std.NONE:

    def _from_str(cls, vm):
        if re.match(api._VALUE_REGEX, vm):
            return cls(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): cls(int(v))
                    for i, v in (m.split(":") for m in vm.split(","))}
        raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or "
                         f"<{api._MAPPING_REGEX}>")

    api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
