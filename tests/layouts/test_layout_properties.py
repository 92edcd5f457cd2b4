"""Property tests over prefix shapes: both roots, with and without ``mtp_block``,
expert indices, several draft layers, num_hidden_layers from 1 to 200."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.layouts import layer_index, layout_for
from specguard.layouts import roles as r

N = st.integers(1, 200)
K = st.integers(1, 4)
EXPERT = st.integers(0, 511)
PROJ = st.sampled_from(["w1", "w2", "w3"])
LEAF = st.sampled_from(["weight", "scale", "weight_scale", "weight_scale_2", "input_scale"])
ROOT = st.sampled_from(["model.", ""])
LINEARS = st.sampled_from(["attn.wq_a", "attn.wkv", "attn.wq_b", "attn.wo_a", "attn.wo_b",
                           "ffn.shared_experts.w1", "ffn.shared_experts.w2", "attn.compressor.wkv"])
FAST = settings(max_examples=150, deadline=None)


@FAST
@given(n=st.integers(0, 10_000), e=EXPERT, root=st.sampled_from(["", "model.", "model.language_model."]),
       tail=st.sampled_from(["", ".ffn.experts.{e}", ".ffn.experts.{e}.w1.weight", ".mlp.experts.{e}.3"]))
def test_layer_index_ignores_expert_and_other_integers(n, e, root, tail):
    assert layer_index(f"{root}layers.{n}{tail.format(e=e)}") == n


@FAST
@given(n=N, k=K, data=st.data(), e=EXPERT, proj=PROJ, leaf=LEAF)
def test_v4_mtp_expert_names_and_prefixes_agree(n, k, data, e, proj, leaf):
    i = data.draw(st.integers(0, k - 1))
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "num_nextn_predict_layers": k})
    name = f"mtp.{i}.ffn.experts.{e}.{proj}.{leaf}"
    want = r.Role(r.DRAFT, r.MTP, n + i, i)
    prefix = f"model.layers.{n + i}.ffn.experts"
    assert layout.runtime_prefix(name) == prefix
    assert layout.parameter_prefix(name) == f"model.layers.{n + i}.mtp_block.ffn.experts.routed_experts"
    # Every spelling of the same module answers the same role: checkpoint name,
    # quant prefix (with and without root, with an expert index), parameter path.
    for spelling in (name, prefix, prefix.removeprefix("model."), f"{prefix}.{e}",
                     layout.parameter_prefix(name)):
        assert layout.role(spelling) == want, spelling


@FAST
@given(n=N, data=st.data(), e=EXPERT, proj=PROJ, leaf=LEAF, lin=LINEARS)
def test_v4_main_layers_stay_main_with_any_expert_index(n, data, e, proj, leaf, lin):
    layer = data.draw(st.integers(0, n - 1))
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "num_nextn_predict_layers": 1})
    for name in (f"layers.{layer}.ffn.experts.{e}.{proj}.{leaf}", f"layers.{layer}.{lin}.{leaf}"):
        assert layout.role(name) == r.Role(r.MAIN, layer=layer)
        assert layout.runtime_prefix(name).startswith(f"model.layers.{layer}.")
        assert layout.role(layout.runtime_prefix(name)) == r.Role(r.MAIN, layer=layer)


@FAST
@given(n=N, k=K, data=st.data(), e=EXPERT, proj=PROJ, root=ROOT, lin=LINEARS)
def test_v4_dspark_both_roots(n, k, data, e, proj, root, lin):
    i = data.draw(st.integers(0, k - 1))
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "n_mtp_layers": k},
                        draft_method="dspark")
    name = f"mtp.{i}.ffn.experts.{e}.{proj}.weight"
    prefix = f"{root}layers.{n + i}.ffn.experts"
    assert prefix in layout.runtime_prefixes(name)
    assert layout.parameter_prefix(name) == f"model.layers.{i}.ffn.experts.routed_experts"
    assert layout.role(prefix) == layout.role(name) == r.Role(r.DRAFT, r.DSPARK, n + i, i)
    lin_name = f"mtp.{i}.{lin}.weight"
    assert all(p.startswith(("model.", "layers.", "context_wkv_proj"))
               for p in layout.runtime_prefixes(lin_name))
    assert layout.role(layout.runtime_prefix(lin_name)).is_draft


@FAST
@given(n=N, k=K, data=st.data(), e=EXPERT, proj=st.sampled_from(["gate_proj", "up_proj", "down_proj"]))
def test_v3_draft_iff_layer_at_least_n(n, k, data, e, proj):
    layer = data.draw(st.integers(0, n + k - 1))
    layout = layout_for({"model_type": "deepseek_v3", "num_hidden_layers": n, "num_nextn_predict_layers": k})
    name = f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"
    role = layout.role(name)
    assert role.is_draft == (layer >= n)
    assert layout.runtime_prefix(name) == f"model.layers.{layer}.mlp.experts"
    assert ("mtp_block" in layout.parameter_prefix(name)) == (layer >= n)


@FAST
@given(n=N, k=K, data=st.data(), model_type=st.sampled_from(["glm4_moe", "mimo_v2", "ernie4_5_moe"]),
       e=EXPERT)
def test_generic_fallback_layer_at_least_n_is_draft(n, k, data, model_type, e):
    layer = data.draw(st.integers(0, n + k - 1))
    layout = layout_for({"model_type": model_type, "num_hidden_layers": n, "num_nextn_predict_layers": k})
    name = f"model.layers.{layer}.mlp.experts.{e}.down_proj.weight"
    assert layout.role(name).is_draft == (layer >= n)
    assert layout.role(layout.runtime_prefix(name)) == layout.role(name)


@settings(max_examples=40, deadline=None)
@given(n=N, k=K, experts=st.integers(1, 6), draft_method=st.sampled_from(["mtp", "dspark"]))
def test_grouping_and_checkpoint_names_are_inverse(n, k, experts, draft_method):
    cfg = {"model_type": "deepseek_v4", "num_hidden_layers": n, "num_nextn_predict_layers": k}
    layout = layout_for(cfg, draft_method=draft_method)
    names = [f"layers.{min(n - 1, 2)}.ffn.experts.{e}.w1.weight" for e in range(experts)]
    for i in range(k):
        names += [f"mtp.{i}.ffn.experts.{e}.{p}.scale" for e in range(experts) for p in ("w1", "w2")]
        names += [f"mtp.{i}.attn.wq_a.weight", f"mtp.{i}.attn.wkv.weight", f"mtp.{i}.attn.wo_b.weight"]
    groups = layout.group_by_runtime_prefix(names)
    assert sum(map(len, groups.values())) == len(names)
    for prefix, members in groups.items():
        assert layout.checkpoint_names(prefix, names) == members
        assert len({layout.role(m) for m in members}) == 1
