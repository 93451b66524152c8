"""Release arithmetic shared by the ecosystems' providers: which older release of a package to
install as a break (versions read with packaging's rules, which npm's x.y.z also follow)."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import InvalidVersion, Version


def older_release(current: str, available: Iterable[str]) -> str | None:
    """The newest final release of another major version older than `current` (else of another minor)."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    older = []
    for text in available:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version < now and not version.is_prerelease and not version.is_devrelease:
            older.append(version)
    older.sort(reverse=True)
    for same in (lambda v: v.major == now.major, lambda v: v.release[:2] == now.release[:2]):
        different = [v for v in older if not same(v)]
        if different:
            return str(different[0])
    return None
