"""Rule 8, recoverable: what a repair may recover the healthy state from, and the check that a
reference fix carries no copy of the answer.

Evidence kinds (where a competent person would recover the healthy state from):

    reversible        the change itself shows the way back (a permission, an encoding, line endings,
                      a symlink whose real target still exists, an added file or line to remove)
    package-index     a distribution at the version the healthy state recorded, from the index
    debian-archive    a Debian package at its recorded version, from the archive
    project-files     the project's own files state it (an example or default config, a value
                      its code or docs name)
    published-source  the project's published source at the mined version (its sdist)

A reference fix recovers from that evidence; it may embed at most a short literal, and only
where the evidence names it:

    literal_bytes(fix_script)   # bytes of data the script carries (heredoc bodies, long strings)
    MAX_FIX_LITERAL             # above this a candidate is rejected as `unrecoverable`
    decoded_payload(fix_script) # a decoder the script runs (base64 -d, b64decode, xxd -r, ...): a
                                # fix must not decode a copy of the original, however short
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

EVIDENCE_KINDS = ("reversible", "package-index", "debian-archive", "project-files", "published-source")
NETWORK_EVIDENCE = frozenset({"package-index", "debian-archive", "published-source"})  # need the network
MAX_FIX_LITERAL = 512  # bytes: "a few hundred"
LONG_STRING = 64  # shorter strings are names, paths and patterns, not carried data
# Commands and calls that turn an encoded payload back into bytes.
DECODERS = re.compile(
    r"\bbase(?:64|32)\s+(?:-[a-zA-Z]*d|--decode)|\b(?:b64|b32|b16|a85|b85|urlsafe_b64)decode\b|"
    r"\bxxd\b[^\n]*\s-r|\buudecode\b|\bopenssl\s+(?:enc\s+)?-?base64\b[^\n]*\s-d\b|"
    r"\bcodecs\.decode\([^)]*['\"](?:base64|hex|zip)"
)


@lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def literal_bytes(script: str) -> int:
    """Bytes of data a bash script carries: every heredoc body, plus every string or word of
    LONG_STRING bytes or more (a base64 blob, an embedded file)."""
    total = 0
    stack: list[Node] = [_parser().parse(script.encode()).root_node]
    while stack:
        node = stack.pop()
        size = node.end_byte - node.start_byte
        if node.type == "heredoc_body":
            total += size
            continue
        if node.type in ("string", "raw_string", "word", "ansi_c_string") and size >= LONG_STRING:
            total += size
            continue
        stack.extend(node.children)
    return total


def needs_network(kinds: Iterable[str]) -> bool:
    """Whether a repair from these kinds of evidence needs the network (the index, the archive)."""
    return bool(NETWORK_EVIDENCE & set(kinds))


def evidence_filter(kinds: Iterable[str] = (), offline: bool = False) -> Callable[[Any], bool]:
    """A test of a task (anything with `.evidence`, a list of items with `.kind`): it names one of
    `kinds` (when given), and with `offline` its repair needs no network. A task recorded without
    evidence passes neither test: nothing says how it is repaired."""
    wanted = set(kinds)

    def keep(task: Any) -> bool:
        have = {e.kind for e in task.evidence}
        if wanted and not have & wanted:
            return False
        return not offline or (bool(have) and not needs_network(have))

    return keep


def decoded_payload(script: str) -> str | None:
    """The decoder a script runs to turn an embedded payload back into bytes, or None."""
    found = DECODERS.search(script)
    return found.group(0).strip() if found else None
