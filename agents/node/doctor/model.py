"""The model line: the model's path, config and weights, then its fit on the GPUs (fit.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Optional

from ...contract.jobs import JobKind, JobSpec
from ...contract.ops import Check
from ...contract.staging import StageItem
from .base import FAIL, OK, WARN, Thresholds, _job_path, model_of
from .fit import _extract_fit, _sglang_fit
from .gguf_fit import check_gguf
from .sizing import _DTYPE_BYTES


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def read_config(model_dir: Path) -> dict[str, Any]:
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


def staged_source(spec: JobSpec, path: Path) -> Optional[tuple[str, StageItem]]:
    """Where a job's model at ``path`` comes from when one of the job's stages puts it there at
    launch: that stage's ``from`` (for a model inside the staged directory, its part of it), and
    the stage. None for a model no stage makes."""
    for item in spec.stage:
        dest = Path(os.path.normpath(os.path.expanduser(item.dest)))
        try:
            rel = Path(os.path.normpath(path)).relative_to(dest).as_posix()
        except ValueError:
            continue
        part = "" if rel == "." else rel
        if item.from_s3:
            return (item.src.rstrip("/") + "/" + part if part else item.src), item
        src = os.path.expanduser(item.src)
        return (os.path.join(src, part) if part else src), item
    return None


def _model_where(spec: JobSpec, path: Path) -> tuple[Path, str, Optional[Check]]:
    """The directory to read a job's model from, how the line names it, and the line itself
    when there is nothing to read here: a stage's local source is read in place of the copy the
    launch will make; a copy from S3 not made yet is said to be staged, not read from S3."""
    staged = staged_source(spec, path)
    if staged is None:
        return path, str(path), None
    src, item = staged
    if item.from_s3:
        if path.exists():  # a copy a launch made before (doctor never reads S3 for it)
            return path, f"{path} (staged from {src})", None
        return path, str(path), Check("model", OK, f"{path} is staged from {src} at launch: not read from S3 here, "
                                                   f"its fit is not checked until the copy is in place (a doctor "
                                                   f"after the job's launch reads it)", job=spec.name)
    if not os.path.exists(src):
        return path, str(path), Check("model", FAIL, f"the model's source {src}, staged to {path} at launch, does "
                                                     f"not exist", f"copy the model to {src}, or correct the stage's "
                                                     f"from in the fleet file", job=spec.name)
    return Path(src), f"{src} (staged to {path} at launch)", None


def check_model(spec: JobSpec, job_dir: Callable[[str], Path], gpu_totals: list[tuple[str, float]],
                th: Thresholds = Thresholds()) -> Check:
    """The model's path (or the source a stage copies it from at launch), then its weights and
    KV cache against the GPUs the job will use."""
    raw = model_of(spec) or ""
    path, name, said = _model_where(spec, Path(_job_path(raw, spec, job_dir)))
    if said:
        return said
    if not path.exists():
        if spec.kind is not JobKind.LLAMA_SERVER and not raw.startswith(("/", ".", "~")) and _HUB_ID.fullmatch(raw):
            return Check("model", WARN, f"{raw!r} is no directory here: taken as a Hugging Face Hub id, "
                                        f"downloaded at the start (its fit is not checked)",
                         f"download it first (huggingface-cli download {raw} --local-dir DIR) and set "
                         f"model = \"DIR\"", job=spec.name)
        return Check("model", FAIL, f"the model path {path} does not exist",
                     f"copy the model to {path} on the node, or correct model in the fleet file", job=spec.name)
    if spec.kind is JobKind.LLAMA_SERVER:  # a GGUF file
        return check_gguf(spec, path, name, gpu_totals, th)
    if not (path / "config.json").is_file():
        return Check("model", FAIL, f"{name} has no config.json: not a model directory (transformers format)",
                     "point model at the directory that holds config.json and the weights", job=spec.name)
    try:
        cfg = read_config(path)
        weights, source = weight_bytes(path)
    except (OSError, ValueError) as exc:
        return Check("model", FAIL, f"{name}: cannot read its config or weights: {exc}",
                     "check the files' permissions and that the copy is complete", job=spec.name)
    if weights is None:
        return Check("model", FAIL, f"{name}: no weights (no *.safetensors, no pytorch_model*.bin)",
                     "finish copying the model", job=spec.name)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    assumed = []
    if dtype not in _DTYPE_BYTES:
        assumed.append(f"dtype {dtype or 'not given'}: 2 bytes assumed")
    model_b = _DTYPE_BYTES.get(dtype, 2)
    quantized = "quantization_config" in cfg
    if spec.kind is JobKind.EXTRACT:
        return _extract_fit(spec, name, weights, source, model_b, quantized, gpu_totals, assumed)
    return _sglang_fit(spec, name, cfg, weights, source, model_b, gpu_totals, assumed, th)


