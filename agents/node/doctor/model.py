"""The model line: the model's path, config and weights, then its fit on the GPUs (fit.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional

from ...contract.jobs import JobKind, JobSpec
from ...contract.ops import Check
from .base import FAIL, WARN, Thresholds, _job_path, model_of
from .fit import _extract_fit, _sglang_fit
from .sizing import _DTYPE_BYTES


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def read_config(model_dir: Path) -> dict:
    """config.json, with a multimodal model's ``text_config`` over its top level."""
    cfg = json.loads((model_dir / "config.json").read_text())
    if not isinstance(cfg, dict):
        raise ValueError("config.json is not a JSON object")
    text = cfg.get("text_config")
    return {**cfg, **text} if isinstance(text, dict) else cfg


def weight_bytes(model_dir: Path) -> tuple[Optional[int], str]:
    """The weights' bytes on disk, and where the figure comes from."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
            return int(total), "the safetensors index's total_size"
        except (ValueError, KeyError, TypeError):
            pass
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        files = list(model_dir.glob(pattern))
        if files:
            return sum(f.stat().st_size for f in files), f"the sizes of its {pattern} files"
    return None, ""



def check_model(spec: JobSpec, job_dir: Callable[[str], Path], gpu_totals: list[tuple[str, float]],
                th: Thresholds = Thresholds()) -> Check:
    """The model's path, then its weights and KV cache against the GPUs the job will use."""
    raw = model_of(spec) or ""
    path = Path(_job_path(raw, spec, job_dir))
    if not path.exists():
        if not raw.startswith(("/", ".", "~")) and _HUB_ID.fullmatch(raw):
            return Check("model", WARN, f"{raw!r} is no directory here: taken as a Hugging Face Hub id, "
                                        f"downloaded at the start (its fit is not checked)",
                         f"download it first (huggingface-cli download {raw} --local-dir DIR) and set "
                         f"model = \"DIR\"", job=spec.name)
        return Check("model", FAIL, f"the model path {path} does not exist",
                     f"copy the model to {path} on the node, or correct model in the fleet file", job=spec.name)
    if not (path / "config.json").is_file():
        return Check("model", FAIL, f"{path} has no config.json: not a model directory (transformers format)",
                     "point model at the directory that holds config.json and the weights", job=spec.name)
    try:
        cfg = read_config(path)
        weights, source = weight_bytes(path)
    except (OSError, ValueError) as exc:
        return Check("model", FAIL, f"{path}: cannot read its config or weights: {exc}",
                     "check the files' permissions and that the copy is complete", job=spec.name)
    if weights is None:
        return Check("model", FAIL, f"{path}: no weights (no *.safetensors, no pytorch_model*.bin)",
                     "finish copying the model", job=spec.name)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    assumed = []
    if dtype not in _DTYPE_BYTES:
        assumed.append(f"dtype {dtype or 'not given'}: 2 bytes assumed")
    model_b = _DTYPE_BYTES.get(dtype, 2)
    quantized = "quantization_config" in cfg
    if spec.kind is JobKind.EXTRACT:
        return _extract_fit(spec, path, weights, source, model_b, quantized, gpu_totals, assumed)
    return _sglang_fit(spec, path, cfg, weights, source, model_b, gpu_totals, assumed, th)


