"""The ops a block of code runs, seen at the dispatcher: for the tests of which ops the custom
ops' wrappers and backwards call (and which tensors those make)."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DispatchLog(TorchDispatchMode):
    """`with DispatchLog() as log:` records every op dispatched inside the block in `calls`:
    (op name, the shapes of its tensor outputs), in order."""

    def __init__(self):
        super().__init__()
        self.calls = []

    @property
    def names(self):
        return [name for name, _ in self.calls]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.calls.append((str(func), [tuple(o.shape) for o in outs if isinstance(o, torch.Tensor)]))
        return out
