"""The networkx builder: a project's files, its healthy run and its ecosystems' code become one
"depends on" graph.

Reads the project folder on the host (the files miner.projectfiles calls project files) and the
recorded HealthyState; runs nothing. This module knows no language: it draws the tests, the
probes, the project files a literal names, the variables, and what a traced run touched; the
ecosystem a project lives in (miner.ecosystems.graph_adapter: Python's
miner.ecosystems.python.graph, Node's miner.ecosystems.node.graph) adds its code and installed
packages through the same node/edge calls.

Edges mean "depends on" (dependent -> dependency). The nodes drawn here:

  test:<test id>            a test of the healthy run (its ecosystem links what it runs)
  probe:<probe id>          a derived probe (`import pkg`, `script --help`, a container's probes)
  config:<path> data:<path> a project file the code reads (path relative to the project)
  envvar:<NAME>             an environment variable the code reads
  module:<path> file:<path> syslib:<soname> debpkg:<name>
                            (projects observed: miner.sandbox.docker.trace) a code file of the
                            project, a system file, a shared library a traced run read, and the
                            Debian package holding it; the image's variables hang off every probe

Every node has `kind` and `label`; test and probe nodes carry `test_id`, the id used in
HealthyState.outcomes; edges carry `rel` (imports, calls, reads, reads-env, runs, requires,
provided-by, installed-by, entry, package, in-file, conftest, defined-in, runner, plugin, config,
loads, touches) and `weight` (0 inside the test itself, else 1).

    graph = build_graph(project, healthy)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path, PurePosixPath

import networkx as nx

from miner import ecosystems
from miner.models import HealthyState, Project
from miner.projectfiles import PROGRAM_SUFFIXES, nearest, project_files, suffix_matches, test_file_of

NOT_DATA_SUFFIXES = {".py", ".pyc", ".pyo", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cc", ".cpp", ".rs", ".so"}
CONFIG_SUFFIXES = {".ini", ".cfg", ".toml", ".yaml", ".yml", ".json", ".conf", ".env", ".properties"}
# Edges that stay inside the test itself (its file's module scope, its conftest files) cost
# nothing when measuring how deep a target sits below a test.
FREE_RELATIONS = {"in-file", "conftest", "defined-in"}


def file_kind(rel: str) -> str:
    """'config' for configuration formats, 'data' for any other non-code file."""
    path = PurePosixPath(rel)
    return "config" if path.suffix.lower() in CONFIG_SUFFIXES or path.name.startswith(".env") else "data"



class GraphBuilder:
    """The graph being built, the calls that add to it, and the parts no language owns."""

    def __init__(self, project: Project, healthy: HealthyState) -> None:
        self.root = Path(project.path)
        self.healthy = healthy
        self.graph = nx.DiGraph(repo=project.repo, commit=project.commit)
        files = self.files = project_files(self.root)
        self.resources = [f for f in files if PurePosixPath(f).suffix.lower() not in NOT_DATA_SUFFIXES]
        self.by_basename: dict[str, list[str]] = defaultdict(list)
        self.folders: dict[str, list[str]] = defaultdict(list)  # folder name -> folders holding resources
        for rel in self.resources:
            self.by_basename[PurePosixPath(rel).name].append(rel)
        for folder in sorted({str(p) for rel in self.resources for p in PurePosixPath(rel).parents if str(p) != "."}):
            self.folders[PurePosixPath(folder).name].append(folder)

    file_kind = staticmethod(file_kind)

    def build(self) -> nx.DiGraph:
        adapter = ecosystems.graph_adapter(self.files, self.healthy)
        ecosystem = adapter(self) if adapter else None
        if ecosystem:
            ecosystem.add_code()
        self._add_tests(ecosystem)
        self._add_probes(ecosystem)
        if ecosystem:
            ecosystem.finish()
        if ecosystems.observed(self.files, self.healthy):
            self._add_trace()
        return self.graph

    def node(self, node_id: str, kind: str, label: str, **attrs: object) -> str:
        """Add a node unless it exists (the first call's kind, label and attributes stay)."""
        if "kind" not in self.graph.nodes.get(node_id, {}):
            self.graph.add_node(node_id, kind=kind, label=label, **attrs)
        return node_id

    def edge(self, source: str, target: str, rel: str) -> None:
        """Add a "depends on" edge, once."""
        if source != target and not self.graph.has_edge(source, target):
            self.graph.add_edge(source, target, rel=rel, weight=0 if rel in FREE_RELATIONS else 1)

    def envvar(self, name: str) -> str:
        """The node of an environment variable (`set`: the healthy environment sets it)."""
        return self.node(f"envvar:{name}", "envvar", f"${name}", set=name in self.healthy.env)

    def file_targets(self, literal: str, near: str, listing: bool = False) -> list[str]:
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
        matches = nearest(suffix_matches(text, self.by_basename), near)
        if listing and not matches:
            for folder in nearest(suffix_matches(text, self.folders), near):
                matches += [r for r in self.resources if r.startswith(folder + "/")]
        return [self.node(f"{file_kind(m)}:{m}", file_kind(m), m, path=m) for m in matches]

    def _add_tests(self, ecosystem: object | None) -> None:
        for test_id in sorted(self.healthy.outcomes):
            if test_id.startswith("probe::"):
                continue
            rel = (test_file_of(test_id) or "").split("[", 1)[0]
            node = self.node(f"test:{test_id}", "test", test_id.split("::", 1)[-1], test_id=test_id, path=rel)
            if ecosystem:
                ecosystem.link_test(node, test_id)

    def _add_probes(self, ecosystem: object | None) -> None:
        probes = {p.id: p for p in self.healthy.probes}
        for probe_id in sorted(set(probes) | {t for t in self.healthy.outcomes if t.startswith("probe::")}):
            probe = probes.get(probe_id)
            kind, _, rest = probe_id.removeprefix("probe::").partition("::")
            kind = probe.kind if probe else kind
            label = known.label(rest) if (known := ecosystems.probe_kind(kind)) else rest or probe_id
            node = self.node(f"probe:{probe_id}", "probe", label, test_id=probe_id)
            if ecosystem:
                ecosystem.link_probe(node, kind, rest, probe)

    # -- what a traced run touched (projects outside Python: miner.sandbox.docker.trace)
    def _add_trace(self) -> None:
        found = (self.healthy.system or {}).get("trace") or {}
        for entry in [*found.get("files", []), *found.get("programs", [])]:
            probes = [f"probe:{p}" for p in entry.get("probes", []) if f"probe:{p}" in self.graph]
            node = self._traced_node(entry)
            for probe in probes:
                self.edge(probe, node, "touches")
        # the image's variables: every program the image starts (its probes) runs with them
        probes = [n for n, data in self.graph.nodes(data=True) if data.get("kind") == "probe"]
        for name in sorted(found.get("variables") or {}):
            node = self.node(f"envvar:{name}", "envvar", f"${name}", set=True)
            for probe in probes:
                self.edge(probe, node, "reads-env")

    def _traced_node(self, entry: dict) -> str:
        """The node of a traced file or program; a library or program links to its Debian package."""
        rel, real = entry.get("rel"), entry["real"]
        if rel is not None:
            kind = "module" if PurePosixPath(rel).suffix.lower() in PROGRAM_SUFFIXES else file_kind(rel)
            return self.node(f"{kind}:{rel}", kind, rel, path=rel)
        if entry.get("library"):
            soname = entry["path"].rsplit("/", 1)[-1]
            node = self.node(f"syslib:{soname}", "syslib", soname, path=real)
        else:
            node = self.node(f"file:{real}", "file", real, path=real)
        package = ((entry.get("debian") or {}).get("package") or "").split(":")[0]
        if package:
            self.edge(node, self.node(f"debpkg:{package}", "debpkg", package), "installed-by")
        return node




def build_graph(project: Project, healthy: HealthyState) -> nx.DiGraph:
    """The "depends on" graph of a project's tests, probes, modules, files, variables, packages."""
    return GraphBuilder(project, healthy).build()
