"""Resolver on the factory's scenarios: the right answer of docs/scenarios.md per module."""

from __future__ import annotations

import threading
from unittest import mock

import pytest

from specguard.checkpoint import source
from specguard.formats import scheme as s
from specguard.resolve import MISROUTED, MISSING, OK, Resolver, UnknownPrefixError
from tests.conftest import resolvers_for


def _by_prefix(r: Resolver):
    return {rt.prefix: rt for rt in r.routes()}


@pytest.mark.parametrize("name", ["s1", "s1-u8", "s1-dspark", "s2", "s3", "s3-fp8", "s5", "s6", "s8", "s8-nvfp4"])
def test_build_is_the_stored_format_of_every_module(scenarios, name):
    """specguard builds each runtime module as its checkpoint modules are stored (the factory's record)."""
    info = scenarios[name]
    (r,) = resolvers_for(info)
    for rt in r.routes():
        for ckpt_name in rt.checkpoint_names:
            assert rt.build.format == info.expected[ckpt_name].format, (rt.prefix, ckpt_name)


def test_s1_vllm_builds_nvfp4_for_mxfp4_draft_experts(scenarios):
    (r,) = resolvers_for(scenarios["s1"])
    routes = _by_prefix(r)
    n = r.layout.num_hidden_layers
    draft = routes[f"model.layers.{n}.ffn.experts"]
    assert (draft.stored.format, draft.vllm.scheme.format, draft.verdict) == (s.MXFP4, s.NVFP4, MISROUTED)
    assert draft.vllm.method == "ModelOptNvFp4FusedMoE"
    assert all(routes[f"model.layers.{i}.ffn.experts"].verdict == OK for i in range(n))
    # any spelling of the prefix resolves: the empty-root DSpark form included
    assert r.route(f"layers.{n}.ffn.experts") is draft
    assert r.on_disk(f"model.layers.{n}.ffn.experts").format == s.MXFP4


def test_s2_draft_tower_is_bf16(scenarios):
    (r,) = resolvers_for(scenarios["s2"])
    draft = [rt for rt in r.routes() if rt.role.is_draft]
    assert draft and all(rt.build.format == s.BF16 for rt in draft)
    assert any(rt.verdict == MISROUTED and rt.vllm.scheme.quantized for rt in draft)


def test_s3_bare_scale_is_a_block_scale(scenarios):
    (r,) = resolvers_for(scenarios["s3"])
    linears = [rt for rt in r.routes() if rt.kind == "linear" and rt.stored.quantized]
    assert linears and all(rt.stored.format == s.FP8_BLOCK and rt.stored.block == (128, 128) for rt in linears)
    assert all(rt.verdict == OK for rt in r.routes())


def test_s4_drafter_routes_by_its_own_disk(scenarios):
    target, drafter = resolvers_for(scenarios["s4"])
    experts = [rt for rt in drafter.routes() if rt.kind == "routed_experts"]
    assert len(experts) == 3
    for rt in experts:
        assert rt.role.draft_kind == "dspark"
        assert rt.build.format == s.MXFP4  # the drafter's own storage
        assert rt.vllm.scheme.format == s.NVFP4  # vLLM gives the drafter the target's scheme
    assert {rt.stored.format for rt in target.routes() if rt.kind == "routed_experts"} == {s.NVFP4}


def test_s7_absent_draft_layer_is_missing(scenarios):
    (r,) = resolvers_for(scenarios["s7"])
    missing = [rt for rt in r.routes() if rt.verdict == MISSING]
    assert [rt.prefix for rt in missing] == [f"model.layers.{r.layout.num_hidden_layers}"]


def test_s5_missing_scales_named(scenarios):
    (r,) = resolvers_for(scenarios["s5"])
    rt = r.route(f"model.layers.{r.layout.num_hidden_layers}.ffn.experts")
    assert rt.verdict == MISSING and rt.missing == ("input_scale", "weight_scale_2")


def test_one_header_pass_per_checkpoint_across_threads(scenarios):
    Resolver.clear_cache()
    path = scenarios["s3"].path
    with mock.patch.object(source, "read_header", wraps=source.read_header) as spy:
        got: list[Resolver] = []
        threads = [threading.Thread(target=lambda: got.append(Resolver.open(path))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len({id(r) for r in got}) == 1
    shards = len(got[0].checkpoint.files)
    assert spy.call_count == shards


def test_checkpoint_style_names_resolve_to_their_runtime_module(scenarios):
    (r,) = resolvers_for(scenarios["s1"])
    n = r.layout.num_hidden_layers
    draft = r.route(f"model.layers.{n}.ffn.experts")
    assert r.route("mtp.0.ffn.experts") is draft  # the experts' checkpoint names
    assert r.route("mtp.0.ffn.experts.3.w1") is draft  # one of them
    with pytest.raises(UnknownPrefixError, match=r"'mtp.0.ffn' names 4 runtime modules"):
        r.route("mtp.0.ffn")  # experts, gate and two shared-expert projections


@pytest.mark.parametrize("prefix", ["model.layers.43.ffn.experts", "layers.9", "no.such.module"])
def test_a_prefix_the_model_lacks_is_an_error_naming_its_layers(scenarios, prefix):
    (r,) = resolvers_for(scenarios["s1"])
    with pytest.raises(UnknownPrefixError, match=r"is not a module of .* \(layers 0-1, draft layer\(s\) 2\)"):
        r.route(prefix)


def test_a_layer_the_model_has_but_the_disk_lacks_is_missing(scenarios):
    (r,) = resolvers_for(scenarios["s7"])
    n = r.layout.num_hidden_layers
    assert r.route(f"model.layers.{n}.ffn.experts").verdict == MISSING


@pytest.mark.parametrize("name", ["s1", "s1-dspark", "s3"])
def test_a_fix_that_changes_the_draft_count_routes_as_a_fresh_resolver(scenarios, name):
    """SG301/SG302's fixes set the draft layer count: lint re-routes them on the grouping it has
    (every stored module is placed as before), and the routes are a fresh Resolver's."""
    from dataclasses import replace

    (r,) = resolvers_for(scenarios[name])
    cfg = dict(r.checkpoint.config)
    for count in (0, cfg["num_nextn_predict_layers"] + 1):
        edited = {**cfg, "num_nextn_predict_layers": count}
        rerouted = r.with_configs(edited, r.checkpoint.hf_quant_config)
        fresh = Resolver(replace(r.checkpoint, config=edited), table=r.table)
        assert rerouted._groups is r._groups  # the grouping is reused, not rebuilt
        assert list(rerouted.layout.draft_layers) == list(fresh.layout.draft_layers)
        assert rerouted.routes() == fresh.routes()
