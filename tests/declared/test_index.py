"""NameIndex answers exactly what Pattern.matches answers, name by name."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.declared import SEMANTICS, Pattern
from specguard.declared.index import NameIndex

SEGMENTS = ["model", "layers", "0", "1", "12", "mtp", "self_attn", "q_a_proj", "kv_a_proj_with_mqa",
            "fused_qkv_a_proj", "mlp", "experts", "ffn", "gate", "lm_head", "language_model", "w1"]
names = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6).map(".".join)
GLOB = st.sampled_from(["*", "?", ".", "re:", ".*", "[0-9]", "$", "\\."])
texts = st.lists(st.one_of(st.sampled_from(SEGMENTS), GLOB), min_size=1, max_size=6).map(lambda xs: ".".join(xs))


@settings(max_examples=300, deadline=None)
@given(st.lists(names, min_size=1, max_size=30), texts, st.sampled_from(SEMANTICS))
def test_index_agrees_with_matches(pool, text, semantics):
    pat = Pattern(text, semantics, "k")
    index = NameIndex(pool)
    expected = sorted({n for n in pool if pat.matches(n)})
    assert index.matching(pat) == expected
    assert index.any(pat) == bool(expected)


def test_export_shape_patterns():
    pool = [f"model.layers.{i}.self_attn.{m}" for i in range(61) for m in ("q_a_proj", "kv_a_proj_with_mqa",
                                                                          "q_b_proj", "o_proj")]
    index = NameIndex(pool)
    assert index.matching(Pattern("model.layers.1.self_attn.q_a_proj", "modelopt-exclude", "k")) == [
        "model.layers.1.self_attn.q_a_proj"]
    assert len(index.matching(Pattern("model.layers.1*", "modelopt-exclude", "k"))) == 4 * 11
    assert not index.any(Pattern("mtp.*", "vllm-exact", "k"))
