"""Record what SGLang 0.5.23 decides for DeepSeek-V4/V3, GLM-4-MoE and Qwen3.5 checkpoints, running its code on CPU.

Run only by scripts/record_sglang.py and its CI test, under the SGLang overlay
(``PYTHONPATH=.engines/sglang-0.5.23:.engines/triton-3.7.1``, docs/engines.md);
never by specguard at run time. Per case (a checkpoint directory) it builds
SGLang's ``ModelConfig`` for the target and for the draft (``is_draft_model=True``,
the draft-architecture rewrite), asks SGLang's loader for the quant config
(``model_loader.loader._get_quantization_config``: quant-config class,
``is_fp4_experts`` from its header probe, the hybrid NVFP4 wrapper) and asks that
quant config's own matching code which routed-expert prefixes it excludes
(``is_layer_skipped`` for ``Fp8Config``, ``ModelOptFp4Config.is_layer_excluded`` for
the hybrid's NVFP4 half). GPU facts are set with SGLang's ``override_platform``
(an SM100 CUDA machine), never patched. What is read rather than run, and why, is
in docs/engines.md ("SGLang 0.5.23").

Bent on CPU, and only these: torchvision's CUDA-linked ``_C`` cannot load beside
CPU torch, so the two op schemas its Python side registers fakes for are defined
first; the ``mxfp4`` registry entry SGLang adds only where torch sees CUDA is added
(``_register_cuda_methods``); ``.venv``'s vLLM is hidden (``sys.modules["vllm"] = None``) so SGLang takes the
paths it takes where vLLM is not installed.

For the cases named in ``record_all``'s ``loads`` it also builds the draft model itself (SGLang's
own class, e.g. ``DeepseekV3ForCausalLMNextN``) and runs its ``load_weights`` over the
checkpoint's tensors (``_load_facts``): under one published single-rank topology
(runtime_context ``publish``, a gloo world of 1, as SGLang's own test helper
``published_topology`` does) with ``device="cpu"`` server args. One more bend, for that build only:
the rotary embedding's kernel choice (rotary_embedding/base.py ``_is_cpu``, read at import) is the
CPU engine's: it builds the cos/sin cache, no layer's quant method, prefix or parameter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ENGINE = "sglang-0.5.23"
SCHEMA = 1
PLANS_DIR = Path(__file__).resolve().parents[2] / "plans" / ENGINE
# An SM100 (Blackwell) CUDA machine, as SGLang's own tests declare one.
PLATFORM = {"is_cuda": True, "is_sm100": True, "is_sm100_or_sm110": True, "is_blackwell": True,
            "is_hip": False, "is_npu": False, "device_capability": (10, 0), "device_sm": 100}
# Routed-expert prefixes as SGLang builds them: target layers (deepseek_v4.py
# ``model.layers.{i}.mlp.experts``), the NextN draft (deepseek_v4_nextn.py
# ``model.decoder``), the DSpark draft stages (deepseek_v4_dspark.py ``stages.{k}``).
SEPARATE_DRAFTERS = ("EAGLE3",)  # --speculative-algorithm values recorded from the drafter's own path
EXPERT_PREFIXES = ("model.layers.0.mlp.experts", "model.layers.1.mlp.experts",
                   "model.decoder.mlp.experts", "stages.0.mlp.experts")


def _cpu_prelude() -> None:
    from specguard.engines.torchvision_ops import define_torchvision_ops

    define_torchvision_ops()
    sys.modules["vllm"] = None  # type: ignore[assignment]


def _prefix_facts(qc: Any, prefix: str) -> dict[str, bool | str | None]:
    """What ``qc``'s own matching code answers for one SGLang runtime prefix: Fp8Config's
    ``is_layer_skipped`` over its ``ignored_layers``, the ModelOpt NVFP4 config's
    ``is_layer_excluded`` and ``is_layer_skipped`` over its ``exclude_modules`` ("raises": the
    ValueError a fused layer whose shards disagree raises)."""
    from sglang.srt.layers.quantization.utils import is_layer_skipped

    fp8 = getattr(qc, "fp8_config", qc)
    nvfp4 = getattr(qc, "nvfp4_config", qc if hasattr(qc, "is_layer_excluded") else None)
    calls: dict[str, Any] = {}
    if getattr(fp8, "ignored_layers", None) is not None:
        calls["fp8_skipped"] = lambda: is_layer_skipped(prefix, fp8.ignored_layers,
                                                        fused_mapping=getattr(fp8, "packed_modules_mapping", {}))
    if nvfp4 is not None:
        calls["nvfp4_excluded"] = lambda: nvfp4.is_layer_excluded(prefix)
        calls["nvfp4_skipped"] = lambda: is_layer_skipped(prefix, nvfp4.exclude_modules or [],
                                                          nvfp4.packed_modules_mapping or {})
    out: dict[str, bool | str | None] = {}
    for key, call in calls.items():
        try:
            out[key] = bool(call())
        except ValueError:
            out[key] = "raises"
    if hasattr(qc, "target_scheme_map"):
        out.update(_ct_prefix_facts(qc, prefix))
    elif type(qc).__name__ == "Mxfp4Config":
        out["mxfp4_linear"] = _mxfp4_linear_method(qc, prefix)
    return out


def ct_scheme_name(scheme: Any) -> str | None:
    """One config group's scheme as a short string (None: no scheme, the layer unquantized)."""
    if not scheme or scheme.get("weights") is None:
        return None
    w, a = scheme["weights"], scheme.get("input_activations")
    block = "x".join(map(str, w.block_structure)) if w.block_structure else None
    kind, strategy = getattr(w.type, "value", w.type), getattr(w.strategy, "value", w.strategy)
    return "-".join(str(x) for x in (f"w{w.num_bits}{kind}", strategy, w.group_size and f"g{w.group_size}",
                                       block and f"b{block}", f"a{a.num_bits}" if a is not None else "a16") if x)


def _ct_prefix_facts(qc: Any, prefix: str) -> dict[str, bool | str | None]:
    """compressed-tensors: what its own ``should_ignore_layer`` and ``get_scheme_dict`` (ignore,
    then ``find_matched_target``: names, ``re:``, class names) give for one SGLang prefix, asked
    with the class SGLang builds there (instances made without ``__init__``: only the class name is
    read): ``FusedMoE`` for routed experts, by expert 0's projections as ``get_moe_scheme`` asks;
    ``ParallelLMHead`` for a head (``get_lm_head_scheme``: names only); a ``LinearBase`` class
    (``ReplicatedLinear``; every one's name ends in ``Linear``) for the rest."""
    from sglang.srt.layers.linear import ReplicatedLinear
    from sglang.srt.layers.moe.fused_moe_triton import FusedMoE
    from sglang.srt.layers.quantization.compressed_tensors.utils import (
        check_equal_or_regex_match,
        should_ignore_layer,
    )

    def scheme(layer: Any, name: str) -> str | None:
        try:
            return ct_scheme_name(qc.get_scheme_dict(layer, name))
        except ValueError as exc:
            return f"raises: {str(exc)[:40]}"

    fused = qc.packed_modules_mapping
    if prefix.endswith(".experts"):
        qc._add_fused_moe_to_target_scheme_map()  # as get_moe_scheme does first
        layer = FusedMoE.__new__(FusedMoE)
        names = [prefix + shard for shard in (".0.gate_proj", ".0.up_proj", ".0.down_proj")]
        schemes = {scheme(layer, n) for n in names}
        return {"ct_ignored": should_ignore_layer(names[0], qc.ignore, fused),
                "ct_scheme": schemes.pop() if len(schemes) == 1 else "raises: projections differ",
                "ct_mxfp4_moe": bool(qc._is_mxfp4_moe(prefix))}
    try:
        ignored: bool | str = bool(should_ignore_layer(prefix, qc.ignore, fused))
    except ValueError:
        ignored = "raises"
    if prefix.endswith(("lm_head", "shared_head.head")):
        hit = next((t for t in qc.target_scheme_map if check_equal_or_regex_match(prefix, [t])), None)
        head = None if ignored is True or hit is None else ct_scheme_name(qc.target_scheme_map[hit])
        return {"ct_ignored": ignored, "ct_scheme": head}
    return {"ct_ignored": ignored, "ct_scheme": scheme(ReplicatedLinear.__new__(ReplicatedLinear), prefix)}


def _mxfp4_linear_method(qc: Any, prefix: str) -> str | None:
    """Mxfp4Config.get_quant_method for a linear layer at ``prefix`` (its ``ignored_layers`` skip,
    else None on CUDA): the method's class name."""
    from sglang.srt.layers.linear import ReplicatedLinear

    method = qc.get_quant_method(ReplicatedLinear.__new__(ReplicatedLinear), prefix)
    return None if method is None else type(method).__name__


def _quant_facts(qc: Any, prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The quant config's class and, per routed-expert prefix, what its own matching code says;
    per SGLang runtime prefix of the checkpoint (``prefixes``) the same for every layer."""
    if qc is None:
        return {"class": None}
    from sglang.srt.layers.quantization.utils import is_layer_skipped

    cls = type(qc)
    facts: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}", "name": qc.get_name()}
    for attr in ("is_fp4_experts", "is_dsv4_fp4_experts", "ignored_layers", "is_checkpoint_mxfp4_serialized", "ignore"):
        if hasattr(qc, attr):
            value = getattr(qc, attr)
            facts[attr] = list(value) if isinstance(value, (list, tuple)) else value
    fp8 = getattr(qc, "fp8_config", qc)
    nvfp4 = getattr(qc, "nvfp4_config", qc if hasattr(qc, "is_layer_excluded") else None)
    if hasattr(qc, "target_scheme_map"):  # compressed-tensors: each config group's targets and scheme
        facts["ct_targets"] = {t: ct_scheme_name(v) for t, v in qc.target_scheme_map.items()}
    if nvfp4 is not None:
        facts["nvfp4_exclude_modules"] = list(nvfp4.exclude_modules)
    per_prefix: dict[str, dict[str, bool]] = {}
    for prefix in EXPERT_PREFIXES:
        row: dict[str, bool] = {}
        ignored = getattr(fp8, "ignored_layers", None)
        if ignored is not None:
            row["fp8_skipped"] = bool(is_layer_skipped(prefix, ignored,
                                                       fused_mapping=getattr(fp8, "packed_modules_mapping", {})))
        if nvfp4 is not None:
            row["nvfp4_excluded"] = bool(nvfp4.is_layer_excluded(prefix))
        per_prefix[prefix] = row
    facts["experts"] = per_prefix
    if prefixes:
        facts["prefixes"] = {prefix: _prefix_facts(qc, prefix) for prefix in prefixes}
        facts["packed_modules_mapping"] = {k: list(v) for k, v in
                                           (getattr(fp8, "packed_modules_mapping", None) or {}).items()}
    return facts


def _draft_model_quant(architecture: str, qc: Any) -> dict[str, Any]:
    """The quant config a draft model class builds its layers with, where the class replaces the
    loader's (``{}``: the loader's, not recorded). Qwen3.5's MTP: qwen3_5_mtp.py
    ``_mtp_quant_config``, SGLang's own function, run on the loader's config."""
    if architecture != "Qwen3_5ForCausalLMMTP":
        return {}
    from sglang.srt.models.qwen3_5_mtp import _mtp_quant_config

    built = _mtp_quant_config(qc)
    cls = None if built is None else f"{type(built).__module__}.{type(built).__qualname__}"
    return {"model_quant_config": cls}


def complete_config(path: Path) -> None:
    """Add to ``path``/config.json the fields SGLang's own ``DeepSeekV4Config`` defaults
    (configs/deepseek_v4.py) that the file lacks: its ModelConfig reads them (e.g.
    ``index_head_dim``) through a config object that has no defaults."""
    import dataclasses

    from sglang.srt.configs.deepseek_v4 import DeepSeekV4Config

    file = path / "config.json"
    config = json.loads(file.read_text())
    for f in dataclasses.fields(DeepSeekV4Config):
        if f.name in config or f.name.startswith("_"):
            continue
        value = (f.default if f.default is not dataclasses.MISSING
                 else f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if isinstance(value, (bool, int, float, str, list)):  # plain JSON values only
            config[f.name] = value
    file.write_text(json.dumps(config, indent=1))


def _dspark_facts(mc: Any) -> dict[str, Any]:
    """A DSpark draft as SGLang parses its config (dspark_config.py ``parse_dspark_draft_config``,
    run): the target-layer ids, ``markov_rank``, and the stage count deepseek_v4_dspark.py
    ``DeepseekV4ForCausalLMDSpark.__init__`` builds from them (``len(target_layer_ids)``, else
    ``num_nextn_predict_layers``); ``refuses``: the ValueError it raises before building a stage
    (``markov_rank`` not > 0, as spec_aux_hidden_state.py raises it first), None where it goes on."""
    from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config

    parsed = parse_dspark_draft_config(draft_hf_config=mc.hf_config)
    ids = None if parsed.target_layer_ids is None else list(parsed.target_layer_ids)
    stages = len(ids) if ids is not None else int(getattr(mc.hf_config, "num_nextn_predict_layers", 1) or 1)
    refuses = None if parsed.require_markov() else (
        f"ValueError: DSpark V4 draft requires markov_rank > 0, got markov_rank={parsed.markov_rank}.")
    return {"target_layer_ids": ids, "markov_rank": parsed.markov_rank, "stages": stages, "refuses": refuses}


_TOPOLOGY: list[Any] = []  # the one published topology and gloo group of this process


def _published_topology() -> None:
    """A single-rank SGLang runtime context, once per process (sglang/test/test_utils.py
    ``published_topology``, restated: importing that module needs the ``datasets`` package)."""
    if _TOPOLOGY:
        return
    import atexit
    import shutil
    import tempfile

    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    reset_context()
    args = ServerArgs(model_path="dummy", device="cpu")
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    init = tempfile.mkdtemp(prefix="sglang-gloo-")  # gloo's file store, for the process's life
    atexit.register(shutil.rmtree, init, ignore_errors=True)
    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                distributed_init_method=f"file://{init}/store")
    parallel_state.initialize_model_parallel(backend="gloo")
    _TOPOLOGY.append(args)


def _load_facts(path: Path, mc: Any, qc: Any) -> dict[str, Any]:
    """SGLang's draft model built as its loader builds it (loader.py ``_initialize_model``:
    ``mc``'s architecture, the loader's quant config ``qc``): each quantizable layer's class and
    quant method, and what its own ``load_weights`` does with the checkpoint's tensors, fed in name order ("ok", or the
    exception it raises: the server stops there)."""
    import sglang.srt.layers.rotary_embedding.base as rope
    import torch
    from safetensors import safe_open
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader.loader import _initialize_model

    _published_topology()
    rope._is_cpu = True  # the cos/sin cache only (module docstring)
    with torch.device("cpu"):
        model = _initialize_model(mc, LoadConfig(), qc)  # the loader's own construction
    built = {name: f"{type(mod).__name__} {type(mod.quant_method).__name__}"
             for name, mod in model.named_modules() if getattr(mod, "quant_method", None) is not None}
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]

    def tensors():
        for name in sorted(index):
            with safe_open(path / index[name], "pt") as f:
                yield name, f.get_tensor(name)

    try:
        model.load_weights(tensors())
        load = "ok"
    except Exception as exc:  # the server stops with it: the recorded fact
        load = f"{type(exc).__name__}: {exc}"
    return {"built": built, "load": load}


def record_case(path: Path, algorithm: str | None = "EAGLE", prefixes: tuple[str, ...] = (),
                load: bool = False) -> dict[str, Any]:
    """SGLang's target and draft decisions for the checkpoint at ``path``, the draft served
    with ``--speculative-algorithm`` ``algorithm`` (EAGLE: NextN; DSPARK: a bundled DSpark head);
    ``prefixes``: the checkpoint's SGLang runtime prefixes (layouts/sglang.py) to ask about;
    ``load``: also build the draft model and load its weights (``_load_facts``)."""
    if json.loads((path / "config.json").read_text()).get("model_type", "").startswith("deepseek_v4"):
        complete_config(path)
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import _get_quantization_config

    out: dict[str, Any] = {}
    # a separate drafter (EAGLE3: --speculative-draft-model-path) is only ever the draft
    sides = (("draft", True),) if algorithm in SEPARATE_DRAFTERS else (("target", False), ("draft", True))
    for side, draft in sides:
        mc = ModelConfig(model_path=str(path), is_draft_model=draft,
                         speculative_algorithm=algorithm if draft else None)
        qc = _get_quantization_config(mc, LoadConfig())
        out[side] = {"architecture": mc.hf_config.architectures[0], "quantization": mc.quantization,
                     "is_fp4_experts": mc.is_fp4_experts, "nvfp4_moe_meta": mc.nvfp4_moe_meta,
                     "quant_config": _quant_facts(qc, prefixes)}
        out[side].update(_draft_model_quant(out[side]["architecture"], qc))
        if draft and algorithm == "DSPARK":
            out[side]["dspark"] = _dspark_facts(mc)
        if draft and load:
            out[side]["model"] = _load_facts(path, mc, qc)
    return out


def _register_cuda_methods() -> None:
    """``mxfp4`` -> ``Mxfp4Config``, as layers/quantization/__init__.py registers it when
    ``is_cuda()`` (``torch.cuda.is_available()``, read once at import, not through
    ``override_platform``): on this CPU the registry lacks it and ModelConfig refuses
    ``Unknown quantization method: mxfp4``. The one registry entry an SM100 machine has."""
    import sglang.srt.layers.quantization as registry
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    registry.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)


def record_all(cases: dict[str, tuple[Path, str | None, tuple[str, ...]]],
               loads: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every case, in one SGLang process (one engine start per version); ``loads``: the cases
    whose draft model is also built and loaded (``_load_facts``)."""
    _cpu_prelude()
    from importlib.metadata import version

    from sglang.srt.runtime_context import override_platform

    result: dict[str, Any] = {"schema": SCHEMA, "engine": ENGINE, "sglang": version("sglang"),
                              "platform": {k: list(v) if isinstance(v, tuple) else v for k, v in PLATFORM.items()},
                              "cases": {}}
    _register_cuda_methods()
    with override_platform(**PLATFORM):
        for name, (path, algorithm, prefixes) in cases.items():
            result["cases"][name] = record_case(path, algorithm, prefixes, load=name in loads)
    return result


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"
