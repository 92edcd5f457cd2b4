"""Scale bytes for the content rules: read once per lint run, shared by the rules.

Per-tensor scales (a handful of bytes) are read whole; block scales only a
prefix, so a lint reads a sliver of the checkpoint however large it is. The
samples are kept column-wise (one array per dtype, each element tagged with
the index of its tensor) so the checks run as a few numpy operations over all
tensors instead of a Python loop over 100,000 small arrays (benchmarks/lint.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, repeat
from operator import attrgetter, itemgetter

import numpy as np

from specguard.checkpoint.checkpoint import in_file_order
from specguard.checkpoint.dtypes import NUMPY
from specguard.formats.table import Module
from specguard.resolve import Resolver

PER_TENSOR_MAX = 64  # elements: per-tensor / per-expert scales are read whole
BLOCK_SAMPLE = 64  # bytes of each block scale checked for impossible values (garbage is never sparse);
# its head or its tail, whichever one read shares with a neighbour (``_tail_offset``)


@dataclass(frozen=True)
class ScaleColumn:
    """All sampled scale elements of one dtype, each tagged with its tensor's index."""

    dtype: str
    raw: np.ndarray | None  # uint8 codes for 8-bit dtypes
    idx: np.ndarray  # the dtype's tensor indices, ascending
    counts: np.ndarray  # elements sampled per tensor of ``idx``
    starts: np.ndarray  # first element of each tensor in ``owners``
    owners: np.ndarray  # tensor indices with at least one element, ascending
    wide: np.ndarray | None = None  # float32 per element of a wider dtype (8-bit: None, see ``table``)
    table: np.ndarray | None = None  # 8-bit: the float32 of each of the 256 codes (U8: the codes)

    @cached_property
    def owner(self) -> np.ndarray:
        """Tensor index per element (made when first asked: a block-scale column's checks name the
        tensors of their hits only, ``owners_at``)."""
        return np.repeat(self.idx, self.counts)

    def owners_at(self, mask: np.ndarray) -> np.ndarray:
        """``owner[mask]``, found from the hits' positions (none, mostly) without ``owner``."""
        at = np.flatnonzero(mask)
        if "owner" in self.__dict__ or not len(at):
            return self.owner[at]
        return self.idx[np.searchsorted(np.cumsum(self.counts), at, side="right")]

    @cached_property
    def values(self) -> np.ndarray:
        """float32 per element (U8: the raw codes); an 8-bit column's made from ``table`` when first
        asked: its checks run on the 256 codes (``of_codes``), not on millions of block samples."""
        if self.wide is not None:
            return self.wide
        assert self.table is not None and self.raw is not None
        return self.table[self.raw]

    def of_codes(self, per_code: np.ndarray) -> np.ndarray:
        """An 8-bit column's per-element mask from a mask over its 256 codes (a check of ``values``
        made once per code: the same answer element by element)."""
        assert self.raw is not None
        hits = np.flatnonzero(per_code)
        if len(hits) > 8:  # a table lookup (its uint8 index widened first: slower than a few compares)
            return per_code[self.raw]
        mask = np.zeros(self.raw.shape, dtype=bool)
        for code in hits.tolist():  # mostly none or one or two (E4M3's NaN codes 0x7F, 0xFF)
            mask |= self.raw == code
        return mask


@dataclass(frozen=True)
class ScaleSamples:
    modules: list[Module]  # the modules holding a sampled scale, each once, in table order
    owner_of: np.ndarray  # int per index, ascending: its module's place in ``modules`` (a module's scales
    # follow one another in its plan's order)
    siblings: np.ndarray  # int per index: same (module less any expert index, parameter), same number
    param_names: list[str]  # the distinct parameter suffixes, in order of first appearance
    param_of: np.ndarray  # int per index: its parameter suffix's place in ``param_names``
    per_tensor: np.ndarray  # bool per index: read whole
    columns: list[ScaleColumn]

    def __len__(self) -> int:
        return len(self.per_tensor)

    def names_of(self, idx) -> list[str]:
        """The tensor name of each index in ``idx`` (asked only for the few a finding names)."""
        owner = self.owner_of[idx]
        first = np.searchsorted(self.owner_of, owner)  # each one's module's first index
        names = []
        for i, k, at in zip(idx, owner.tolist(), first.tolist(), strict=True):
            m = self.modules[k]
            assert m.scales is not None  # (every sampled module has a plan)
            names.append(m.params[m.scales.params[i - at]].name)
        return names

    def modules_of(self, idx: np.ndarray) -> list[str]:
        """The module of each index in ``idx``."""
        return list(map(_NAME, map(self.modules.__getitem__, self.owner_of[idx].tolist())))

    def params_of(self, idx: np.ndarray) -> list[str]:
        """The parameter suffix of each index in ``idx``."""
        return list(map(self.param_names.__getitem__, self.param_of[idx].tolist()))

    def param_in(self, names: Collection[str]) -> np.ndarray:
        """Bool per index: its parameter suffix is one of ``names`` (decided once per distinct suffix)."""
        return np.array([p in names for p in self.param_names], dtype=bool)[self.param_of] if self.param_names \
            else np.zeros(len(self), dtype=bool)


_SCALES, _NAME = attrgetter("scales"), attrgetter("name")


def read_scales(r: Resolver) -> ScaleSamples:
    """Every scale tensor's bytes: whole for per-tensor scales, ``BLOCK_SAMPLE`` bytes of each block scale.

    The scales are numbered module by module in table order, each module's in its plan's order
    (formats/table.py ``ScalePlan``: picked once per signature when classify ran). What a plan
    fixes (dtype, size, suffix) is worked out per plan and spread to its scales by numpy; only
    where each scale lies is read from its header record, one visit each."""
    mods = [m for m in r.table if m.scales is not None]
    if r.checkpoint.root is None or not mods:
        empty = np.zeros(0, np.int64)
        return ScaleSamples([], empty, empty, [], empty, np.zeros(0, bool), [])
    plans = list(map(_SCALES, mods))
    distinct = list({id(p): p for p in plans}.values())  # in order of first appearance
    number = {id(p): g for g, p in enumerate(distinct)}
    group = np.fromiter(map(number.__getitem__, map(id, plans)), np.int64, len(mods))
    width = np.array([len(p.params) for p in distinct], dtype=np.int64)  # scales per module, per plan
    per_owner = width[group]
    first = np.cumsum(per_owner) - per_owner
    n = int(per_owner.sum())
    # each scale's slot among the plans' scales laid end to end: what its plan says of it, by one lookup
    slot = np.arange(n, dtype=np.int64) + np.repeat((np.cumsum(width) - width)[group] - first, per_owner)
    dtypes = list(chain.from_iterable(p.dtypes for p in distinct))
    kinds = {d: i for i, d in enumerate(dict.fromkeys(dtypes))}  # in order of first appearance
    kind = np.array([kinds[d] for d in dtypes], dtype=np.int64)[slot]
    itemsize = np.array([NUMPY[d].itemsize for d in dtypes], dtype=np.int64)[slot]
    size = np.array(list(chain.from_iterable(p.nbytes for p in distinct)), dtype=np.int64)[slot]
    suffixes = list(chain.from_iterable(p.params for p in distinct))
    param_ids = {p: i for i, p in enumerate(dict.fromkeys(suffixes))}
    param_of = np.array([param_ids[p] for p in suffixes], dtype=np.int64)[slot]
    begins, files = _where(mods)
    begin = np.array(begins, dtype=np.int64)
    per_tensor = size <= PER_TENSOR_MAX * itemsize
    want = np.where(per_tensor, size, np.minimum(size, BLOCK_SAMPLE))
    want -= want % itemsize
    names = list(dict.fromkeys(files))
    shard = np.fromiter(map({f: i for i, f in enumerate(names)}.__getitem__, files), np.int64, n)
    begin += _tail_offset(shard, begin, size, want, per_tensor)
    buf, pos = r.checkpoint.read_ranges(names, shard, begin, want)
    columns = [_column(d, np.flatnonzero(kind == i), buf, pos, want // itemsize) for d, i in kinds.items()]
    # siblings: one number per (module less any expert index, parameter), from two int maps
    owners = list(map(_NAME, mods))
    layers = list(map(itemgetter(0), map(str.partition, owners, repeat(".experts."))))  # once per module
    layer_ids = {x: i for i, x in enumerate(dict.fromkeys(layers))}
    layer_of = np.fromiter(map(layer_ids.__getitem__, layers), np.int64, len(owners))
    owner_at = np.repeat(np.arange(len(owners), dtype=np.int64), per_owner)
    siblings = layer_of[owner_at] * len(param_ids) + param_of
    return ScaleSamples(mods, owner_at, siblings, list(param_ids), param_of, per_tensor, columns)


def _where(mods: list[Module]) -> tuple[list[int], list[str]]:
    """Each scale's first byte in its shard (``TensorInfo.offsets[0]``) and its shard, in one visit
    per header record: the 75,000-135,000 records lie spread over memory after the header pass,
    and a pass per field fetched each one again."""
    begins: list[int] = []
    files: list[str] = []
    add_begin, add_file = begins.append, files.append
    for m in mods:
        params = m.params
        for p in m.scales.params:  # type: ignore[union-attr]  # (read_scales keeps modules with a plan)
            t = params[p]
            add_begin(t.data_start + t.data_offsets[0])
            add_file(t.file)
    return begins, files


def _tail_offset(shard: np.ndarray, begin: np.ndarray, size: np.ndarray, want: np.ndarray,
                 whole: np.ndarray) -> np.ndarray:
    """Where in each scale its sample starts: 0 (its head), or ``size - want`` (its tail) for a block
    scale whose tail touches the next sample in its file, so the two are one read (``read_ranges``
    joins touching ranges). Files written by safetensors store a dtype's tensors side by side in name
    order: a run of block scales is sampled tail, head, tail, head (one read per pair); a writer that
    stores each module's tensors together puts its per-tensor scales right after the block scale
    (one read for the three). The same bytes per scale either way."""
    at, order = in_file_order(shard, begin)
    start, end, part = at[order], at[order] + size[order], ~whole[order]
    touch = np.zeros(len(at), dtype=bool)
    touch[:-1] = start[1:] == end[:-1]
    linked = np.zeros(len(at), dtype=bool)  # a block scale right after another: their chain goes on
    linked[1:] = touch[:-1] & part[1:] & part[:-1]
    step = np.arange(len(at))
    first = np.maximum.accumulate(np.where(linked, 0, step))  # where each one's chain begins
    tail = part & touch & ((step - first) % 2 == 0)  # a chain's 1st, 3rd, ... (the next takes its head)
    out = np.zeros(len(at), dtype=np.int64)
    out[order] = np.where(tail, size[order] - want[order], 0)
    return out


def _column(dtype: str, idx: np.ndarray, buf: np.ndarray, pos: np.ndarray, count: np.ndarray) -> ScaleColumn:
    """Gather one dtype's elements out of the read buffer (positions need not be aligned)."""
    np_dtype = NUMPY[dtype]
    k = np_dtype.itemsize
    counts = count[idx]
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    keep = counts > 0
    raw = _gather(buf, pos[idx], counts * k)
    if k == 1:  # 8-bit: the codes; each code's float32 from a 256-entry table (the same conversion, once per code)
        table = np.arange(256, dtype=np.uint8).view(np_dtype if dtype != "U8" else np.uint8).astype(np.float32)
        return ScaleColumn(dtype, raw, idx, counts, first[keep], idx[keep], table=table)
    return ScaleColumn(dtype, None, idx, counts, first[keep], idx[keep], wide=raw.view(np_dtype).astype(np.float32))


def _gather(buf: np.ndarray, pos: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """The bytes ``[pos[i], pos[i] + nbytes[i])`` of ``buf``, one range after another."""
    if len(nbytes) and (nbytes == nbytes[0]).all():  # every block scale's sample, or every scalar: one width
        # a row per range from a window view of ``buf`` (no copy): one C-level copy of the rows, ~15x
        # faster than indexing every byte (25,000 block scales on benchmarks/lint.py)
        width = int(nbytes[0])
        return np.lib.stride_tricks.sliding_window_view(buf, width)[pos].reshape(-1) if width \
            else np.zeros(0, dtype=np.uint8)
    # byte j of range i lies at pos[i] + (j - first[i]): one repeat over all bytes
    first = np.cumsum(nbytes) - nbytes
    return buf[np.arange(int(nbytes.sum()), dtype=np.int64) + np.repeat(pos - first, nbytes)]
