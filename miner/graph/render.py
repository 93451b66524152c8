"""Rendering the graph: JSON (everything), Graphviz dot and SVG (what tests reach, readable).

Chosen inversion points are highlighted (red in pictures, `highlighted` in JSON); a picture
merges look-alike tests and, in big projects, draws functions inside their module's node.

    write_graph(graph, "svg", Path("graph.svg"), highlight=[target for target, _, _ in chosen])
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import networkx as nx

from miner.graph.select import target_nodes
from miner.models import Target


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
    "node-package": ("#fde6cf", "installed distributions"),
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
