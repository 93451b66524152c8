"""Tree-sitter parsing of one Python file: what each of its scopes imports, reads and runs.

The first stage of the graph, and the project's one code scanner: the graph builder
(miner.graph.build) and target enumeration (miner.inverters.targets) both read the project's code
through `parse_source` / `parse_files`. No networkx, no project layout here: one file in, one
SourceFile out.

A scope is the module level, a class body, or one function with its nested code (decorators
belong to what they decorate; code under `if __name__ == "__main__":` is MAIN_SCOPE). Per
scope: imports (absolute, relative, `from`, `importlib.import_module`, `python -m pkg` in a
subprocess argv), string literals and path expressions that may name project files
(`open("x")`, `Path(__file__).parent / "data" / "x.csv"`, module constants, `os.path.join`,
`importlib.resources.files(pkg) / "x"`), environment variables read (`os.environ[...]`,
`os.getenv`, `os.environ.get`, `"X" in os.environ`, with the literal default they fall back to)
and set (`monkeypatch.setenv`, `os.environ[...] = ...`, `patch.dict(os.environ, {...})`),
programs run through subprocess, and
the identifiers named. Per file: its functions (fixtures, autouse, usefixtures), classes (bases)
and lazy `__getattr__` exports.

    source = parse_source(path.read_bytes(), "pkg/mod.py", "pkg.mod")
    source.scopes["load"].paths        # {"data/words.csv", ...}
    source.everything().envvars        # {"PKG_HOME", ...}
    sources = parse_files(root, ["pkg/__init__.py", "pkg/mod.py"])   # rel -> SourceFile
"""

from __future__ import annotations

import ast
import re
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import tree_sitter_python
from tree_sitter import Language, Node, Parser, Query, QueryCursor

PY_LANGUAGE = Language(tree_sitter_python.language())
ENVIRON = {"os.environ", "environ", "os.environb"}
ENV_CALLS = {"os.getenv", "getenv", "os.environ.get", "environ.get", "os.environ.setdefault",
             "environ.setdefault", "os.getenvb", "os.environ.pop", "environ.pop"}
ENV_SETTERS = {"setenv", "delenv", "putenv", "unsetenv"}
COMMAND_CALLS = {"run", "call", "check_call", "check_output", "Popen", "system", "getoutput",
                 "getstatusoutput", "which", "spawnlp", "execvp", "popen"}
PATH_CALLS = {"Path", "PurePath", "PosixPath", "PurePosixPath", "join", "joinpath"}
RESOURCE_CALLS = {"files", "read_text", "read_binary", "open_text", "open_binary", "get_data",
                  "is_resource", "path"}
# gettext reads <localedir>/<language>/LC_MESSAGES/<domain>.mo: the call names the domain, not the file
GETTEXT_CALLS = {"translation", "bindtextdomain", "install", "find"}
TMP_NAMES = {"tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory", "tmp_dir", "temp_dir", "tmp"}

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


@dataclass
class Scope:
    """What one scope (module level, a class body, or one function with its nested code) uses."""

    imports: set[tuple[int, str, tuple[str, ...]]] = field(default_factory=set)  # (level, module, names)
    paths: set[str] = field(default_factory=set)  # string literals that may name project files
    envvars: set[str] = field(default_factory=set)
    env_defaults: set[tuple[str, str]] = field(default_factory=set)  # (variable, literal default it is read with)
    sets_env: set[str] = field(default_factory=set)  # variables it sets itself (monkeypatch.setenv)
    commands: set[str] = field(default_factory=set)  # programs run through subprocess & co
    names: set[str] = field(default_factory=set)  # identifiers referenced

    def merge(self, other: Scope) -> None:
        self.imports |= other.imports
        self.paths |= other.paths
        self.envvars |= other.envvars
        self.env_defaults |= other.env_defaults
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


def last_name(text: str) -> str:
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
        name = last_name(_dotted(function))
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
        # importing a name is not using it: `from .i18n import activate` in a package's __init__
        # must not make everything that imports the package depend on activate()
        self.skip.update(_identifiers(node))
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
        name = last_name(function)
        if function in ENV_CALLS and args:
            self._add_envvar(args[0], scope)
            if name == "pop":
                self._add_envvar(args[0], scope, sets=True)
            elif len(args) >= 2:
                self._add_env_default(args[0], args[1], scope)
        elif name in ENV_SETTERS and args:
            self._add_envvar(args[0], scope, sets=True)
        elif name == "dict" and len(args) >= 2 and (_dotted(args[0]) in ENVIRON or _literal(args[0]) in ENVIRON):
            for pair in (c for c in args[1].named_children if c.type == "pair"):
                self._add_envvar(pair.child_by_field_name("key"), scope, sets=True)  # patch.dict(os.environ, {...})
        elif name in COMMAND_CALLS and args:
            self._add_command(args[0], scope)
        elif name == "import_module" and args and _literal(args[0]):
            scope.imports.add((0, _literal(args[0]), ()))
        elif name in GETTEXT_CALLS and ("gettext" in function or name in ("translation", "bindtextdomain")):
            self._add_gettext_domain(node, args, scope)
        if name in PATH_CALLS or name in RESOURCE_CALLS:
            self._add_path(node, scope)

    @staticmethod
    def _add_gettext_domain(node: Node, args: list[Node], scope: Scope) -> None:
        """The message catalogues a gettext call loads, as the file name they all share."""
        keywords = {k.child_by_field_name("name").text.decode(): k.child_by_field_name("value")
                    for k in node.child_by_field_name("arguments").named_children if k.type == "keyword_argument"}
        value = args[0] if args else keywords.get("domain")
        domain = _literal(value) if value is not None else None
        if domain and "/" not in domain:
            scope.paths.add(f"{domain}.mo")

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

    def _string_value(self, node: Node) -> str | None:
        """A string literal's value, or the value of the module-level string constant it names."""
        value = _literal(node)
        return self.strings.get(_dotted(node)) if value is None and node.type == "identifier" else value

    def _add_env_default(self, name_node: Node, default_node: Node, scope: Scope) -> None:
        """`os.getenv("X", "v")`, `os.environ.get("X", DEFAULT)`: the value the code falls back to."""
        name, default = self._string_value(name_node), self._string_value(default_node)
        if name and default is not None:
            scope.env_defaults.add((name, default))

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
                    names = [last_name(_dotted(b)) for b in (bases.named_children if bases else [])
                             if b.type in ("identifier", "attribute")]
                    self.file.classes[qualname] = ClassDef(qualname=qualname, bases=names, usefixtures=used)
                    stack.append((definition.child_by_field_name("body"), qualname + "."))
                    continue
                text = " ".join(_dotted(d) for d in decorators)
                self.file.functions[qualname] = Function(
                    qualname=qualname, fixture="fixture" in text,
                    autouse=bool(re.search(r"autouse\s*=\s*True", text)), usefixtures=used)


def _descendants(node: Node, kind: str) -> Iterable[Node]:
    """The node and everything below it of one tree-sitter type."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            yield current
        stack.extend(current.children)


def _identifiers(node: Node) -> Iterable[Node]:
    return _descendants(node, "identifier")


def _strings(node: Node) -> Iterable[Node]:
    return _descendants(node, "string")


def parse_source(text: bytes, rel: str, module: str, package: bool = False) -> SourceFile:
    """Analyse one Python file (tree-sitter tolerates syntax errors: what parses is used)."""
    tree = Parser(PY_LANGUAGE).parse(text)
    return _FileParser(SourceFile(rel=rel, module=module, package=package), tree.root_node).parse()


# One crawl reads a project's code three times (the graph, target enumeration, the inverter's
# config keys): parsed files are kept, keyed by path, size and mtime, so each is parsed once.
_PARSED: OrderedDict[tuple[str, int, int], SourceFile] = OrderedDict()
MAX_PARSED = 5000


def parse_files(root: Path, rels: Iterable[str], modules: Mapping[str, str] | None = None) -> dict[str, SourceFile]:
    """rel -> SourceFile of each readable Python file under root, named after `modules` (else its path)."""
    parsed = {}
    for rel in rels:
        path = Path(root) / rel
        module = (modules or {}).get(rel) or ".".join(PurePosixPath(rel).with_suffix("").parts)
        try:
            info = path.stat()
            key = (str(path.resolve()), info.st_size, info.st_mtime_ns)
            source = _PARSED.get(key)
            if source is None:
                source = _PARSED[key] = parse_source(path.read_bytes(), rel, module, rel.endswith("__init__.py"))
                while len(_PARSED) > MAX_PARSED:
                    _PARSED.popitem(last=False)
        except OSError:
            continue  # gone or unreadable: nothing to learn from it
        parsed[rel] = replace(source, rel=rel, module=module)
    return parsed
