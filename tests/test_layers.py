"""The package's shape: no import cycle in miner/, and no stage imports a layer above it.

Run alone with `python3 -m pytest tests/test_layers.py`. Imports are read from the source with
`ast` (every `import` and `from ... import`, at any depth, lazy ones inside functions included),
so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "miner"
# The lower layers and the only parts of miner each may import (a prefix matches submodules).
LAYERS = {
    "miner.models": set(),
    "miner.projectfiles": set(),
    "miner.evidence": set(),
    "miner.archives": set(),
    "miner.sandbox": {"miner.models", "miner.sandbox", "miner.projectfiles"},
    "miner.store": {"miner.models"},
    "miner.catalogue": {"miner.models"},
    # miner.sandbox.local: the confined tool pytest's collection runs under when discovery asks it
    "miner.ecosystems": {"miner.models", "miner.ecosystems", "miner.projectfiles", "miner.sandbox.base",
                         "miner.sandbox.local", "miner.archives"},
    "miner.graph": {"miner.models", "miner.graph", "miner.projectfiles", "miner.ecosystems"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """miner modules a source file imports (relative imports resolved; `from pkg import mod`
    imports the submodule mod, `from mod import name` the module mod)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
    return {name for name in found if name == "miner" or name.startswith("miner.")}


def import_graph() -> nx.DiGraph:
    """miner's modules and the miner modules each imports (a name that is not a module maps to its module)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py") if "catalogue_data" not in p.parts}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        for target in imports_of(path, set(files)):
            while target not in files and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in files and target != name:
                graph.add_edge(name, target)
    return graph


def test_there_is_no_import_cycle() -> None:
    graph = import_graph()
    graph.remove_node("miner")  # the package's __init__ holds only the version
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, cycles[:5]


def test_lower_layers_import_nothing_above_them() -> None:
    graph = import_graph()
    wrong = []
    for module in graph:
        layer = next((lay for lay in LAYERS if module == lay or module.startswith(lay + ".")), None)
        if layer is None:
            continue
        allowed = LAYERS[layer] | {layer}
        for target in graph.successors(module):
            if target != "miner" and not any(target == a or target.startswith(a + ".") for a in allowed):
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


# No stage names a language's package (discovery reaches them through ecosystems.DISCOVERIES).
KNOWS_LANGUAGES: set[str] = set()
LANGUAGES = ("miner.ecosystems.python", "miner.ecosystems.node")


def test_only_the_language_packages_know_a_language() -> None:
    """The stages reach a language through miner.ecosystems; a language's package imports no
    other language's package and not the registry (it sees only miner.ecosystems.base)."""
    graph = import_graph()
    wrong = []
    for module, target in graph.edges():
        language = next((lang for lang in LANGUAGES if module == lang or module.startswith(lang + ".")), None)
        into = next((lang for lang in LANGUAGES if target == lang or target.startswith(lang + ".")), None)
        if language is None and into is not None and module != "miner.ecosystems" and module not in KNOWS_LANGUAGES:
            wrong.append(f"{module} imports {target}")
        if language is not None and (target == "miner.ecosystems" or (into is not None and into != language)):
            wrong.append(f"{module} imports {target}")
    assert not wrong, wrong
