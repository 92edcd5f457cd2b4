"""GPTQ ``dynamic`` claims read with GPTQ's own order: the first rule that matches decides
(gptq_utils.get_dynamic_override), positive or negative."""

from __future__ import annotations

from specguard.declared import parse_declared
from specguard.formats import scheme as s

BASE = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}


def _claim(dynamic: dict, name: str = "mtp.layers.0.mlp.experts"):
    return parse_declared({"quantization_config": {**BASE, "dynamic": dynamic}}).scheme_for(name, kind="routed_experts")


def test_an_earlier_positive_rule_shadows_a_later_negative_one():
    claim = _claim({"+:.*mtp.*": {"bits": 8}, "-:.*mtp.*": {}})
    assert claim.scheme.format == s.INT8_GROUP and "+:.*mtp.*" in claim.source


def test_an_earlier_negative_rule_wins():
    assert not _claim({"-:.*mtp.*": {}, "+:.*mtp.*": {"bits": 8}}).quantized


def test_per_module_override_of_the_first_positive_match():
    claim = _claim({"+:.*experts.*": {"group_size": 64}, "+:.*mtp.*": {"bits": 8}})
    assert (claim.scheme.format, claim.scheme.group_size) == (s.INT4_GROUP, 64)


def test_a_dynamic_that_is_not_an_object_is_bad_input():
    # gptq_utils.get_dynamic_override calls dynamic.items(): vLLM cannot read a list
    import pytest

    from specguard.errors import ConfigError
    with pytest.raises(ConfigError, match="dynamic"):
        _claim([None])  # type: ignore[arg-type]
