"""How a Node test command is read: the program it runs, also through `npx`."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath


def program(command: str) -> str | None:
    """The name of the program a command runs (`npx jest …`: jest), None when it does not parse."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:1] == ["npx"]:
        words = [w for w in words[1:] if not w.startswith("-")][:1]
    return PurePosixPath(words[0]).name if words else None
