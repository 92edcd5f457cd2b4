"""SG4xx: scale values that cannot be right, and scale bytes that contradict their label."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from specguard.formats.settle import scale_tensor
from specguard.formats.sniff import SAMPLE_BYTES, sniff_many
from specguard.formats.specs import spec_for
from specguard.lint.content import ScaleColumn, ScaleSamples
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.registry import rule
from specguard.resolve import Route

FINFO_MIN = float(np.finfo(np.float32).min)  # vLLM pre-fills FP8 scales with it
TINY, HUGE = 1e-30, 1e30  # per-tensor scales outside this are allocator garbage, not calibration
SIBLING_SPREAD = 1e6  # x from the median of the same scale across a layer's experts
# Float scales of the FP8/FP4 families are magnitudes; GPTQ/AWQ/auto-round `scales`
# may legitimately be negative (signed symmetric int4), so they are not checked.
NON_NEGATIVE = frozenset({"weight_scale", "weight_scale_inv", "scale", "weight_scale_2", "input_scale",
                          "weight_global_scale", "input_global_scale"})


SG401 = rule("SG401", "implausible-scale-values", ERROR,
      "Scale tensors hold values no quantizer writes: NaN/Inf, E8M0 0xFF, zero or negative per-tensor "
      "scales, vLLM's finfo.min sentinel, or magnitudes far outside their siblings.", reads_bytes=True)


@SG401
def implausible_scales(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        samples = ctx.scales(r)
        problems: dict[str, set[int]] = defaultdict(set)
        for col in samples.columns:
            for what, owners in _problems(col, samples):
                if owners:
                    problems[what] |= owners
        for what, owners in _outliers(samples).items():
            problems[what] |= owners
        for what, owners in sorted(problems.items()):
            names = samples.names_of(sorted(owners))
            yield SG401.finding(f"{len(names)} scale tensor(s) {what}: {describe(names)}", tuple(names),
                "re-export the affected scales; a checkpoint must never carry uninitialized memory",
            )


def _problems(col: ScaleColumn, samples: ScaleSamples) -> Iterator[tuple[str, set[int]]]:
    """Each check is one vectorized mask over every sampled element of the dtype (an 8-bit
    dtype's: over its 256 codes, then looked up per element)."""
    table = col.table
    eight_bit = col.raw is not None and table is not None

    def hit(mask: np.ndarray) -> set[int]:
        return set(col.owners_at(mask).tolist())

    if col.dtype == "F8_E8M0" and col.raw is not None:  # 8-bit: raw codes are kept
        yield "hold E8M0 0xFF (NaN)", hit(col.raw == 0xFF)
    elif col.dtype != "U8":
        yield "hold NaN or Inf", hit(col.of_codes(~np.isfinite(table)) if eight_bit and table is not None
                                     else ~np.isfinite(col.values))
    if col.dtype in ("F32", "BF16", "F16"):
        v = col.values
        yield "hold vLLM's finfo(float32).min fill value", hit(v == FINFO_MIN)
        signed = samples.param_in(NON_NEGATIVE)[col.owner]
        yield "hold negative values", hit((v < 0) & (v != FINFO_MIN) & signed)
    if col.dtype != "U8":
        zero_what = "are zero (a per-tensor scale of 0 erases the layer)"
        odd_what = f"have magnitudes outside [{TINY:g}, {HUGE:g}] (uninitialized memory?)"
        if not samples.per_tensor[col.owners].any():  # block scales only: neither check can hit
            yield zero_what, set()
            yield odd_what, set()
            return
        per_tensor = samples.per_tensor[col.owner]
        v = table if eight_bit and table is not None else col.values
        mag = np.abs(v)
        zero = v == 0
        odd = np.isfinite(v) & (v != 0) & ((mag < TINY) | (mag > HUGE))
        if eight_bit:
            zero, odd = col.of_codes(zero), col.of_codes(odd)
        yield zero_what, hit(per_tensor & zero)
        yield odd_what, hit(per_tensor & odd)


def _outliers(samples: ScaleSamples) -> dict[str, set[int]]:
    """Per-tensor scales of one layer's experts should agree within orders of magnitude."""
    out: dict[str, set[int]] = {}
    for col in samples.columns:
        if col.dtype not in ("F32", "BF16", "F16") or not col.owners.size:
            continue
        peak = np.maximum.reduceat(np.abs(col.values), col.starts)
        ok = samples.per_tensor[col.owners] & np.isfinite(peak) & (peak > 0)
        owners, peak = col.owners[ok], peak[ok]
        kin = samples.siblings[owners]
        # sorted by group, then value: every group's median at once (integer groups: no string keys)
        order = np.lexsort((peak, kin))
        kin, vals = kin[order], peak[order]
        starts = np.flatnonzero(np.r_[True, kin[1:] != kin[:-1]]) if len(kin) else np.zeros(0, dtype=np.int64)
        sizes = np.diff(np.r_[starts, len(kin)])
        # the middle value, or the float32 mean of the middle two as np.median takes it, halved before the
        # sum (the same float32, where np.median's sum overflows to inf near float32's maximum and calls
        # every sibling an outlier); the bounds as ``vals > median * SIBLING_SPREAD`` takes them (float64
        # products compared as float32)
        half = np.float32(2)
        med = vals[starts + (sizes - 1) // 2] / half + vals[starts + sizes // 2] / half
        wide = med.astype(np.float64)
        with np.errstate(over="ignore"):  # a median past float32's range / 1e6: no bound above (inf)
            high, low = (wide * SIBLING_SPREAD).astype(np.float32), (wide / SIBLING_SPREAD).astype(np.float32)
        big = np.repeat(sizes >= 3, sizes)
        far = big & ((vals > np.repeat(high, sizes)) | (vals < np.repeat(low, sizes)))
        for group in np.unique(np.repeat(np.arange(len(sizes)), sizes)[far]).tolist():
            members = owners[order[starts[group]:starts[group] + sizes[group]]]
            hit = far[starts[group]:starts[group] + sizes[group]]
            param = samples.param_names[samples.param_of[members[0]]]
            what = f"differ from their sibling {param}s by over {SIBLING_SPREAD:g}x"
            out.setdefault(what, set()).update(members[hit].tolist())
    return out


SG402 = rule("SG402", "scale-bytes-contradict-dtype", WARNING,
      "The bytes of an 8-bit scale tensor read as another format than its label or its declared scheme says "
      "(E8M0 powers of two under an E4M3 label, or the reverse).", reads_bytes=True)


@SG402
def scale_label(ctx: LintContext) -> Iterator[Finding]:
    groups: dict[tuple, list[str]] = defaultdict(list)
    detail: dict[tuple, str] = {}
    todo: list[tuple[Route, str, str]] = []  # (route, scale dtype, the label its bytes must fit)
    raws: list[bytes] = []
    for r in ctx.resolvers:
        if r.checkpoint.root is None:
            continue
        for rt in ctx.routes(r):
            claim = _claimed(rt)
            if claim is None:
                continue
            name = scale_tensor(r.table[rt.checkpoint_names[0]])
            if name is None:
                continue
            t = r.checkpoint.tensors[name]
            if t.dtype not in ("U8", "F8_E4M3", "F8_E8M0"):
                continue
            raws.append(r.checkpoint.read_bytes_range(name, SAMPLE_BYTES))
            todo.append((rt, t.dtype, claim if t.dtype == "U8" else t.dtype))
    for (rt, dtype, label), sn in zip(todo, sniff_many(raws), strict=True):  # one batch: hundreds of modules
        if sn.dtype is not None and sn.dtype != label and sn.confidence >= 0.9:
            how = f"claimed {label} by {'the declared scheme' if dtype == 'U8' else 'its dtype'}"
            key = (dtype, label, sn.dtype)
            groups[key].extend(rt.checkpoint_names)
            detail[key] = f"{how}, bytes read as {sn.dtype} with confidence {sn.confidence:.2f} ({sn.evidence})"
    for key, names in groups.items():
        yield SG402.finding(f"{key[0]} scale bytes of {describe(names)}: {detail[key]}",
                      tuple(names), "label the scale with the dtype its bytes hold, and route the module by it")


def _claimed(rt: Route) -> str | None:
    """The scale element the engine will read (formats/specs.py: E4M3 for NVFP4, E8M0 for MXFP4/MXFP8)."""
    if rt.vllm is None:
        return None
    spec = spec_for(rt.vllm.scheme)
    return spec.scale_element if spec is not None else None
