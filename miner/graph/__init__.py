"""Dependency graph of a project: which tests depend on which functions, modules, files,
variables, installed packages and (in containers) system libraries, so that the enumerated
targets can be ranked and their breaks predicted before anything is broken.

Pure analysis of a project folder on the host plus its recorded HealthyState (no sandbox, no
store). Three stages, one module each, data flowing one way:

  build.py    the networkx builder (build_graph): tests, probes, files, variables, what a
              traced run touched; each ecosystem's adapter adds its code and packages
              (miner.ecosystems.python.graph, miner.ecosystems.node.graph)
  select.py   target_nodes, predict (the tests a target's break should fail), depth, and
              select_targets (the enumerated targets worth trying, best first)
  render.py   to_json, to_dot, write_graph (json, dot, svg through Graphviz)

What may be broken is decided elsewhere (miner.inverters.targets.enumerate_targets); task
difficulty lives with task making (miner.tasks); `miner graph` is a verb of miner.cli.

    graph = build_graph(project, healthy)
    chosen = select_targets(graph, healthy, enumerate_targets(project, healthy), budget=20, seed=0)
    write_graph(graph, "svg", Path("graph.svg"), highlight=[t for t, _, _ in chosen])
"""

from miner.graph.build import build_graph, file_kind
from miner.graph.render import FORMATS, GraphvizMissing, highlight_nodes, to_dot, to_json, write_graph
from miner.graph.select import UNMODELLED_KINDS, depth, predict, select_targets, target_nodes

__all__ = [
    "FORMATS",
    "UNMODELLED_KINDS",
    "GraphvizMissing",
    "build_graph",
    "depth",
    "file_kind",
    "highlight_nodes",
    "predict",
    "select_targets",
    "target_nodes",
    "to_dot",
    "to_json",
    "write_graph",
]
