"""What the extraction costs and how fast it goes: FLOPs per sample, the device's peak,
and the rolling rates reported in progress.json. No torch here: the agent and the tests
import it cheaply.

FLOPs counted are the ones the extraction needs, not the ones a naive run spends:

- the decoder layers that run (up to the deepest layer kept): 2 x their matmul parameters
  per token (q, k, v, o projections and the MLP);
- causal attention: QK^T and AV over the keys each query may see, 2 x n x d_attn per token
  per layer on average for a sample of n tokens (n^2 x d_attn each, halved by causality);
- nothing for the embedding lookup (a gather) and nothing for the LM head (not computed).

MFU is those FLOPs per second over the device's dense bf16 peak.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Optional

from ...contract.units import human_bytes

# Dense bf16 tensor-core peaks (FLOP/s) from NVIDIA's datasheets. The datasheets print the
# "with sparsity" figure; the dense one is half of it (H100 SXM: 1,979 TFLOPS sparse ->
# 989.4 dense). Matched as a substring of the CUDA device name, most specific first.
PEAK_BF16_DENSE: tuple[tuple[str, float, str], ...] = (
    ("H200 NVL", 835.0e12, "NVIDIA H200 NVL datasheet: 1,671 TFLOPS BF16 sparse / 2"),
    ("H200", 989.4e12, "NVIDIA H200 SXM datasheet: 1,979 TFLOPS BF16 sparse / 2"),
    ("H100 NVL", 835.0e12, "NVIDIA H100 NVL datasheet: 1,671 TFLOPS BF16 sparse / 2"),
    ("H100 PCIe", 756.0e12, "NVIDIA H100 PCIe datasheet: 1,513 TFLOPS BF16 sparse / 2"),
    ("H100", 989.4e12, "NVIDIA H100 SXM datasheet: 1,979 TFLOPS BF16 sparse / 2"),
    ("H800", 989.4e12, "NVIDIA H800 SXM: same tensor cores as H100 SXM, 1,979 sparse / 2"),
    ("GH200", 989.4e12, "NVIDIA GH200 datasheet: 1,979 TFLOPS BF16 sparse / 2"),
    ("B200", 2250.0e12, "NVIDIA HGX B200 datasheet: 4.5 PFLOPS BF16 sparse / 2"),
    ("B100", 1750.0e12, "NVIDIA B100 datasheet: 3.5 PFLOPS BF16 sparse / 2"),
    ("A100", 312.0e12, "NVIDIA A100 datasheet: 312 TFLOPS BF16 dense"),
    ("A800", 312.0e12, "NVIDIA A800: A100 tensor cores, 312 TFLOPS BF16 dense"),
    ("L40S", 362.05e12, "NVIDIA L40S datasheet: 733 TFLOPS BF16 sparse / 2"),
    ("L4", 121.0e12, "NVIDIA L4 datasheet: 242 TFLOPS BF16 sparse / 2"),
    ("A10", 125.0e12, "NVIDIA A10 datasheet: 125 TFLOPS BF16 dense"),
)


def peak_flops(device_name: Optional[str], override_tflops: Optional[float] = None
               ) -> tuple[Optional[float], str]:
    """(peak dense bf16 FLOP/s, where the number comes from) for a CUDA device name; None
    when the device is unknown (CPU, a card not in the table) and no override was given."""
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    if not device_name:
        return None, "no device name"
    for key, peak, source in PEAK_BF16_DENSE:
        if key.lower() in device_name.lower():
            return peak, source
    return None, f"{device_name!r} is not in the peak table; pass --peak-tflops"


@dataclass(frozen=True)
class FlopModel:
    """FLOPs of one forward pass up to ``layers_run`` decoder layers."""
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    layers_run: int

    @property
    def matmul_params_per_layer(self) -> int:
        attn = self.hidden * (self.n_heads + 2 * self.n_kv_heads) * self.head_dim \
            + self.n_heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return attn + mlp

    def sample_flops(self, n_tokens: int) -> float:
        """FLOPs for one sample of ``n_tokens`` (padding excluded: it is waste, not work)."""
        d_attn = self.n_heads * self.head_dim
        per_layer = 2.0 * self.matmul_params_per_layer * n_tokens + 2.0 * n_tokens * n_tokens * d_attn
        return per_layer * self.layers_run

    @classmethod
    def from_config(cls, cfg, layers_run: int) -> "FlopModel":
        """From a transformers config (or anything with the same attribute names)."""
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        return cls(hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, n_heads=heads,
                   n_kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
                   head_dim=head_dim, layers_run=layers_run)


@dataclass(frozen=True)
class CountedFlops:
    """FLOPs of one forward pass, counted from the layers that run rather than from a config:
    for decoders whose layers differ (hybrids of linear and full attention).
    ``matmul_params``: the weights of every linear in the layers run; ``attn_width``: the sum
    of heads x head_dim over the full-attention layers among them. A linear-attention layer
    costs its projections; its recurrence is linear in the length and left out."""
    matmul_params: int
    attn_width: int

    def sample_flops(self, n_tokens: int) -> float:
        return 2.0 * self.matmul_params * n_tokens + 2.0 * n_tokens * n_tokens * self.attn_width


class RollingRate:
    """Rates of cumulative counters over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._points: collections.deque[tuple[float, tuple[float, ...]]] = collections.deque()

    def add(self, values: tuple[float, ...], now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        self._points.append((now, values))
        while len(self._points) > 2 and now - self._points[1][0] > self.window_s:
            self._points.popleft()

    def rates(self) -> Optional[tuple[float, ...]]:
        if len(self._points) < 2:
            return None
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        if t1 <= t0:
            return None
        return tuple((b - a) / (t1 - t0) for a, b in zip(v0, v1))


def disk_projection(bytes_written: int, samples_written: int, samples_total: Optional[int],
                    free_bytes: int, est_bytes_per_sample: Optional[float] = None) -> dict:
    """How many more bytes the run will write, against the free space of the output's disk.

    The bytes per sample come from what was written so far, or from ``est_bytes_per_sample``
    (measured on the first samples before any shard closed)."""
    per_sample = (bytes_written / samples_written) if samples_written else est_bytes_per_sample
    out: dict = {"bytes_written": bytes_written, "free_bytes": free_bytes,
                 "projected_total_bytes": None, "projected_remaining_bytes": None, "disk_alert": None}
    if per_sample is None or samples_total is None:
        return out
    remaining = max(0, samples_total - samples_written) * per_sample
    out["projected_total_bytes"] = int(bytes_written + remaining)
    out["projected_remaining_bytes"] = int(remaining)
    if remaining > free_bytes:
        out["disk_alert"] = (f"the output will not fit: {human_bytes(remaining)} more to write "
                             f"({samples_total - samples_written} samples x {human_bytes(per_sample)}), "
                             f"{human_bytes(free_bytes)} free")
    return out
