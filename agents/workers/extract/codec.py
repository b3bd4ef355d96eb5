"""``--compress``: lossless compression of hidden states as byte planes + zstd (the class
docstring says how and why). The writer threads compress (extract/store.py ShardWriter); the
reader decodes (extract/reader.py)."""

from __future__ import annotations

import functools
import threading
import warnings

import numpy as np

from .layout import DTYPE_SIZES, StoreError


class PlaneCodec:
    """Lossless compression of hidden states, ``byteplanes-zstd/1`` (``--compress``).

    A sample's states ``[n, L*H]`` are split into byte planes laid out ``[itemsize, L, n, H]``
    (plane ``itemsize - 1`` holds each value's most significant byte: the sign and the top
    exponent bits). The lower planes are stored as they are (mantissa bits do not compress);
    the top plane goes through zstd. Grouping it by layer keeps each zstd block within one
    layer's range of exponents. On the issue's Qwen3-shaped model the top plane shrinks to a
    third, the whole sample to about 0.67 of its size, at about 1 GB/s of top plane per core.

    The GPU does the split (a permuting copy, see forward.py ``to_planes``); this class compresses the
    top plane on the writer threads (zstd releases the GIL) and decodes on read."""

    # literal-heavy data: tiny hash tables, no search. Faster than level 1 and a better ratio,
    # because level 1's spurious short matches cost more than the literals they replace.
    PARAMS = dict(window_log=17, chain_log=6, hash_log=6, search_log=1, min_match=7, target_length=0)

    def __init__(self) -> None:
        try:
            import zstandard
        except ImportError:
            raise StoreError("--compress needs the zstandard package (pip install 'gpudeck[extract]')") from None
        self._zstd = zstandard
        self._params = zstandard.ZstdCompressionParameters(strategy=zstandard.STRATEGY_FAST, **self.PARAMS)
        self._local = threading.local()

    def compress(self, data: memoryview) -> bytes:
        c = getattr(self._local, "c", None)
        if c is None:  # a ZstdCompressor is not thread-safe: one per thread
            c = self._local.c = self._zstd.ZstdCompressor(compression_params=self._params)
        return c.compress(data)

    def decompress(self, data, size: int) -> bytes:
        return self._zstd.ZstdDecompressor().decompress(data, max_output_size=size)


def decode_planes(low: np.ndarray, high: np.ndarray, n: int, n_layers: int, dtype: str):
    """The ``[n, L*H]`` torch tensor back from a sample's planes: ``low`` the raw lower
    planes ``[itemsize-1, L, n, H]`` (uint8), ``high`` the zstd frame of the top plane, and
    ``dtype`` the safetensors name of the values' type (BF16, F16, F32)."""
    import torch

    itemsize = DTYPE_SIZES[dtype]
    per_plane = low.size // (itemsize - 1)
    hidden = per_plane // (n * n_layers)
    top = np.frombuffer(plane_codec().decompress(memoryview(np.ascontiguousarray(high)), per_plane), dtype=np.uint8)
    if top.size != per_plane or hidden * n * n_layers != per_plane:
        raise StoreError(f"compressed sample of {n} tokens: {top.size} bytes in the top plane, "
                         f"{per_plane} in each lower one")
    planes = list(low.reshape(itemsize - 1, n_layers, n, hidden)) + [top.reshape(n_layers, n, hidden)]
    as_int = {2: torch.int16, 4: torch.int32}[itemsize]
    with warnings.catch_warnings():  # the decompressed bytes are read-only; they are only read
        warnings.simplefilter("ignore", UserWarning)
        value = torch.from_numpy(planes[0]).to(as_int)
        for p in range(1, itemsize):
            value |= torch.from_numpy(planes[p]).to(as_int) << (8 * p)
    torch_dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[dtype]
    return value.permute(1, 0, 2).reshape(n, n_layers * hidden).view(torch_dtype)


@functools.lru_cache(maxsize=1)
def plane_codec() -> PlaneCodec:
    """The process's codec (its compressors are per thread); StoreError without zstandard."""
    return PlaneCodec()
