"""The start-up caches: where Triton's compiled kernels (and its autotuning results) and
torch.compile's FX graph and AOT autograd caches live, so that a restart on the same node
(the watcher's restart, a requeue, a move back) loads them instead of compiling again.

Layout, under ``--cache-dir`` (default ``$GPUDECK_HOME/cache/compile``, else
``~/.gpudeck/cache/compile``)::

    <cache-dir>/<model_type>-<dtype>-<key>/
        key.json     what the key was made of (for a human)
        triton/      TRITON_CACHE_DIR
        inductor/    TORCHINDUCTOR_CACHE_DIR (FX graphs, AOT autograd entries, inductor's kernels)

The key hashes what decides which kernels get built: the model's shape (architecture,
hidden size, layers, heads, head dims, vocab, the linear-attention dims, the layer types),
the dtype, torch's and Triton's versions and the GPU (name, compute capability). The
caches are content-addressed inside too, so a wrong key would only cost disk; the key keeps
one model's entries away from another's and lets an old torch's be deleted whole.

The environment is set before anything compiles or Triton makes its first kernel (run.py
calls :func:`use` after CUDA is up, before the model loads: loading imports the kernel
packages). A variable the operator set (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``)
wins over ours, and is said so in the log. No torch at import: the key is testable on any
machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Mapping, Optional

log = logging.getLogger("gpudeck.extract")

FORMAT = 1  # bumped when what goes into the key changes
OFF = ("off", "none", "")  # --cache-dir off: torch's and Triton's own defaults

# the config fields that decide the kernels' shapes (absent ones are left out of the key)
SHAPE_FIELDS = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "layer_types",
                "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                "linear_conv_kernel_dim", "partial_rotary_factor", "attention_bias", "mlp_bias", "hidden_act",
                "tie_word_embeddings", "sliding_window", "use_sliding_window")


def default_root() -> str:
    """``$GPUDECK_HOME/cache/compile``, else ``~/.gpudeck/cache/compile`` (the node's gpudeck home)."""
    home = os.environ.get("GPUDECK_HOME") or os.path.join(os.path.expanduser("~"), ".gpudeck")
    return os.path.join(home, "cache", "compile")


def shape_of(config: Any) -> dict[str, Any]:
    """The fields of a model config (a transformers config, or config.json as a dict) that go
    into the key; a multimodal config's ``text_config`` is the one that counts."""
    if not isinstance(config, Mapping):
        config = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    text = config.get("text_config")
    if isinstance(text, Mapping):
        config = {**text, "architectures": config.get("architectures")}
    out = {}
    for name in SHAPE_FIELDS:
        value = config.get(name)
        if value is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def installed_version(*names: str) -> Optional[str]:
    """The first of these distributions that is installed, as name==version (no import)."""
    for name in names:
        try:
            return f"{name}=={metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


@dataclass(frozen=True)
class CacheKey:
    shape: dict[str, Any]
    dtype: str
    torch: Optional[str]
    triton: Optional[str]
    gpu: Optional[str]  # the device's name, "cpu" for none
    capability: Optional[str]  # "9.0"

    def inputs(self) -> dict[str, Any]:
        return {"format": FORMAT, "shape": self.shape, "dtype": canonical_dtype(self.dtype), "torch": self.torch,
                "triton": self.triton, "gpu": self.gpu, "capability": self.capability}

    @property
    def digest(self) -> str:
        text = json.dumps(self.inputs(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """The directory's name: readable, then the digest (``qwen3-bfloat16-1f0c...``)."""
        mtype = "".join(c if c.isalnum() or c in "_." else "_" for c in str(self.shape.get("model_type", "model")))
        return f"{mtype}-{canonical_dtype(self.dtype)}-{self.digest}"


def canonical_dtype(name: str) -> str:
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(name, name)


def key_for(config: Any, dtype: str, gpu: Optional[str], capability: Optional[str]) -> CacheKey:
    """The key of this model in this dtype on this GPU with the installed torch and Triton."""
    return CacheKey(shape=shape_of(config), dtype=dtype, torch=installed_version("torch"),
                    triton=installed_version("triton", "pytorch-triton", "pytorch-triton-rocm"), gpu=gpu,
                    capability=capability)


@dataclass(frozen=True)
class CacheDirs:
    """Where this run's caches are, and whether they held anything when it started."""
    root: str  # <cache-dir>/<name>
    triton: str
    inductor: str
    warm: bool  # entries were there already: a restart on this node
    ours: tuple[str, ...]  # the variables we set (one the operator set is left alone)

    def to_json(self) -> dict[str, Any]:
        return {"dir": self.root, "warm": self.warm}


def dirs_for(base: str, key: CacheKey) -> CacheDirs:
    root = os.path.join(os.path.expanduser(base), key.name)
    triton, inductor = os.path.join(root, "triton"), os.path.join(root, "inductor")
    warm = any(_nonempty(d) for d in (triton, inductor))
    return CacheDirs(root=root, triton=triton, inductor=inductor, warm=warm, ours=())


def _nonempty(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except OSError:
        return False


def use(base: Optional[str], key: CacheKey, environ: Optional[dict] = None) -> Optional[CacheDirs]:
    """Point Triton and inductor at the key's directories (made if needed) and switch on the
    FX graph and AOT autograd caches and Triton's autotuning cache; None with ``--cache-dir
    off``. ``environ``: os.environ unless given (tests)."""
    env = os.environ if environ is None else environ
    if base is not None and base.strip().lower() in OFF:
        return None
    d = dirs_for(base or default_root(), key)
    ours = []
    for var, path in (("TRITON_CACHE_DIR", d.triton), ("TORCHINDUCTOR_CACHE_DIR", d.inductor)):
        if env.get(var):
            log.info("start-up cache: %s is set (%s); leaving it", var, env[var])
            continue
        os.makedirs(path, exist_ok=True)
        env[var] = path
        ours.append(var)
    # autotuned kernels (the hybrid's flash-linear-attention kernels) keep their best config
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    os.makedirs(d.root, exist_ok=True)
    try:
        with open(os.path.join(d.root, "key.json"), "w") as f:
            json.dump(key.inputs(), f, indent=1, sort_keys=True)
    except OSError as exc:  # a read-only home: the caches still work where they can
        log.warning("start-up cache: cannot write %s: %s", os.path.join(d.root, "key.json"), exc)
    if environ is None:
        _inductor_caches_on()
    log.info("start-up cache: %s (%s)", d.root, "warm: entries from an earlier run" if d.warm else "cold: first run")
    return CacheDirs(root=d.root, triton=d.triton, inductor=d.inductor, warm=d.warm, ours=tuple(ours))


def _inductor_caches_on() -> None:
    """torch.compile's on-disk FX graph and AOT autograd caches (on by default in recent
    torch; said here so that a site config cannot have switched them off)."""
    try:
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config
    except ImportError:  # an old torch: its own defaults
        return
    if hasattr(inductor_config, "fx_graph_cache"):
        inductor_config.fx_graph_cache = True
    if hasattr(functorch_config, "enable_autograd_cache"):
        functorch_config.enable_autograd_cache = True
