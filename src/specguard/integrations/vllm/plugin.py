"""Install / uninstall the patches; ``register`` is vLLM's plugin entry point.

What is patched (each when vLLM imports the module, see ``hooks``):

* ``DeepseekV4FP8Config.get_quant_method`` of ``vllm.models.deepseek_v4`` (CPU,
  XPU registry) and ``vllm.models.deepseek_v41`` (CUDA/ROCm registry), plus
  V4.1's ``_is_nvfp4_expert_layer``; ``CompressedTensorsConfig.get_quant_method``
  (llm-compressor checkpoints whose draft tower is BF16); ``AutoGPTQConfig.get_quant_method``
  (GPTQ checkpoints whose ``dynamic`` rules claim a BF16 drafter quantized);
  ``Fp8Config.get_quant_method`` (FP8 exports whose draft was left BF16: DeepSeek-V3,
  Qwen3-Next, MiMo, GLM FP8) and ModelOpt's ``ModelOptQuantConfigBase`` /
  ``ModelOptMixedPrecisionConfig`` ``get_quant_method`` (NVFP4/FP8/MXFP8 exports, GLM-4.7);
  ``Mxfp4Config.get_quant_method`` (gpt-oss-style MXFP4 checkpoints).
  A subclass with its own ``get_quant_method`` that calls ``super()`` (DeepSeek-V4's FP8
  config) asks the parent's unpatched rules: routing happens once, at the outermost call.
* ``VllmConfig._get_quantization_config``: tags each quant config with the
  checkpoint it was built from, so a separate drafter routes by its own disk.
* ``BaseModelLoader.load_model`` / ``DefaultModelLoader.load_weights``: the
  start-up log and the LoadGuard around the draft model's weight load;
  ``filter_duplicate_safetensors_files`` as ``default_loader`` calls it: a draft
  load also reads a file the index never names that stores its tensors.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from types import ModuleType
from typing import Any

from specguard.integrations.vllm import hooks, safety
from specguard.integrations.vllm.hooks import SOURCE_ATTR
from specguard.integrations.vllm.settings import (
    GUARD_ENV,
    MODE_ENV,
    OFF,
    Settings,
    SettingsError,
    read_settings,
    set_current,
    version_supported,
)

log = logging.getLogger("vllm.specguard")

V4_QUANT = "vllm.models.deepseek_v4.quant_config"
V41_QUANT = "vllm.models.deepseek_v41.quant_config"
CT_QUANT = "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors"
GPTQ_QUANT = "vllm.model_executor.layers.quantization.auto_gptq"
FP8_QUANT = "vllm.model_executor.layers.quantization.fp8"
MODELOPT_QUANT = "vllm.model_executor.layers.quantization.modelopt"
MXFP4_QUANT = "vllm.model_executor.layers.quantization.mxfp4"
VLLM_CONFIG = "vllm.config.vllm"
BASE_LOADER = "vllm.model_executor.model_loader.base_loader"
DEFAULT_LOADER = "vllm.model_executor.model_loader.default_loader"

_patches = hooks.Patches()
_lock = threading.Lock()
_active: Settings | None = None


def register() -> None:
    """``vllm.general_plugins`` entry point: cheap, idempotent, never raises."""
    try:
        _register()
    except Exception as exc:  # specguard's own failure: vLLM starts as without the plugin
        safety.warn_once("starting the plugin", exc)


def _register() -> None:
    try:
        settings = read_settings()
    except SettingsError as exc:
        log.warning("specguard: %s; plugin inactive, vLLM's routing is unchanged", exc)
        return
    if settings.mode == OFF:
        log.info("specguard: %s=off; vLLM's routing is unchanged", MODE_ENV)
        return
    version = vllm_version()
    if version is None or not version_supported(version):
        from specguard.engines.registry import plugin_versions

        log.warning(
            "specguard: vLLM %s is not a version this plugin was tested against (%s); "
            "plugin inactive, vLLM's routing is unchanged", version or "(not installed)",
            ", ".join(plugin_versions()),
        )
        return
    if install(settings):
        log.info(
            "specguard: vLLM %s plugin active (%s=%s, %s=%s)",
            version, MODE_ENV, settings.mode, GUARD_ENV, settings.guard,
        )


def vllm_version() -> str | None:
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def active() -> Settings | None:
    """The settings the patches run with, or None when not installed."""
    return _active


def install(settings: Settings | None = None) -> bool:
    """Patch vLLM (now or on import). Idempotent; False when it already was installed."""
    global _active
    settings = settings or Settings()
    with _lock:
        set_current(settings)
        if _active is not None:
            _active = settings
            return False
        _active = settings
        for name, patch in _HOOKS.items():
            hooks.when_imported(name, _safe(name, patch))
        return True


def _safe(name: str, patch: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """``patch`` as an import hook that can never fail vLLM's import of ``name``.

    A hook that fails half-way undoes what it patched, so vLLM runs as it would without it.
    """

    def run(module: ModuleType) -> None:
        keep = len(_patches)
        try:
            patch(module)
        except Exception as exc:
            _patches.undo(keep)
            # A dependency of specguard's own that will not import fails every patch alike: say it once.
            what = "importing specguard's routing" if isinstance(exc, ImportError) else f"patching {name}"
            safety.warn_once(what, exc)

    return run


def uninstall() -> None:
    """Restore every patched vLLM attribute and drop pending import hooks."""
    global _active
    with _lock:
        hooks.cancel_pending()
        _patches.undo()
        _active = None


@contextmanager
def installed(settings: Settings | None = None) -> Iterator[None]:
    """Patched within the block (tests, notebooks); restored after."""
    install(settings)
    try:
        yield
    finally:
        uninstall()


def _patch_v4(module: ModuleType) -> None:
    from specguard.integrations.vllm import routing

    cls = module.DeepseekV4FP8Config
    if _patches.replace(cls, "get_quant_method", routing.wrap_get_quant_method):
        _log_routing(cls)


def _patch_v41(module: ModuleType) -> None:
    from specguard.integrations.vllm import routing

    cls = module.DeepseekV4FP8Config
    if _patches.replace(cls, "get_quant_method", routing.wrap_get_quant_method):
        _log_routing(cls)
    _patches.replace(cls, "_is_nvfp4_expert_layer", routing.wrap_is_nvfp4_expert_layer)


def _patch_compressed_tensors(module: ModuleType) -> None:
    from specguard.integrations.vllm import routing

    cls = module.CompressedTensorsConfig
    if _patches.replace(cls, "get_quant_method", routing.wrap_get_quant_method):
        _log_routing(cls)


def _patch_auto_gptq(module: ModuleType) -> None:
    """GPTQ checkpoints (auto-round and GPTQModel exports): a ``dynamic`` rule that claims a
    BF16 drafter quantized builds GPTQ experts for it; routed by what is stored instead."""
    from specguard.integrations.vllm import routing

    cls = module.AutoGPTQConfig
    if _patches.replace(cls, "get_quant_method", routing.wrap_get_quant_method):
        _log_routing(cls)


def _patch_classes(*names: str) -> Callable[[ModuleType], None]:
    """A patch routing ``get_quant_method`` of each named class of a quant-config module by the disk."""

    def patch(module: ModuleType) -> None:
        from specguard.integrations.vllm import routing

        for name in names:
            cls = getattr(module, name)
            if "get_quant_method" not in cls.__dict__:
                continue  # inherits it: patched on the class that defines it
            if _patches.replace(cls, "get_quant_method", routing.wrap_get_quant_method):
                _log_routing(cls)

    return patch


def _log_routing(cls: type) -> None:
    # Logged when vLLM imports the class: by then vLLM has configured its logging,
    # which it has not always when plugins load.
    settings = _active or Settings()
    log.info(
        "specguard: %s.%s routes by what is stored (%s=%s, %s=%s)",
        cls.__module__, cls.__name__, MODE_ENV, settings.mode, GUARD_ENV, settings.guard,
    )


def _patch_vllm_config(module: ModuleType) -> None:
    _patches.replace(module.VllmConfig, "_get_quantization_config", _tagging)


def _tagging(original: Any) -> Any:
    """Wrap the static ``_get_quantization_config`` to tag its result with the checkpoint."""
    fn: Callable[..., Any] = original.__func__ if isinstance(original, staticmethod) else original

    @functools.wraps(fn)
    def _get_quantization_config(model_config: Any, load_config: Any) -> Any:
        quant_config = fn(model_config, load_config)
        try:
            tag_source(quant_config, model_config)
        except Exception as exc:  # untagged: the current model's checkpoint is used
            safety.warn_once("tagging the quant config with its checkpoint", exc)
        return quant_config

    return staticmethod(_get_quantization_config)


def tag_source(quant_config: Any, model_config: Any) -> None:
    """Remember which checkpoint ``quant_config`` describes (the target's or a drafter's)."""
    model = getattr(model_config, "model", None)
    if quant_config is not None and model:
        # A config class with __slots__ stays untagged: the current model is used then.
        with contextlib.suppress(AttributeError):
            setattr(quant_config, SOURCE_ATTR, str(model))


def _patch_base_loader(module: ModuleType) -> None:
    from specguard.integrations.vllm import loading

    _patches.replace(module.BaseModelLoader, "load_model", loading.wrap_load_model)


def _patch_default_loader(module: ModuleType) -> None:
    from specguard.integrations.vllm import loading

    _patches.replace(module.DefaultModelLoader, "load_weights", loading.wrap_load_weights)
    # default_loader.py imports the function by name: its module global is the one called
    _patches.replace(module, "filter_duplicate_safetensors_files", loading.wrap_filter_files)


# Which vLLM module each patch waits for (applied when vLLM imports it).
_HOOKS: dict[str, Callable[[ModuleType], None]] = {
    V4_QUANT: _patch_v4,
    V41_QUANT: _patch_v41,
    CT_QUANT: _patch_compressed_tensors,
    GPTQ_QUANT: _patch_auto_gptq,
    FP8_QUANT: _patch_classes("Fp8Config"),
    MODELOPT_QUANT: _patch_classes("ModelOptQuantConfigBase", "ModelOptMixedPrecisionConfig"),
    MXFP4_QUANT: _patch_classes("Mxfp4Config"),
    VLLM_CONFIG: _patch_vllm_config,
    BASE_LOADER: _patch_base_loader,
    DEFAULT_LOADER: _patch_default_loader,
}
