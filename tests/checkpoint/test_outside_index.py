"""Files the index never names are read (the stored truth), a stale copy of an indexed
tensor there is ignored, and the index's own totals are judged without them."""

from __future__ import annotations

import json
import shutil

import numpy as np

from specguard.checkpoint.source import open_checkpoint
from specguard.checkpoint.writer import save_file


def test_unindexed_drafter_file_is_read(scenarios):
    q2 = scenarios["q2"]
    c = open_checkpoint(q2.path)
    drafts = {n for n in q2.tensors if n.startswith("mtp.")}
    assert set(c.outside_index) == drafts and c.unreferenced == ("model_extra_tensors.safetensors",)
    assert {c.tensors[n].file for n in drafts} == {"model_extra_tensors.safetensors"}
    index = json.loads((q2.path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) | drafts == set(c.tensors)


def test_a_stale_copy_outside_the_index_is_skipped(scenarios, tmp_path):
    d = tmp_path / "q0"
    shutil.copytree(scenarios["q0"].path, d)
    name = "model.language_model.norm.weight"
    save_file({name: np.zeros(256, np.float32), "mtp.extra.weight": np.ones(4, np.float32)},
              d / "consolidated.safetensors", {"format": "pt"})
    c = open_checkpoint(d)
    assert c.outside_index == ("mtp.extra.weight",)
    assert c.tensors[name].file != "consolidated.safetensors"


def test_inspect_says_which_tensors_the_index_never_names(scenarios, capsys):
    from specguard.cli import main

    assert main(["inspect", str(scenarios["q2"].path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "; 29 in model_extra_tensors.safetensors, which the index never names" in out
