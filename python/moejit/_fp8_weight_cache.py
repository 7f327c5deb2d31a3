"""The FP8 recipe's weight cache for the PyTorch ops (moejit.torch.fp8_weight_cache; the C
ABI's args->weight_cache, docs/DESIGN.md §2.9).

Without it every FP8 call quantizes the weights it reads (forward: per 128x128 block; backward:
transposed). Inside `with moejit.torch.fp8_weight_cache():` the caller promises that no layer's
weights change, which is what the micro-batches of one optimizer step look like: the first call
that meets a layer's weights quantizes both layouts into a cache buffer (FILL), every later call
in the block reads it (USE), forwards and backwards alike. When the block ends the buffers are
dropped, so the next step quantizes its updated weights again.

The block is process-wide, not per thread: autograd runs the backward of CUDA ops on its own
device thread, which must see the block the training loop opened.

What the block cannot see is the caller's to avoid: a write through `.data` or from outside
PyTorch changes the weights without moving their version counter. What it can see, it handles:
a weight changed in place inside the block (its `_version` moved, e.g. an optimizer step taken
inside) is quantized again; an entry holds its weight tensors, so a key (tensor identity and
address) cannot be reused by another tensor while the block lasts; only leaf tensors (parameters)
are cached, so a weight rebuilt on every call (a cast, a gathered copy) is quantized per call
instead of piling up buffers; and a call captured into a CUDA graph quantizes for itself, since a
replay outlives the block and never sees a version move."""

from __future__ import annotations

import contextlib
import threading
from typing import Dict, Iterator, Optional, Tuple

import torch

from . import errors

_lock = threading.Lock()
_entries: Optional[Dict[Tuple, "_Entry"]] = None  # the open block's, else None
# How many calls filled and used a cache, since import (tests and benchmarks read it).
counts = {"fill": 0, "use": 0}


class _Entry:
    """One layer's cache: the buffer, the weights it was filled from (held, so their ids and
    addresses stay theirs) and their versions then."""

    __slots__ = ("buffer", "weights", "versions")

    def __init__(self, buffer: torch.Tensor, weights: Tuple, versions: Tuple) -> None:
        self.buffer = buffer
        self.weights = weights
        self.versions = versions


def _version(w: torch.Tensor) -> Optional[int]:
    try:
        return w._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None


@contextlib.contextmanager
def fp8_weight_cache() -> Iterator[None]:
    """Keeps each FP8 layer's weights quantized across the calls of this block. Use it around
    the micro-batches of one optimizer step, with the optimizer step outside:

        for batches in steps:
            with moejit.torch.fp8_weight_cache():
                for micro in batches:
                    model(micro).loss.backward()
            optimizer.step()

    The block holds, per layer, a buffer of twice its weights' e4m3 bytes (plus scales) until it
    ends. bf16 layers are not affected. One block at a time in the process (blocks do not nest;
    the backward's autograd thread sees the block its training loop opened)."""
    global _entries
    with _lock:
        if _entries is not None:
            raise errors.InvalidArgumentError(
                "moejit.torch.fp8_weight_cache(): a block is already open in this process "
                "(blocks do not nest)")
        _entries = {}
    try:
        yield
    finally:
        with _lock:
            _entries = None


def active() -> bool:
    return _entries is not None


def call_cache(plan, weights: Dict[str, torch.Tensor],
               device: torch.device) -> Tuple[Optional[torch.Tensor], str]:
    """(buffer, mode) for an FP8 call with these weights ({name: tensor}): (None, "none")
    outside a block, for weights that are not leaf tensors, and while a CUDA graph is being
    captured; otherwise ("fill") the first time these tensors are met or after one of them
    changed in place, else ("use")."""
    named = sorted((n, w) for n, w in weights.items() if w is not None)
    if (_entries is None or not all(w.is_leaf for _, w in named)
            or (device.type == "cuda" and torch.cuda.is_current_stream_capturing())):
        return None, "none"
    key = tuple((n, id(w), w.data_ptr(), tuple(w.shape), w.dtype, w.device) for n, w in named)
    versions = tuple(_version(w) for _, w in named)
    with _lock:
        entries = _entries
        if entries is None:
            return None, "none"
        entry = entries.get(key)
        mode = "use"
        if entry is None:  # the key holds id(w) and the entry holds w: a hit is the same tensors
            entry = entries[key] = _Entry(
                torch.empty(plan.weight_cache_size(), dtype=torch.uint8, device=device),
                tuple(w for _, w in named), versions)
            mode = "fill"
        elif entry.versions != versions or None in versions:
            entry.versions = versions  # changed in place (or untracked): quantize again
            mode = "fill"
        counts[mode] += 1
        return entry.buffer, mode
