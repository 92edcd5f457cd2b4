"""Record vLLM 0.33's build plans from its own model construction (scripts/record_plans.py).

Run only by the recorder script and its CI test, never by specguard at run time
(it imports vLLM and torch; specguard.plans reads the plans without either).

Per target architecture (``TARGETS``) this writes a tiny config.json with the
architecture's real layer structure, lets vLLM's ``EngineArgs`` build the
VllmConfig (with the speculative config the proposer would get, so
``SpeculativeConfig.hf_config_override`` picks the draft architecture), and
constructs the target and its draft with ``initialize_model`` on the meta
device under a *recording* quant config: its ``get_quant_method`` notes
(prefix, layer class) for every layer that asks and returns the unquantized
method. A layer with a ``quant_method`` that never asked was built with
``quant_config=None``. The loader's name mapping is recorded from the built
models: ``hf_to_vllm_mapper``, ``packed_modules_mapping``, ``get_expert_mapping()``
and the ``stacked_params_mapping`` literal of each ``load_weights`` in the
model's classes.

What is bent: vLLM's registry inspects model classes in a subprocess (to keep
CUDA out of the parent); here it runs in-process (no CUDA exists). A drafter
checkpoint's own quant config (``get_draft_quant_config``) is a second recording
config. Remote-code config classes (MiMo, openPangu) are registered as the
transformers class they extend. Nothing that decides a prefix or a class is touched.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _installed_engine() -> str:
    """``vllm-MAJOR.MINOR`` of the vLLM first on sys.path: ``.venv``'s 0.33, or an overlay's
    (``PYTHONPATH=.engines/vllm-0.32``, docs/engines.md) when recording another version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "vllm-" + ".".join(version("vllm").split(".")[:2])
    except PackageNotFoundError:
        return "vllm-0.33"


ENGINE = _installed_engine()
SCHEMA = 1
PLANS_DIR = Path(__file__).resolve().parents[2] / "plans" / ENGINE
# Recording sizes: N target layers (the first dense where the family has both),
# K draft layers where vLLM builds several; distinct so templating can tell them apart.
N, K = 4, 2
# vLLM 0.32 refuses the V2 model runner without an active GPU triton driver
# (config/vllm.py _validate_v2_model_runner, triton_utils/importing.py HAS_TRITON) and
# itself falls back to V1 on CPU; the models it constructs are the same classes.
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "",
           "VLLM_USE_V2_MODEL_RUNNER": "0" if ENGINE == "vllm-0.32" else "1"}

# Sizes are the config class's own defaults (the meta device allocates nothing); only
# the structure is set: N layers (dense first where the family mixes), K draft layers.
_DS = {"num_nextn_predict_layers": K, "first_k_dense_replace": 1}
_DSPARK = {"n_mtp_layers": K, "dspark_target_layer_ids": [1, 2, 3], "dspark_block_size": 4,
           "dspark_markov_rank": 16}
_EAGLE_LLAMA = {"architectures": ["EagleLlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1}
_EAGLE3_LLAMA = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
                 "draft_vocab_size": 1024}
_EAGLE3_QWEN = {"architectures": ["Eagle3Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 1,
                "draft_vocab_size": 1024}


class Target:
    """One recorded architecture: its model_type, structural overrides, and how its draft is served
    (``method``; ``draft``: a separate drafter checkpoint's config, for EAGLE). ``cuda``: the model
    builds CUDA-only objects at construction; record it as a CUDA server builds it (``_cuda_build``)."""

    def __init__(self, model_type: str, config: dict[str, Any] | None = None, method: str | None = None,
                 draft: dict[str, Any] | None = None, engine_args: dict[str, Any] | None = None,
                 *, cuda: bool = False, text_defaults: str | None = None, since: str | None = None) -> None:
        self.model_type, self.config, self.method, self.draft = model_type, config or {}, method, draft
        self.engine_args = engine_args or {}
        self.cuda = cuda
        # a wrapper config (DeepSeek-V4.1's) whose class reads the text model from ``text_config``
        # and has no defaults of its own: filled with this model_type's transformers defaults
        self.text_defaults = text_defaults
        self.since = since  # the first engine version it is recorded for (None: every version)
        if cuda:  # JIT kernel warm-up registration (tilelang/cutedsl) is a CUDA start-up step, not a build
            self.engine_args = {"kernel_config": {"enable_jit_warmup": False}, **self.engine_args}


# plan name -> Target. The plan's file is ``{name}.json``; the target architecture is the
# name up to ``+`` (an EAGLE drafter over it adds ``+{drafter}``).
TARGETS: dict[str, Target] = {
    "DeepseekV3ForCausalLM": Target("deepseek_v3", _DS, "mtp"),
    "Glm4MoeForCausalLM": Target("glm4_moe", {**_DS, "head_dim": 128}, "mtp"),
    "Glm4MoeLiteForCausalLM": Target("glm4_moe_lite", _DS, "mtp"),
    "Qwen3NextForCausalLM": Target("qwen3_next", {"full_attention_interval": 2, "num_nextn_predict_layers": K},
                                   "mtp"),
    "Ernie4_5_MoeForCausalLM": Target("ernie4_5_moe", {"num_nextn_predict_layers": K, "moe_layer_start_index": 1},
                                      "mtp"),
    "MiMoForCausalLM": Target("mimo", {"num_nextn_predict_layers": K}, "mtp"),
    "LongcatFlashForCausalLM": Target("longcat_flash", {"num_layers": 2, "num_nextn_predict_layers": 1,
                                                        "mla_scale_q_lora": True, "mla_scale_kv_lora": True,
                                                        "zero_expert_type": "identity"}, "mtp"),
    "PanguUltraMoEForCausalLM": Target("pangu_ultra_moe", _DS, "mtp"),
    "GptOssForCausalLM": Target("gpt_oss"),
    "LlamaForCausalLM": Target("llama"),
    "Qwen3ForCausalLM": Target("qwen3"),
    "Qwen3MoeForCausalLM": Target("qwen3_moe", {"mlp_only_layers": [0]}),  # a dense layer adds gate_up_proj
    "LlamaForCausalLM+EagleLlamaForCausalLM": Target("llama", {}, "eagle", _EAGLE_LLAMA),
    "LlamaForCausalLM+LlamaForCausalLMEagle3": Target("llama", {}, "eagle3", _EAGLE3_LLAMA),
    "Qwen3ForCausalLM+Eagle3Qwen3ForCausalLM": Target("qwen3", {}, "eagle3", _EAGLE3_QWEN),
    "GptOssForCausalLM+LlamaForCausalLMEagle3": Target("gpt_oss", {}, "eagle3", _EAGLE3_LLAMA),
    # DeepSeek-V4/V4.1 build CUDA-only objects: recorded as a CUDA server builds them (_cuda_build).
    # A DSpark draft ships inside the target checkpoint (speculative.py: model = the target's).
    "DeepseekV4ForCausalLM": Target("deepseek_v4", {"num_nextn_predict_layers": K}, "mtp", cuda=True,
                                    since="vllm-0.33"),
    "DeepseekV4ForCausalLM+DSparkDraftModel": Target("deepseek_v4", _DSPARK, "dspark", cuda=True,
                                                     since="vllm-0.33"),
}


# Architectures with a draft form that vLLM 0.33 cannot build on this CPU build, and why;
# specguard keeps its hand-written family models for them (layouts/, engines/vllm/v0_33.py).
NOT_RECORDED = {
    "DeepseekV41ForCausalLM": "DeepseekV41Config (transformers_utils/configs/deepseek_v41.py) has no text "
                              "defaults; filled from DeepseekV4Config's, transformers' validator refuses them "
                              "(ValueError: The `mlp_layer_types` entries must be in ('sparse', 'dense') but got "
                              "['hash_moe', 'hash_moe', 'hash_moe', 'moe'])",
    "Qwen3_5ForConditionalGeneration": "qwen3_5.py imports the Qwen3-VL vision tower, which needs torchvision "
                                       "(not in the CPU install); the text classes share the module",
    "Qwen3_5MoeForConditionalGeneration": "as Qwen3_5ForConditionalGeneration",
    "BailingMoeV2_5ForCausalLM": "VllmConfig rejects the hybrid's draft on CPU (--mamba-block-size can only be set "
                                 "with --enable-prefix-caching)",
    "DeepseekV32ForCausalLM": "VllmConfig validation fails with an assertion on the CPU build",
}


def _templated(name: str, n: int, draft: bool) -> str:
    """``layers.{i}`` -> ``layers.{L}`` (target layer), ``layers.{D}`` (draft runtime
    index N+d) or, in a draft model, ``layers.{d}`` (the draft's own 0-based index)."""
    def sub(m: re.Match[str]) -> str:
        i = int(m.group(2))
        word = "D" if i >= n else ("d" if draft else "L")
        return f"{m.group(1)}{{{word}}}"
    return re.sub(r"((?:^|\.)layers\.)(\d+)(?=\.|$)", sub, name)


def _mapper(obj: Any, n: int, draft: bool) -> dict[str, Any] | None:
    m = getattr(obj, "hf_to_vllm_mapper", None)
    if m is None:
        return None
    out: dict[str, Any] = {}
    for field in ("orig_to_new_prefix", "orig_to_new_substr", "orig_to_new_suffix"):
        d = getattr(m, field, None) or {}
        if d:
            out[field.removeprefix("orig_to_new_")] = {
                _templated(k, n, draft): (None if v is None else _templated(v, n, draft)) for k, v in d.items()}
    regex = getattr(m, "orig_to_new_regex", None) or {}
    if regex:
        out["regex"] = {p.pattern: v for p, v in regex.items()}
    stacked = getattr(m, "orig_to_new_stacked", None) or {}
    if stacked:
        out["stacked"] = {k: [v[0], v[1]] for k, v in stacked.items()}
    return out


def _stacked_params(model: Any) -> list[list[Any]]:
    """The ``stacked_params_mapping`` list literal of every ``load_weights`` the built model's
    classes define (vLLM keeps it a local variable: read from the source it runs)."""
    seen: dict[tuple, None] = {}
    classes = {type(m) for m in model.modules()}
    for cls in sorted(classes, key=lambda c: c.__qualname__):
        fn = cls.__dict__.get("load_weights")
        if fn is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "stacked_params_mapping" and isinstance(node.value, ast.List)):
                for elt in node.value.elts:
                    try:
                        seen[tuple(ast.literal_eval(elt))] = None
                    except ValueError:
                        continue
    return [list(x) for x in seen]


def _expert_mapping(model: Any) -> list[list[Any]]:
    get = getattr(model, "get_expert_mapping", None)
    if get is None:
        return []
    try:
        rows = get()
    except Exception:
        return []
    out: dict[tuple, None] = {}
    for param, weight, expert, shard in rows:
        out[(param, re.sub(rf"\.{expert}\.", ".{e}.", weight), shard)] = None
    return [list(x) for x in out]


def _modules(model: Any, asked: dict[int, tuple[str, str]], n: int, draft: bool) -> list[list[Any]]:
    """[module path, class, quant prefix or None] for every module holding parameters
    or a quant method; templated by layer, one row per template."""
    rows: dict[str, list[Any]] = {}
    for path, mod in model.named_modules(remove_duplicate=True):
        own = any(True for _ in mod.parameters(recurse=False))
        if not own and id(mod) not in asked and not hasattr(mod, "quant_method"):
            continue
        if not path:
            continue
        asked_as = asked.get(id(mod))
        key = _templated(path, n, draft)
        rows.setdefault(key, [key, type(mod).__name__,
                              None if asked_as is None else _templated(asked_as[0], n, draft)])
    return list(rows.values())


# model_types whose config class ships as remote code with the checkpoint (auto_map); the
# recorder registers the transformers class the remote one extends (MiMo: Qwen2; openPangu
# Ultra MoE: DeepSeek-V3), so vLLM reads the same attributes without remote code.
_REMOTE_CONFIGS = {"mimo": "Qwen2Config", "pangu_ultra_moe": "DeepseekV3Config"}


def _register_remote_configs() -> None:
    import transformers

    for model_type, base in _REMOTE_CONFIGS.items():
        if model_type in transformers.CONFIG_MAPPING:
            continue
        cls = type(f"Recorded{base}_{model_type}", (getattr(transformers, base),), {"model_type": model_type})
        transformers.AutoConfig.register(model_type, cls)


@contextmanager
def _cpu_registry() -> Iterator[None]:
    """Run vLLM's registry inspection in-process (it forks a fresh interpreter to keep
    CUDA out of the parent; there is no CUDA here)."""
    from vllm.model_executor.models import registry

    saved = registry._run_in_subprocess
    registry._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        registry._run_in_subprocess = saved


def _recording_config() -> Any:
    import torch
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

    class Recording(QuantizationConfig):
        """Notes every (layer, prefix) vLLM asks about; builds everything unquantized."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: dict[int, tuple[str, str]] = {}
            self.packed_snapshot: dict[str, list[str]] = {}  # packed_modules_mapping once built

        def get_name(self) -> Any:
            return "recording"

        def get_supported_act_dtypes(self) -> list[Any]:
            return [torch.bfloat16]

        @classmethod
        def get_min_capability(cls) -> int:
            return 0

        @staticmethod
        def get_config_filenames() -> list[str]:
            return []

        @classmethod
        def from_config(cls, config: dict[str, Any]) -> Any:
            return cls()

        def get_quant_method(self, layer: Any, prefix: str) -> Any:
            self.asked[id(layer)] = (prefix, type(layer).__name__)
            return UnquantizedLinearMethod() if isinstance(layer, LinearBase) else None

    return Recording()


def _build(vllm_config: Any, model_config: Any, rec: Any = None, *, own: bool = False,
           own_in_config: bool = False) -> tuple[Any, Any]:
    """``model_config``'s model built on the meta device under recording quant configs: ``rec``
    as ``vllm_config.quant_config`` (an MTP draft shares the target's object), and with ``own``
    a second one that a drafter checkpoint gets for itself (utils.py get_draft_quant_config ->
    ``VllmConfig.get_quantization_config``). Returns the model and the config its layers asked:
    with ``own`` that one, holding what the target's also saw. ``own_in_config``: the draft's own
    config is handed over as ``vllm_config.quant_config`` (dspark/utils.py load_dspark_model)."""
    import torch
    from vllm.config import VllmConfig
    from vllm.model_executor.model_loader.utils import initialize_model

    rec = rec if rec is not None else _recording_config()
    mine = _recording_config() if own else rec
    vllm_config.quant_config = mine if own_in_config else rec
    vllm_config.compilation_config.static_forward_context.clear()  # layer names must be unique
    saved = VllmConfig.__dict__["get_quantization_config"]
    VllmConfig.get_quantization_config = staticmethod(lambda *args, **kwargs: mine)
    try:
        with torch.device("meta"):
            model = initialize_model(vllm_config, model_config=model_config)
        for r in {id(rec): rec, id(mine): mine}.values():
            r.packed_snapshot = {k: list(v) for k, v in (r.packed_modules_mapping or {}).items()}
    finally:
        VllmConfig.get_quantization_config = saved
    if own:
        mine.asked = {**rec.asked, **mine.asked}
    return model, mine


@contextmanager
def _class_mappings_kept() -> Iterator[None]:
    """Some model classes add to their class-level ``packed_modules_mapping`` in ``__init__``
    (deepseek_v2.py: fused_qkv_a_proj, qwen3_moe.py: gate_up_proj), which a quant config may
    hold by reference: within one recording (target, then the MTP draft sharing its quant
    config) that is vLLM's state; afterwards every class mapping is restored, so no recording
    leaks into the next."""
    import torch.nn as nn

    def mappings() -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        seen = set()
        stack = [nn.Module]
        while stack:
            cls = stack.pop()
            stack.extend(cls.__subclasses__())
            mapping = cls.__dict__.get("packed_modules_mapping")
            if isinstance(mapping, dict) and id(mapping) not in seen:
                seen.add(id(mapping))
                out.append((mapping, {k: list(v) for k, v in mapping.items()}))
        return out

    before = mappings()
    try:
        yield
    finally:
        for mapping, content in before:
            mapping.clear()
            mapping.update(content)


# Platform-dispatching packages that import their CPU implementation on this host
# (vllm/models/deepseek_v4/__init__.py: ``elif current_platform.is_cpu(): from .cpu...``, whose
# MTP and DSpark classes raise NotImplementedError); a CUDA server resolves these names to nvidia/.
_NVIDIA_CLASSES = {
    "DeepseekV4ForCausalLM": "vllm.models.deepseek_v4.nvidia.model:DeepseekV4ForCausalLM",
    "DeepSeekV4MTPModel": "vllm.models.deepseek_v4.nvidia.mtp:DeepSeekV4MTP",
    "DSparkDraftModel": "vllm.models.deepseek_v4.nvidia.dspark:DSparkDeepseekV4ForCausalLM",
}
# The device a CUDA recording stands for: an H100/H200 (SM 9.0), where the DeepSeek-V4 attention
# class picks FlashMLA (nvidia/model.py _select_dsv4_attn_cls).
CUDA_CAPABILITY = (9, 0)


class _InertCudaObject:
    """Stands in for ``torch.cuda.Stream`` / ``torch.cuda.Event``, which the CPU build of torch
    cannot instantiate; layers only keep them for overlapping kernels at run time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def _cuda_build(on: bool) -> Iterator[None]:
    """Build as a CUDA server does, for models that construct CUDA-only objects: the NVIDIA
    classes behind platform-dispatching registry names, the device capability the
    attention-class choice reads, inert streams/events. Nothing here decides a prefix, a
    class that asks the quant config, or a loader mapping."""
    if not on:
        yield
        return
    import torch
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    platform = type(current_platform)
    saved_models = {k: ModelRegistry.models[k] for k in _NVIDIA_CLASSES if k in ModelRegistry.models}
    saved_cap = platform.__dict__.get("get_device_capability")
    saved_cuda = torch.cuda.Stream, torch.cuda.Event
    for arch, where in _NVIDIA_CLASSES.items():
        ModelRegistry.register_model(arch, where)
    platform.get_device_capability = classmethod(
        lambda cls, device_id=0: DeviceCapability(*CUDA_CAPABILITY))
    torch.cuda.Stream, torch.cuda.Event = _InertCudaObject, _InertCudaObject  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch.cuda.Stream, torch.cuda.Event = saved_cuda  # type: ignore[misc]
        if saved_cap is None:
            del platform.get_device_capability
        else:
            platform.get_device_capability = saved_cap
        ModelRegistry.models.update(saved_models)


def _single_rank(vllm_config: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        return
    store = tempfile.mkdtemp(prefix="specguard-gloo-")
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"file://{store}/store", backend="gloo")
        ensure_model_parallel_initialized(1, 1)


def _side(model: Any, rec: Any, arch: str, n: int, draft: bool) -> dict[str, Any]:
    cls = type(model)
    out: dict[str, Any] = {"architecture": arch, "class": f"{cls.__module__}.{cls.__qualname__}",
                           "modules": _modules(model, rec.asked, n, draft)}
    # packed: what the quant config holds once the model is built (configure_quant_config /
    # SupportsQuant), i.e. what is_layer_skipped and friends expand fused layers with
    loader = {"mapper": _mapper(model, n, draft),
              "packed": rec.packed_snapshot or None,
              "stacked": _stacked_params(model) or None, "experts": _expert_mapping(model) or None}
    out["loader"] = {k: v for k, v in loader.items() if v}
    return out


def _engine_config(target: Target, config: dict[str, Any], root: Path) -> Any:
    """The VllmConfig ``vllm serve`` builds for ``config`` (+ the drafter's), written under ``root``."""
    from vllm.engine.arg_utils import EngineArgs

    root.mkdir(parents=True, exist_ok=True)
    Path(root, "config.json").write_text(json.dumps(config))
    spec: dict[str, Any] | None = None
    if target.method:
        spec = {"method": target.method, "num_speculative_tokens": 1}
    if target.draft is not None and spec is not None:
        Path(root, "draft").mkdir(exist_ok=True)
        Path(root, "draft", "config.json").write_text(json.dumps(target.draft))
        spec["model"] = str(Path(root, "draft"))
    with _cpu_registry():
        return EngineArgs(model=str(root), skip_tokenizer_init=True, speculative_config=spec,
                          **target.engine_args).create_engine_config()


def record(name: str) -> dict[str, Any]:
    """The build plan of ``name`` (target and, where it has one, its draft as vLLM's proposer builds it)."""
    target = TARGETS[name]
    arch = name.split("+", 1)[0]
    config = {"architectures": [arch], "model_type": target.model_type, "num_hidden_layers": N, **target.config}
    if target.text_defaults is not None:
        import transformers

        text = transformers.AutoConfig.for_model(target.text_defaults).to_dict()
        per_layer = text.get("num_hidden_layers")  # per-layer lists (layer_types) follow the count
        text = {k: (v[:N] if isinstance(v, list) and len(v) == per_layer else v) for k, v in text.items()
                if k not in ("architectures", "model_type", "transformers_version")}
        config = {"architectures": [arch], "model_type": target.model_type,
                  "text_config": {**text, "num_hidden_layers": N, **target.config}}
    with (tempfile.TemporaryDirectory(prefix="specguard-plan-") as d, _class_mappings_kept(),
          _cuda_build(target.cuda)):
        vc = _engine_config(target, config, Path(d, "with"))
        _single_rank(vc)
        built, rec = _build(vc, vc.model_config)
        n = _num_layers(built, config)
        plan: dict[str, Any] = {"schema": SCHEMA, "engine": ENGINE, "recorded_with": config,
                                "target": _side(built, rec, arch, n, False)}
        if target.cuda:  # what a CUDA server builds (nvidia/ classes), not this CPU build's
            plan = {**plan, "platform": {"device": "cuda", "capability": list(CUDA_CAPABILITY)}}
        if target.method:
            dmc = vc.speculative_config.draft_model_config
            # an MTP draft is built with the target's quant config object (load_eagle_model keeps
            # vllm_config.quant_config); a drafter checkpoint gets its own (get_draft_quant_config)
            if target.method == "dspark":  # dspark/utils.py: get_draft_quant_config into the draft's vllm_config
                draft, drec = _build(vc, dmc, own=True, own_in_config=True)
            else:
                draft, drec = (_build(vc, dmc, rec) if target.draft is None else _build(vc, dmc, own=True))
            side = {"method": target.method, **_side(draft, drec, dmc.hf_config.architectures[0], n, True),
                    **_draft_layers(draft, config, target.draft)}
            side["count_default"] = _count_default(target, config, side["count_keys"], Path(d, "without"))
            plan["draft"] = side
    return plan


def _count_default(target: Target, config: dict[str, Any], keys: list[str], root: Path) -> int | None:
    """The draft layer count vLLM builds from a config without the count keys (the published
    Qwen3-Next config has none); None where vLLM then fails (the key is required)."""
    if not keys or target.draft is not None:
        return None
    try:
        vc = _engine_config(target, {k: v for k, v in config.items() if k not in keys}, root)
        draft, _ = _build(vc, vc.speculative_config.draft_model_config)
    except Exception:
        return None
    count = getattr(_inner(draft), "num_mtp_layers", None)
    return count if isinstance(count, int) else None


def _inner(model: Any) -> Any:
    inner = getattr(model, "model", None)
    return inner if inner is not None else model


def _num_layers(model: Any, config: dict[str, Any]) -> int:
    """The target's layer count as built (``end_layer`` of its decoder; LongCat builds two per layer)."""
    inner = _inner(getattr(model, "language_model", model))
    for attr in ("end_layer",):
        if isinstance(getattr(inner, attr, None), int):
            return int(getattr(inner, attr))
    return int(config.get("text_config", config)["num_hidden_layers"])


def _draft_layers(draft: Any, config: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """Where the draft's layers start (runtime index) and how many it builds, with the config
    key each equals (``count_key``: the recorded count equals that key; none: a constant)."""
    inner = _inner(draft)
    start = getattr(inner, "mtp_start_layer_idx", None)
    count = getattr(inner, "num_mtp_layers", None)
    source = own if own is not None else config.get("text_config", config)
    out: dict[str, Any] = {"start": start, "count": count}
    keys = [k for k, v in source.items() if isinstance(v, int) and not isinstance(v, bool) and v == count]
    out["count_keys"] = [k for k in keys if any(w in k for w in ("nextn", "mtp", "predict"))]
    return out


def supported_architectures() -> list[str]:
    from vllm.model_executor.models.registry import ModelRegistry

    return sorted(ModelRegistry.get_supported_archs())


def transformers_architectures() -> list[str]:
    """Generative model classes transformers exports: vLLM's registry
    (``_try_resolve_transformers``: ``getattr(transformers, architecture)``) serves an
    architecture it lacks natively through its Transformers backend when one exists."""
    import transformers

    return sorted(n for n in dir(transformers) if n.endswith(("ForCausalLM", "ForConditionalGeneration")))


def record_all(out_dir: Path = PLANS_DIR, only: list[str] | None = None) -> dict[str, str]:
    """Record every target's plan into ``out_dir``; returns arch -> error for those that failed."""
    saved = {k: os.environ.get(k) for k in CPU_ENV}
    os.environ.update(CPU_ENV)
    try:
        return _record_all(out_dir, only)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def targets(engine: str = ENGINE) -> list[str]:
    """The plan names recorded for ``engine`` (``Target.since``: added in a later version)."""
    def version(e: str) -> tuple[int, ...]:
        return tuple(int(x) for x in e.removeprefix("vllm-").split("."))
    return [n for n, t in TARGETS.items() if t.since is None or version(engine) >= version(t.since)]


def _record_all(out_dir: Path, only: list[str] | None) -> dict[str, str]:
    from vllm.model_executor.models.registry import ModelRegistry

    only = only or targets()
    _register_remote_configs()
    for name in only:  # imported before any build: _class_mappings_kept sees them
        ModelRegistry._try_load_model_cls(name.split("+", 1)[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    for name in only:
        try:
            plan = record(name)
        except Exception as exc:
            import traceback
            traceback.print_exc()
            failed[name] = f"{type(exc).__name__}: {exc}"[:400]
            continue
        (out_dir / f"{name}.json").write_text(dumps(plan))
    import transformers

    registry = {"schema": SCHEMA, "engine": ENGINE, "architectures": supported_architectures(),
                "transformers": transformers.__version__, "transformers_backend": transformers_architectures()}
    (out_dir / "_registry.json").write_text(dumps(registry))
    return failed


def dumps(obj: Any) -> str:
    """Compact, diff-friendly JSON: objects one key a line, a list of scalars (a module
    row, a mapping entry) on one line."""
    return _dump(obj, 0) + "\n"


def _dump(obj: Any, depth: int) -> str:
    pad = " " * (depth + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        return "[\n" + ",\n".join(pad + _dump(x, depth + 1) for x in obj) + "\n" + " " * depth + "]"
    return json.dumps(obj)
