"""Installed by scripts/engines.sh as .engines/torchvision-0.28.0/sitecustomize.py.

That overlay's torchvision has its CUDA-linked ``_C`` removed, so the two op schemas its
Python side registers fakes for must exist before it imports. The plan recorder defines them
in its own process (``recorder.torchvision_prelude``), but vLLM also inspects models in fresh
subprocesses that inherit PYTHONPATH: without this hook, their ``import torchvision`` (through
transformers' image utils) fails and vLLM reports "failed to be inspected". It runs only on the
first ``import torchvision``; every other import passes through untouched."""

import sys

_KEPT = []


class _DefineTorchvisionOps:
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        lib = torch.library.Library("torchvision", "FRAGMENT")
        for schema in ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                       "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"):
            try:
                lib.define(schema)
            except RuntimeError:  # already defined (recorder.torchvision_prelude ran first)
                pass
        _KEPT.append(lib)
        return None  # the normal finders import torchvision itself


sys.meta_path.insert(0, _DefineTorchvisionOps())
