"""The one question the plugin asks specguard: what is stored behind a runtime prefix?

Everything vLLM-independent lives in specguard's stages; this adapter only
turns a (checkpoint, runtime prefix) pair into a ``Stored`` answer, or None
where the disk cannot say (no such module, mixed formats, ambiguous bytes).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from functools import lru_cache

from specguard.formats.scheme import AMBIGUOUS, UNKNOWN, Scheme

log = logging.getLogger("vllm.specguard")


@dataclass(frozen=True)
class Stored:
    """What the checkpoint holds for one runtime module."""

    scheme: Scheme
    role: str  # main, draft, embedding, head
    checkpoint_names: tuple[str, ...]

    @property
    def format(self) -> str:
        return self.scheme.format


def stored(source: str, runtime_prefix: str) -> Stored | None:
    """The stored scheme behind ``runtime_prefix`` in checkpoint ``source``, if the disk says."""
    index = _index(source)
    if index is None:
        return None
    answer = index.lookup(runtime_prefix)
    if answer is None or answer.format in (UNKNOWN, AMBIGUOUS):
        return None
    return answer


@lru_cache(maxsize=16)
def _index(source: str) -> _HeaderIndex | None:
    # One header pass per checkpoint per process; lru_cache is thread-safe for reads,
    # the lock keeps two threads from reading the same headers twice.
    with _open_lock:
        try:
            return _HeaderIndex(source)
        except Exception as exc:  # unreadable checkpoint: keep vLLM's routing, say why once
            log.warning("specguard: cannot read %s (%s); vLLM's routing is kept", source, exc)
            return None


_open_lock = threading.Lock()

# --- temporary: header reading + DeepSeek-V4 naming until specguard.resolve lands ---------

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?=\.|$)")


def layer_index(name: str) -> int | None:
    """The integer after ``layers.`` (``model.layers.43.ffn.experts.12`` -> 43)."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


_RUNTIME = re.compile(r"^(?:model\.)?layers\.(\d+)\.(?:mtp_block\.)?(.+)$")
# Runtime module -> the checkpoint modules vLLM fuses into it.
_FUSED = {
    "ffn.shared_experts.gate_up_proj": ("ffn.shared_experts.w1", "ffn.shared_experts.w3"),
    "ffn.shared_experts.down_proj": ("ffn.shared_experts.w2",),
    "attn.fused_wqa_wkv": ("attn.wq_a", "attn.wkv"),
}


class _HeaderIndex:
    """Modules of one checkpoint classified from headers, looked up by runtime prefix."""

    def __init__(self, source: str) -> None:
        from specguard.checkpoint.source import open_checkpoint
        from specguard.formats.table import classify

        checkpoint = open_checkpoint(source)
        self.modules = {m.name: m.scheme for m in classify(checkpoint)}
        config = checkpoint.config or {}
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        self.num_hidden_layers = int(text.get("num_hidden_layers", 0))  # type: ignore[union-attr]

    def lookup(self, runtime_prefix: str) -> Stored | None:
        m = _RUNTIME.match(runtime_prefix)
        if m is None:
            return None
        index, rest = int(m.group(1)), m.group(2)
        draft = index >= self.num_hidden_layers
        base = f"mtp.{index - self.num_hidden_layers}" if draft else f"layers.{index}"
        names = self._names(base, rest)
        schemes = {self.modules[n] for n in names}
        if not names or len({s.format for s in schemes}) != 1:
            return None
        return Stored(next(iter(schemes)), "draft" if draft else "main", tuple(names))

    def _names(self, base: str, rest: str) -> list[str]:
        if rest == "ffn.experts":
            expert = re.compile(rf"^{re.escape(base)}\.ffn\.experts\.\d+\.w[123]$")
            return [n for n in self.modules if expert.match(n)]
        parts = _FUSED.get(rest, (rest,))
        return [f"{base}.{p}" for p in parts if f"{base}.{p}" in self.modules]
