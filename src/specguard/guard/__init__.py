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
  where every byte value is legal, are tracked instead of poisoned: the byte
  regions written into their storages are recorded (``track_writes``:
  ``"methods"``, the default, wraps ``Tensor.copy_/fill_/zero_/__setitem__``
  process-wide while a guard is active, cheap and thread-agnostic;
  ``"aten"`` uses a TorchDispatchMode that sees every ATen write of the
  guarding thread, ``out=`` and C++-internal copies included, at ~20-30 us
  per op). A tensor covered by recorded writes was written, even with the
  bytes it already held; what no recorded write covered is reported.
  Limits: writes neither mechanism sees (numpy views, ctypes, custom kernels;
  under ``"methods"`` also ``out=`` and ``index_*``/``scatter_``/
  ``masked_fill_``; under ``"aten"`` other threads) would be reported as
  unwritten. For loaders that use them pass ``marker=True``: the tensors are
  then also filled with 0xA5 bytes and an unrecorded row whose bytes changed
  counts as written (at row granularity: a row such a path wrote only partly,
  leaving 0xA5 elsewhere, counts as written).
* Storage swapped during the load (``param.data = x``, ``assign=True``): the
  tensor counts as written; only non-finite values and scale magnitudes are
  checked.
* Scales: float tensors whose last name component matches ``*scale*`` are
  also checked for implausible magnitudes (nonzero |x| < 1e-30, > 1e20, or
  negative) — the seed's ~1e-43 and ~1e31 torch.empty residue.

Memory: no copy of the model. Per guarded tensor a small Python record; per
integer-like storage the recorded write intervals (16 bytes per contiguous run
written, merged as they arrive: adjacent copies coalesce into one run);
during the exit check a bounded scratch of at most ~1 M elements (a few bool
masks, plus int64 offsets only for integer tensors the recorder did not fully
cover). The common case writes each float tensor once on entry (the poison:
one ``fill_`` over an integer view), reads it once on exit (one streaming
reduction: ``sum``; a byte ``max``, two for fp8 with negative values; for a
scale ``aminmax``, which also settles its magnitudes), computes per-row /
per-expert detail only for a tensor that fails that reduction, and neither
writes nor reads fully-recorded integer tensors. A contiguous write into an
integer tensor costs the hooks ~2 us (plain-int bookkeeping, no numpy).

Cost: one write and one read of every guarded float byte, at memory bandwidth;
on memory fresh from ``torch.empty`` the poison fill takes the first-touch page
faults the load's copies would otherwise take (so that part is not extra).
"""

from specguard.guard.core import LoadGuard, LoadGuardWarning, Policy, UnloadedParametersError
from specguard.guard.poison import POISONS, Poison, Strategy
from specguard.guard.report import (
    IMPLAUSIBLE_SCALE,
    NEVER_WRITTEN,
    NON_FINITE,
    PARTLY_WRITTEN,
    GuardFinding,
    LoadReport,
)

__all__ = [
    "IMPLAUSIBLE_SCALE",
    "NEVER_WRITTEN",
    "NON_FINITE",
    "PARTLY_WRITTEN",
    "POISONS",
    "GuardFinding",
    "LoadGuard",
    "LoadGuardWarning",
    "LoadReport",
    "Poison",
    "Policy",
    "Strategy",
    "UnloadedParametersError",
]
