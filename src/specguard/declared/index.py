"""Which of many names a pattern matches, without a Python loop per name.

An export with 45,000 modules and 122 exclusion entries asked every entry of
every module in turn (5.5 million Python-level matches, 30 s). Here the names
are joined into one newline-separated text once; each entry is then one C-level
scan of it: ``str.__contains__`` for exact and substring semantics, one
compiled regular expression for wildcards. Entries whose semantics cannot be
expressed that way (user regexes: ``re:`` targets, transformers keys, GPTQ
rules) fall back to the pattern's own ``matches`` over the names, which gives
the same answer, only slower.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from functools import cached_property

from specguard.declared import model as m
from specguard.declared import patterns as p

_SEP = "\n"
_WILDCARDS = re.compile(r"([*?])")


def _glob_regex(pattern: str) -> str | None:
    """``fnmatch`` / ``fnmatchcase`` as a regex over one line (None: a ``[...]`` class,
    left to the fallback)."""
    if "[" in pattern or _SEP in pattern:
        return None
    # the wildcards split out, the literal runs escaped whole (re.escape is char by char: the same text)
    return "".join("[^\n]*" if c == "*" else "[^\n]" if c == "?" else re.escape(c) for c in _WILDCARDS.split(pattern))


class NameIndex:
    """A set of names (checkpoint names or runtime prefixes) to test patterns against."""

    def __init__(self, names: Iterable[str]) -> None:
        # first-seen order: sorting 45,000 checkpoint names cost more than every scan of them
        self.names: list[str] = [n for n in dict.fromkeys(names) if _SEP not in n]
        self._set = frozenset(self.names)
        self._found: dict[tuple[str, str], list[str]] = {}  # ``matching`` by (text, semantics)

    @cached_property
    def _text(self) -> str:
        return _SEP.join(self.names)

    @cached_property
    def _starts(self) -> list[int]:
        out, pos = [], 0
        for n in self.names:
            out.append(pos)
            pos += len(n) + 1
        return out

    def _lines_at(self, positions: Iterable[int]) -> set[str]:
        return {self.names[bisect_right(self._starts, i) - 1] for i in positions}

    # -- primitive scans ---------------------------------------------------

    def _substring(self, text: str, want_all: bool) -> set[str]:
        if not text or _SEP in text:
            return set()
        if not want_all:
            return {text} if text in self._text else set()  # any hit will do
        return self._lines_at(mt.start() for mt in re.finditer(re.escape(text), self._text))

    def _regex(self, body: str, want_all: bool) -> set[str]:
        rx = re.compile(f"^(?:{body})$", re.M)
        if not want_all:
            hit = rx.search(self._text)
            return {hit.group(0)} if hit else set()
        return {mt.group(0) for mt in rx.finditer(self._text)}

    def _experts_rule(self, entry: str) -> set[str]:
        """vLLM's exact mode also skips an ``experts`` prefix that is a substring of an
        ``experts`` entry (``is_layer_skipped``)."""
        if "experts" not in entry:
            return set()
        # the entry's substrings looked up in the set (a few thousand for any real entry), not a
        # scan of every name: an export's 45,000 checkpoint modules, once per ``experts`` entry
        size = len(entry)
        if size * (size + 1) // 2 > len(self.names):
            return {n for n in self.names if "experts" in n and n in entry}
        subs = {entry[i:j] for i in range(size) for j in range(i + 7, size + 1)}  # len("experts") == 7
        return {n for n in subs & self._set if "experts" in n}

    # -- per semantics -------------------------------------------------------

    def _matching(self, pat: m.Pattern, want_all: bool) -> set[str] | None:
        t, sem = pat.text, pat.semantics
        if sem == m.VLLM_EXACT:
            return ({t} & self._set) | self._experts_rule(t)
        if sem in (m.VLLM_SUBSTRING, m.GPTQ_IN_BLOCK):
            return self._substring(t, want_all)
        if sem == m.VLLM_SUFFIX:
            return ({t} & self._set) | self._regex(f"[^\n]*{re.escape('.' + t)}", want_all)
        if sem in (m.MODELOPT_EXCLUDE, m.FNMATCHCASE):
            entries = p.modelopt_rewrite((t,)) if sem == m.MODELOPT_EXCLUDE else [t]
            out: set[str] = set()
            for e in entries:
                glob = _glob_regex(e)
                if glob is None:
                    return None
                if sem == m.MODELOPT_EXCLUDE:  # exact, legacy substring, fnmatch (is_layer_excluded)
                    out |= self._substring(e, want_all) | self._experts_rule(e)
                if any(c in e for c in "*?"):
                    out |= self._regex(glob, want_all)
                elif sem == m.FNMATCHCASE:  # no wildcard: a glob is an equality test
                    out |= {e} & self._set
                if out and not want_all:
                    return out
            return out
        if sem == m.CT_MATCH and not t.startswith("re:"):
            return {t} & self._set
        return None  # user regexes: the fallback

    def matching(self, pat: m.Pattern) -> list[str]:
        """Every indexed name ``pat`` matches, in sorted order (a copy: once per text and
        semantics, all a match reads; SG101 and the planner ask of the same entries)."""
        key = (pat.text, pat.semantics)
        hit = self._found.get(key)
        if hit is None:
            found = self._matching(pat, want_all=True)
            hit = self._found[key] = sorted(n for n in self.names if pat.matches(n)) if found is None else sorted(found)
        return list(hit)

    def any(self, pat: m.Pattern) -> bool:
        """Does ``pat`` match at least one indexed name?"""
        hit = self._matching(pat, want_all=False)
        if hit is None:
            return any(pat.matches(n) for n in self.names)
        return bool(hit)
