"""Build vLLM 0.33's real config objects and layers on a CPU-only machine.

Everything here is vLLM's own code path: ``EngineArgs.create_engine_config``
for the VllmConfig, ``VllmConfig.get_quantization_config`` for the quant
config (with the registry asked as on CUDA for the V4.1 class), and the
NVIDIA ``DeepseekV4MoE`` / ``ReplicatedLinear`` layers, which call
``get_quant_method`` exactly as they do when serving.

What is bent to make that possible on CPU is listed in ``cpu_kernel_checks_off``:
only kernel-availability checks, never a routing decision; no kernel runs. The
registry's model-class inspection runs in this process, not a fresh interpreter
(``engine_config``): the same model info, without a second ``import vllm``.
"""

from __future__ import annotations

import atexit
import copy
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# vLLM reads these when first imported; the conftest sets them before any test
# module imports vLLM. VLLM_PLUGINS="" keeps EngineArgs from loading installed
# plugins, so "before" results are vLLM's alone.
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "", "VLLM_USE_V2_MODEL_RUNNER": "1"}


def set_cpu_env() -> None:
    for key, value in CPU_ENV.items():
        os.environ[key] = value


def engine_config(model: str, speculative: dict | None = None, **engine_args: Any) -> Any:
    """The VllmConfig ``vllm serve MODEL --speculative-config ...`` would build, with any other
    ``EngineArgs`` given (the model classes inspected in this process, as the plan recorder does:
    there is no CUDA to keep out)."""
    from vllm.engine.arg_utils import EngineArgs

    from specguard.engines.vllm.recorder import inspect_in_process

    args = EngineArgs(model=model, skip_tokenizer_init=True, speculative_config=speculative, **engine_args)
    with inspect_in_process():
        return args.create_engine_config()


@contextmanager
def cuda_registry() -> Iterator[None]:
    """Let vLLM's quantization registry answer as on CUDA (it then returns the V4.1 class)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    original = cls.__dict__.get("is_cuda")
    cls.is_cuda = lambda self: True  # type: ignore[method-assign]
    try:
        yield
    finally:
        if original is None:
            del cls.is_cuda
        else:
            cls.is_cuda = original  # type: ignore[method-assign]


def quant_config(vllm_config: Any, registry: str, model_config: Any = None) -> Any:
    """vLLM's quant config for ``model_config`` (default: the target's), from the
    ``cpu`` registry (vllm.models.deepseek_v4) or the ``cuda`` one (deepseek_v41),
    configured for the NVIDIA DeepSeek-V4 model class as ``initialize_model`` does
    (its checkpoint-to-vLLM name mapper and packed-module mapping)."""
    from vllm.config import VllmConfig
    from vllm.model_executor.model_loader.utils import configure_quant_config
    from vllm.models.deepseek_v4.nvidia.model import DeepseekV4ForCausalLM

    model_config = model_config or vllm_config.model_config
    if registry == "cpu":
        quant = VllmConfig.get_quantization_config(model_config, vllm_config.load_config)
    else:
        with cuda_registry():
            quant = VllmConfig.get_quantization_config(model_config, vllm_config.load_config)
    if quant is not None:  # None: the checkpoint declares no quantization
        configure_quant_config(quant, DeepseekV4ForCausalLM)
    return quant


def with_quant_config(vllm_config: Any, quant: Any) -> Any:
    """A shallow copy of ``vllm_config`` carrying ``quant`` (as vLLM's DSpark loader does)."""
    out = copy.copy(vllm_config)
    out.quant_config = quant
    return out


@contextmanager
def cpu_kernel_checks_off() -> Iterator[None]:
    """Make kernel selection succeed on a CPU without AMX or Triton.

    vLLM picks a kernel backend while constructing a quant method or creating
    its weights; on this machine no backend qualifies, so construction would
    fail before any routing can be observed. These four checks answer only
    "can this device run the kernel"; no kernel is ever called by the tests.
    """
    from vllm.model_executor.kernels.linear.scaled_mm.cpu import CPUFp8BlockScaledMMKernel
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUExpertsInt4, CPUExpertsMxfp4
    from vllm.model_executor.layers.fused_moe.experts.nvfp4_emulation_moe import (
        Nvfp4QuantizationEmulationTritonExperts,
    )

    saved = [
        (Nvfp4QuantizationEmulationTritonExperts, "_supports_current_device"),
        (CPUExpertsMxfp4, "_supports_current_device"),
        (CPUExpertsInt4, "_supports_current_device"),  # needs AMX: Intel Xeons have it, AMD EPYCs not
        (CPUFp8BlockScaledMMKernel, "is_supported"),
    ]
    originals = [(cls, name, cls.__dict__.get(name)) for cls, name in saved]
    Nvfp4QuantizationEmulationTritonExperts._supports_current_device = staticmethod(lambda: True)
    CPUExpertsMxfp4._supports_current_device = staticmethod(lambda: True)
    CPUExpertsInt4._supports_current_device = staticmethod(lambda: True)
    CPUFp8BlockScaledMMKernel.is_supported = classmethod(lambda cls, cc=None: (True, None))
    try:
        yield
    finally:
        for cls, name, value in originals:
            if value is None:  # inherited: drop the override
                delattr(cls, name)
            else:
                setattr(cls, name, value)


def init_single_rank(vllm_config: Any) -> None:
    """A one-rank gloo process group: vLLM's parallel layers ask for TP/EP ranks.

    Made once per process, for every model the process builds: vLLM creates the expert-parallel
    group only where the current config's model is MoE, so a dense model's config (a Qwen2)
    coming first would leave every later MoE build without it. The groups are made under a copy
    of the config without its model, which vLLM reads as "create them all".
    """
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        return
    store = tempfile.mkdtemp(prefix="specguard-gloo-")  # gloo's file store; removed at exit
    atexit.register(shutil.rmtree, store, ignore_errors=True)
    path = os.path.join(store, "store")
    any_model = copy.copy(vllm_config)
    any_model.model_config = None  # parallel_state.initialize_model_parallel: "is_moe or no model"
    with set_current_vllm_config(any_model):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{path}",
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)


def build_moe(vllm_config: Any, quant: Any, ffn_prefix: str) -> Any:
    """vLLM's (NVIDIA) DeepseekV4MoE at ``ffn_prefix``; its experts get ``{ffn_prefix}.experts``."""
    from vllm.config import set_current_vllm_config
    from vllm.models.deepseek_v4.nvidia.model import DeepseekV4MoE

    cfg = with_quant_config(vllm_config, quant)
    cfg.compilation_config.static_forward_context.clear()  # layer names must be unique
    with set_current_vllm_config(cfg):
        return DeepseekV4MoE(cfg, prefix=ffn_prefix, num_hash_layers=0)


def build_linear(vllm_config: Any, quant: Any, prefix: str) -> Any:
    """A ReplicatedLinear hidden->hidden like MTP's e_proj / h_proj."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.linear import ReplicatedLinear

    hidden = vllm_config.model_config.hf_config.hidden_size
    with set_current_vllm_config(vllm_config):
        return ReplicatedLinear(
            hidden, hidden, bias=False, return_bias=False, quant_config=quant, prefix=prefix
        )


def routed_experts(moe: Any) -> Any:
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    return next(m for m in moe.modules() if isinstance(m, RoutedExperts))


def method_name(layer: Any) -> str:
    return type(layer.quant_method).__name__


def param_layout(module: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {
        n: (str(p.dtype).removeprefix("torch."), tuple(p.shape))
        for n, p in module.named_parameters()
    }


def mtp_draft_model(vllm_config: Any, quant: Any) -> Any:
    """vLLM's ``DeepSeekV4MTP`` holding one MTP layer's FFN, e_proj, h_proj and norms.

    The full MTP layer also holds attention, whose construction needs GPU
    kernels; everything the checkpoint's draft FFN and projections load into is
    the real vLLM module, and ``load_weights`` is vLLM's own (name remapping,
    ``.scale`` renames, expert mapping, the layers' weight loaders).
    """
    from torch import nn
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm

    hf = vllm_config.speculative_config.draft_model_config.hf_config
    n = hf.num_hidden_layers
    cls = _mtp_class()
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    model.config = hf
    model.quant_config = quant
    model.pad_shared_expert = getattr(quant, "weight_block_size", None) is not None
    layer = nn.Module()
    layer.mtp_block = nn.Module()
    layer.mtp_block.ffn = build_moe(vllm_config, quant, f"model.layers.{n}.ffn")
    layer.e_proj = build_linear(vllm_config, quant, f"model.layers.{n}.e_proj")
    layer.h_proj = build_linear(vllm_config, quant, f"model.layers.{n}.h_proj")
    with set_current_vllm_config(vllm_config):
        layer.enorm = RMSNorm(hf.hidden_size, eps=hf.rms_norm_eps)
        layer.hnorm = RMSNorm(hf.hidden_size, eps=hf.rms_norm_eps)
    model.model = nn.Module()
    model.model.mtp_start_layer_idx = n
    model.model.num_mtp_layers = 1
    model.model.layers = nn.ModuleDict({str(n): layer})
    return model


HELD = ("mtp.0.ffn.", "mtp.0.e_proj.", "mtp.0.h_proj.", "mtp.0.enorm.", "mtp.0.hnorm.")


@functools.cache
def _mtp_class() -> type:
    """vLLM's DeepSeekV4MTP, fed only the checkpoint tensors of the modules built above."""
    from vllm.models.deepseek_v4.nvidia.mtp import DeepSeekV4MTP

    class PartialMTP(DeepSeekV4MTP):
        def load_weights(self, weights: Any) -> set[str]:
            return super().load_weights(
                (n, w) for n, w in weights if n.startswith(HELD)
            )

    return PartialMTP


def load_draft_weights(vllm_config: Any, model: Any) -> None:
    """vLLM's DefaultModelLoader reads the draft checkpoint and calls ``model.load_weights``."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import DefaultModelLoader

    draft = vllm_config.speculative_config.draft_model_config
    with set_current_vllm_config(vllm_config):
        DefaultModelLoader(vllm_config.load_config).load_weights(model, draft)


def run_fresh_process(code: str, cwd: str) -> tuple[Any, dict]:
    """Run ``code`` in a new Python process as vLLM starts one on CPU (installed plugins
    enabled, no specguard settings): a child of the worker's one vLLM start
    (tests/integrations/fresh_vllm.py). Returns the process's outcome and the JSON it printed
    after ``RESULT ``."""
    import json

    from tests.integrations import fresh_vllm

    proc = fresh_vllm.run_one(fresh_vllm.Job(env=fresh_vllm.fresh_env(), code=code, cwd=cwd), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return proc, json.loads(line[len("RESULT "):])
