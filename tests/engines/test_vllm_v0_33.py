"""engines/vllm/v0_33: what vLLM 0.33 builds, pinned on the seeds' layouts and compared with
vLLM's real ``DeepseekV4FP8Config.get_quant_method`` (both classes) on generated
configs and prefixes.

The real method runs unchanged: the real quant config comes from vLLM's
``from_config``, its lists are renamed by vLLM's own ``configure_quant_config``
with the real model class, the MTP draft shares that object (and ROCm re-keys it
with the real ``align_mtp_quant_config``), DSpark builds a fresh one. Only the
*constructors* of the returned quant-method classes are replaced by recorders,
because on a CPU box they fail in kernel-backend selection; which class the
decision picked is what is compared.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import vllm.model_executor.layers.quantization.fp8 as fp8_mod
import vllm.model_executor.layers.quantization.modelopt as modelopt_mod
import vllm.models.deepseek_v4.quant_config as q4
import vllm.models.deepseek_v41.quant_config as q41
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from vllm.config import set_current_vllm_config
from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization import get_quantization_config
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.model_loader.utils import configure_quant_config
from vllm.model_executor.models.utils import WeightsMapper
from vllm.models.deepseek_v4.cpu.model import DeepseekV4ForCausalLM as CpuV4
from vllm.models.deepseek_v4.nvidia.dspark import DSparkDeepseekV4ForCausalLM as DSparkV4
from vllm.models.deepseek_v4.nvidia.model import DeepseekV4ForCausalLM as NvidiaV4
from vllm.models.deepseek_v4.nvidia.model import _make_deepseek_v4_weights_mapper
from vllm.models.deepseek_v41.nvidia.dspark import DSparkDeepseekV4ForCausalLM as DSparkV41
from vllm.models.deepseek_v41.nvidia.vl_model import DeepseekV41ForCausalLM as V41

from specguard.engines.vllm.v0_33 import V4_CLASS, V41_CLASS, Vllm033, deepseek_v4_rename
from specguard.formats import scheme as s
from tests.engines.layers import bare_layer

N = 43
BASE = {"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": N,
        "num_nextn_predict_layers": 1, "expert_dtype": "fp4"}
QC = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
      "weight_block_size": [128, 128]}
S1 = {**BASE, "quantization_config": {**QC, "moe_quant_algo": "NVFP4", "ignored_layers": ["mtp.*"]}}
S1_IGNORE = {**BASE, "quantization_config": {**S1["quantization_config"], "ignore": ["mtp.*"]}}

RECORDED = [
    (modelopt_mod, "ModelOptNvFp4FusedMoE"), (modelopt_mod, "ModelOptLinearMethod"), (modelopt_mod, "CkptCtx"),
    (q4, "Mxfp4MoEMethod"), (q41, "Mxfp4MoEMethod"), (q4, "UnquantizedFusedMoEMethod"),
    (q41, "UnquantizedFusedMoEMethod"), (q41, "UnquantizedLinearMethod"), (fp8_mod, "Fp8LinearMethod"),
    (fp8_mod, "Fp8MoEMethod"), (fp8_mod, "UnquantizedLinearMethod"), (fp8_mod, "UnquantizedFusedMoEMethod"),
]


@pytest.fixture(scope="module", autouse=True)
def recorders():
    with pytest.MonkeyPatch.context() as mp:
        for module, name in RECORDED:
            mp.setattr(module, name, type(name, (), {"__init__": lambda self, *a, **k: None}))
        yield


def real_method(config: dict, prefix: str, kind: str, platform: str, model: str) -> str:
    """The quant-method class vLLM 0.33's own code picks."""
    qc, v41 = config["quantization_config"], config["model_type"] == "deepseek_v41"
    cls = q41.DeepseekV4FP8Config if platform in ("cuda", "rocm") else q4.DeepseekV4FP8Config
    assert cls.override_quantization_method(dict(qc), None, hf_config=NS(model_type=config["model_type"]))
    # ROCm's amd/model.py class has the CPU class's mapper names and packed mapping
    # (it cannot be imported without a GPU).
    model_class = V41 if v41 else {"cuda": NvidiaV4, "cpu": CpuV4, "rocm": CpuV4}[platform]
    if model == "dspark":
        obj = cls.from_config(dict(qc))
        configure_quant_config(obj, DSparkV41 if v41 else DSparkV4)
    else:
        obj = cls.from_config(dict(qc))
        configure_quant_config(obj, model_class)
        if model == "mtp" and platform == "rocm":
            q4.align_mtp_quant_config(obj, NS(**config))
    hf = NS(**config)
    with set_current_vllm_config(NS(model_config=NS(hf_config=hf, hf_text_config=hf))):
        try:
            method = obj.get_quant_method(bare_layer(kind), prefix)
        except ValueError:
            return "ValueError"
    return "None" if method is None else type(method).__name__


def ours(config: dict, prefix: str, kind: str, platform: str, model: str) -> str:
    return Vllm033(config, platform=platform).builds(prefix, kind=kind, model=model).method


# --- the seeds -------------------------------------------------------------------------

@pytest.mark.parametrize("platform", ["cuda", "cpu", "rocm"])
@pytest.mark.parametrize("prefix", ["model.layers.43.ffn.experts", "layers.43.ffn.experts"])
def test_s1_draft_experts_are_built_nvfp4_on_every_platform(platform, prefix):
    choice = Vllm033(S1, platform=platform).builds(prefix, kind="routed_experts")
    assert choice.method == "ModelOptNvFp4FusedMoE" and choice.scheme.format == s.NVFP4
    assert real_method(S1, prefix, "routed_experts", platform, "mtp") == choice.method


def test_s1_remedy_ignore_list_honoured_only_by_the_v41_class():
    cuda, cpu = Vllm033(S1_IGNORE, platform="cuda"), Vllm033(S1_IGNORE, platform="cpu")
    assert cuda.quant_config_class() == V41_CLASS and cpu.quant_config_class() == V4_CLASS
    draft = cuda.builds("model.layers.43.ffn.experts", kind="routed_experts")
    assert draft.method == "Mxfp4MoEMethod" and "mtp.0.ffn.experts" in draft.reason
    assert cuda.builds("model.layers.42.ffn.experts", kind="routed_experts").method == "ModelOptNvFp4FusedMoE"
    assert cpu.builds("model.layers.43.ffn.experts", kind="routed_experts").method == "ModelOptNvFp4FusedMoE"


def test_ignored_layers_runtime_entry_makes_draft_experts_bf16_not_mxfp4():
    """SCENARIOS S1: an ``ignored_layers`` entry naming the runtime prefix builds BF16."""
    cfg = {**S1, "quantization_config": {**S1["quantization_config"],
                                         "ignored_layers": ["model.layers.43.ffn.experts"]}}
    choice = Vllm033(cfg).builds("model.layers.43.ffn.experts", kind="routed_experts")
    assert choice.method == "UnquantizedFusedMoEMethod" and not choice.quantized


def test_the_target_renames_ignore_lists_and_only_rocm_rekeys_the_mtp_draft():
    cfg = {**S1, "quantization_config": {**S1["quantization_config"],
                                         "ignored_layers": ["mtp.*", "mtp.0.ffn.experts"]}}
    assert Vllm033(cfg).ignored_layers("mtp") == ("model.mtp.*", "model.mtp.0.ffn.experts")
    rocm = Vllm033(cfg, platform="rocm")
    assert rocm.ignored_layers("mtp") == ("model.mtp.*", "model.layers.43.ffn.experts")
    assert rocm.builds("model.layers.43.ffn.experts", kind="routed_experts").method == "UnquantizedFusedMoEMethod"
    assert Vllm033(cfg, draft_method="dspark").ignored_layers("dspark") == ("mtp.*", "mtp.0.ffn.experts")


def test_layers_built_without_quant_config():
    v = Vllm033(S1)
    for prefix, kind in [("model.layers.3.ffn.gate", "linear"), ("lm_head", "head"),
                         ("model.layers.3.attn.compressor.fused_wkv_wgate", "linear")]:
        assert not v.builds(prefix, kind=kind).quantized
    assert v.builds("model.layers.43.head", kind="head").method == "None"  # Fp8Config: no method for heads
    v3 = Vllm033({"model_type": "deepseek_v3", "num_hidden_layers": 2, "num_nextn_predict_layers": 1,
                  "quantization_config": {**QC, "scale_fmt": None}})
    assert not v3.builds("model.layers.1.mlp.gate", kind="linear").quantized  # GateLinear(quant_config=None)
    assert v3.builds("model.layers.1.mlp.gate_up_proj", kind="linear").quantized


def test_s2_compressed_tensors_re_entry_never_reaches_the_draft_tower():
    cfg = {**BASE, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": [r"re:.*mtp\..*", "lm_head"],
        "config_groups": {
            "e": {"targets": [r"re:.*ffn\.experts.*"], "weights": {"num_bits": 4, "type": "float", "group_size": 16,
                                                                     "strategy": "tensor_group"}},
            "a": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                                                     "block_structure": [128, 128]}}}}}
    v = Vllm033(cfg)
    experts = v.builds("model.layers.43.ffn.experts", kind="routed_experts")
    assert experts.method == "CompressedTensorsMoEMethod" and experts.scheme.format == s.NVFP4
    linear = v.builds("model.layers.43.attn.fused_wqa_wkv", kind="linear")
    assert linear.scheme.format == s.FP8_BLOCK and "'Linear'" in linear.reason
    assert not v.builds("lm_head", kind="head").quantized


def test_separate_drafter_gets_the_targets_method_and_target_moe_switch():
    """S4: vLLM feeds the drafter's own dict to the target's class, but reads
    moe_quant_algo / expert_dtype from the target's config."""
    drafter = {**BASE, "quantization_config": dict(QC)}
    v = Vllm033(S1, draft_method="dspark", draft_config=drafter)
    choice = v.builds("model.layers.43.ffn.experts", kind="routed_experts", model="dspark")
    assert choice.method == "ModelOptNvFp4FusedMoE"
    modelopt_target = {**BASE, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    v = Vllm033(modelopt_target, draft_method="dspark", draft_config=drafter)
    assert v.builds("model.layers.43.ffn.experts", kind="routed_experts", model="dspark").method == "ValueError"


def test_class_choice_matches_vllm_registry_on_this_cpu_box():
    assert get_quantization_config("deepseek_v4_fp8") is q4.DeepseekV4FP8Config
    assert Vllm033(S1, platform="cpu").quant_config_class() == V4_CLASS


def test_unknown_and_unquantized():
    v = Vllm033({**BASE, "quantization_config": {"quant_method": "hqq"}})
    assert v.builds("model.layers.1.attn.wo_a", kind="linear").scheme.format == s.UNKNOWN
    v = Vllm033(BASE)
    assert v.quant_config_class() is None and not v.builds("model.layers.1.attn.wo_a", kind="linear").quantized
    with pytest.raises(ValueError, match="platform"):
        Vllm033(BASE, platform="tpu")


# --- differential against the real get_quant_method ---------------------------------------

IGNORED = st.lists(st.sampled_from([
    "mtp.*", "mtp.0.ffn.experts", "mtp.0.ffn.experts.0.w1", "model.layers.{n}.ffn.experts", "layers.{n}.ffn.experts",
    "model.layers.{n}.ffn.experts.0.w1", "model.layers.{n}.attn.wq_a", "model.layers.{n}.attn.wkv",
    "model.layers.{n}.attn.fused_wqa_wkv", "layers.0.attn.wq_a", "layers.0.attn.wkv", "model.layers.{n}.e_proj",
    "mtp.0.e_proj", "mtp.0.attn.wq_a", "layers.1.ffn.shared_experts.w1", "model.layers.1.ffn.shared_experts.w3",
]), max_size=4)
IGNORE = st.one_of(st.none(), st.lists(st.sampled_from(["mtp.*", "mtp.0.*", "mtp.1.*", "layers.1.*", "*experts",
                                                         "MTP.*", "layers.*"]), max_size=3))
PREFIXES = st.sampled_from([
    ("model.layers.{n}.ffn.experts", "routed_experts"), ("layers.{n}.ffn.experts", "routed_experts"),
    ("model.layers.{n1}.ffn.experts", "routed_experts"), ("model.layers.1.ffn.experts", "routed_experts"),
    ("model.layers.0.ffn.experts", "routed_experts"), ("language_model.model.layers.1.ffn.experts", "routed_experts"),
    ("model.layers.{n}.attn.fused_wqa_wkv", "linear"), ("model.layers.0.attn.fused_wqa_wkv", "linear"),
    ("model.layers.{n}.e_proj", "linear"), ("model.layers.1.ffn.shared_experts.gate_up_proj", "linear"),
    ("model.layers.{n}.attn.wo_a", "linear"), ("model.layers.{n}.head", "head"),
])


@st.composite
def cases(draw):
    n = draw(st.integers(2, 61))
    fmt = {"n": n, "n1": n + 1}
    qc = {**QC, "ignored_layers": [x.format(**fmt) for x in draw(IGNORED)]}
    algo = draw(st.sampled_from([None, "NVFP4", "nvfp4", "MXFP4"]))
    if algo:
        qc["moe_quant_algo"] = algo
    ignore = draw(IGNORE)
    if ignore is not None:
        qc["ignore"] = ignore
    qc["weight_block_size"] = draw(st.sampled_from([[128, 128], [32, 32]]))
    platform = draw(st.sampled_from(["cuda", "cpu", "rocm"]))
    model_type = draw(st.sampled_from(["deepseek_v4", "deepseek_v41"])) if platform != "cpu" else "deepseek_v4"
    config = {"model_type": model_type, "num_hidden_layers": n, "num_nextn_predict_layers": draw(st.integers(1, 2)),
              "expert_dtype": draw(st.sampled_from(["fp4", "fp4", "fp8"])), "quantization_config": qc}
    model = draw(st.sampled_from(["target", "mtp", "dspark"] if model_type == "deepseek_v4" else ["target", "dspark"]))
    prefix, kind = draw(PREFIXES)
    return config, prefix.format(**fmt), kind, platform, model


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_builds_equals_vllm_get_quant_method(case):
    assert ours(*case) == real_method(*case), case


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.sampled_from([
    "mtp.*", "mtp.0.ffn.experts", "layers.3.ffn.experts.0.w1", "embed.weight", "head.weight", "norm.weight",
    "hc_head_fn", "layers.1.ffn.shared_experts.w2", "layers.1.attn.wq_a.scale", "layers.1.ffn.experts.3.w2.scale",
    "model.layers.43.ffn.experts", "lm_head", "layers.1.ffn.gate.bias", "mtp.0.head.weight", "x.embed.weight",
]), max_size=6))
def test_rename_equals_vllm_rename_mapper(names):
    real = _make_deepseek_v4_weights_mapper("fp4").get_rename_mapper().apply_list(names)
    assert [deepseek_v4_rename(n) for n in names] == real
    assert WeightsMapper().apply_list(names) == names  # identity mapper sanity


# --- compressed-tensors: differential against CompressedTensorsConfig.get_scheme_dict ------

CT_ARGS = [{"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True},
           {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128], "symmetric": True}]
CT_TARGETS = st.sampled_from([
    "Linear", r"re:.*ffn\.experts\.\d+\.w[123]$", r"re:.*attn\.(wq_a|wq_b|wkv|wo_a|wo_b)$",
    r"re:.*shared_experts\.w[123]$", "re:.*experts.*", "layers.0.attn.wq_b", "model.layers.1.attn.wo_a",
    "lm_head", r"re:.*mtp\..*", "re:.*head$", "layers.1.ffn.shared_experts.w2",
])
CT_IGNORE = st.sampled_from([
    "lm_head", r"re:.*mtp\..*", "re:.*wq_a$", "re:.*wkv$", "layers.0.attn.wq_a", "model.layers.{n}.e_proj",
    "re:.*shared_experts.*", "head", r"re:model\.layers\.{n}\..*", "layers.0.ffn.shared_experts.w1",
])
CT_PREFIXES = st.sampled_from([
    ("model.layers.{n}.ffn.experts", "routed_experts"), ("model.layers.0.ffn.experts", "routed_experts"),
    ("model.layers.0.attn.fused_wqa_wkv", "linear"), ("model.layers.{n}.attn.fused_wqa_wkv", "linear"),
    ("model.layers.0.attn.wq_b", "linear"), ("model.layers.1.attn.wo_a", "linear"),
    ("model.layers.{n}.e_proj", "linear"), ("model.layers.0.ffn.shared_experts.gate_up_proj", "linear"),
    ("model.layers.1.ffn.shared_experts.down_proj", "linear"), ("lm_head", "head"), ("model.layers.{n}.head", "head"),
])


@st.composite
def ct_cases(draw):
    n = draw(st.integers(2, 8))
    groups = {f"group_{g}": {"targets": draw(st.lists(CT_TARGETS, min_size=1, max_size=3, unique=True)),
                             "weights": dict(draw(st.sampled_from(CT_ARGS)))}
              for g in range(draw(st.integers(1, 3)))}
    qc = {"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": groups,
          "ignore": [x.format(n=n) for x in draw(st.lists(CT_IGNORE, max_size=3))]}
    config = {**BASE, "num_hidden_layers": n, "quantization_config": qc}
    prefix, kind = draw(CT_PREFIXES)
    return config, prefix.format(n=n), kind, draw(st.sampled_from(["target", "mtp", "dspark"]))


def real_ct_target(config: dict, prefix: str, kind: str, model: str) -> str | None:
    import copy

    from vllm.model_executor.layers.linear import ColumnParallelLinear
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    obj = CompressedTensorsConfig.from_config(copy.deepcopy(config["quantization_config"]))
    configure_quant_config(obj, DSparkV4 if model == "dspark" else NvidiaV4)
    if kind == "routed_experts":
        obj._add_fused_moe_to_target_scheme_map()
        layer, names = object.__new__(RoutedExperts), [f"{prefix}.0.{p}" for p in ("w1", "w3", "w2")]
    else:
        layer = object.__new__(ParallelLMHead if kind == "head" else ColumnParallelLinear)
        names = [prefix]
    try:
        dicts = [obj.get_scheme_dict(layer, n) for n in names]
    except ValueError:
        return "None" if kind == "head" else "ValueError"
    if any(x is not dicts[-1] for x in dicts):
        return "ValueError"
    return next((k for k, v in obj.target_scheme_map.items() if v is dicts[-1]), None)


@settings(max_examples=300, deadline=None)
@given(case=ct_cases())
def test_compressed_tensors_target_equals_vllm_get_scheme_dict(case):
    config, prefix, kind, model = case
    v = Vllm033(config, draft_method="dspark" if model == "dspark" else None)
    try:
        ours_target = v.ct_target(prefix, kind, model)[0]
    except ValueError:
        ours_target = "None" if kind == "head" else "ValueError"
    assert ours_target == real_ct_target(config, prefix, kind, model), case


# --- ModelOpt: differential against ModelOptNvFp4Config.get_quant_method ---------------------

MO_EXCLUDES = st.sampled_from([
    "lm_head", "model.embed_tokens", "model.layers.0.self_attn*", "model.layers.{n}.eh_proj",
    "model.layers.{n}.shared_head.head", "model.layers.{n}.head", "mtp*", "mtp.*", "layers.{n}.*", "*experts*",
    "model.layers.1.mlp.gate_proj", "model.layers.1.mlp.gate_proj*", "model.layers.{n}*", "*self_attn.q_a_proj",
])
MO_PREFIXES = st.sampled_from([
    ("model.layers.0.self_attn.fused_qkv_a_proj", "linear"), ("model.layers.1.self_attn.o_proj", "linear"),
    ("model.layers.1.mlp.gate_up_proj", "linear"), ("model.layers.{n}.mlp.experts", "routed_experts"),
    ("model.layers.1.mlp.experts", "routed_experts"), ("model.layers.{n}.head", "head"), ("lm_head", "head"),
    ("model.layers.{n}.self_attn.fused_qkv_a_proj", "linear"), ("model.embed_tokens", "embedding"),
    ("layers.{n}.ffn.experts", "routed_experts"), ("model.layers.{n}.e_proj", "linear"),
])


@st.composite
def modelopt_cases(draw):
    n = draw(st.integers(2, 6))
    family = draw(st.sampled_from(["deepseek_v3", "deepseek_v4"]))
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
          "ignore": [x.format(n=n) for x in draw(st.lists(MO_EXCLUDES, max_size=4))]}
    config = {"model_type": family, "num_hidden_layers": n, "num_nextn_predict_layers": 1, "q_lora_rank": 64,
              "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "quantization_config": qc}
    prefix, kind = draw(MO_PREFIXES)
    return config, prefix.format(n=n), kind


def real_modelopt_method(config: dict, prefix: str, kind: str, mp: pytest.MonkeyPatch) -> str:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.models.deepseek_v2 import DeepseekV3ForCausalLM

    rec = {name: type(name, (), {"__init__": lambda self, *a, **k: None})
           for name in ("ModelOptLinearMethod", "ModelOptNvFp4FusedMoE", "UnquantizedLinearMethod")}
    mp.setattr(modelopt_mod, "build_linear_method", lambda *a, **k: rec["ModelOptLinearMethod"]())
    mp.setattr(modelopt_mod.ModelOptNvFp4Config, "FusedMoEMethodCls", rec["ModelOptNvFp4FusedMoE"])
    mp.setattr(modelopt_mod, "UnquantizedLinearMethod", rec["UnquantizedLinearMethod"])
    obj = modelopt_mod.ModelOptNvFp4Config.from_config(dict(config["quantization_config"]))
    if config["model_type"] == "deepseek_v3":
        configure_quant_config(obj, DeepseekV3ForCausalLM)
        # DeepseekV2ForCausalLM.__init__ adds fused_qkv_a_proj to the shared dict (q_lora_rank set)
        obj.packed_modules_mapping = {**obj.packed_modules_mapping,
                                      "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"]}
    else:
        configure_quant_config(obj, NvidiaV4)
    cls = {"linear": LinearBase, "routed_experts": RoutedExperts, "head": ParallelLMHead,
           "embedding": VocabParallelEmbedding}[kind]
    layer = object.__new__(cls)
    layer.__dict__["moe_config"] = None
    try:
        method = obj.get_quant_method(layer, prefix)
    except ValueError:
        return "ValueError"
    return "None" if method is None else type(method).__name__


@settings(max_examples=200, deadline=None)
@given(case=modelopt_cases())
def test_modelopt_builds_equals_vllm_get_quant_method(case):
    config, prefix, kind = case
    choice = Vllm033(config).builds(prefix, kind=kind, model="target")
    # Layers the model constructs with quant_config=None never reach get_quant_method.
    assume(not choice.reason.startswith("the model builds this layer with quant_config=None"))
    with pytest.MonkeyPatch.context() as mp:
        real = real_modelopt_method(config, prefix, kind, mp)
    assert choice.method == real, case


def test_v3_modelopt_mtp_head_is_quantized_though_its_hf_name_is_excluded():
    """FORMATS: ModelOpt quantizes ParallelLMHead unless excluded; the MTP head's quant
    prefix is ``model.layers.{N}.head``, the exclude list names ``...shared_head.head``."""
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "num_nextn_predict_layers": 1, "q_lora_rank": 64,
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "ignore": ["lm_head", "model.layers.2.shared_head.head", "model.layers.2.eh_proj"]}}
    v = Vllm033(cfg)
    assert v.builds("model.layers.2.head", kind="head").scheme.format == s.NVFP4
    assert not v.builds("lm_head", kind="head").quantized
    assert not v.builds("model.layers.2.eh_proj", kind="linear").quantized  # nn.Linear: no quant method at all


def test_eagle_drafter_routes_by_its_own_config():
    target = {"model_type": "llama", "num_hidden_layers": 32, "quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
    drafter = {"model_type": "llama", "num_hidden_layers": 1}
    v = Vllm033(target, draft_method="eagle3", draft_config=drafter)
    assert v.builds("model.layers.32.self_attn.qkv_proj", kind="linear").method == "UnquantizedLinearMethod"
    assert v.builds("model.layers.3.self_attn.qkv_proj", kind="linear").scheme.format == s.FP8_BLOCK


def test_dspark_heads_are_built_as_the_dspark_models_build_them():
    """qwen3_dspark.py: the Markov head's markov_w1 is an nn.Embedding and the confidence
    head a float32 ReplicatedLinear, both without a quant config; markov_w2 is a
    ParallelLMHead that Qwen3 DSpark gives its quant config and DeepSeek-V4's DSpark
    (deepseek_v4/nvidia/dspark.py builds DSparkMarkovHead without one) does not."""
    import inspect

    import vllm.model_executor.models.qwen3_dspark as q3
    from vllm.models.deepseek_v4.nvidia.dspark import DSparkDeepseekV4Model

    from specguard.engines.vllm.v0_33 import Vllm033

    def markov_call(src: str) -> str:  # the arguments of the DSparkMarkovHead(...) call
        return src.split("DSparkMarkovHead(", 1)[1].split("\n        )", 1)[0]

    assert "quant_config=self.quant_config" in markov_call(inspect.getsource(q3.Qwen3DSparkModel.__init__))
    assert "quant_config" not in markov_call(inspect.getsource(DSparkDeepseekV4Model.__init__))
    qwen = Vllm033({"model_type": "qwen3", "num_hidden_layers": 2,
                    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    v4 = Vllm033({"model_type": "deepseek_v4", "num_hidden_layers": 2, "expert_dtype": "fp4",
                  "dspark_target_layer_ids": [0, 1],
                  "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    for engine in (qwen, v4):
        assert engine.built_without_quant_config("model.markov_head.markov_w1", "embedding")
        assert engine.built_without_quant_config("model.confidence_head.proj", "linear")
    assert not qwen.built_without_quant_config("model.markov_head.markov_w2", "head")
    assert v4.built_without_quant_config("model.markov_head.markov_w2", "head")
