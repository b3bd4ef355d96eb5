"""Reading an extraction back: ``open_extract(out_dir).get(sample_id).hidden_states``, over
one output directory or a directory of per-part ones, through their index files;
:func:`read_shard` reads one shard alone.

:class:`Sample` here is a stored sample (token ids, loss mask, hidden states); it shares its
name, and nothing else, with agents/contract/wire.py's ``Sample``, a point of the agent's history.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any, Iterator

from .codec import decode_planes
from .layout import CODEC_PLANES_ZSTD, FORMAT, INDEX, META, StoreError
from .store import read_index


@dataclass
class Sample:
    id: str
    input_ids: Any  # torch.Tensor int64 [n]
    loss_mask: Any  # torch.Tensor bool [n]
    hidden_states: Any  # torch.Tensor [n, len(layers) * hidden]
    layers: list[int]

    def layer(self, layer: int):
        """The hidden states of one of the kept layers, [n, hidden]."""
        j = self.layers.index(layer)
        h = self.hidden_states.shape[-1] // len(self.layers)
        return self.hidden_states[:, j * h:(j + 1) * h]


class ExtractOutput:
    """An extraction's output directory (or a directory of per-part directories) as seen
    through its index files: ``len()``, ``ids()``, ``get(id)``, ``iter_samples()``."""

    def __init__(self, root: str) -> None:
        self.root = root
        dirs = [root] + sorted(d for d in glob.glob(os.path.join(root, "part-*")) if os.path.isdir(d))
        self.dirs = [d for d in dirs if os.path.exists(os.path.join(d, INDEX))]
        if not self.dirs:
            raise StoreError(f"{root}: no {INDEX} here or in part-*/ (not an extraction output?)")
        self.meta = {}
        meta_path = os.path.join(self.dirs[0], META)
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                self.meta = json.load(f)
        self._where: dict[str, tuple[str, int, int]] = {}
        self.shards: list[str] = []
        for d in self.dirs:
            for e in read_index(os.path.join(d, INDEX)):
                path = os.path.join(d, e["shard"])
                self.shards.append(path)
                for k, (i, n) in enumerate(zip(e["ids"], e["n_tokens"])):
                    if i in self._where:
                        raise StoreError(f"sample {i!r} is in two shards: {self._where[i][0]} and {path}")
                    self._where[i] = (path, k, n)

    @property
    def layers(self) -> list[int]:
        return list(self.meta.get("layers", []))

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._where

    def ids(self) -> list[str]:
        return list(self._where)

    def n_tokens(self) -> int:
        return sum(n for _, _, n in self._where.values())

    def get(self, item_id: str) -> Sample:
        path, k, _ = self._where[item_id]
        from safetensors import safe_open
        with safe_open(path, framework="pt") as st:
            return _sample(st, k, item_id, _layers_of(st.metadata()))

    def iter_samples(self) -> Iterator[Sample]:
        for path in self.shards:
            yield from read_shard(path)


def _layers_of(meta: dict) -> list[int]:
    return [int(x) for x in meta["layers"].split(",")]


def _sample(st, k: int, item_id: str, layers: list[int]) -> Sample:
    input_ids = st.get_tensor(f"{k}.input_ids").long()
    meta = st.metadata()
    codec = meta.get("codec")
    if codec is None:
        hidden = st.get_tensor(f"{k}.hidden_states")
    elif codec == CODEC_PLANES_ZSTD:
        hidden = decode_planes(st.get_tensor(f"{k}.hidden_states.low").numpy(),
                               st.get_tensor(f"{k}.hidden_states.high_zstd").numpy(),
                               int(input_ids.shape[0]), len(layers), meta["dtype"])
    else:
        raise StoreError(f"sample {item_id!r}: unknown codec {codec!r} (a newer gpudeck wrote it?)")
    return Sample(id=item_id, input_ids=input_ids, loss_mask=st.get_tensor(f"{k}.loss_mask").bool(),
                  hidden_states=hidden, layers=layers)


def read_shard(path: str) -> Iterator[Sample]:
    """Every sample of one shard, from the shard alone (no index needed)."""
    from safetensors import safe_open
    with safe_open(path, framework="pt") as st:
        meta = st.metadata()
        if meta.get("format") != FORMAT:
            raise StoreError(f"{path}: not a {FORMAT} shard (format {meta.get('format')!r})")
        layers = _layers_of(meta)
        for k, item_id in enumerate(json.loads(meta["ids"])):
            yield _sample(st, k, item_id, layers)


def open_extract(root: str) -> ExtractOutput:
    """The reader: ``open_extract(out_dir).get(sample_id).hidden_states``."""
    return ExtractOutput(root)
