"""Node's part of the dependency graph: the project's JavaScript files (what each requires, reads
from the environment and names, from miner.ecosystems.node.code) and the npm packages they load.

Nodes it adds (see miner.graph.build for the rest):

  module:<path>         a JavaScript file of the project
  node-package:<name>   an installed npm package -> the packages it depends on (a file that
                        runs its program, from node_modules/.bin, depends on it too)

    NodeGraph(builder).finish()   # after the tests and probes exist: their files link to them
"""

from __future__ import annotations

from miner.ecosystems.base import GraphCalls
from miner.ecosystems.node import npm
from miner.ecosystems.node.code import JS_SUFFIXES, JsFile, parse_js_files
from miner.ecosystems.node.code import resolve as resolve_js
from miner.models import NodePackage, Probe


class NodeGraph:
    """Adds a Node project's files and installed packages to a GraphBuilder's graph."""

    def __init__(self, builder: GraphCalls) -> None:
        self.builder = builder
        self.graph, self.healthy = builder.graph, builder.healthy

    def add_code(self) -> None:
        """Nothing before the tests: the files are drawn once the tests exist (finish)."""

    def link_test(self, node: str, test_id: str) -> None:
        """Tests link to their file in finish()."""

    def link_probe(self, node: str, kind: str, rest: str, probe: Probe | None) -> None:
        """A Node project's probes are its container's: the traced run links them."""

    def finish(self) -> None:
        """Per file, what it requires, reads from the environment, names; then the packages."""
        b = self.builder
        parsed = parse_js_files(b.root, b.files)
        files = set(b.files)
        main = npm.main_file(b.root)
        for rel, found in sorted(parsed.items()):
            node = b.node(f"module:{rel}", "module", rel, path=rel)
            for specifier in sorted(found.requires):
                if (target := resolve_js(rel, specifier, files, main)) is not None:
                    kind = "module" if target.endswith(JS_SUFFIXES) else b.file_kind(target)
                    b.edge(node, b.node(f"{kind}:{target}", kind, target, path=target), "imports")
            for name in sorted(found.env_reads):
                b.edge(node, b.envvar(name), "reads-env")
            for literal in sorted(found.strings):
                for target in b.file_targets(literal, rel):
                    if not target.endswith(JS_SUFFIXES):
                        b.edge(node, target, "reads")
        for test_id in self.healthy.outcomes:
            rel = test_id.split("::", 1)[0]
            if f"test:{test_id}" in self.graph and rel in parsed:
                b.edge(f"test:{test_id}", f"module:{rel}", "in-file")
        self._add_packages(parsed)

    def _add_packages(self, parsed: dict[str, JsFile]) -> None:
        """The installed packages: a file requires a package, a package the ones it depends on
        (by name: the top-level copy, as npm dedupes them)."""
        b = self.builder
        installed = {p.name: p for p in self.healthy.node_packages if p.path == f"node_modules/{p.name}"}
        for rel, found in sorted(parsed.items()):
            for name in sorted({npm.package_of(spec) for spec in found.requires} - {None}):
                if name in installed:
                    b.edge(f"module:{rel}", b.node(f"node-package:{name}", "node-package", name), "imports")
        self._add_programs(parsed, installed)
        for name, package in sorted(installed.items()):
            for dep in package.requires:
                if dep in installed:
                    b.node(f"node-package:{name}", "node-package", name)
                    b.edge(f"node-package:{name}", b.node(f"node-package:{dep}", "node-package", dep), "imports")

    def _add_programs(self, parsed: dict[str, JsFile], installed: dict[str, NodePackage]) -> None:
        """A file that runs an installed package's program (node_modules/.bin, npx, an npm script)
        depends on that package: breaking its link fails the file's tests."""
        b = self.builder
        owners = {program: name for name, package in installed.items() for program in package.bins}
        scripts = npm.script_words(b.root)
        for rel in sorted(parsed):
            try:
                text = (b.root / rel).read_text(errors="replace")
            except OSError:
                continue
            for program in sorted(npm.programs_named(text, scripts) & set(owners)):
                name = owners[program]
                b.edge(f"module:{rel}", b.node(f"node-package:{name}", "node-package", name), "runs")
