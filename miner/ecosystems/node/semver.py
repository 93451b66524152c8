"""npm's version ranges, as far as the break types need them: does a release satisfy a range a
package.json (or an installed package's dependencies or peerDependencies) declares.

Covers what npm writes and what packages declare: `||`, hyphen ranges (`1.2 - 2`), comparators
(`>=1.2.3 <2`), caret and tilde ranges, x-ranges (`1.x`, `*`, `2`). A prerelease satisfies
nothing (npm's rule but for ranges naming one, which no type picks), and a range that is not one
(a tag, a git or file URL, an `npm:` alias) is not understood: `satisfies` answers None.
"""

from __future__ import annotations

import re

Version = tuple[int, int, int]
Comparator = tuple[str, Version]  # (">=", (1, 2, 0))

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
_PARTIAL = re.compile(r"^v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:[-+].*)?$")
_TOKEN = re.compile(r"^(<=|>=|<|>|=|\^|~>?)?(.*)$")
HIGH = 10**9


def parse(version: str) -> Version | None:
    """A final release's (major, minor, patch); None for a prerelease or anything else."""
    found = _VERSION.match(version.strip())
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def _partial(text: str) -> list[int] | None:
    """The numbers a partial version names (`1.2` -> [1, 2], `1.x` -> [1], `*` -> []); None when
    it is no version."""
    found = _PARTIAL.match(text)
    if not found and text not in ("", "*", "x", "X"):
        return None
    numbers: list[int] = []
    for part in (found.groups() if found else ()):
        if part is None or not part.isdigit():
            break
        numbers.append(int(part))
    return numbers


def _pad(numbers: list[int]) -> Version:
    return (*numbers, 0, 0, 0)[:3]  # type: ignore[return-value]


def _bump(numbers: list[int]) -> Version:
    """The first release past everything a partial version names (`1.2` -> 1.3.0, `1` -> 2.0.0)."""
    if not numbers:
        return (HIGH, 0, 0)
    head = [*numbers[:-1], numbers[-1] + 1]
    return _pad(head)


def _caret(numbers: list[int]) -> Version:
    """The first release a caret range excludes: the next change of the leftmost non-zero part."""
    padded = _pad(numbers)
    for index, part in enumerate(padded[:len(numbers)]):
        if part != 0 or index == len(numbers) - 1:
            return _bump(list(padded[:index + 1]))
    return _bump(numbers)


def _comparators(token: str) -> list[Comparator] | None:
    """One token of a range as comparators every satisfying release meets."""
    op, rest = _TOKEN.match(token).groups()  # type: ignore[union-attr]
    numbers = _partial(rest)
    if numbers is None:
        return None
    full = len(numbers) == 3
    if op in (None, "="):
        return [("=", _pad(numbers))] if full else [(">=", _pad(numbers)), ("<", _bump(numbers))]
    if op in ("~", "~>"):
        return [(">=", _pad(numbers)), ("<", _bump(numbers[:2] if len(numbers) > 1 else numbers))]
    if op == "^":
        return [(">=", _pad(numbers)), ("<", _caret(numbers))]
    if op == ">":
        return [(">", _pad(numbers))] if full else [(">=", _bump(numbers))]
    if op == "<=":
        return [("<=", _pad(numbers))] if full else [("<", _bump(numbers))]
    return [(op, _pad(numbers))]  # >= and < of a partial version mean its padded form


def _alternative(text: str) -> list[Comparator] | None:
    """One `||` alternative: a hyphen range or space-separated comparators."""
    text = re.sub(r"(<=|>=|<|>|=|\^|~>?)\s+", r"\1", text.strip())
    if " - " in text:
        low, _, high = text.partition(" - ")
        low_numbers, high_numbers = _partial(low.strip()), _partial(high.strip())
        if low_numbers is None or high_numbers is None:
            return None
        top = [("<=", _pad(high_numbers))] if len(high_numbers) == 3 else [("<", _bump(high_numbers))]
        return [(">=", _pad(low_numbers)), *top]
    found: list[Comparator] = []
    for token in text.split():
        comparators = _comparators(token)
        if comparators is None:
            return None
        found += comparators
    return found


def _meets(version: Version, comparator: Comparator) -> bool:
    op, bound = comparator
    return {"=": version == bound, ">=": version >= bound, ">": version > bound,
            "<": version < bound, "<=": version <= bound}[op]


def satisfies(version: str, declared: str) -> bool | None:
    """Whether a release satisfies a declared range (None: the range is not one this reads)."""
    parsed = parse(version)
    alternatives = [_alternative(part) for part in declared.split("||")]
    if any(a is None for a in alternatives):
        return None
    if parsed is None:
        return False
    return any(all(_meets(parsed, c) for c in alternative) for alternative in alternatives if alternative is not None)
