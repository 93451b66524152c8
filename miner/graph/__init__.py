"""Dependency graph of a project: which tests depend on which functions, modules, files,
variables, installed packages and (in containers) system libraries, so that the enumerated
targets can be ranked and their breaks predicted before anything is broken.

Pure analysis of a project folder on the host plus its recorded HealthyState (no sandbox, no
store). Four stages, one module each, data flowing one way:

  parse.py    tree-sitter parsing of one Python file (Scope, SourceFile, parse_source,
              parse_files): the project's one code scanner, also used by target enumeration
  build.py    the networkx builder (build_graph) and project layout helpers (module_names,
              pytest_config, split_test_id, file_kind, canonical)
  select.py   target_nodes, predict (the tests a target's break should fail), depth, and
              select_targets (the enumerated targets worth trying, best first)
  render.py   to_json, to_dot, write_graph (json, dot, svg through Graphviz)

What may be broken is decided elsewhere (miner.inverters.targets.enumerate_targets); task
difficulty lives with task making (miner.tasks); `miner graph` is a verb of miner.cli.

    graph = build_graph(project, healthy)
    chosen = select_targets(graph, healthy, enumerate_targets(project, healthy), budget=20, seed=0)
    write_graph(graph, "svg", Path("graph.svg"), highlight=[t for t, _, _ in chosen])
"""

from miner.graph.build import build_graph, canonical, file_kind, module_names, pytest_config, split_test_id
from miner.ecosystems.python.code import MAIN_SCOPE, ClassDef, Function, Scope, SourceFile, parse_files, parse_source
from miner.graph.render import FORMATS, GraphvizMissing, highlight_nodes, to_dot, to_json, write_graph
from miner.graph.select import UNMODELLED_KINDS, depth, predict, select_targets, target_nodes

__all__ = [
    "FORMATS",
    "MAIN_SCOPE",
    "UNMODELLED_KINDS",
    "ClassDef",
    "Function",
    "GraphvizMissing",
    "Scope",
    "SourceFile",
    "build_graph",
    "canonical",
    "depth",
    "file_kind",
    "highlight_nodes",
    "module_names",
    "parse_files",
    "parse_source",
    "predict",
    "pytest_config",
    "select_targets",
    "split_test_id",
    "target_nodes",
    "to_dot",
    "to_json",
    "write_graph",
]
