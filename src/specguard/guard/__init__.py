"""LoadGuard: make a parameter the load never wrote impossible to miss.

Engines allocate quantization parameters with ``torch.empty`` and nothing
checks that the checkpoint filled them; behaviour then depends on what the
allocator left there. ``LoadGuard`` makes that a deterministic, named failure::

    with LoadGuard(model, policy="raise"):
        model.load_state_dict(state)        # or any loader, vLLM's load_weights

    @LoadGuard(policy="warn")
    def load_weights(self, weights): ...    # decorator: guards ``self``

How it knows what was written
-----------------------------
* Float dtypes (f16, bf16, f32, f64, complex64, every fp8 incl. E8M0): on entry
  each element is set to a NaN bit pattern no checkpoint holds (f32
  0xFFE5A5A5, bf16 0xFFE5, f16 0xFE5A, E4M3FN 0xFF, E5M2 0xFF, FNUZ 0x80,
  E8M0 0xFF). Whatever still holds it was never written; any other NaN/Inf was
  written non-finite. Exact per element, whatever path did the writing.
* Integer-like dtypes (u8/i8 packed FP4, int32 GPTQ words, bool, fp4x2),
  where every byte value is legal: a TorchDispatchMode records the byte
  regions every ATen write (copy_, fill_, out=, __setitem__) touches in their
  storages; a tensor covered by recorded writes was written, even with the
  bytes it already held. As a second line they are filled with 0xA5 bytes: an
  unrecorded region that still holds the marker is reported unwritten, an
  unrecorded row holding any other byte was written by a path the recorder
  cannot see. Limits: writes outside ATen (numpy views, ctypes, custom
  kernels), writes from other threads (dispatch modes are thread-local) and
  index-driven writes (index_put_, scatter_, masked_fill_) fall back to the
  marker at row granularity, so a row that such a path wrote only partly and
  whose untouched bytes were all 0xA5 would be reported written.
* Storage swapped during the load (``param.data = x``, ``assign=True``): the
  tensor counts as written; only non-finite values and scale magnitudes are
  checked.
* Scales: float tensors whose last name component matches ``*scale*`` are
  also checked for implausible magnitudes (nonzero |x| < 1e-30, > 1e20, or
  negative) — the seed's ~1e-43 and ~1e31 torch.empty residue.

Memory: no copy of the model. Per guarded tensor a small Python record; per
integer-like storage the recorded write intervals (16 bytes per contiguous run
written, merged as they arrive — typically one run per copied tensor); during
the exit check a bounded scratch of at most ~1 M elements (a few bool masks,
plus int64 offsets only for integer tensors the recorder did not fully cover).
The common case reads each float tensor once with a streaming ``sum`` and does
not read fully-recorded integer tensors at all.
"""

from specguard.guard.core import LoadGuard, LoadGuardWarning, Policy, UnloadedParametersError
from specguard.guard.poison import POISONS, Poison, Strategy
from specguard.guard.report import (
    IMPLAUSIBLE_SCALE,
    NEVER_WRITTEN,
    NON_FINITE,
    PARTLY_WRITTEN,
    Finding,
    LoadReport,
)

__all__ = [
    "IMPLAUSIBLE_SCALE",
    "NEVER_WRITTEN",
    "NON_FINITE",
    "PARTLY_WRITTEN",
    "POISONS",
    "Finding",
    "LoadGuard",
    "LoadGuardWarning",
    "LoadReport",
    "Poison",
    "Policy",
    "Strategy",
    "UnloadedParametersError",
]
