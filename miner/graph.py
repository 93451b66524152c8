"""Dependency graph of a project: which tests depend on which functions, modules, files,
variables and installed packages, so inversion points can be chosen before anything is broken.

Pure analysis of a project folder on the host plus its recorded HealthyState (no sandbox). The
project's Python files are parsed with tree-sitter: imports (absolute, relative, `from`, local,
`importlib.import_module`, lazy `__getattr__` exports), string literals and path expressions
naming project files (`open("x")`, `Path(__file__).parent / "data" / "x.csv"`, module
constants, `os.path.join`, `importlib.resources.files(pkg) / "x"`), environment reads and writes
(`os.environ[...]`, `os.getenv`, `os.environ.get`, `monkeypatch.setenv`), and programs run
through subprocess. Installed distributions come from the healthy inventory (top-level
modules, files, requirements, console scripts). Calls between the project's functions are
matched by name among the modules a scope can reach through imports, so a test depends on the
functions it calls rather than on everything its imports contain.

The result is a networkx DiGraph whose edges mean "depends on" (dependent -> dependency):

  test:<pytest node id>     a test: its file's module level, its conftest files, its own body,
                            class and setup code, the fixtures it requests (by name), the
                            project functions those call, pytest itself and its config file
  probe:<probe id>          a derived probe (`import pkg`, `script --help`)
  function:<module>.<name>  a function or method of the project's code (not of test files)
  module:<dotted name>      a project module (what runs at import), or an imported top-level
                            package of an installed distribution (attribute external=True)
  distribution:<name>       an installed distribution -> the distributions it requires
  script:<name>             a console script -> its entry function and its distribution
  config:<path> data:<path> a project file the code reads (path relative to the project)
  envvar:<NAME>             an environment variable the code reads

Every node has `kind` and `label`; test and probe nodes carry `test_id`, the id used in
HealthyState.outcomes; edges carry `rel` (imports, calls, reads, reads-env, runs, requires,
provided-by, installed-by, entry, package, in-file, conftest, defined-in, runner, plugin, config).
On top of the graph: `predict` (the tests a target's break should fail), `depth` (how far below
those tests it sits), `select_targets` (inversion points worth trying, most informative first),
`difficulty`, renderers (`to_json`, `to_dot`, `write_graph`) and `graph_command` behind
`miner graph`.

    graph = build_graph(project, healthy)
    chosen = select_targets(graph, healthy, targets, budget=20, seed=0)  # [(target, F2P, depth)]
    write_graph(graph, "svg", Path("graph.svg"), highlight=[t for t, _, _ in chosen])
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable

import networkx as nx
import tree_sitter_python
from tree_sitter import Language, Node, Parser, Query, QueryCursor

from miner.models import HealthyState, Project, Target

if TYPE_CHECKING:
    from miner.store import Store

PY_LANGUAGE = Language(tree_sitter_python.language())
SKIP_DIRS = {".git", "__pycache__", ".tox", ".nox", ".venv", "venv", ".mypy_cache", ".pytest_cache",
             "build", "dist", ".eggs", "node_modules", ".hg", ".svn"}
NOT_DATA_SUFFIXES = {".py", ".pyc", ".pyo", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cc", ".cpp", ".rs", ".so"}
CONFIG_SUFFIXES = {".ini", ".cfg", ".toml", ".yaml", ".yml", ".json", ".conf", ".env", ".properties"}
ENVIRON = {"os.environ", "environ", "os.environb"}
ENV_CALLS = {"os.getenv", "getenv", "os.environ.get", "environ.get", "os.environ.setdefault",
             "environ.setdefault", "os.getenvb", "os.environ.pop", "environ.pop"}
ENV_SETTERS = {"setenv", "delenv", "putenv", "unsetenv"}
COMMAND_CALLS = {"run", "call", "check_call", "check_output", "Popen", "system", "getoutput",
                 "getstatusoutput", "which", "spawnlp", "execvp", "popen"}
PATH_CALLS = {"Path", "PurePath", "PosixPath", "PurePosixPath", "join", "joinpath"}
RESOURCE_CALLS = {"files", "read_text", "read_binary", "open_text", "open_binary", "get_data",
                  "is_resource", "path"}
LISTING_NAMES = {"glob", "rglob", "iglob", "iterdir", "listdir", "scandir", "walk", "copytree"}
TMP_NAMES = {"tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory", "tmp_dir", "temp_dir", "tmp"}
CLASS_SETUP = {"setUp", "tearDown", "setUpClass", "tearDownClass", "asyncSetUp", "asyncTearDown",
               "setup_method", "teardown_method", "setup_class", "teardown_class", "setup", "teardown"}
MODULE_SETUP = {"setup_module", "teardown_module", "setUpModule", "tearDownModule", "setup_function",
                "teardown_function"}
# Edges that stay inside the test itself (its file's module scope, its conftest files) cost
# nothing when measuring how deep a target sits below a test.
FREE_RELATIONS = {"in-file", "conftest", "defined-in"}

_QUERY = Query(PY_LANGUAGE, """
(import_statement) @import
(import_from_statement) @import
(call function: (_) @fn arguments: (argument_list) @args) @call
(subscript value: (_) @obj subscript: (_) @key) @subscript
(comparison_operator) @compare
(binary_operator operator: "/") @div
(string) @string
(identifier) @name
(pair key: (string) value: (string)) @pair
""")


# ---------------------------------------------------------------------------------------------
# Parsing one file
# ---------------------------------------------------------------------------------------------

@dataclass
class Scope:
    """What one scope (module level, a class body, or one function with its nested code) uses."""

    imports: set[tuple[int, str, tuple[str, ...]]] = field(default_factory=set)  # (level, module, names)
    paths: set[str] = field(default_factory=set)  # string literals that may name project files
    envvars: set[str] = field(default_factory=set)
    sets_env: set[str] = field(default_factory=set)  # variables it sets itself (monkeypatch.setenv)
    commands: set[str] = field(default_factory=set)  # programs run through subprocess & co
    names: set[str] = field(default_factory=set)  # identifiers referenced

    def merge(self, other: Scope) -> None:
        self.imports |= other.imports
        self.paths |= other.paths
        self.envvars |= other.envvars
        self.sets_env |= other.sets_env
        self.commands |= other.commands
        self.names |= other.names


@dataclass
class Function:
    """A module-level function or a method: what pytest may call as a test or a fixture."""

    qualname: str
    fixture: bool = False
    autouse: bool = False
    usefixtures: set[str] = field(default_factory=set)


@dataclass
class ClassDef:
    """A class: the base classes it names and the fixtures it requests for its tests."""

    qualname: str
    bases: list[str] = field(default_factory=list)
    usefixtures: set[str] = field(default_factory=set)


@dataclass
class SourceFile:
    """The analysis of one Python file: its scopes keyed by qualified name ("" = module level)."""

    rel: str
    module: str
    package: bool
    scopes: dict[str, Scope] = field(default_factory=lambda: defaultdict(Scope))
    functions: dict[str, Function] = field(default_factory=dict)
    classes: dict[str, ClassDef] = field(default_factory=dict)
    lazy: dict[str, str] = field(default_factory=dict)  # name -> module, for a module __getattr__

    def everything(self) -> Scope:
        total = Scope()
        for scope in self.scopes.values():
            total.merge(scope)
        return total


def _literal(node: Node) -> str | None:
    """The value of a plain (non f-) string literal."""
    if node.type not in ("string", "concatenated_string"):
        return None
    try:
        value = ast.literal_eval(node.text.decode("utf-8", "replace"))
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _dotted(node: Node | None) -> str:
    return node.text.decode() if node is not None else ""


def _last_name(text: str) -> str:
    return text.rsplit(".", 1)[-1]


MAIN_SCOPE = "<main>"  # code under `if __name__ == "__main__":` runs as a script, never on import


def _is_main_guard(condition: Node | None) -> bool:
    if condition is None or condition.type != "comparison_operator":
        return False
    text = condition.text.decode(errors="replace").replace("'", '"').replace(" ", "")
    return text in ('__name__=="__main__"', '"__main__"==__name__')


def _scope_key(node: Node) -> str:
    """Qualified name of the scope holding node: classes down to the first function.

    Decorators count as part of what they decorate, so `@pytest.mark.parametrize("f", ["a.csv"])`
    belongs to the test function, not to the module.
    """
    chain: list[Node] = []
    main_guard = False
    previous, current = node, node.parent
    while current is not None:
        if current.type in ("function_definition", "class_definition"):
            chain.append(current)
        elif current.type == "decorated_definition" and previous.type == "decorator":
            chain.append(current.child_by_field_name("definition"))
        elif current.type == "if_statement" and _is_main_guard(current.child_by_field_name("condition")):
            main_guard = True
        previous, current = current, current.parent
    if main_guard and not chain:
        return MAIN_SCOPE
    parts = []
    for definition in reversed(chain):
        parts.append(_dotted(definition.child_by_field_name("name")))
        if definition.type == "function_definition":
            break
    return ".".join(parts)


class _FileParser:
    """Collects one file's imports, file paths, environment variables and names, per scope."""

    def __init__(self, source: SourceFile, root: Node) -> None:
        self.file = source
        self.root = root
        self.constants: dict[str, list[str]] = {}  # module-level NAME = <path-like expression>
        self.strings: dict[str, str] = {}  # module-level NAME = "text"
        self.skip: set[Node] = set()  # strings already read as parts of a longer path, or definitions
        self.definitions: list[tuple[int, int]] = []  # byte spans of module constants' values

    def parse(self) -> SourceFile:
        self._read_constants()
        captures = QueryCursor(_QUERY).captures(self.root)
        for kind in ("import", "call", "subscript", "compare", "div"):
            for node in captures.get(kind, []):
                getattr(self, f"_on_{kind}")(node, self.file.scopes[_scope_key(node)])
        for node in captures.get("string", []):
            self._on_string(node)
        for node in captures.get("name", []):
            if node not in self.skip:
                self.file.scopes[_scope_key(node)].names.add(_dotted(node))
        self._attribute_constants()
        self._read_definitions()
        if "__getattr__" in self.file.functions:
            self._read_lazy_exports(captures.get("pair", []))
        return self.file

    def _read_lazy_exports(self, pairs: list[Node]) -> None:
        """{"name": ".submodule"} maps of a package that imports submodules on first attribute use."""
        for pair in pairs:
            name = _literal(pair.child_by_field_name("key"))
            module = _literal(pair.child_by_field_name("value"))
            if name and name.isidentifier() and module and re.fullmatch(r"\.*[A-Za-z_][\w.]*", module):
                self.file.lazy[name] = module

    # -- module-level constants: HERE = Path(__file__).parent; DATA = HERE / "data"; ENV = "X"
    def _read_constants(self) -> None:
        for statement in self.root.children:
            if statement.type != "expression_statement" or not statement.children:
                continue
            assignment = statement.children[0]
            if assignment.type != "assignment":
                continue
            left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
            if left is None or right is None or left.type != "identifier":
                continue
            parts = self._parts(right)
            if parts is None:
                continue
            name = _dotted(left)
            self.constants[name] = parts
            self.definitions.append((right.start_byte, right.end_byte))
            self.skip.add(left)
            self._skip_strings(right)
            if _literal(right) is not None:
                self.strings[name] = _literal(right)

    def _attribute_constants(self) -> None:
        """A constant's path belongs to the scopes that use it (to the module if none does)."""
        used: set[str] = set()
        for scope in self.file.scopes.values():
            for name in scope.names & self.constants.keys():
                used.add(name)
                if self.constants[name]:
                    scope.paths.add("/".join(self.constants[name]))
        module = self.file.scopes[""]
        for name in self.constants.keys() - used:
            if self.constants[name]:
                module.paths.add("/".join(self.constants[name]))

    def _skip_strings(self, node: Node) -> None:
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type == "string":
                self.skip.add(current)
            stack.extend(current.children)

    # -- path-like expressions
    def _parts(self, node: Node) -> list[str] | None:
        """Literal path components of a path-like expression, None when it is not one.

        Handles "a/b", Path("a") / "b", HERE / "b" (module constants), os.path.join(x, "a", "b"),
        base.joinpath("a"), importlib.resources.files("pkg.data") / "x", read_text("pkg", "x").
        Paths under pytest's temporary directories are not project files: they yield None.
        """
        kind = node.type
        if kind in ("string", "concatenated_string"):
            value = _literal(node)
            return [value] if value is not None else None
        if kind == "identifier":
            name = _dotted(node)
            if name in TMP_NAMES:
                return None
            return list(self.constants[name]) if name in self.constants else ([] if name == "__file__" else None)
        if kind == "parenthesized_expression" and node.named_children:
            return self._parts(node.named_children[0])
        if kind == "attribute":  # Path(__file__).parent, HERE.parent
            return self._parts(node.child_by_field_name("object"))
        if kind == "subscript":  # Path(__file__).parents[1]
            return self._parts(node.child_by_field_name("value"))
        if kind == "binary_operator" and _dotted(node.child_by_field_name("operator")) == "/":
            left = self._parts(node.child_by_field_name("left"))
            right = self._parts(node.child_by_field_name("right"))
            if left is None and node.child_by_field_name("left").type not in ("call", "attribute"):
                return None
            return (left or []) + (right or []) if right is not None else None
        if kind == "call":
            return self._call_parts(node)
        return None

    def _call_parts(self, node: Node) -> list[str] | None:
        function = node.child_by_field_name("function")
        name = _last_name(_dotted(function))
        args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "keyword_argument"]
        if name in ("dirname", "abspath", "realpath", "resolve", "absolute", "expanduser") and args:
            return self._parts(args[0])
        if name in ("resolve", "absolute", "expanduser") and function.type == "attribute":
            return self._parts(function.child_by_field_name("object"))
        if name in PATH_CALLS:
            parts: list[str] = []
            if name == "joinpath" and function.type == "attribute":
                parts = self._parts(function.child_by_field_name("object")) or []
            for arg in args:
                sub = self._parts(arg)
                if sub is None and arg.type == "identifier" and _dotted(arg) in TMP_NAMES:
                    return None
                parts += sub or []
            return parts
        if name in RESOURCE_CALLS and args:
            return self._resource_parts(args)
        return None

    def _resource_parts(self, args: list[Node]) -> list[str] | None:
        """importlib.resources / pkgutil calls: the first argument names a package."""
        package = _literal(args[0])
        parts = [package.replace(".", "/")] if package else []
        for arg in args[1:]:
            value = _literal(arg)
            if value is not None:
                parts.append(value)
        return parts if package is not None or args[0].type in ("identifier", "attribute") else None

    def _in_definition(self, node: Node) -> bool:
        return any(start <= node.start_byte and node.end_byte <= end for start, end in self.definitions)

    def _add_path(self, node: Node, scope: Scope) -> None:
        if self._in_definition(node):
            return  # read where the constant is used
        parts = self._parts(node)
        if parts is None:
            if any(_dotted(n) in TMP_NAMES for n in _identifiers(node)):
                self._skip_strings(node)
            return
        parts = [p for p in parts if p]
        if parts:
            scope.paths.add("/".join(parts))
        if len(parts) >= 2:
            self._skip_strings(node)

    # -- query handlers
    def _on_import(self, node: Node, scope: Scope) -> None:
        if node.type == "import_statement":
            for child in node.children_by_field_name("name"):
                target = child.child_by_field_name("name") if child.type == "aliased_import" else child
                scope.imports.add((0, _dotted(target), ()))
            return
        module = node.child_by_field_name("module_name")
        level, name = 0, _dotted(module)
        if module is not None and module.type == "relative_import":
            prefix = next((c for c in module.children if c.type == "import_prefix"), None)
            level = len(_dotted(prefix))
            dotted = next((c for c in module.children if c.type == "dotted_name"), None)
            name = _dotted(dotted)
        names = ["*"] if any(c.type == "wildcard_import" for c in node.children) else []
        for child in node.children_by_field_name("name"):
            target = child.child_by_field_name("name") if child.type == "aliased_import" else child
            names.append(_dotted(target))
        scope.imports.add((level, name, tuple(names)))

    def _on_call(self, node: Node, scope: Scope) -> None:
        function = _dotted(node.child_by_field_name("function"))
        args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "keyword_argument"]
        name = _last_name(function)
        if function in ENV_CALLS and args:
            self._add_envvar(args[0], scope)
            if name == "pop":
                self._add_envvar(args[0], scope, sets=True)
        elif name in ENV_SETTERS and args:
            self._add_envvar(args[0], scope, sets=True)
        elif name == "dict" and len(args) >= 2 and (_dotted(args[0]) in ENVIRON or _literal(args[0]) in ENVIRON):
            for pair in (c for c in args[1].named_children if c.type == "pair"):
                self._add_envvar(pair.child_by_field_name("key"), scope, sets=True)  # patch.dict(os.environ, {...})
        elif name in COMMAND_CALLS and args:
            self._add_command(args[0], scope)
        elif name == "import_module" and args and _literal(args[0]):
            scope.imports.add((0, _literal(args[0]), ()))
        if name in PATH_CALLS or name in RESOURCE_CALLS:
            self._add_path(node, scope)

    def _on_subscript(self, node: Node, scope: Scope) -> None:
        if _dotted(node.child_by_field_name("value")) not in ENVIRON:
            return
        parent = node.parent
        writes = parent is not None and (parent.type == "delete_statement" or (
            parent.type in ("assignment", "augmented_assignment") and parent.child_by_field_name("left") == node))
        self._add_envvar(node.child_by_field_name("subscript"), scope, sets=writes)

    def _on_compare(self, node: Node, scope: Scope) -> None:
        children = node.children
        if len(children) == 3 and children[1].type in ("in", "not in") and _dotted(children[2]) in ENVIRON:
            self._add_envvar(children[0], scope)

    def _on_div(self, node: Node, scope: Scope) -> None:
        parent = node.parent
        if parent is not None and parent.type == "binary_operator" and node == parent.child_by_field_name("left"):
            return  # only the whole chain a / b / c
        self._add_path(node, scope)

    def _on_string(self, node: Node) -> None:
        if node in self.skip or node.parent is None:
            return
        if node.parent.type == "expression_statement" and len(node.parent.children) == 1:
            return  # a docstring
        if node.parent.type == "concatenated_string":
            return
        value = _literal(node)
        if value and "\n" not in value and len(value) < 256:
            self.file.scopes[_scope_key(node)].paths.add(value)

    def _add_envvar(self, node: Node | None, scope: Scope, sets: bool = False) -> None:
        if node is None:
            return
        value = _literal(node)
        if value is None and node.type == "identifier":
            value = self.strings.get(_dotted(node))
        elif value:
            self.skip.add(node)  # a variable's name, not a file name
        if value:
            (scope.sets_env if sets else scope.envvars).add(value)

    def _add_command(self, node: Node, scope: Scope) -> None:
        if node.type in ("list", "tuple") and node.named_children:
            items = node.named_children
            values = [_literal(i) for i in items]
            if values[0] is not None:
                scope.commands.add(values[0])
            for flag, module in zip(values, values[1:]):  # [sys.executable, "-m", "pkg"]
                if flag == "-m" and module:
                    scope.imports.add((0, module, ()))
            return
        value = _literal(node)
        if value and value.split():
            scope.commands.add(value.split()[0])

    # -- functions and classes, for pytest's test and fixture lookup
    def _read_definitions(self) -> None:
        stack = [(self.root, "")]
        while stack:
            node, prefix = stack.pop()
            for child in node.children:
                definition, decorators = child, []
                if child.type == "decorated_definition":
                    definition = child.child_by_field_name("definition")
                    decorators = [c for c in child.children if c.type == "decorator"]
                if definition.type not in ("function_definition", "class_definition"):
                    continue
                qualname = f"{prefix}{_dotted(definition.child_by_field_name('name'))}"
                used = {v for d in decorators if "usefixtures" in _dotted(d)
                        for v in (_literal(s) for s in _strings(d)) if v}
                if definition.type == "class_definition":
                    bases = definition.child_by_field_name("superclasses")
                    names = [_last_name(_dotted(b)) for b in (bases.named_children if bases else [])
                             if b.type in ("identifier", "attribute")]
                    self.file.classes[qualname] = ClassDef(qualname=qualname, bases=names, usefixtures=used)
                    stack.append((definition.child_by_field_name("body"), qualname + "."))
                    continue
                text = " ".join(_dotted(d) for d in decorators)
                self.file.functions[qualname] = Function(
                    qualname=qualname, fixture="fixture" in text,
                    autouse=bool(re.search(r"autouse\s*=\s*True", text)), usefixtures=used)


def _identifiers(node: Node) -> Iterable[Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "identifier":
            yield current
        stack.extend(current.children)


def _strings(node: Node) -> Iterable[Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "string":
            yield current
        stack.extend(current.children)


def _suffix_matches(text: str, index: dict[str, list[str]]) -> list[str]:
    """Paths of the index (keyed by last component) equal to text or ending/ended with it at a '/'."""
    return [rel for rel in index.get(PurePosixPath(text).name, [])
            if rel == text or text.endswith("/" + rel) or rel.endswith("/" + text)]


def _nearest(matches: list[str], near: str) -> list[str]:
    """Of several same-named paths, those sharing the longest folder prefix with `near`."""
    if len(matches) < 2:
        return matches
    here = PurePosixPath(near).parent.parts

    def shared(rel: str) -> int:
        parts = PurePosixPath(rel).parts
        return next((i for i, (a, b) in enumerate(zip(parts, here)) if a != b), min(len(parts), len(here)))

    best = max(shared(m) for m in matches)
    return [m for m in matches if shared(m) == best]


def parse_source(text: bytes, rel: str, module: str, package: bool = False) -> SourceFile:
    """Analyse one Python file (tree-sitter tolerates syntax errors: what parses is used)."""
    tree = Parser(PY_LANGUAGE).parse(text)
    return _FileParser(SourceFile(rel=rel, module=module, package=package), tree.root_node).parse()


# ---------------------------------------------------------------------------------------------
# Project layout
# ---------------------------------------------------------------------------------------------

def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_files(root: Path) -> list[str]:
    """Project-relative posix paths of the project's regular files (caches and venvs skipped)."""
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and not path.is_symlink() and rel.parts[0] not in SKIP_DIRS:
            files.append(rel.as_posix())
    return files


def module_names(py_files: list[str]) -> dict[str, str]:
    """relative path -> importable dotted name, the way pytest's default import mode sees it.

    A file's import root is the first ancestor folder without __init__.py (so src/pkg/mod.py is
    pkg.mod and tests/test_x.py without tests/__init__.py is test_x). Files whose names clash
    (several conftest.py) are named after their path instead.
    """
    present = set(py_files)
    names: dict[str, str] = {}
    for rel in py_files:
        parts = list(PurePosixPath(rel).with_suffix("").parts)
        start = len(parts) - 1
        while start > 0 and "/".join(parts[:start] + ["__init__.py"]) in present:
            start -= 1
        dotted = parts[start:]
        if dotted[-1] == "__init__":
            dotted = dotted[:-1]
        names[rel] = ".".join(dotted) if dotted else parts[0]
    counts = defaultdict(int)
    for name in names.values():
        counts[name] += 1
    for rel, name in names.items():
        if counts[name] > 1:
            parts = list(PurePosixPath(rel).with_suffix("").parts)
            names[rel] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return names


def file_kind(rel: str) -> str:
    """'config' for configuration formats, 'data' for any other non-code file."""
    path = PurePosixPath(rel)
    return "config" if path.suffix.lower() in CONFIG_SUFFIXES or path.name.startswith(".env") else "data"


def pytest_config(root: Path, files: list[str]) -> str | None:
    """The file pytest reads its configuration from, in pytest's own order of precedence."""
    markers = [("pytest.ini", ""), (".pytest.ini", ""), ("pyproject.toml", "[tool.pytest.ini_options]"),
               ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")]
    for name, marker in markers:
        if name in files:
            text = (root / name).read_text("utf-8", "replace")
            if not marker or marker in text:
                return name
    return None


def split_test_id(test_id: str) -> tuple[str, str]:
    """('tests/test_x.py', 'TestC.test_y') from 'tests/test_x.py::TestC::test_y[1]'."""
    bare = test_id.split("[", 1)[0]
    path, _, rest = bare.partition("::")
    return path, ".".join(p for p in rest.split("::") if p)


# ---------------------------------------------------------------------------------------------
# Building the graph
# ---------------------------------------------------------------------------------------------

class _Builder:
    """Turns parsed files and the healthy inventory into nodes and edges."""

    def __init__(self, project: Project, healthy: HealthyState) -> None:
        self.root = Path(project.path)
        self.healthy = healthy
        self.graph = nx.DiGraph(repo=project.repo, commit=project.commit)
        files = project_files(self.root)
        py_files = [f for f in files if f.endswith(".py")]
        self.modules_by_file = module_names(py_files)
        self.files_by_module = {m: f for f, m in self.modules_by_file.items()}
        self.sources = {rel: self._parse(rel) for rel in py_files}
        self.resources = [f for f in files if PurePosixPath(f).suffix.lower() not in NOT_DATA_SUFFIXES]
        self.by_basename: dict[str, list[str]] = defaultdict(list)
        self.folders: dict[str, list[str]] = defaultdict(list)  # folder name -> folders holding resources
        for rel in self.resources:
            self.by_basename[PurePosixPath(rel).name].append(rel)
        for folder in sorted({str(p) for rel in self.resources for p in PurePosixPath(rel).parents if str(p) != "."}):
            self.folders[PurePosixPath(folder).name].append(folder)
        self.providers = self._providers()
        self.scripts_by_basename: dict[str, list[str]] = defaultdict(list)  # files with a __main__ block
        for rel, source in self.sources.items():
            if MAIN_SCOPE in source.scopes:
                self.scripts_by_basename[PurePosixPath(rel).name].append(rel)
        self.scripts = {s: d.name for d in healthy.inventory for s in d.console_scripts}
        own = {canonical(n) for n in healthy.project_dists}
        # own scripts named like a package of the project are matched only where they are run
        packages = {m.split(".", 1)[0] for m in self.files_by_module}
        self.own_scripts = {s for s, d in self.scripts.items() if canonical(d) in own and s not in packages}
        self.test_files = self._test_files()
        self.pytest_config = pytest_config(self.root, files)
        self.functions_by_name: dict[str, list[tuple[SourceFile, str]]] = defaultdict(list)
        self.classes_by_name: dict[str, list[tuple[SourceFile, str]]] = defaultdict(list)
        for rel, source in self.sources.items():
            if rel in self.test_files:
                continue  # test files' helpers and fixtures are folded into their tests
            for qualname in source.functions:
                self.functions_by_name[_last_name(qualname)].append((source, qualname))
            for qualname in source.classes:
                self.classes_by_name[_last_name(qualname)].append((source, qualname))
        self.imports_of: dict[str, set[str]] = {}
        self.lazy: dict[str, dict[str, str]] = {}  # module -> {exported name: submodule node}
        self._visible: dict[str, set[str]] = {}
        self.graph.graph["providers"] = {k: sorted(v) for k, v in self.providers.items()}
        self.system = healthy.system or {}
        self.import_loads: dict[str, list[str]] = self.system.get("import_loads", {})

    def _parse(self, rel: str) -> SourceFile:
        text = (self.root / rel).read_bytes()
        return parse_source(text, rel, self.modules_by_file[rel], rel.endswith("__init__.py"))

    def _providers(self) -> dict[str, set[str]]:
        """Top-level import name -> the distributions that install it."""
        providers: dict[str, set[str]] = defaultdict(set)
        for dist in self.healthy.inventory:
            tops = set(dist.top_level)
            for path in dist.files:
                head = path.split("/", 1)[0]
                if head.endswith(".py"):
                    tops.add(head[:-3])
                elif "/" in path and head.isidentifier():
                    tops.add(head)
            for top in tops:
                providers[top].add(canonical(dist.name))
        return providers

    def _test_files(self) -> set[str]:
        named = {rel for rel in self.sources if PurePosixPath(rel).name == "conftest.py"
                 or PurePosixPath(rel).name.startswith("test_") or rel.endswith("_test.py")}
        return named | {split_test_id(t)[0] for t in self.healthy.outcomes if not t.startswith("probe::")}

    def build(self) -> nx.DiGraph:
        self._add_distributions()
        for source in self.sources.values():
            self._project_module(source.module)
            if source.rel not in self.test_files:
                for qualname in source.functions:
                    self._node(f"function:{source.module}.{qualname}", "function", f"{qualname}()",
                               module=source.module, path=source.rel)
        for source in self.sources.values():
            everything = source.everything()
            self.imports_of[source.module] = {
                t.removeprefix("module:") for item in everything.imports for t in self._import_targets(item, source)
                if self.graph.nodes[t].get("project")}
        for source in self.sources.values():
            for name, module in source.lazy.items():
                level = len(module) - len(module.lstrip("."))
                found = self._import_targets((level, module.lstrip("."), ()), source)
                if found:
                    self.lazy.setdefault(source.module, {})[name] = found[0]
        for rel, source in sorted(self.sources.items()):
            self._add_module(rel, source)
        self._add_scripts()
        self._add_tests()
        self._add_probes()
        return self.graph

    # -- nodes
    def _node(self, node_id: str, kind: str, label: str, **attrs: object) -> str:
        if "kind" not in self.graph.nodes.get(node_id, {}):
            self.graph.add_node(node_id, kind=kind, label=label, **attrs)
        return node_id

    def _edge(self, source: str, target: str, rel: str) -> None:
        if source != target and not self.graph.has_edge(source, target):
            self.graph.add_edge(source, target, rel=rel, weight=0 if rel in FREE_RELATIONS else 1)

    def _distribution(self, name: str) -> str | None:
        node = f"distribution:{canonical(name)}"
        return node if node in self.graph else None

    def _add_distributions(self) -> None:
        own = {canonical(n) for n in self.healthy.project_dists}
        for dist in self.healthy.inventory:
            name = canonical(dist.name)
            self._node(f"distribution:{name}", "distribution", f"{name} {dist.version}",
                       version=dist.version, own=name in own)
        for dist in self.healthy.inventory:
            if canonical(dist.name) in own:
                continue  # the project's own code is analysed: what it imports is known precisely
            for requirement in dist.requires:
                target = self._distribution(requirement)
                if target:
                    self._edge(f"distribution:{canonical(dist.name)}", target, "requires")

    def _add_scripts(self) -> None:
        for dist in self.healthy.inventory:
            for script, entry in dist.console_scripts.items():
                node = self._node(f"script:{script}", "script", script, entry=entry)
                self._edge(node, f"distribution:{canonical(dist.name)}", "installed-by")
                module, _, attr = (part.strip() for part in entry.partition(":"))
                for target in self._import_targets((0, module, ()), None):
                    self._edge(node, target, "entry")
                function = f"function:{module}.{attr.split('[')[0].strip()}"
                if function in self.graph:
                    self._edge(node, function, "calls")

    def _project_module(self, dotted: str) -> str | None:
        rel = self.files_by_module.get(dotted)
        if rel is None:
            return None
        node = f"module:{dotted}"
        if node not in self.graph:
            self._node(node, "module", dotted, path=rel, project=True, test=rel in self.test_files)
            self._link_package(dotted, rel)
        return node

    def _link_package(self, dotted: str, rel: str) -> None:
        """A module imports its parent package first; a src-layout package comes from its install."""
        if "." in dotted:
            parent = self._project_module(dotted.rsplit(".", 1)[0])
            if parent:
                self._edge(f"module:{dotted}", parent, "package")
            return
        if rel.split("/", 1)[0] in (dotted, f"{dotted}.py"):
            return  # importable from the project root
        if rel in self.test_files:
            return
        for name in sorted(self.providers.get(dotted, set()) & {canonical(n) for n in self.healthy.project_dists}):
            dist = self._distribution(name)
            if dist:
                self._edge(f"module:{dotted}", dist, "installed-by")

    def _external_module(self, top: str) -> str | None:
        providers = self.providers.get(top)
        if not providers:
            return None
        node = self._node(f"module:{top}", "module", top, project=False, external=True)
        for name in sorted(providers):
            dist = self._distribution(name)
            if dist:
                self._edge(node, dist, "provided-by")
        self._link_libraries(node, top)
        return node

    # -- beneath the project (container backends): shared libraries and their Debian packages
    def _system_module(self, top: str) -> str | None:
        """A standard-library module drawn only when importing it loads a shared library."""
        if not self._libraries_loaded_by(top):
            return None
        node = self._node(f"module:{top}", "module", top, project=False, external=True, stdlib=True)
        self._link_libraries(node, top)
        return node

    def _libraries_loaded_by(self, top: str) -> list[str]:
        files = set(self.import_loads.get(top, ()))
        return sorted(soname for soname, lib in self.system.get("libraries", {}).items()
                      if files & {os.path.realpath(u) for u in lib.get("used_by", ()) if u != "interpreter"})

    def _link_libraries(self, node: str, top: str) -> None:
        """import top -> the shared libraries its extension modules load (ldd) -> their packages."""
        libraries = self.system.get("libraries", {})
        for soname in self._libraries_loaded_by(top):
            lib = libraries[soname]
            library = self._node(f"syslib:{soname}", "syslib", soname, path=lib.get("path"))
            self._edge(node, library, "loads")
            package = lib.get("package")
            if package:
                name = package.split(":")[0]
                version = self.system.get("packages", {}).get(package, {}).get("version", "")
                self._edge(library, self._node(f"debpkg:{name}", "debpkg", f"{name} {version}".strip()), "installed-by")

    def _import_targets(self, item: tuple[int, str, tuple[str, ...]], source: SourceFile | None) -> list[str]:
        """Module nodes one import statement depends on (stdlib and unknown names ignored)."""
        level, module, names = item
        if level and source is not None:
            base = source.module.split(".") if source.package else source.module.split(".")[:-1]
            base = base[: len(base) - (level - 1)] if level > 1 else base
            full = ".".join(base + ([module] if module else []))
        elif level:
            return []
        else:
            full = module
        targets = [n for n in (self._project_module(f"{full}.{name}") for name in names if name != "*") if n]
        parts = full.split(".") if full else []
        for end in range(len(parts), 0, -1):
            node = self._project_module(".".join(parts[:end]))
            if node:
                return targets + [node]
        if level or not parts or parts[0] == "__future__":
            return targets
        if parts[0] in sys.stdlib_module_names:
            system = self._system_module(parts[0])
            return targets + ([system] if system else [])
        external = self._external_module(parts[0])
        return targets + ([external] if external else [])

    def _file_targets(self, literal: str, near: str, listing: bool = False) -> list[str]:
        """Project files a string literal names: equal, or one ends with the other at a '/'.

        With `listing` (the scope globs or lists folders), a literal naming a folder stands for
        every file under it.
        """
        text = literal.strip().replace("\\", "/")
        while text.startswith("./"):
            text = text[2:]
        text = text.rstrip("/")
        if not text or len(text) > 255:
            return []
        matches = _nearest(_suffix_matches(text, self.by_basename), near)
        if listing and not matches:
            for folder in _nearest(_suffix_matches(text, self.folders), near):
                matches += [r for r in self.resources if r.startswith(folder + "/")]
        return [self._node(f"{file_kind(m)}:{m}", file_kind(m), m, path=m) for m in matches]

    # -- calls between the project's functions, matched by name among the modules in reach
    def visible(self, module: str) -> set[str]:
        """Project modules a module can reach through imports (itself included)."""
        if module not in self._visible:
            seen, queue = {module}, [module]
            while queue:
                for imported in self.imports_of.get(queue.pop(), ()):
                    if imported not in seen:
                        seen.add(imported)
                        queue.append(imported)
            self._visible[module] = seen
        return self._visible[module]

    def _callees(self, names: set[str], visible: set[str]) -> set[str]:
        """Function nodes a scope may call: same-named functions and methods of visible modules.

        A class named in the scope stands for its special methods (__init__, __eq__, ...) and
        those of its bases, which run without being named.
        """
        found: set[str] = set()
        for name in names:
            for source, qualname in self.functions_by_name.get(name, ()):
                if source.module in visible:
                    found.add(f"function:{source.module}.{qualname}")
            for source, qualname in self.classes_by_name.get(name, ()):
                if source.module in visible:
                    found |= self._class_entries(source, qualname, visible, set())
        return found

    def _class_entries(self, source: SourceFile, qualname: str, visible: set[str], seen: set[str]) -> set[str]:
        key = f"{source.module}.{qualname}"
        if key in seen:
            return set()
        seen.add(key)
        found = {f"function:{source.module}.{q}" for q in source.functions
                 if q.rsplit(".", 1)[0] == qualname and _last_name(q).startswith("__")}
        for base in source.classes[qualname].bases:
            for other, other_name in self.classes_by_name.get(base, ()):
                if other.module in visible:
                    found |= self._class_entries(other, other_name, visible, seen)
        return found

    # -- what a scope uses
    def _scope_targets(self, scope: Scope, source: SourceFile, visible: set[str]) -> list[tuple[str, str]]:
        """(node, relation) pairs for everything a scope uses."""
        found: list[tuple[str, str]] = []
        for item in sorted(scope.imports):
            found += [(t, "imports") for t in self._import_targets(item, source)]
        listing = bool(scope.names & LISTING_NAMES)
        for literal in sorted(scope.paths):
            found += [(t, "reads") for t in self._file_targets(literal, source.rel, listing)]
        for name in sorted(scope.envvars):
            found.append((self._node(f"envvar:{name}", "envvar", f"${name}", set=name in self.healthy.env),
                          "reads-env"))
        # Programs a scope runs: any console script called by subprocess & co, and the project's
        # own scripts wherever their name appears as a path (Path(sys.executable).parent / "tool").
        named = {PurePosixPath(c).name for c in scope.commands} & self.scripts.keys()
        named |= {PurePosixPath(p).name for p in scope.paths} & self.own_scripts
        for name in sorted(named):
            found.append((self._node(f"script:{name}", "script", name), "runs"))
        for literal in sorted(p for p in scope.paths if p.endswith(".py")):  # [sys.executable, "tool.py"]
            for rel in _nearest(_suffix_matches(literal.removeprefix("./"), self.scripts_by_basename), source.rel):
                found.append((f"function:{self.modules_by_file[rel]}.{MAIN_SCOPE}", "runs"))
        lazy = {self.lazy[m][n] for m in visible & self.lazy.keys() for n in scope.names & self.lazy[m].keys()}
        found += [(m, "imports") for m in sorted(lazy)]
        for module in lazy:
            visible = visible | self.visible(module.removeprefix("module:"))
        found += [(f, "calls") for f in sorted(self._callees(scope.names, visible))]
        return found

    def _add_module(self, rel: str, source: SourceFile) -> None:
        node = f"module:{source.module}"
        visible = self.visible(source.module)
        if rel in self.test_files:  # its functions are folded into its tests (see _add_tests)
            scope = self._import_time_scope(source)
        else:
            scope = Scope()
            for key, part in source.scopes.items():
                if key not in source.functions and key != MAIN_SCOPE:  # module level, class bodies, if/try
                    scope.merge(part)
            for qualname in source.functions:
                self._add_function(source, qualname, visible)
            if MAIN_SCOPE in source.scopes:  # what `python file.py` runs besides the import
                main = self._node(f"function:{source.module}.{MAIN_SCOPE}", "function", f"{rel} as a script",
                                  module=source.module, path=rel)
                self._edge(main, node, "defined-in")
                for target, relation in self._scope_targets(source.scopes[MAIN_SCOPE], source, visible):
                    self._edge(main, target, relation)
        for target, relation in self._scope_targets(scope, source, visible):
            self._edge(node, target, relation)

    def _add_function(self, source: SourceFile, qualname: str, visible: set[str]) -> None:
        node = f"function:{source.module}.{qualname}"
        self._edge(node, f"module:{source.module}", "defined-in")
        for target, relation in self._scope_targets(source.scopes.get(qualname, Scope()), source, visible):
            self._edge(node, target, relation)

    @staticmethod
    def _import_time_scope(source: SourceFile) -> Scope:
        """What a test file runs when imported: module level, class bodies, the helpers they call."""
        total, seen = Scope(), set()
        queue = ["", *source.classes]
        while queue:
            key = queue.pop()
            scope = source.scopes.get(key, Scope())
            total.merge(scope)
            for name in scope.names:
                if name in source.functions and not source.functions[name].fixture and name not in seen:
                    seen.add(name)
                    queue.append(name)
        return total

    # -- tests
    def _conftests(self, rel: str) -> list[SourceFile]:
        """conftest.py files pytest loads for a test file, nearest first."""
        found = []
        for folder in PurePosixPath(rel).parents:
            candidate = "conftest.py" if str(folder) == "." else f"{folder}/conftest.py"
            if candidate in self.sources:
                found.append(self.sources[candidate])
        return found

    def _runner_targets(self) -> list[tuple[str, str]]:
        """pytest itself, installed pytest plugins and pytest's configuration file."""
        found = []
        for dist in self.healthy.inventory:
            name = canonical(dist.name)
            if name == "pytest":
                found.append((f"distribution:{name}", "runner"))
            elif name.startswith("pytest-"):
                found.append((f"distribution:{name}", "plugin"))
        if self.pytest_config:
            name = self.pytest_config
            found.append((self._node(f"config:{name}", "config", name, path=name), "config"))
        return found

    def _add_tests(self) -> None:
        runner = self._runner_targets()
        for test_id in sorted(self.healthy.outcomes):
            if test_id.startswith("probe::"):
                continue
            rel, qualname = split_test_id(test_id)
            node = self._node(f"test:{test_id}", "test", test_id.split("::", 1)[-1], test_id=test_id, path=rel)
            for target, relation in runner:
                self._edge(node, target, relation)
            source = self.sources.get(rel)
            if source is None:
                continue
            self._edge(node, f"module:{source.module}", "in-file")
            conftests = self._conftests(rel)
            visible = set(self.visible(source.module))
            for conftest in conftests:
                self._edge(node, f"module:{conftest.module}", "conftest")
                visible |= self.visible(conftest.module)
            scope = Scope()
            for owner, key in self._test_scopes(source, qualname, conftests):
                scope.merge(owner.scopes.get(key, Scope()))
            self.graph.nodes[node]["sets_env"] = sorted(scope.sets_env)
            scope.sets_env = set()
            for target, relation in self._scope_targets(scope, source, visible):
                self._edge(node, target, relation)

    def _test_scopes(self, source: SourceFile, qualname: str,
                     conftests: list[SourceFile]) -> list[tuple[SourceFile, str]]:
        """The function-level scopes a test runs: itself, its classes, setup, fixtures it requests.

        A test that cannot be found (generated, inherited) is given every scope of its file.
        """
        if qualname not in source.functions:
            return [(source, key) for key in source.scopes if key]
        classes = qualname.split(".")[:-1]
        class_keys = [".".join(classes[: i + 1]) for i in range(len(classes))]
        chosen: list[tuple[SourceFile, str]] = [(source, qualname)]
        chosen += [(source, f"{c}.{m}") for c in class_keys for m in CLASS_SETUP if f"{c}.{m}" in source.functions]
        chosen += [(source, m) for m in MODULE_SETUP if m in source.functions]
        for owner in [source] + conftests:  # autouse fixtures and pytest hooks run for every test
            chosen += [(owner, f.qualname) for f in owner.functions.values() if f.qualname.count(".") == 0
                       and (f.autouse or f.qualname.startswith("pytest_"))]
        chosen += [(source, f.qualname) for f in source.functions.values()
                   if f.autouse and f.qualname.rsplit(".", 1)[0] in class_keys]
        requested = set(source.functions[qualname].usefixtures)
        for key in class_keys:
            requested |= source.classes[key].usefixtures if key in source.classes else set()
        return self._close_over_names(source, class_keys, conftests, chosen, requested)

    def _close_over_names(self, source: SourceFile, class_keys: list[str], conftests: list[SourceFile],
                          chosen: list[tuple[SourceFile, str]], requested: set[str]) -> list[tuple[SourceFile, str]]:
        """Add the helpers and fixtures that chosen scopes name, transitively."""
        seen = {(owner.rel, key) for owner, key in chosen}
        queue = list(chosen)
        names = set(requested)
        while queue or names:
            if queue:
                owner, key = queue.pop()
                if key in owner.scopes:  # request.getfixturevalue("name") names a fixture too
                    names |= owner.scopes[key].names | owner.scopes[key].paths
                continue
            found = self._lookup(names.pop(), source, class_keys, conftests)
            if found and (found[0].rel, found[1]) not in seen:
                seen.add((found[0].rel, found[1]))
                chosen.append(found)
                queue.append(found)
        return chosen

    @staticmethod
    def _lookup(name: str, source: SourceFile, class_keys: list[str],
                conftests: list[SourceFile]) -> tuple[SourceFile, str] | None:
        for key in reversed(class_keys):
            if f"{key}.{name}" in source.functions:
                return source, f"{key}.{name}"
        if name in source.functions:
            return source, name
        for conftest in conftests:
            function = conftest.functions.get(name)
            if function is not None and function.fixture:
                return conftest, name
        return None

    # -- probes
    def _add_probes(self) -> None:
        probes = {p.id: p for p in self.healthy.probes}
        for probe_id in sorted(set(probes) | {t for t in self.healthy.outcomes if t.startswith("probe::")}):
            probe = probes.get(probe_id)
            kind, _, rest = probe_id.removeprefix("probe::").partition("::")
            kind = probe.kind if probe else kind
            label = {"import": f"import {rest}", "script": f"{rest} --help"}.get(kind, rest or probe_id)
            node = self._node(f"probe:{probe_id}", "probe", label, test_id=probe_id)
            if kind == "import":
                module = (probe.module if probe and probe.module else rest)
                for target in self._import_targets((0, module, ()), None):
                    self._edge(node, target, "imports")
            elif kind in ("script", "command"):
                argv = probe.argv if probe and probe.argv else rest.split()
                name = PurePosixPath(argv[0]).name if argv else ""
                if name in self.scripts:
                    self._edge(node, f"script:{name}", "runs")
                for arg in argv[1:]:  # python3 tool.py ...: the file runs as a script
                    module = self.modules_by_file.get(arg.removeprefix("./"))
                    if module and f"function:{module}.{MAIN_SCOPE}" in self.graph:
                        self._edge(node, f"function:{module}.{MAIN_SCOPE}", "runs")


# Target kinds the graph has no nodes for: tried after the selected ones, with no prediction.
UNMODELLED_KINDS = frozenset({"system", "service"})


def build_graph(project: Project, healthy: HealthyState) -> nx.DiGraph:
    """The "depends on" graph of a project's tests, probes, modules, files, variables, packages."""
    return _Builder(project, healthy).build()


# ---------------------------------------------------------------------------------------------
# Prediction and selection
# ---------------------------------------------------------------------------------------------

def target_nodes(graph: nx.DiGraph, target: Target) -> list[str]:
    """Graph nodes a target stands for.

    Files match by path whichever of config/data the caller called them; a module stands for
    itself and for the distributions installing it (code inside other distributions imports
    it too: six is used by dateutil, not by the project).
    """
    if target.kind in ("config", "data"):
        paths = {p for p in (target.path, target.name) if p}
        return [n for n, a in graph.nodes(data=True) if a["kind"] in ("config", "data") and a.get("path") in paths]
    if target.kind == "distribution":
        node = f"distribution:{canonical(target.name)}"
        return [node] if node in graph else []
    if target.kind == "module":
        top = target.name.split(".", 1)[0]
        nodes = [f"module:{target.name}"] if f"module:{target.name}" in graph else []
        providers = graph.graph.get("providers", {}).get(top, [])
        if target.attrs.get("dist") in providers:
            providers = [target.attrs["dist"]]
        return nodes + [f"distribution:{p}" for p in providers if f"distribution:{p}" in graph]
    return [target.key] if target.key in graph else []


def predict(graph: nx.DiGraph, target: Target) -> set[str]:
    """Ids of the tests and probes whose result depends, transitively, on the target.

    A test that sets an environment variable itself (monkeypatch.setenv, os.environ[...] = ...)
    does not depend on its outside value, unless some module reads it at import time.
    """
    found: set[str] = set()
    for node in target_nodes(graph, target):
        overridable = target.kind == "envvar" and not any(
            graph.nodes[p]["kind"] == "module" for p in graph.predecessors(node))
        for dependent in nx.ancestors(graph, node) | {node}:
            attrs = graph.nodes[dependent]
            if attrs.get("test_id") is None:
                continue
            if overridable and target.name in attrs.get("sets_env", ()):
                continue
            found.add(attrs["test_id"])
    return found


def depth(graph: nx.DiGraph, target: Target, tests: Iterable[str]) -> int | None:
    """Shortest distance from the given tests down to the target (1 = used directly by a test).

    A test's own file and its conftest files count as the test itself. None when no given test
    reaches the target.
    """
    nodes = target_nodes(graph, target)
    wanted = {f"test:{t}" if not t.startswith("probe::") else f"probe:{t}" for t in tests}
    if not nodes or not wanted:
        return None
    lengths = nx.multi_source_dijkstra_path_length(graph.reverse(copy=False), set(nodes), weight="weight")
    reached = [lengths[n] for n in wanted if n in lengths]
    return max(1, int(min(reached))) if reached else None


def select_targets(graph: nx.DiGraph, healthy: HealthyState, targets: list[Target], budget: int | None,
                   seed: int) -> list[tuple[Target, set[str], int]]:
    """Inversion points worth trying, best first: (target, predicted F2P, depth).

    Dropped: targets whose predicted radius (passing tests and probes that depend on them) is
    empty, and whole-suite targets inside the test runner (pytest, its plugins and their
    requirements). Other targets predicted to fail every passing test (probes aside) come after all the others:
    the prediction over-approximates (an import guarded by try/except, a function never called),
    so they may still break only part of the suite. Within each group: round-robin over target
    kinds (kind order shuffled by seed) so kinds are spread; within a kind, first a radius not
    chosen before (distinct F2P sets first), then a node not chosen before, then the deepest
    (indirect dependencies), then a seeded random tie-break.
    """
    passing = set(healthy.passing)
    scored = []
    for target in targets:
        radius = predict(graph, target) & passing
        if radius:
            scored.append((target, radius, depth(graph, target, radius) or 1))
    # Killing every test is "the whole suite" even when derived probes survive.
    suite = {t for t in passing if not t.startswith("probe::")} or passing
    partial = [s for s in scored if not s[1] >= suite]
    runner = _runner_closure(graph)  # breaking the test runner itself only ever stops every test
    whole = [s for s in scored if s[1] >= suite and not set(target_nodes(graph, s[0])) & runner]
    rng = random.Random(seed)
    chosen = _spread(partial, rng) + _spread(whole, rng)
    return chosen if budget is None else chosen[:budget]


def _runner_closure(graph: nx.DiGraph) -> set[str]:
    """pytest, its plugins, and every distribution they require."""
    runners = {v for _, v, rel in graph.edges(data="rel") if rel in ("runner", "plugin") and v in graph}
    return runners.union(*(nx.descendants(graph, r) for r in runners)) if runners else set()


def _spread(pool: list[tuple[Target, set[str], int]], rng: random.Random) -> list[tuple[Target, set[str], int]]:
    """The pool in selection order: kinds round-robin, new radii and nodes first, deepest first."""
    ties = {id(s): rng.random() for s in pool}
    buckets: dict[str, list] = defaultdict(list)
    for item in pool:
        buckets[item[0].kind].append(item)
    kinds = sorted(buckets)
    rng.shuffle(kinds)
    chosen: list[tuple[Target, set[str], int]] = []
    radii: dict[frozenset, int] = defaultdict(int)
    keys: dict[str, int] = defaultdict(int)
    while len(chosen) < len(pool):
        for kind in kinds:
            if not buckets[kind]:
                continue
            best = min(buckets[kind], key=lambda s: (radii[frozenset(s[1])], keys[s[0].key], -s[2], ties[id(s)]))
            buckets[kind].remove(best)
            radii[frozenset(best[1])] += 1
            keys[best[0].key] += 1
            chosen.append(best)
    return chosen


FAMILY_WEIGHT = {"deps": 0.3, "config": 0.5, "fs": 0.5, "data": 0.6, "env": 0.6, "system": 0.8, "service": 0.8}


def difficulty(depth: int | None, n_f2p: int, family: str) -> tuple[str, float]:
    """An estimate of how hard a task is to repair: (easy|medium|hard, score in [0, 1]).

        score = 0.45 * D + 0.25 * F + 0.30 * W
        D = min(depth - 1, 3) / 3      0 when a failing test uses the broken node directly, 1 at
                                       four or more hops (unknown depth counts as 0.5)
        F = 1 / sqrt(n_f2p)            one failing test gives a single, faint trail; many
                                       failing tests point at their common dependency
        W = FAMILY_WEIGHT[family]      deps 0.3 (tracebacks name the missing module), config/fs
                                       0.5, data/env 0.6 (the symptom is far from the cause),
                                       system/service 0.8; other families 0.5
    easy below 0.35, hard from 0.6, medium between.
    """
    d = 0.5 if depth is None else min(max(depth, 1) - 1, 3) / 3
    f = 1 / math.sqrt(max(n_f2p, 1))
    w = FAMILY_WEIGHT.get(family, 0.5)
    score = round(0.45 * d + 0.25 * f + 0.30 * w, 3)
    label = "easy" if score < 0.35 else "hard" if score >= 0.6 else "medium"
    return label, score


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

class GraphvizMissing(RuntimeError):
    """Graphviz's `dot` is needed for SVG output and is not installed."""


FORMATS = ("json", "dot", "svg")
MAX_FUNCTIONS_SHOWN = 60  # above this, functions are drawn inside their module's node
EVERY_TEST = {"runner", "plugin", "config"}  # relations every test has: not drawn edge by edge
HIDDEN_UNLESS_RED = {"defined-in", "conftest"}  # implied by the clusters nodes are drawn in
MAX_TEST_NAMES = 4  # test names listed on a node of tests that share their dependencies
KIND_STYLE = {  # fill colour, cluster title
    "test": ("#dbe9f6", "tests"),
    "probe": ("#c6dbef", "derived probes"),
    "module": ("#e5f5e0", "project code"),
    "function": ("#f4fbf2", "project code"),
    "script": ("#fff2cc", "console scripts"),
    "config": ("#ead9f2", "config and data files"),
    "data": ("#f9dce9", "config and data files"),
    "envvar": ("#eeeeee", "environment variables"),
    "external": ("#fff7bc", "imported packages"),
    "distribution": ("#fde6cf", "installed distributions"),
    "syslib": ("#e0e0e0", "system"),
    "debpkg": ("#d0d0d0", "system"),
}
CLUSTER_ORDER = ["tests", "derived probes", "project code", "console scripts", "config and data files",
                 "environment variables", "imported packages", "installed distributions", "system"]


def highlight_nodes(graph: nx.DiGraph, highlight: Iterable[str | Target]) -> set[str]:
    """Graph nodes of the given targets or node ids ("kind:name")."""
    nodes: set[str] = set()
    for item in highlight:
        if isinstance(item, str) and item in graph:
            nodes.add(item)
            continue
        if isinstance(item, str):
            kind, _, name = item.partition(":")
            try:
                item = Target(kind=kind, name=name, path=name)
            except ValueError:
                continue
        found = target_nodes(graph, item)
        if item.kind == "module" and f"module:{item.name}" in found:
            found = [f"module:{item.name}"]  # the package drawn, not every distribution installing it
        nodes |= set(found)
    return nodes


def to_json(graph: nx.DiGraph, highlight: Iterable[str | Target] = ()) -> str:
    """The whole graph as JSON: nodes (id, kind, label, attributes, highlighted), edges, highlight."""
    marked = highlight_nodes(graph, highlight)
    nodes = [{"id": n, **{k: v for k, v in a.items()}, "highlighted": n in marked}
             for n, a in sorted(graph.nodes(data=True))]
    edges = [{"source": u, "target": v, "rel": a.get("rel", "")} for u, v, a in sorted(graph.edges(data=True))]
    return json.dumps({"repo": graph.graph.get("repo"), "commit": graph.graph.get("commit"), "nodes": nodes,
                       "edges": edges, "highlight": sorted(marked)}, indent=2, default=str)


def _style_key(attrs: dict) -> str:
    if attrs.get("kind") == "module" and attrs.get("external"):
        return "external"
    return attrs.get("kind", "")


def readable_view(graph: nx.DiGraph, highlight: set[str]) -> nx.DiGraph:
    """What is worth drawing: what tests and probes reach, with look-alike tests merged.

    Tests of one file with the same dependencies become one node listing their names; when the
    project has many functions they are drawn inside their module's node.
    """
    roots = {n for n, a in graph.nodes(data=True) if a.get("kind") in ("test", "probe")}
    keep = set(roots) | set(highlight)
    for root in roots:
        keep |= nx.descendants(graph, root)
    view = graph.subgraph(keep).copy()
    for source, target, attrs in list(view.edges(data=True)):
        if attrs.get("rel") in EVERY_TEST:  # drawn as a note on the target instead of one edge per test
            view.nodes[target]["every_test"] = True
            view.remove_edge(source, target)
    functions = [n for n, a in view.nodes(data=True) if a["kind"] == "function"]
    if len(functions) > MAX_FUNCTIONS_SHOWN:
        for node in functions:
            owner = f"module:{view.nodes[node]['module']}"
            if node not in highlight and owner in view:
                view = nx.contracted_nodes(view, owner, node, self_loops=False, copy=False)
    return _merge_tests(view, highlight)


def _merge_tests(view: nx.DiGraph, highlight: set[str]) -> nx.DiGraph:
    groups: dict[tuple, list[str]] = defaultdict(list)
    for node, attrs in view.nodes(data=True):
        if attrs["kind"] == "test":
            groups[(attrs.get("path", ""), frozenset(view.successors(node)))].append(node)
    for (path, successors), members in groups.items():
        if len(members) < 2:
            continue
        names = sorted(view.nodes[m]["label"].split("::")[-1] for m in members)
        shown = names[:MAX_TEST_NAMES]
        if len(names) > MAX_TEST_NAMES:
            shown.append(f"+{len(names) - MAX_TEST_NAMES} more")
        merged = f"tests:{path}:{min(members)}"
        view.add_node(merged, kind="test", label="\n".join(shown), path=path, tests=len(members),
                      test_id=None)
        for successor in successors:
            view.add_edge(merged, successor, **view.edges[members[0], successor])
        view.remove_nodes_from(members)
    return view


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def _dot_label(node: str, attrs: dict) -> str:
    kind, label = attrs.get("kind"), str(attrs.get("label", node))
    if kind == "test" and attrs.get("tests"):
        return label
    if kind == "test":
        return label.split("::")[-1]
    if attrs.get("every_test"):
        label += "\n(used by every test)"
    if kind == "distribution":
        return label.replace(" ", "\n", 1)
    if kind == "module" and attrs.get("test"):
        return f"{attrs.get('path', label)}\n(module level)"
    return label


def _cluster_of(attrs: dict) -> tuple[str, str]:
    """(cluster title, sub-cluster title or "")."""
    key = _style_key(attrs)
    if key == "test" or (key == "module" and attrs.get("test")):
        return "tests", attrs.get("path", "")
    if key in ("module", "function"):
        return "project code", attrs.get("path", "") if key == "function" or attrs.get("path") else ""
    return KIND_STYLE.get(key, ("", "system"))[1], ""


LEGEND = "arrows: depends on   red: chosen inversion points (light red: paths from tests to them)"


def to_dot(graph: nx.DiGraph, highlight: Iterable[str | Target] = ()) -> str:
    """Graphviz text: left to right from tests to distributions, one cluster and colour per kind,
    chosen inversion points in red and the edges leading to them in light red."""
    marked = highlight_nodes(graph, highlight)
    view = readable_view(graph, marked)
    title = f"{graph.graph.get('repo', '')} @ {str(graph.graph.get('commit', ''))[:12]}"
    lines = ["digraph dependencies {",
             "  graph [rankdir=LR, ranksep=0.9, nodesep=0.18, fontname=Helvetica, fontsize=16, labelloc=t,"
             f" label={_quote(title + chr(10) + LEGEND)}];",
             '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, penwidth=0.8];',
             '  edge [color="#8c8c8c", arrowsize=0.6, penwidth=0.7];']
    lines += _dot_clusters(view, marked)
    lines += _dot_edges(view, marked)
    return "\n".join(lines + ["}"]) + "\n"


def _dot_clusters(view: nx.DiGraph, marked: set[str]) -> list[str]:
    """Nodes grouped in one cluster per kind, sub-clusters per file."""
    clusters: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node, attrs in sorted(view.nodes(data=True)):
        style = f"fillcolor={_quote(KIND_STYLE.get(_style_key(attrs), ('#ffffff', ''))[0])}"
        if node in marked:
            style = 'fillcolor="#fcbba1", color="#cb181d", penwidth=2.5, fontcolor="#a50f15"'
        big, sub = _cluster_of(attrs)
        clusters[big][sub].append(f"    {_quote(node)} [label={_quote(_dot_label(node, attrs))}, {style}];")
    lines = []
    order = sorted(clusters, key=lambda c: CLUSTER_ORDER.index(c) if c in CLUSTER_ORDER else len(CLUSTER_ORDER))
    for index, big in enumerate(order):
        lines += [f"  subgraph cluster_{index} {{", f'    label={_quote(big)}; style=dashed; color="#bdbdbd";']
        for sub_index, (sub, members) in enumerate(sorted(clusters[big].items())):
            if not sub:
                lines += members
                continue
            lines += [f"    subgraph cluster_{index}_{sub_index} {{",
                      f'      label={_quote(sub)}; style="rounded"; color="#d9d9d9"; fontsize=10;']
            lines += ["  " + m for m in members] + ["    }"]
        lines.append("  }")
    return lines


def _dot_edges(view: nx.DiGraph, marked: set[str]) -> list[str]:
    """Edges; those on a path from a test to a chosen point in light red."""
    hot = set(marked)
    for node in marked & set(view):
        hot |= nx.ancestors(view, node)
    lines = []
    for source, target, attrs in sorted(view.edges(data=True)):
        extra = ' [color="#fb6a4a", penwidth=1.4]' if source in hot and target in hot else ""
        if attrs.get("rel") in HIDDEN_UNLESS_RED and not extra:
            continue
        if attrs.get("rel") == "in-file" and not extra:
            extra = " [style=dashed]"
        lines.append(f"  {_quote(source)} -> {_quote(target)}{extra};")
    return lines


def write_graph(graph: nx.DiGraph, fmt: str, out_path: Path, highlight: Iterable[str | Target] = ()) -> Path:
    """Write the graph as json, dot, or svg (rendered by Graphviz's `dot`)."""
    highlight = list(highlight)
    if fmt not in FORMATS:
        raise ValueError(f"unknown graph format {fmt!r} (choose from {', '.join(FORMATS)})")
    out_path = Path(out_path)
    if fmt == "json":
        out_path.write_text(to_json(graph, highlight), encoding="utf-8")
        return out_path
    dot_text = to_dot(graph, highlight)
    if fmt == "dot":
        out_path.write_text(dot_text, encoding="utf-8")
        return out_path
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizMissing("SVG output needs Graphviz's `dot`, which is not on PATH: install Graphviz "
                              "(apt-get install graphviz) or use --format dot or --format json")
    result = subprocess.run([dot, "-Tsvg", "-o", str(out_path)], input=dot_text, text=True,
                            capture_output=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"dot failed (exit {result.returncode}): {result.stderr.strip()[:500]}")
    return out_path


# ---------------------------------------------------------------------------------------------
# `miner graph`: the graph of a source or of a stored task's project
# ---------------------------------------------------------------------------------------------

class GraphUnavailable(ValueError):
    """The project could not be fetched, built or measured; the message says why."""


@dataclass
class GraphReport:
    """What `miner graph` wrote and chose."""

    path: Path
    nodes: int
    edges: int
    passing: int  # healthy-passing tests and probes
    chosen: list[tuple[Target, set[str], int]]  # inversion points: (target, predicted F2P, depth)
    task: str | None = None  # the task id when a task was drawn


def graph_targets(graph: nx.DiGraph, healthy: HealthyState) -> list[Target]:
    """Inversion points the graph offers: distributions, imported packages, scripts, variables,
    the config and data files the code reads (the project's code and tests are protected), and
    in containers the shared libraries and Debian packages beneath."""
    protected = set(healthy.protected)
    targets = []
    for node, attrs in sorted(graph.nodes(data=True)):
        kind, name = attrs["kind"], node.split(":", 1)[1]
        if kind in ("distribution", "script", "envvar", "syslib", "debpkg"):
            targets.append(Target(kind=kind, name=name))
        elif kind == "module" and attrs.get("external") and not attrs.get("stdlib"):
            targets.append(Target(kind="module", name=name))
        elif kind in ("config", "data") and attrs["path"] not in protected:
            targets.append(Target(kind=kind, name=attrs["path"], path=attrs["path"]))
    return targets


def graph_command(store: "Store", source_or_task: str, fmt: str = "svg", out: Path | None = None,
                  budget: int = 8, seed: int = 0, backend: str = "local", timeout: float = 600.0,
                  say=lambda text: None) -> GraphReport:
    """Draw the graph of a stored task's project (its target highlighted) or of a source
    (repos.txt syntax: folder, git URL, pypi:NAME==VERSION), highlighting the inversion points
    select_targets chooses. A source without a healthy state in the store is built and measured
    in a sandbox first (the backend caches builds)."""
    from miner.sources import parse_source as parse_line
    from miner.store import UnknownTask

    try:
        task = store.get_task(source_or_task)
    except UnknownTask:
        task = None
    source = task.source if task else parse_line(source_or_task, Path.cwd())
    if source is None:
        raise ValueError(f"not a task id nor a source: {source_or_task!r}")
    project, healthy = _project_state(store, source, backend, timeout, say)
    graph = build_graph(project, healthy)
    passing = set(healthy.passing)
    if task is not None:
        radius = predict(graph, task.target) & passing
        chosen = [(task.target, radius, depth(graph, task.target, task.f2p) or 0)]
    else:
        chosen = select_targets(graph, healthy, graph_targets(graph, healthy), budget, seed)
    name = task.id[:12] if task else source.name
    path = Path(out) if out else Path.cwd() / f"{name}.graph.{fmt}"
    write_graph(graph, fmt, path, [t for t, _, _ in chosen])
    return GraphReport(path, graph.number_of_nodes(), graph.number_of_edges(), len(passing), chosen,
                       task.id if task else None)


def _project_state(store: "Store", source, backend: str, timeout: float, say) -> tuple[Project, HealthyState]:
    """The fetched project and its healthy state: from the store, else measured now."""
    from miner.healthy import SkipProject
    from miner.sandbox.base import SandboxError
    from miner.sources import FetchError, fetch

    try:
        say(f"fetching {source.raw}")
        project = fetch(source, store.root / "cache" / "sources")
        return project, store.healthy(project.key) or _measure_healthy(store, project, backend, timeout, say)
    except (FetchError, SkipProject, SandboxError) as exc:
        log = getattr(exc, "log", "")
        raise GraphUnavailable(f"{source.raw}: {exc}" + (f" | {log.strip()[-300:]}" if log else "")) from None


def _measure_healthy(store: "Store", project: Project, backend_name: str, timeout: float, say) -> HealthyState:
    from miner.healthy import measure_project
    from miner.install import build_spec
    from miner.sandbox import get_backend

    backend = get_backend(backend_name)
    spec = build_spec(project, backend=backend.name)
    say(f"building {project.repo} ({backend.name} sandbox)")
    env = backend.build(project, spec, store.root / "work" / project.key)
    say("recording the healthy state (the test suite runs twice)")
    return measure_project(backend, env, project, spec, timeout)
