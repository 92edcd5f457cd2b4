"""Finding texts say exactly what they list: a run-length label names only modules that
exist, and SG203 speaks of a draft only where there is one
(issue 26: a Quark MoE export read "9 module(s)" beside a shorter list, with a fix about
a draft the checkpoint does not have)."""

from __future__ import annotations

import re
from pathlib import Path

from specguard.lint import lint
from specguard.lint.context import describe
from specguard.resolve import Resolver

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"


def _expand(label: str) -> int:
    """How many modules one label stands for: the product of its ranges' sizes and leaf counts."""
    n = 1
    for part in label.split(" · "):
        words = part.split(" ")
        nums = re.findall(r"(\d+)(?:-(\d+))?", words[-1]) if len(words) > 1 else []
        if nums:
            n *= sum(int(b or a) - int(a) + 1 for a, b in nums)
        elif "," in part:
            n *= len(part.split(","))
    return n


def test_labels_never_stand_for_modules_that_do_not_exist():
    names = ["model.layers.1.mlp.experts", "model.layers.1.mlp.gate", "model.layers.2.mlp.experts",
             "model.layers.3.mlp.experts", "model.layers.3.mlp.gate"]
    text = describe(names)
    assert text == "model.layers 1,3 · mlp · experts,gate; model.layers 2 · mlp · experts"
    assert sum(_expand(x) for x in text.split("; ")) == len(names)


def test_sg203_on_a_quark_moe_export_counts_what_it_lists_and_names_no_draft():
    r = Resolver.open(PRODUCERS / "quark_int8")
    (f,) = [f for f in lint([r]).findings if f.code == "SG203"]
    count = int(re.search(r"(\d+) main module\(s\)", f.message).group(1))
    listed = f.message.rsplit("): ", 1)[1]
    assert sum(_expand(x) for x in listed.split("; ")) == count  # runtime modules, as listed
    assert f.fix is not None and "draft" not in f.fix.message


def test_misroute_text_says_what_each_stack_reads(tmp_path):
    """Qwen3-Next FP8's experts are built by Fp8Config, which reads no expert_dtype (fp8.py
    Fp8Config.get_quant_method): its SG203 text must not borrow DeepSeek-V4's wording."""
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("published_sparse", root / "scripts" / "published_sparse.py")
    published = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_sparse", published)
    spec.loader.exec_module(published)
    path = published.build("qwen3-next-fp8-mtp-bf16-not-excluded", tmp_path / "qn", 4)
    sg203 = [f for f in lint([Resolver.open(path)]).findings if f.code == "SG203"]
    experts = [f for f in sg203 if "experts" in f.message]
    assert experts and all("Fp8Config" in f.message for f in sg203)
    assert not [f.message for f in sg203 if "expert_dtype" in f.message]
