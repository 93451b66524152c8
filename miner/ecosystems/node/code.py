"""Tree-sitter parsing of JavaScript files: what each file requires, reads and names.

The Node counterpart of miner.ecosystems.python.code, per file rather than per scope: the modules it loads
(`require("x")`, `import ... from "x"`, `import("x")`), the environment variables it reads
(`process.env.X`, `process.env["X"]`) and its string literals (which may name project files:
`path.join(__dirname, "..", "config", "quotd.json")`). A relative specifier is resolved to a
project file as node does (the file, then `.js`, `.cjs`, `.mjs`, `.json`, then `index.js`).

    files = parse_js_files(root, ["lib/config.js", "test/config.test.js"])
    files["lib/config.js"].env_reads      # {"QUOTD_CONFIG"}
    resolve("test/config.test.js", "../lib/config", project)   # "lib/config.js"
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter_javascript
from tree_sitter import Language, Node, Parser, Query, QueryCursor

JS_LANGUAGE = Language(tree_sitter_javascript.language())
JS_SUFFIXES = (".js", ".cjs", ".mjs")
RESOLVE_SUFFIXES = ("", ".js", ".cjs", ".mjs", ".json", "/index.js", "/index.json")
MAX_BYTES = 1_000_000  # a bundled or minified file says nothing a person would read

_QUERY = Query(JS_LANGUAGE, """
(call_expression function: (_) @fn arguments: (arguments . (string (string_fragment) @spec))) @call
(import_statement source: (string (string_fragment) @import))
(export_statement source: (string (string_fragment) @import))
(member_expression object: (member_expression object: (identifier) @proc property: (property_identifier) @env)
                   property: (property_identifier) @var) @envread
(subscript_expression object: (member_expression object: (identifier) @proc2 property: (property_identifier) @env2)
                      index: (string (string_fragment) @var2)) @envsub
(string (string_fragment) @string)
""")


@dataclass
class JsFile:
    """What one JavaScript file loads, reads from the environment and names."""

    requires: set[str] = field(default_factory=set)  # module specifiers, as written
    env_reads: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)


def _text(node: Node) -> str:
    return (node.text or b"").decode(errors="replace")


def parse_js(data: bytes) -> JsFile:
    """One file's requires, environment reads and string literals."""
    found = JsFile()
    tree = Parser(JS_LANGUAGE).parse(data)
    for _, captures in QueryCursor(_QUERY).matches(tree.root_node):
        if "spec" in captures and _text(captures["fn"][0]) in ("require", "import", "require.resolve"):
            found.requires.add(_text(captures["spec"][0]))
        elif "import" in captures:
            found.requires.add(_text(captures["import"][0]))
        elif "var" in captures and _text(captures["proc"][0]) == "process" and _text(captures["env"][0]) == "env":
            found.env_reads.add(_text(captures["var"][0]))
        elif "var2" in captures and _text(captures["proc2"][0]) == "process" and _text(captures["env2"][0]) == "env":
            found.env_reads.add(_text(captures["var2"][0]))
        if "string" in captures:
            found.strings.add(_text(captures["string"][0]))
    return found


def parse_js_files(root: Path, files: Iterable[str]) -> dict[str, JsFile]:
    """rel -> JsFile for the JavaScript files among `files` (project-relative)."""
    parsed = {}
    for rel in files:
        if not rel.endswith(JS_SUFFIXES):
            continue
        path = Path(root) / rel
        try:
            if path.stat().st_size > MAX_BYTES:
                continue
            parsed[rel] = parse_js(path.read_bytes())
        except OSError:
            continue
    return parsed


def resolve(importer: str, specifier: str, files: set[str], main: str | None = None) -> str | None:
    """The project file a relative specifier of `importer` loads (None for a package or outside);
    the project's own folder (`require("../")` from test/) loads package.json's `main`."""
    if not specifier.startswith((".", "/")):
        return None
    base = posixpath.normpath(posixpath.join(posixpath.dirname(importer), specifier))
    if base == "." and main:
        base = posixpath.normpath(main)
    for suffix in RESOLVE_SUFFIXES:
        if (candidate := posixpath.normpath(base + suffix)) in files:
            return candidate
    return None
