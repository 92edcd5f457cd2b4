"""Each stack's pattern semantics: pinned with the seeds' examples, and compared
with the real libraries (vLLM 0.33, compressed-tensors 0.17, transformers) on
generated names. The libraries are imported unconditionally (CI installs them)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import compressed_tensors.utils.match as ct_match
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.quantizers.quantizers_utils import should_convert_module
from vllm.model_executor.layers.quantization.compressed_tensors.utils import should_ignore_layer
from vllm.model_executor.layers.quantization.modelopt import ModelOptQuantConfigBase
from vllm.model_executor.layers.quantization.utils.config_utils import is_equal_or_regex_match
from vllm.model_executor.layers.quantization.utils.gptq_utils import get_dynamic_override
from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped
from vllm.model_executor.models.utils import WeightsMapper

from specguard.declared import (
    CT_MATCH,
    FNMATCHCASE,
    GPTQ_DYNAMIC,
    MODELOPT_EXCLUDE,
    TRANSFORMERS_MATCH,
    VLLM_EXACT,
    VLLM_SUBSTRING,
    VLLM_SUFFIX,
    Pattern,
)
from specguard.declared import patterns as p
from specguard.layouts import layout_for

V4 = {"model_type": "deepseek_v4", "num_hidden_layers": 43, "num_nextn_predict_layers": 1}
V4_PACKED = {"gate_up_proj": ["w1", "w3"], "fused_wqa_wkv": ["wq_a", "wkv"], "fused_wkv_wgate": ["wkv", "wgate"]}
S1_CHECKPOINT = ["mtp.0.ffn.experts.0.w1", "mtp.0.ffn.experts.7.w2", "mtp.0.e_proj", "mtp.0.attn.wq_a"]


def _runtime(names: list[str], draft_method: str = "mtp") -> list[str]:
    layout = layout_for({**V4, "n_mtp_layers": 3}, draft_method=draft_method)
    return sorted({q for n in names for q in layout.runtime_prefixes(n)})


# --- the seeds' examples -------------------------------------------------------------

def test_mtp_star_in_ignored_layers_matches_no_runtime_prefix():
    """Seed 001: ``ignored_layers: ["mtp.*"]`` never matches ``model.layers.43.ffn.experts``."""
    mtp_star = Pattern("mtp.*", VLLM_EXACT, "quantization_config.ignored_layers[0]")
    for prefix in _runtime(S1_CHECKPOINT) + _runtime(S1_CHECKPOINT, "dspark"):
        assert not mtp_star.matches(prefix)
        assert not is_layer_skipped(prefix, ["mtp.*"], V4_PACKED)
    # Exact mode is not a wildcard: it does not match the checkpoint names either.
    assert mtp_star.matching(S1_CHECKPOINT) == []


def test_mtp_star_as_modelopt_exclude_matches_checkpoint_names_only():
    mtp_star = Pattern("mtp.*", MODELOPT_EXCLUDE, "hf_quant_config.json:quantization.exclude_modules[0]")
    assert mtp_star.matching(S1_CHECKPOINT) == S1_CHECKPOINT
    assert mtp_star.matching(_runtime(S1_CHECKPOINT)) == []


def test_ct_regex_matches_checkpoint_names_only():
    """Seed 002 / S2: ``re:.*mtp\\..*`` is prefix-anchored ``re.match``."""
    pattern = Pattern(r"re:.*mtp\..*", CT_MATCH, "quantization_config.ignore[0]")
    assert pattern.matching(S1_CHECKPOINT) == S1_CHECKPOINT
    assert pattern.matching(_runtime(S1_CHECKPOINT)) == []
    assert all(ct_match.match_name(n, pattern.text) for n in S1_CHECKPOINT)


def test_ct_regex_is_anchored_at_the_start_not_a_full_match():
    assert Pattern("re:model.layers.43", CT_MATCH, "k").matches("model.layers.43.ffn.experts")
    assert Pattern("re:model.layers.43", CT_MATCH, "k").matches("model.layers.430")
    assert not Pattern("re:layers.43", CT_MATCH, "k").matches("model.layers.43")
    assert not Pattern("model.layers.43", CT_MATCH, "k").matches("model.layers.43.ffn")


def test_ct_class_targets_match_kinds_not_names():
    linear = Pattern("Linear", CT_MATCH, "k")
    assert linear.is_class_target and not linear.matches("model.layers.0.self_attn.q_proj")
    assert linear.matches_kind("linear") and linear.matches_kind("routed_experts") and linear.matches_kind("head")
    assert not linear.matches_kind("embedding")
    assert not Pattern("lm_head", CT_MATCH, "k").is_class_target


def test_vllm_exact_expert_special_case():
    """An experts prefix is skipped when it is a substring of an ``experts`` entry."""
    entry = Pattern("model.layers.43.ffn.experts.0.w1", VLLM_EXACT, "k")
    assert entry.matches("model.layers.43.ffn.experts")
    assert not entry.matches("model.layers.4.ffn.experts")
    assert not Pattern("model.layers.43", VLLM_EXACT, "k").matches("model.layers.43.ffn.experts")


def test_vllm_substring_and_suffix_modes():
    assert Pattern("self_attn", VLLM_SUBSTRING, "k").matches("model.layers.0.self_attn.o_proj")
    assert Pattern("b_proj", VLLM_SUFFIX, "k").matches("model.layers.0.self_attn.b_proj")
    assert not Pattern("b_proj", VLLM_SUFFIX, "k").matches("model.layers.0.self_attn.q_b_proj")


def test_modelopt_rewrite_of_trailing_star():
    assert p.modelopt_rewrite(["mtp*", "mtp.*", "*", "lm_head"]) == ["mtp", "mtp.*", "mtp.*", "*", "lm_head"]
    # Legacy substring: "lm_head" also excludes "model.layers.43.lm_head".
    assert Pattern("lm_head", MODELOPT_EXCLUDE, "k").matches("model.layers.43.lm_head")


def test_v41_ignore_is_case_sensitive_fnmatch():
    assert Pattern("mtp.*", FNMATCHCASE, "k").matches("mtp.0.ffn.experts")
    assert not Pattern("MTP.*", FNMATCHCASE, "k").matches("mtp.0.ffn.experts")
    assert not Pattern("mtp.*", FNMATCHCASE, "k").matches("model.layers.43.ffn.experts")


def test_transformers_modules_to_not_convert():
    assert Pattern("lm_head", TRANSFORMERS_MATCH, "k").matches("lm_head")
    assert Pattern("model.layers.1", TRANSFORMERS_MATCH, "k").matches("model.layers.1.mlp.experts")
    assert Pattern("mlp", TRANSFORMERS_MATCH, "k").matches("block.mlp")  # endswith
    assert not Pattern("mlp", TRANSFORMERS_MATCH, "k").matches("model.layers.1.mlp.experts")


def test_bad_regex_matches_nothing_instead_of_raising():
    assert not Pattern("re:(", CT_MATCH, "k").matches("model.layers.0")


def test_propose_rewrites_checkpoint_patterns_for_runtime_prefixes():
    runtime = _runtime(S1_CHECKPOINT)
    assert Pattern("mtp.*", MODELOPT_EXCLUDE, "k").propose(runtime) == ["model.layers.43.*"]
    assert Pattern("mtp.*", FNMATCHCASE, "k").propose(runtime) == ["model.layers.43.*"]
    ct = Pattern(r"re:.*mtp\..*", CT_MATCH, "k").propose(runtime)
    assert ct == [r"re:model\.layers\.43\."]
    exact = Pattern("mtp.*", VLLM_EXACT, "k").propose(runtime)
    assert exact == runtime  # exact mode has no wildcard: one entry per prefix
    assert all(is_layer_skipped(x, exact, V4_PACKED) for x in runtime)
    dspark = _runtime(S1_CHECKPOINT, "dspark")
    assert Pattern("mtp.*", MODELOPT_EXCLUDE, "k").propose(dspark) == ["layers.43.*", "model.layers.43.*"]
    assert Pattern("x", GPTQ_DYNAMIC, "k").propose(["model.main_proj"]) == [r"-:model\.main_proj$"]


# --- differential tests against the libraries ----------------------------------------

SEGMENTS = st.sampled_from([
    "attn.wq_a", "attn.wkv", "attn.fused_wqa_wkv", "ffn.experts", "ffn.experts.3.w1", "ffn.experts.12.w2",
    "ffn.shared_experts.gate_up_proj", "ffn.shared_experts.w1", "ffn.shared_experts.w3", "e_proj", "head",
    "self_attn.q_proj", "self_attn.qkv_proj", "mlp.gate_up_proj", "mlp.experts", "attn.compressor.wkv",
    "attn.compressor.fused_wkv_wgate", "attn.compressor.wgate",
])
ROOTS = st.sampled_from(
    ["model.layers.{L}.", "layers.{L}.", "mtp.{i}.", "model.mtp.{i}.", "language_model.model.layers.{L}."]
)


@st.composite
def names(draw) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["lm_head", "model.embed_tokens", "model.norm", "mtp", "model"]))
    root = draw(ROOTS).format(L=draw(st.sampled_from([0, 4, 42, 43, 44, 430])), i=draw(st.integers(0, 2)))
    return root + draw(SEGMENTS)


@st.composite
def plain_patterns(draw) -> str:
    """Entries as people write them: exact names, parents, fragments, globs."""
    base = draw(names())
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return base
    if kind == 1:
        return base.rsplit(".", 1)[0]
    if kind == 2:
        return base + "*"
    if kind == 3:
        return base.rsplit(".", 1)[0] + ".*"
    if kind == 4:
        return "*" + base.split(".")[-1]
    if kind == 5:
        return draw(st.sampled_from(["mtp.*", "mtp*", "*experts*", "lm_head", "experts", "model.layers.43*"]))
    parts = base.split(".")
    a = draw(st.integers(0, len(parts) - 1))
    return ".".join(parts[a: a + draw(st.integers(1, 3))])


@st.composite
def regex_patterns(draw) -> str:
    base = draw(names())
    parts = base.split(".")
    frag = re.escape(parts[draw(st.integers(0, len(parts) - 1))])
    return "re:" + draw(st.sampled_from([".*{f}.*", "{f}", ".*{f}$", r".*\.{f}\..*", "model.*{f}"])).format(f=frag)


LISTS = st.lists(plain_patterns(), max_size=5)
FAST = settings(max_examples=300, deadline=None)
_SHARDS = {"fused_wqa_wkv": ("wq_a", "wkv"), "fused_wkv_wgate": ("wkv", "wgate"), "gate_up_proj": ("w1", "w3")}


@st.composite
def name_and_list(draw) -> tuple[str, list[str]]:
    """A name and an entry list that often hits it: the name itself, its parent,
    its shards (some or all), an ``experts`` entry below it."""
    name = draw(names())
    related = [name, name.rsplit(".", 1)[0], name + ".0.w1", name + "*"]
    head, _, leaf = name.rpartition(".")
    related += [f"{head}.{shard}" for shard in _SHARDS.get(leaf, ())]
    extra = draw(st.lists(st.sampled_from(related), max_size=3))
    return name, draw(LISTS) + extra


def _both(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError:
        return "raises"


@FAST
@given(case=name_and_list(), packed=st.sampled_from([{}, V4_PACKED]),
       mode=st.sampled_from(["exact", "substring", "suffix"]))
def test_is_layer_skipped_equals_vllm(case, packed, mode):
    name, ignored = case
    ours = _both(p.vllm_is_layer_skipped, name, ignored, packed, mode)
    assert ours == _both(is_layer_skipped, name, ignored, packed, match_mode=mode)


@FAST
@given(case=name_and_list())
def test_vllm_exact_pattern_decomposes_the_list(case):
    name, ignored = case
    semantics = {"exact": VLLM_EXACT, "substring": VLLM_SUBSTRING, "suffix": VLLM_SUFFIX}
    for mode, sem in semantics.items():
        want = is_layer_skipped(name, ignored, match_mode=mode)
        assert any(Pattern(t, sem, "k").matches(name) for t in ignored) == want


@FAST
@given(case=name_and_list(), packed=st.sampled_from([{}, V4_PACKED]))
def test_modelopt_exclusion_equals_vllm(case, packed):
    name, excludes = case
    config = SimpleNamespace(exclude_modules=list(excludes), packed_modules_mapping=packed)
    ModelOptQuantConfigBase.apply_vllm_mapper(config, WeightsMapper())  # the x* rewrite, identity renames
    want = _both(ModelOptQuantConfigBase.is_layer_excluded, config, name)
    assert _both(p.modelopt_is_excluded, name, p.modelopt_rewrite(excludes), packed) == want
    if not packed and want != "raises":
        assert any(Pattern(t, MODELOPT_EXCLUDE, "k").matches(name) for t in excludes) == want


@FAST
@given(name=names(), target=st.one_of(plain_patterns(), regex_patterns()))
def test_compressed_tensors_match_equals_library_and_vllm(name, target):
    ours = Pattern(target, CT_MATCH, "k").matches(name)
    assert ours == ct_match.match_name(name, target)
    assert ours == is_equal_or_regex_match(name, target)


@FAST
@given(name=names(), ignore=st.lists(st.one_of(plain_patterns(), regex_patterns()), max_size=4))
def test_compressed_tensors_ignore_list_equals_vllm_should_ignore_layer(name, ignore):
    want = should_ignore_layer(name, ignore=ignore)
    assert any(Pattern(t, CT_MATCH, "k").matches(name) for t in ignore) == want


@FAST
@given(name=names(), keys=st.lists(st.one_of(plain_patterns(), regex_patterns().map(lambda r: r[3:])),
                                    max_size=4))
def test_transformers_modules_to_not_convert_equals_library(name, keys):
    keys = [k for k in keys if p._compiled(k) is not None and p._compiled(k + "\\.") is not None]
    want = not should_convert_module(name, keys)
    assert any(Pattern(k, TRANSFORMERS_MATCH, "k").matches(name) for k in keys) == want


@FAST
@given(name=names(), rule=regex_patterns().map(lambda r: r[3:]), negative=st.booleans())
def test_gptq_dynamic_equals_vllm(name, rule, negative):
    key = ("-:" if negative else "+:") + rule
    config = SimpleNamespace(dynamic={key: {"bits": 8}})
    got = get_dynamic_override(config, name, "bits", 4)
    want = (got is False) if negative else (got == 8)
    assert Pattern(key, GPTQ_DYNAMIC, "k").matches(name) == want


def test_unknown_semantics_raise():
    with pytest.raises(ValueError, match="semantics"):
        Pattern("x", "glob", "k").matches("x")
