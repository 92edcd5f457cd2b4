"""torchvision's two op schemas, for a torchvision whose CUDA-linked ``_C`` is removed.

The torchvision wheels on this index are CUDA builds; the overlays scripts/engines.sh installs
(``.engines/torchvision-0.28.0`` for vLLM's Qwen3.5 plans, and SGLang's own copy) drop ``_C``,
which needs libtorch_cuda, so the schemas its Python side registers fakes for must exist before
it imports. Nothing torchvision runs here builds a layer. Callers: the vLLM plan recorder
(``recorder.torchvision_prelude``), the SGLang recorder, and, as a file, the overlay's
``sitecustomize.py``: scripts/engines.sh copies this module there, where it runs at interpreter
start (vLLM's model-inspection subprocesses inherit PYTHONPATH) and defines the schemas on the
first ``import torchvision``; so it imports nothing of specguard.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
           "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_KEPT: list[Any] = []  # the op library stays alive for the process


def define_torchvision_ops() -> None:
    """Define ``torchvision::nms`` and ``torchvision::qnms``; one defined already is left as it is."""
    import torch

    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in SCHEMAS:
        with contextlib.suppress(RuntimeError):  # defined already (the sitecustomize hook ran first)
            lib.define(schema)
    _KEPT.append(lib)


class DefineOnFirstImport:
    """A meta-path finder that defines the schemas when ``torchvision`` is first looked up, then
    steps aside (every other import passes through untouched; the normal finders do the import)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            define_torchvision_ops()


if __name__ == "sitecustomize":  # the overlay's copy, run by site at interpreter start
    sys.meta_path.insert(0, DefineOnFirstImport())
