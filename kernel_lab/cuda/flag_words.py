"""The chunk kernels' flagged words, kept per stream and reused from launch to launch.

The chunk kernels (forward kinds chunks / chunks_reg, the backwards' chunks:
cuda_src/chunk_sync.cuh) meet
a row's partial results in global memory: each chunk stores a 64-bit word - its fp32 value in the
low half, the launch's *epoch* in the high half - and the row's CTAs wait until every word of the
row carries that epoch. A buffer zeroed for every launch (``torch.zeros``: a fill kernel in the
stream before each call) would do with epoch 1; here each (device, stream) keeps one buffer and
each launch takes the next epoch, so words left by earlier launches read as "not yet in" and no
fill runs between calls.

- Launches on one stream run in order, so a launch never sees a later one's words; launches on
  other streams have their own buffers.
- A fresh buffer (first use, too small, or after 2^32 - 1 epochs) is zeroed once: no word
  carries epoch 0, the first epoch is 1.
- While a CUDA graph is being captured the launch gets a zeroed buffer of its own and epoch 1:
  a replay repeats the captured fill, where a kept epoch would be stale on the second replay.
- ``REUSE = False`` zeroes a buffer for every launch (the former behaviour; the A/B baseline).
- Threads that launch on one stream (the autograd engine's and the caller's) take their epochs
  under a lock: two launches never share one.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

# False: a zeroed buffer for every launch (epoch 1), as before the buffers were kept
REUSE = True
# the largest epoch: a 32-bit word's high half, 0 reserved for "never written"
EPOCH_LIMIT = 2**32 - 1

# (device index, stream handle) -> [buffer, the last epoch handed out]
_BUFFERS: dict[tuple[int | None, int], list] = {}
_LOCK = threading.Lock()


def flag_words(count: int, device: torch.device) -> tuple[torch.Tensor, np.uint32]:
    """``count`` int64 words on ``device`` for one chunk-kernel launch on the current stream, and
    the launch's epoch (a kernel ``unsigned``): no word of the buffer carries it yet."""
    if not REUSE or _capturing(device):
        return torch.zeros(count, dtype=torch.int64, device=device), np.uint32(1)
    key = (device.index, _stream_handle(device))
    with _LOCK:
        entry = _BUFFERS.get(key)
        if entry is None or entry[0].numel() < count or entry[1] >= EPOCH_LIMIT:
            # grown to a power of two so that a few row counts do not reallocate on every call
            size = 1 << max(count - 1, 1).bit_length()
            entry = _BUFFERS[key] = [torch.zeros(size, dtype=torch.int64, device=device), 0]
        entry[1] += 1
        return entry[0][:count], np.uint32(entry[1])


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _stream_handle(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def forget() -> None:
    """Drop every kept buffer (tests; the next launch on each stream zeroes a fresh one)."""
    _BUFFERS.clear()
