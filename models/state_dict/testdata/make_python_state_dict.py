"""Writes python_state_dict.pt and python_legacy_state_dict.pt (the format
before PyTorch 1.6), the torch_save_test's files from Python's own torch.save: a state_dict-shaped OrderedDict (with `_metadata`, as
Module.state_dict() returns it) holding a transposed view, two views of one
storage, a 0-d int64, a bool and a bfloat16 tensor. Run with Debian's
python3-torch: /usr/bin/python3 make_python_state_dict.py"""
import collections

import torch

base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
sd = collections.OrderedDict()
sd["fc.weight"] = base.t()                 # strides (1, 4): not contiguous
sd["fc.bias"] = base[1]                    # offset 4 into the same storage
sd["bn.num_batches_tracked"] = torch.tensor(7)
sd["mask"] = torch.tensor([True, False, True])
sd["half"] = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
sd._metadata = collections.OrderedDict([("", {"version": 1}),
                                        ("bn", {"version": 2})])
torch.save(sd, "python_state_dict.pt")
torch.save(sd, "python_legacy_state_dict.pt",
           _use_new_zipfile_serialization=False)
