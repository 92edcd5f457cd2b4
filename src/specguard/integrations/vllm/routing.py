"""The patched ``get_quant_method``: keep vLLM's choice where the disk agrees, else route by disk.

For every routed-expert and linear layer vLLM builds, the wrapper asks vLLM
first (its own rules, unpatched), asks specguard what the checkpoint stores
behind the same runtime prefix, and only when both answers are known and
differ returns the method for the stored format (``fix``) or records the
difference (``log``). Every difference becomes a ``Decision`` for the log.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from specguard.integrations.vllm import disk, methods, safety
from specguard.integrations.vllm.hooks import SOURCE_ATTR
from specguard.integrations.vllm.settings import FIX, current

REKEYED_ATTR = "_specguard_mtp_rekeyed"


@dataclass(frozen=True)
class Decision:
    """One layer where vLLM's choice and the disk disagree."""

    prefix: str  # runtime prefix vLLM passed to get_quant_method
    kind: str  # experts | linear
    role: str  # main | draft
    stored: str  # format on disk
    vllm: str  # format of the method vLLM chose
    routed: str | None  # format of the method returned; None: vLLM's kept
    source: str  # checkpoint the answer came from
    checkpoint_names: tuple[str, ...] = ()
    note: str = ""


class _State(threading.local):
    vanilla = False  # True while asking vLLM's unpatched rules


_state = _State()
_decisions: list[Decision] = []
_decisions_lock = threading.Lock()


def take_decisions() -> list[Decision]:
    """Decisions recorded since the last call (the log drains them after each model load)."""
    with _decisions_lock:
        out = list(_decisions)
        _decisions.clear()
    return out


def _record(decision: Decision) -> None:
    with _decisions_lock:
        _decisions.append(decision)


@contextmanager
def vanilla() -> Iterator[None]:
    """Within this block, patched helpers answer as vLLM 0.33 does."""
    before = _state.vanilla
    _state.vanilla = True
    try:
        yield
    finally:
        _state.vanilla = before


def vllm_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` where ``fn`` is vLLM's own: what it raises is vLLM's, passed through."""
    try:
        return fn(*args)
    except Exception as exc:
        safety.from_vllm(exc)
        raise


def wrap_get_quant_method(original: Callable[..., Any]) -> Callable[..., Any]:
    def get_quant_method(self: Any, layer: Any, prefix: str) -> Any:
        if _state.vanilla:
            return vllm_call(original, self, layer, prefix)
        kind = methods.layer_kind(layer)
        if kind is None or not modelled(self, prefix):
            return vllm_call(original, self, layer, prefix)
        if current().mode == FIX:
            rekey_mtp_entries(self, prefix)
        return route(self, layer, prefix, kind, original)

    return safety.method(f"{_owner(original)}.get_quant_method", get_quant_method, original,
                         _unpatched(original))


def _owner(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", "get_quant_method").rsplit(".", 1)[0]


def _unpatched(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` with every patched helper it calls answering as vLLM does."""

    def call(*args: Any) -> Any:
        with vanilla():
            return original(*args)

    return call


def wrap_is_nvfp4_expert_layer(original: Callable[..., bool]) -> Callable[..., bool]:
    """V4.1's NVFP4-or-MXFP4 switch for expert layers, answered by the disk in ``fix`` mode."""

    def _is_nvfp4_expert_layer(self: Any, prefix: str) -> bool:
        if _state.vanilla or current().mode != FIX:
            return vllm_call(original, self, prefix)
        source = checkpoint_of(self)
        answer = disk.stored(source, prefix, draft_method()) if source else None
        if answer is not None and answer.format in ("nvfp4", "mxfp4") and modelled(self, prefix):
            return answer.format == "nvfp4"
        return vllm_call(original, self, prefix)

    return safety.method(f"{_owner(original)}._is_nvfp4_expert_layer", _is_nvfp4_expert_layer, original,
                         _unpatched(original))


def modelled(config: Any, prefix: str) -> bool:
    """Does specguard model what vLLM builds at ``prefix`` (a recorded plan of the architecture,
    a model of the quant stack)? Where not, the plugin guessing could turn a correctly routed
    model into a wrong one: vLLM's own routing stands, said once per checkpoint and cause."""
    source = checkpoint_of(config)
    answer = disk.stored(source, prefix, draft_method()) if source else None
    if answer is None or not answer.unmodelled:
        return True
    key = f"{source}|{answer.unmodelled}"
    with _unmodelled_lock:
        first = key not in _unmodelled
        _unmodelled.add(key)
    if first:
        safety.log.warning("specguard: %s: %s; the plugin leaves this model's routing to vLLM", source,
                           answer.unmodelled)
    return False


_unmodelled: set[str] = set()
_unmodelled_lock = threading.Lock()


def route(config: Any, layer: Any, prefix: str, kind: str, original: Callable[..., Any]) -> Any:
    """vLLM's method for ``layer`` unless the disk stores another format (see module doc)."""
    source = checkpoint_of(config) or ""
    answer = disk.stored(source, prefix, draft_method()) if source else None
    try:
        with vanilla():
            chosen = original(config, layer, prefix)
    except Exception as exc:
        # vLLM's own choice cannot even be built here (e.g. no kernel for it on this
        # device); route by the disk when it can, else fail as vLLM would.
        safety.from_vllm(exc)
        if answer is None or current().mode != FIX:
            raise
        note = f"vLLM's own method failed: {type(exc).__name__}: {exc}"
        replacement = _replace(config, layer, prefix, kind, answer, "?", source, note)
        if replacement is None:
            raise
        return replacement
    if answer is None:
        return chosen
    vllm_format = methods.built_format(chosen, layer)
    if vllm_format is None or methods.family(answer.format) == methods.family(vllm_format):
        return chosen
    if current().mode != FIX:
        _record(_decision(prefix, kind, answer, vllm_format, None, source, "SPECGUARD_VLLM=log"))
        return chosen
    replacement = _replace(config, layer, prefix, kind, answer, vllm_format, source)
    return chosen if replacement is None else replacement


def _replace(
    config: Any, layer: Any, prefix: str, kind: str, answer: disk.Stored, vllm_format: str,
    source: str, note: str = "",
) -> Any | None:
    method = methods.build_method(answer.scheme, kind, config, layer, prefix)
    if method is None:
        _record(_decision(prefix, kind, answer, vllm_format, None, source, "no vLLM method for it"))
        return None
    if getattr(layer, "scheme", None) is not None and type(method).__name__.startswith("Unquantized"):
        del layer.scheme  # compressed-tensors tags the layer with the scheme it chose
    routed = methods.built_format(method, layer)
    _record(_decision(prefix, kind, answer, vllm_format, routed, source, note))
    return method


def _decision(
    prefix: str, kind: str, answer: disk.Stored, vllm_format: str, routed: str | None, source: str,
    note: str = "",
) -> Decision:
    return Decision(
        prefix, kind, answer.role, answer.format, vllm_format, routed, source,
        answer.checkpoint_names, note,
    )


def checkpoint_of(config: Any) -> str | None:
    """The checkpoint a quant config was built from: its tag, else the model being loaded."""
    tagged = getattr(config, SOURCE_ATTR, None)
    if tagged:
        return str(tagged)
    vllm_config = _current_vllm_config()
    model_config = getattr(vllm_config, "model_config", None)
    model = getattr(model_config, "model", None)
    return str(model) if model else None


def draft_method() -> str | None:
    """``mtp`` or ``dspark`` when vLLM serves such a draft (the layouts' names for them)."""
    spec = getattr(_current_vllm_config(), "speculative_config", None)
    method = str(getattr(spec, "method", "") or "").lower()
    if "dspark" in method:
        return "dspark"
    return "mtp" if "mtp" in method else None


def rekey_mtp_entries(config: Any, prefix: str) -> None:
    """Re-key ``mtp.{i}.`` ignore entries onto ``model.layers.{N+i}.`` once per config.

    vLLM 0.33 does this (``align_mtp_quant_config``) only when it builds the MTP
    draft on ROCm, 0.32 nowhere; elsewhere such entries never match a runtime prefix. The
    root follows the first draft prefix vLLM builds (DSpark builds may have none).
    Wildcards (``mtp.*``) stay as they are: vLLM matches these lists exactly.
    """
    if getattr(config, REKEYED_ATTR, False) or not hasattr(config, "apply_vllm_mapper"):
        return
    from vllm.platforms import current_platform

    if current_platform.is_rocm() and _realigns_on_rocm():
        return  # vLLM's ROCm MTP model re-keys the entries itself (0.33; 0.32 does not)
    hf_config = _hf_text_config()
    n = getattr(hf_config, "num_hidden_layers", None)
    if n is None or not _is_draft_prefix(prefix, n):
        return
    from vllm.model_executor.models.utils import WeightsMapper

    drafts = max(int(getattr(hf_config, "num_nextn_predict_layers", 0) or 0),
                 int(getattr(hf_config, "n_mtp_layers", 0) or 0), 1)
    root = "" if prefix.startswith("layers.") else "model."
    mapping: dict[str, str | None] = {}
    for i in range(drafts):
        mapping[f"model.mtp.{i}."] = f"{root}layers.{n + i}."
        mapping[f"mtp.{i}."] = f"{root}layers.{n + i}."
    config.apply_vllm_mapper(WeightsMapper(orig_to_new_prefix=mapping))
    setattr(config, REKEYED_ATTR, True)


def _realigns_on_rocm() -> bool:
    from specguard.engines.registry import engine
    from specguard.integrations.vllm.settings import running_engine

    return bool(getattr(engine(running_engine()).model, "realigns_mtp_on_rocm", True))


def _is_draft_prefix(prefix: str, num_hidden_layers: int) -> bool:
    from specguard.layouts.names import layer_index

    index = layer_index(prefix)
    return index is not None and index >= num_hidden_layers


def _current_vllm_config() -> Any:
    from vllm.config import get_current_vllm_config_or_none

    return get_current_vllm_config_or_none()


def _hf_text_config() -> Any:
    model_config = getattr(_current_vllm_config(), "model_config", None)
    return getattr(model_config, "hf_text_config", None) if model_config is not None else None
