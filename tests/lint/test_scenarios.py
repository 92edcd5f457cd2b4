"""The full finding set of every scenario: a new false alarm, or a lost finding, fails here."""

from __future__ import annotations

import pytest

from specguard.lint import lint
from tests.conftest import resolvers_for

# docs/scenarios.md's right answers, as rule codes.
EXPECTED = {
    "s1": {"SG101", "SG201", "SG202"},
    "s1-dspark": {"SG101", "SG201", "SG202"},
    "s1-u8": {"SG101", "SG201", "SG202", "SG402"},
    "s2": {"SG101", "SG203"},
    "s3": set(),
    "s3-fp8": set(),
    "s4": {"SG201", "SG202"},
    "s5": {"SG101", "SG202"},
    "s6": set(),
    "s6-bf16": {"SG203"},  # Fp8Config builds the BF16 draft FP8 (tests/integrations/test_vllm_fp8_plugin.py)
    "s7": {"SG301"},
    "s8": set(),
    "s8-nvfp4": set(),
    # Qwen3.5 / 3.6 (issue 19; docs/qwen3_5.md)
    "q0": set(),
    "q1": {"SG203"},
    "q1-dense": set(),  # vLLM 0.33's header scan keeps the BF16 MTP linears unquantized
    "q1-listed": {"SG203"},
    "q2": {"SG303", "SG601"},
    "q3": {"SG702"},
    "q4": {"SG204"},
    "q4-fc": {"SG203"},
    "q0-ct": set(),
}
NVFP4_PER_TENSOR = ["w13_weight_scale_2", "w2_weight_scale_2", "w13_input_scale", "w2_input_scale"]


def test_every_scenario_has_an_expectation(scenarios):
    assert set(scenarios) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_finding_set(scenarios, name):
    result = lint(resolvers_for(scenarios[name]))
    got = {f.code for f in result.findings}
    assert got == EXPECTED[name], [f"{f.code}: {f.message}" for f in result.findings]


@pytest.mark.parametrize("name", ["s1", "s1-u8", "s1-dspark", "s4"])
def test_misrouted_draft_experts_are_exactly_the_draft_experts(scenarios, name):
    info = scenarios[name]
    result = lint(resolvers_for(info))
    sg201 = [f for f in result.findings if f.code == "SG201"]
    named = {m for f in sg201 for m in f.modules}
    expected = {m for m, e in {**info.expected, **info.drafter_expected}.items()
                if e.role == "draft" and ".experts." in m}
    assert named == expected


@pytest.mark.parametrize("name", ["s1", "s5"])
def test_uninitialized_parameters_named(scenarios, name):
    f = next(f for f in lint(resolvers_for(scenarios[name])).findings if f.code == "SG202")
    assert f.data["engine_parameters"] == NVFP4_PER_TENSOR
    assert f.data["missing"] == ["weight_scale_2", "input_scale"]


def test_dead_ignore_pattern_dropped_where_the_planner_repairs(scenarios):
    s2 = next(f for f in lint(resolvers_for(scenarios["s2"])).findings if f.code == "SG101")
    assert s2.data["pattern"] == r"re:.*mtp\..*"
    assert all(p.startswith("model.layers.") for p in s2.data["runtime_prefixes"])
    # the repair planner re-routes the modules it was meant for (SG203's fix); SG101 drops it
    assert str(s2.fix).startswith('remove "re:.*mtp\\\\..*" from ') and s2.fix.applicability == "safe"
    assert s2.as_dict()["edits"] == [{"file": "config.json", "path": ["quantization_config", "ignore"],
                                      "op": "discard", "value": [r"re:.*mtp\..*"], "index": None}]
    s1 = next(f for f in lint(resolvers_for(scenarios["s1"])).findings if f.code == "SG101")
    assert s1.data["pattern"] == "mtp.*" and str(s1.fix).startswith('remove "mtp.*" from ')


def test_header_only_rules_read_no_bytes(scenarios):
    result = lint(resolvers_for(scenarios["s1"]))
    from specguard.lint import RULES

    for code, n in result.bytes_by_rule.items():
        if not RULES[code].reads_bytes:
            assert n == 0, code
    assert result.bytes_by_rule["SG401"] > 0
    assert result.bytes_read < result.checkpoint_bytes


def test_select_and_ignore(scenarios):
    rs = resolvers_for(scenarios["s1"])
    assert {f.code for f in lint(rs, select_codes=["SG2"]).findings} == {"SG201", "SG202"}
    assert {f.code for f in lint(rs, ignore_codes=["SG2", "SG101"]).findings} == set()


def test_the_fix_lint_recommends_for_s1_clears_it(scenarios, tmp_path):
    """SG101/SG201 advise a ModelOpt-style `ignore` list; applied, nothing is left to report."""
    import json
    import shutil

    from specguard.resolve import Resolver

    fixed = tmp_path / "s1-fixed"
    shutil.copytree(scenarios["s1"].path, fixed)
    cfg = json.loads((fixed / "config.json").read_text())
    q = cfg["quantization_config"]
    q.pop("ignored_layers")
    q["ignore"] = ["mtp.*"]
    (fixed / "config.json").write_text(json.dumps(cfg))
    r = Resolver.open(fixed)
    assert [f.code for f in lint([r]).findings] == []
    assert all(rt.verdict == "ok" for rt in r.routes())


# Issue 12 item 1: other shapes than the factory's default. "one-block": every FP8 weight
# fits one 128x128 block (a [1, 1] scale reads per-tensor and block-wise alike: the claim
# wins); "odd": dims that are not multiples of the block (partial edge blocks).
SIZED = ["s1", "s1-u8", "s2", "s3", "s3-fp8", "s6", "s8-nvfp4"]


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    from specguard.factory import write_scenario

    root = tmp_path_factory.mktemp("sized")
    return {(size, name): write_scenario(name, root / size / name, size=size)
            for size in ("one-block", "odd") for name in SIZED}


@pytest.mark.parametrize("size", ["one-block", "odd"])
@pytest.mark.parametrize("name", SIZED)
def test_findings_do_not_depend_on_the_sizes(sized, size, name):
    got = {f.code for f in lint(resolvers_for(sized[(size, name)])).findings}
    # SG502: odd dims leave a partial FP8 block along the input dim (a true fact of those shapes)
    expected = EXPECTED[name] | ({"SG502"} if size == "odd" and name != "s8-nvfp4" else set())
    assert got == expected


def test_one_block_weights_read_as_declared(sized):
    from specguard.resolve import Resolver

    r = Resolver.open(sized[("one-block", "s3")].path)
    rt = r.route("model.layers.0.attn.fused_wqa_wkv")
    assert rt.verdict == "ok" and rt.stored.format == "fp8_block"
    assert any(x.format == "fp8_tensor" for x in rt.stored.readings)


def test_v41_style_ignore_list_lints_clean(scenarios, tmp_path):
    """Issue 12 item 7: a ModelOpt-style ``ignore`` as V4.1 conversions write it. vLLM 0.33's
    V4.1 quant config matches it against routed-expert names only (``_is_nvfp4_expert_layer``):
    ``mtp.*`` routes the draft experts to MXFP4; the non-expert entries are never read and
    change nothing, so none is a dead pattern."""
    import json
    import shutil

    from specguard.resolve import Resolver

    d = tmp_path / "s1-v41-ignore"
    shutil.copytree(scenarios["s1"].path, d)
    cfg = json.loads((d / "config.json").read_text())
    q = cfg["quantization_config"]
    del q["ignored_layers"]
    q["ignore"] = ["*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"]
    (d / "config.json").write_text(json.dumps(cfg))
    findings = lint([Resolver.open(d)]).findings
    assert not findings, [f"{f.code}: {f.message}" for f in findings]


@pytest.mark.parametrize("name", ["s1", "s4", "s5"])
def test_lint_says_what_route_says_is_declared(scenarios, name):
    """Issue 12 item 6: a finding's "declared" is route's "declared as", never what the engine builds."""
    rs = resolvers_for(scenarios[name])
    declared = {rt.prefix: rt.declared.scheme.short() for r in rs for rt in r.routes() if rt.declared}
    for f in lint(rs).findings:
        if f.code != "SG201":
            continue
        shown = f.message.split("; declared ", 1)[1].split(" by ", 1)[0]
        assert {declared[p] for p in f.data["runtime_prefixes"]} == {shown}, f.message


@pytest.mark.parametrize("name", sorted(n for n, codes in EXPECTED.items() if any(c.startswith("SG2") for c in codes)))
def test_routing_findings_name_modules_one_way(scenarios, name):
    """Issue 24: every SG2xx finding lists checkpoint names in ``modules`` and the engine's
    runtime prefixes in ``data["runtime_prefixes"]`` (SG203 had only the first, while its fix
    targets the second): the modules are exactly those behind the prefixes, and the fix targets them."""
    rs = resolvers_for(scenarios[name])
    behind = {rt.prefix: set(rt.checkpoint_names) for r in rs for rt in r.routes()}
    for f in lint(rs).findings:
        if not f.code.startswith("SG2"):
            continue
        prefixes = f.data["runtime_prefixes"]
        assert set(f.modules) == {n for p in prefixes for n in behind[p]}, f.message
        if f.fix is not None and f.fix.targets:
            assert set(prefixes) <= set(f.fix.targets), f.message
