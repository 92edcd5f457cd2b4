"""Around vLLM's model loads: log the routing decisions, guard the draft's weight load.

``BaseModelLoader.load_model`` builds a model and loads its weights; vLLM calls
it once for the target and once per draft model (MTP, DSpark, EAGLE) with the
draft's ``ModelConfig``. The wrapper marks draft loads, so the wrapped
``DefaultModelLoader.load_weights`` runs them under LoadGuard, and logs what the
routing changed once the model is built.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from specguard.integrations.vllm import safety
from specguard.integrations.vllm.settings import FIX, GUARD_ENV, RAISE, current

log = logging.getLogger("vllm.specguard")

_draft_source: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "specguard_draft_source", default=None
)
def emit_decisions() -> list[str]:
    """Log (and return) the lines for every routing decision not logged yet."""
    from specguard.integrations.vllm import report, routing

    out = report.lines(routing.take_decisions())
    for line in out:
        # A corrected layer is news; one left as vLLM built it against the disk is a warning.
        if "-> routed" in line:
            log.info(line)
        else:
            log.warning(line)
    return out


def is_draft_load(vllm_config: Any, model_config: Any) -> bool:
    """vLLM loads a draft with the draft's ModelConfig next to the target's VllmConfig."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or model_config is None:
        return False
    return model_config is getattr(spec, "draft_model_config", None) or (
        model_config is not getattr(vllm_config, "model_config", None)
    )


@contextmanager
def draft_load(source: str | None) -> Iterator[None]:
    """Weight loads inside this block load a draft model (``source``: its checkpoint)."""
    token = _draft_source.set(source)
    try:
        yield
    finally:
        _draft_source.reset(token)


def wrap_load_model(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_model(self: Any, vllm_config: Any, model_config: Any, *args: Any, **kw: Any) -> Any:
        try:
            source = str(model_config.model) if is_draft_load(vllm_config, model_config) else None
        except Exception as exc:
            safety.warn_once("telling the draft load from the target's", exc)
            source = None
        try:
            with draft_load(source):
                return original(self, vllm_config, model_config, *args, **kw)
        finally:
            _emit_safely()

    return load_model


def _emit_safely() -> None:
    try:
        emit_decisions()
    except Exception as exc:
        safety.warn_once("logging the routing decisions", exc)


def wrap_load_weights(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_weights(self: Any, model: Any, model_config: Any, *args: Any, **kw: Any) -> Any:
        settings = current()
        if _draft_source.get() is None or settings.mode != FIX:
            return original(self, model, model_config, *args, **kw)
        _emit_safely()  # the draft is built: say what was routed before loading it
        guard = DraftGuard(model, settings.guard)
        try:
            guard.__enter__()
        except Exception as exc:
            safety.warn_once("LoadGuard around the draft's weight load", exc)
            return original(self, model, model_config, *args, **kw)
        try:
            result = original(self, model, model_config, *args, **kw)
        except BaseException as exc:
            guard.__exit__(type(exc), exc, exc.__traceback__)  # restores; vLLM's exception goes on
            raise
        guard.__exit__(None, None, None)
        return result

    return load_weights


def wrap_filter_files(original: Callable[..., Any]) -> Callable[..., Any]:
    """``filter_duplicate_safetensors_files`` keeps only the files the index names; while a
    draft loads (fix mode), a file the index never names that holds draft tensors no named
    file holds (``model_extra_tensors.safetensors`` of AutoRound exports, SG303) is kept too."""
    @functools.wraps(original)
    def filter_files(hf_weights_files: list[str], hf_folder: str, index_file: str) -> list[str]:
        kept = original(hf_weights_files, hf_folder, index_file)
        if _draft_source.get() is None or current().mode != FIX:
            return kept
        try:
            extra = draft_files_outside_index(hf_folder, hf_weights_files, kept)
        except Exception as exc:
            from specguard.errors import SpecguardError
            from specguard.integrations.vllm import disk

            if isinstance(exc, SpecguardError):  # the checkpoint, not specguard: said once per checkpoint
                disk.say_unreadable(hf_folder, exc)
            else:
                safety.warn_once("reading the draft's files outside the index", exc)
            return kept
        for path, count in extra.items():
            log.info("specguard: reading %s, which the index never names: it stores %d draft tensor(s) "
                     "(SG303)", path, count)
        return [*kept, *extra]

    return filter_files


def draft_files_outside_index(folder: str, files: list[str], kept: list[str]) -> dict[str, int]:
    """Files vLLM found but dropped that hold draft tensors only they store -> how many."""
    import os

    from specguard.resolve import Resolver

    r = Resolver.open(folder)
    counts: dict[str, int] = {}
    for name in r.checkpoint.outside_index:
        if r.layout.role(name).is_draft:
            path = os.path.join(folder, r.checkpoint.tensors[name].file)
            counts[path] = counts.get(path, 0) + 1
    return {p: n for p, n in counts.items() if p in files and p not in kept}


class DraftLoadError(RuntimeError):
    """The draft model's weight load left parameters unwritten (SPECGUARD_VLLM_GUARD=raise)."""

    __specguard_passthrough__ = True  # deliberate: the safety net lets it reach vLLM

    def __init__(self, load_report: Any) -> None:
        names = load_report.names()
        shown = ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else "")
        super().__init__(
            f"specguard: the draft model's weight load left {len(names)} parameter(s) unwritten "
            f"or invalid: {shown}. Serving it would give near-zero draft acceptance. "
            f"To serve this checkpoint now, start without speculative decoding (drop "
            f"--speculative-config); `specguard lint` on the checkpoint says what is missing. "
            f"SPECGUARD_VLLM_GUARD=warn serves it anyway and only logs this.\n{load_report}"
        )
        self.report = load_report


class DraftGuard:
    """LoadGuard over the parameters of the draft's linear and routed-expert layers.

    Only those layers carry quantization parameters a checkpoint must fill;
    embeddings and heads may be shared with the target after the load, and
    KV-cache scales legitimately keep their defaults.
    """

    def __init__(self, model: Any, policy: str) -> None:
        self.model = model
        self.policy = policy
        self.report: Any = None
        self._guard: Any = None

    def __enter__(self) -> DraftGuard:
        from specguard.guard import LoadGuard

        include = guarded_patterns(self.model)
        self._guard = LoadGuard(self.model, policy="report", include=include, exclude=optional_parameters(self.model),
                                buffers=False)
        self._guard.__enter__()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        try:
            self._guard.__exit__(exc_type, exc, tb)
        except Exception as own:
            safety.warn_once("LoadGuard's check of the draft weights", own)
            return False
        if exc_type is not None:
            return False
        self.report = self._guard.report
        if self.report.ok:
            log.info("specguard: draft weights: %s", self.report.summary())
            return False
        if self.policy == RAISE:
            log.error("specguard: draft weights: %s", self.report.summary())
            raise DraftLoadError(self.report)  # carries the table
        log.error("specguard: draft weights (%s=warn, serving anyway):\n%s", GUARD_ENV, self.report)
        return False


def optional_parameters(model: Any) -> list[str]:
    """Parameters vLLM registers for tensors a checkpoint may lack and drops when the load
    left them unwritten: GPTQ MoE expert biases (auto_gptq.py ``AutoGPTQMoEMethod``
    ``process_weights_after_loading`` unregisters ``w13_bias`` / ``w2_bias`` not loaded)."""
    out = []
    for name, module in model.named_modules():
        if type(getattr(module, "quant_method", None)).__name__ == "AutoGPTQMoEMethod":
            out += [f"{name}.w13_bias" if name else "w13_bias", f"{name}.w2_bias" if name else "w2_bias"]
    return out


def guarded_patterns(model: Any) -> list[str]:
    """fnmatch patterns for the parameters of every quantizable layer of ``model``."""
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    out = []
    for name, module in model.named_modules():
        if not isinstance(module, (RoutedExperts, LinearBase)):
            continue
        if getattr(getattr(module, "quant_method", None), "uses_meta_device", False):
            continue  # online quantization: parameters do not come from the checkpoint
        out.append(f"{name}.*" if name else "*")
    return out
