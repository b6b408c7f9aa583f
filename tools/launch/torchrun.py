"""torchrun with the workarounds Debian's PyTorch needs, then torchrun itself
(torch.distributed.run.main), unchanged otherwise:

  /usr/bin/python3 tools/launch/torchrun.py --nproc_per_node=2 --no_python \
      bazel-bin/trainer/train --epochs=1

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
import re
import sys

import torch
import torch.distributed as dist

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
