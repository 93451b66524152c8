"""A Dockerized project known by what its running program touches: the trace, its targets, its graph."""

from __future__ import annotations

from pathlib import Path

from miner import ecosystems
from miner.ecosystems.node.code import parse_js, resolve
from miner.graph.build import build_graph
from miner.inverters.system import traced_targets
from miner.inverters.targets import enumerate_targets, image_variable_targets, traced_files
from miner.models import PROJECT_DIR, HealthyState, Project, Source
from miner.sandbox.docker import trace

FIXTURE = Path(__file__).parent.parent / "fixtures" / "node-service"

# strace -f -qq -s 4096 -e trace=open,openat,execve,connect,bind of `node healthcheck.js` (host
# strace 6.1), shortened; one openat interrupted by another thread and resumed, as strace writes it.
RECORDED = f"""\
31473 execve("/usr/bin/node", ["node", "healthcheck.js"], 0x564dccd3fc18 /* 40 vars */) = 0
31473 openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3
31473 openat(AT_FDCWD, "/lib/x86_64-linux-gnu/libnode.so.108", O_RDONLY|O_CLOEXEC) = 3
31473 openat(AT_FDCWD, "/lib/x86_64-linux-gnu/libmissing.so.1", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
31474 openat(AT_FDCWD, "/usr/share/zoneinfo/Europe/Paris", O_RDONLY|O_CLOEXEC <unfinished ...>
31473 openat(AT_FDCWD, "config/quotd.json", O_RDONLY|O_CLOEXEC) = 18
31474 <... openat resumed>) = 19
31473 openat(AT_FDCWD, "/proc/self/maps", O_RDONLY) = 20
31473 openat(AT_FDCWD, "logs/quotd.log", O_WRONLY|O_CREAT|O_APPEND, 0644) = 21
31473 connect(19, {{sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("127.0.0.1")}}, 16) = -1 EINPROGRESS (Operation now in progress)
31473 connect(20, {{sa_family=AF_INET, sin_port=htons(9999), sin_addr=inet_addr("127.0.0.1")}}, 16) = -1 ECONNREFUSED (Connection refused)
31475 execve("/bin/sh", ["sh", "-c", "date"], 0x7ffd /* 40 vars */) = 0
"""


def test_a_trace_gives_what_succeeded() -> None:
    touched = trace.parse(RECORDED, PROJECT_DIR)
    assert touched.programs == ["/usr/bin/node", "/bin/sh"]
    assert f"{PROJECT_DIR}/config/quotd.json" in touched.files
    assert "/usr/share/zoneinfo/Europe/Paris" in touched.files  # put back together from two lines
    assert "/lib/x86_64-linux-gnu/libmissing.so.1" not in touched.files  # ENOENT
    assert touched.files[f"{PROJECT_DIR}/logs/quotd.log"] is True and touched.files["/etc/ld.so.cache"] is False
    assert touched.sockets == [{"call": "connect", "family": "inet", "address": "127.0.0.1:8080"}]


def test_merged_runs_name_the_probes_each_file_served() -> None:
    main = trace.parse(RECORDED, PROJECT_DIR)
    health = trace.parse(RECORDED.splitlines()[5] + "\n", PROJECT_DIR)
    found = trace.merge([(main, ["probe::http::8080/", "probe::healthcheck"]), (health, ["probe::healthcheck"])],
                        {"/bin/sh": "/usr/bin/dash"})
    by_path = {e["real"]: e for e in found["files"]}
    assert "/proc/self/maps" not in by_path
    config = by_path[f"{PROJECT_DIR}/config/quotd.json"]
    assert config["rel"] == "config/quotd.json" and not config["library"]
    assert config["probes"] == ["probe::healthcheck", "probe::http::8080/"]
    assert by_path["/lib/x86_64-linux-gnu/libnode.so.108"]["library"]
    assert [p["real"] for p in found["programs"]] == ["/usr/bin/dash", "/usr/bin/node"]


def _observation() -> dict:
    def entry(real: str, package: str | None, library: bool = False, rel: str | None = None) -> dict:
        return {"path": real, "real": real, "rel": rel, "library": library, "write": False,
                "probes": ["probe::http::8080/"], "debian": {"package": package, "version": "1"} if package else None}
    return {"dpkg": True, "tools": {"apt-get": "/usr/bin/apt-get"}, "recovery_libraries": [], "extensions": {},
            "system": {}, "trace": {
                "files": [entry("/usr/lib/x86_64-linux-gnu/libnode.so.108", "libnode108", True),
                          entry("/usr/lib/x86_64-linux-gnu/libxml2.so.2", "libxml2", True),
                          entry("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc6", True),
                          entry(f"{PROJECT_DIR}/config/quotd.json", None, rel="config/quotd.json"),
                          entry(f"{PROJECT_DIR}/lib/config.js", None, rel="lib/config.js"),
                          entry(f"{PROJECT_DIR}/package.json", None, rel="package.json")],
                "programs": [{"path": "/usr/bin/node", "real": "/usr/bin/node", "probes": [],
                              "debian": {"package": "nodejs", "version": "18"}},
                             {"path": "/usr/bin/xmllint", "real": "/usr/bin/xmllint", "probes": [],
                              "debian": {"package": "libxml2-utils", "version": "2"}}],
                "runtime": {"programs": ["/usr/bin/node"], "libraries": ["libnode.so.108", "libc.so.6"]},
                "variables": {"QUOTD_CONFIG": "/srv/quotd/config/quotd.json"}}}


def test_traced_targets_spare_the_runtime_every_check_runs() -> None:
    targets = {(t.kind, t.name) for t in traced_targets(_observation(), FIXTURE)}
    assert ("syslib", "libxml2.so.2") in targets and ("debpkg", "libxml2") in targets
    assert ("debpkg", "libxml2-utils") in targets
    assert not {("syslib", "libnode.so.108"), ("debpkg", "libnode108"), ("debpkg", "nodejs"),
                ("syslib", "libc.so.6")} & targets


def _healthy(outcomes: dict[str, str], system: dict | None = None) -> HealthyState:
    return HealthyState(repo="r", commit="c", backend="docker", test_command="node --test test/", outcomes=outcomes,
                        system=system)


def test_a_node_project_is_not_a_python_one() -> None:
    node = _healthy({"test/a.test.js::x": "passed", "probe::healthcheck": "passed"})
    assert ecosystems.detect(["package.json", "server.js", "test/a.test.js"], node) == {ecosystems.NODE}
    assert ecosystems.detect(["pkg/__init__.py"], _healthy({})) == {ecosystems.PYTHON}
    assert ecosystems.detect([], _healthy({"tests/test_a.py::t": "passed"})) == {ecosystems.PYTHON}


def test_a_node_project_targets_what_it_reads_and_its_image_sets() -> None:
    healthy = _healthy({"test/config.test.js::the shipped config loads": "passed"}, _observation())
    assert traced_files(healthy) == ["config/quotd.json"]  # code and package.json are not environment
    assert [(t.kind, t.name, t.attrs["where"]) for t in image_variable_targets(healthy)] == \
        [("envvar", "QUOTD_CONFIG", "image")]
    project = Project(source=Source(raw=str(FIXTURE), kind="local", location=str(FIXTURE)), repo=str(FIXTURE),
                      commit="x", path=FIXTURE)
    kinds = {(t.kind, t.name) for t in enumerate_targets(project, healthy)}
    assert ("config", "config/quotd.json") in kinds and ("envvar", "QUOTD_CONFIG") in kinds
    assert not any(k in ("distribution", "module", "bytecode", "setting") for k, _ in kinds)


def test_javascript_requires_env_reads_and_file_names_reach_the_graph() -> None:
    parsed = parse_js(b"const c = require('../lib/config'); import x from './x.mjs';\n"
                      b"const p = process.env.QUOTD_CONFIG || process.env['TZ'];\n"
                      b"fs.readFileSync(path.join(__dirname, 'data', 'quotes.tsv'));\n")
    assert parsed.requires == {"../lib/config", "./x.mjs"} and parsed.env_reads == {"QUOTD_CONFIG", "TZ"}
    assert "quotes.tsv" in parsed.strings
    assert resolve("test/a.test.js", "../lib/config", {"lib/config.js"}) == "lib/config.js"
    assert resolve("test/a.test.js", "node:fs", {"lib/config.js"}) is None

    test_id = "test/server.test.js::GET /quotes counts the quotes"
    healthy = _healthy({test_id: "passed", "test/quotes.test.js::the shipped quotes file parses": "passed"},
                       _observation())
    project = Project(source=Source(raw=str(FIXTURE), kind="local", location=str(FIXTURE)), repo=str(FIXTURE),
                      commit="x", path=FIXTURE)
    graph = build_graph(project, healthy)
    import networkx as nx
    reach = nx.descendants(graph, f"test:{test_id}")
    assert {"module:server.js", "module:lib/config.js", "envvar:QUOTD_CONFIG", "envvar:TZ"} <= reach
    assert "distribution:pytest" not in reach  # node's runner, not pytest, runs these tests
    assert "data:data/quotes.tsv" in nx.descendants(graph, "test:test/quotes.test.js::the shipped quotes file parses")


def test_an_image_variable_gets_the_image_types_not_the_startup_file_ones() -> None:
    from miner.catalogue import load_catalogue
    from miner.inverters.procedural import matches

    catalogue = load_catalogue()
    image = image_variable_targets(_healthy({}, _observation()))[0]
    assert matches(catalogue["env/image-var-unset"].preconditions, image)
    assert not matches(catalogue["env/unset-var"].preconditions, image)  # its break greps the startup file
    assert not matches(catalogue["env/wrong-var"].preconditions, image)
