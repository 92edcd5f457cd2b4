"""One tensor-parallel rank of S1's MTP draft load: vLLM 0.33's real classes on CPU, two gloo ranks.

    python -m tests.integrations.tp_rank RANK WORLD STORE CHECKPOINT

Each rank loads the draft twice: as vLLM 0.33 does (LoadGuard reporting) and with the specguard
plugin installed (fix mode, LoadGuard raising). Prints one ``RESULT {json}`` line: per load, the
method built for the draft experts, what LoadGuard found, and whether every loaded shard equals
this rank's slice of the checkpoint's tensors (read with safetensors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.integrations import vllm_harness as H

EXPERTS = "model.layers.2.mtp_block.ffn.experts.routed_experts."


def init_ranks(vllm_config, rank: int, world: int, store: str) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    vllm_config.parallel_config.tensor_parallel_size = world
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank,
                                     distributed_init_method=f"file://{store}", backend="gloo")
        ensure_model_parallel_initialized(world, 1)


def expected_slices(ckpt: Path, rank: int, world: int) -> dict[str, object]:
    """This rank's part of each expert tensor: w1/w3 split by output rows, w2 by input columns."""
    import torch
    from safetensors import safe_open

    out: dict[str, object] = {}
    for shard in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118
                if not k.startswith("mtp.0.ffn.experts."):
                    continue
                t = f.get_tensor(k).view(torch.uint8)
                if ".w2." in k:
                    n = t.shape[1] // world
                    out[k] = t[:, rank * n:(rank + 1) * n]
                else:
                    n = t.shape[0] // world
                    out[k] = t[rank * n:(rank + 1) * n]
    return out


def compare(model, want: dict[str, object], experts: int) -> bool:
    import torch

    p = {n.removeprefix(EXPERTS): t for n, t in model.named_parameters() if n.startswith(EXPERTS)}
    ok = True
    for e in range(experts):
        t = {k.removeprefix(f"mtp.0.ffn.experts.{e}."): v for k, v in want.items()
             if k.startswith(f"mtp.0.ffn.experts.{e}.")}
        half = t["w1.weight"].shape[0]
        ok &= torch.equal(p["w13_weight"][e, :half], t["w1.weight"])
        ok &= torch.equal(p["w13_weight"][e, half:], t["w3.weight"])
        ok &= torch.equal(p["w2_weight"][e], t["w2.weight"])
        ok &= torch.equal(p["w13_weight_scale"][e, :half], t["w1.scale"])
        ok &= torch.equal(p["w13_weight_scale"][e, half:], t["w3.scale"])
        ok &= torch.equal(p["w2_weight_scale"][e], t["w2.scale"])
    return bool(ok)


def plugin_load(cfg, ckpt: str) -> tuple[object, dict]:
    """The draft built and loaded with the plugin installed (fix mode, LoadGuard raising)."""
    from specguard.integrations.vllm import installed, loading, routing

    out: dict = {}
    with installed():
        model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
        out["decisions"] = [f"{d.prefix}:{d.routed}" for d in routing.take_decisions()]
        try:
            with loading.draft_load(ckpt):
                H.load_draft_weights(cfg, model)
            out["guard"] = "clean"
        except loading.DraftLoadError as e:
            out["guard"] = sorted(e.report.names("never_written"))
    return model, out


def vllm_load(cfg) -> tuple[object, dict]:
    """The draft as vLLM 0.33 builds and loads it, LoadGuard reporting what stays unwritten."""
    from specguard.guard import LoadGuard

    model = H.mtp_draft_model(cfg, H.quant_config(cfg, "cuda"))
    guard = LoadGuard(model, policy="report", include=[f"{EXPERTS}*"])
    with guard:
        H.load_draft_weights(cfg, model)
    never = guard.report.names("never_written")
    return model, {"guard": "clean" if not never else sorted(never)}


def describe(model, out: dict, ckpt: str, rank: int, world: int) -> dict:
    from specguard import factory

    experts = next(m for m in model.modules() if type(m).__name__ == "RoutedExperts")
    out["method"] = type(experts.quant_method).__name__
    out["shapes"] = {n.removeprefix(EXPERTS): list(t.shape) for n, t in model.named_parameters()
                     if n.startswith(EXPERTS)}
    if out["method"] == "Mxfp4MoEMethod":
        out["slices_equal"] = compare(model, expected_slices(Path(ckpt), rank, world),
                                      factory.SIZES["tiny"].experts)
    return out


def main(rank: int, world: int, store: str, ckpt: str) -> dict:
    H.set_cpu_env()
    cfg = H.engine_config(ckpt, {"method": "mtp", "num_speculative_tokens": 1})
    init_ranks(cfg, rank, world, store)
    with H.cpu_kernel_checks_off():
        before = describe(*vllm_load(cfg), ckpt, rank, world)
        after = describe(*plugin_load(cfg, ckpt), ckpt, rank, world)
    return {"rank": rank, "vllm": before, "plugin": after}


if __name__ == "__main__":
    r, w, store, ckpt = sys.argv[1:5]
    print("RESULT " + json.dumps(main(int(r), int(w), store, ckpt)), flush=True)
