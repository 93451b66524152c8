"""`miner discover`: real PyPI sdists, and PyGithub against a local server replaying recorded GitHub API answers."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.parse
from collections.abc import Iterator
from email.utils import formatdate
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from conftest import FIXTURES, run_miner
from miner.discover import Options, reset_wait
from miner.ecosystems.python.discover import Listing, assess, choose_release, folder_listing
from miner.sources import parse_repos

GITHUB_DATA = Path(__file__).parent / "data" / "github"
TOKEN = "ghp_testtoken0000000000000000000000000000"


# -- the recorded-response server ------------------------------------------------------------


class ReplayServer(ThreadingHTTPServer):
    """Answers GitHub API requests from tests/data/github (see its README.md); logs every request."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReplayHandler)
        config = json.loads((GITHUB_DATA / "routes.json").read_text())
        self.api, self.routes = config["api"], config["routes"]
        self.base = f"http://127.0.0.1:{self.server_address[1]}"
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.limited: set[int] = set()  # routes that already sent their one rate-limit answer
        self.lock = threading.Lock()

    def route(self, path: str, params: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        for number, route in enumerate(self.routes):
            wanted = route.get("params", {})
            if route["path"] == path and all(fnmatch(params.get(k, ""), v) for k, v in wanted.items()):
                return number, route
        return None

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.requests]


class ReplayHandler(BaseHTTPRequestHandler):
    server: ReplayServer

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        with self.server.lock:
            self.server.requests.append((url.path, params, dict(self.headers)))
            found = self.server.route(url.path, params)
            number, route = found if found else (-1, {})
            limited = route.get("rate_limited_first") and number not in self.server.limited
            self.server.limited.add(number)
        if not found:
            return self.answer(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest",
                                     "status": "404"}, "core")
        if limited:
            body = json.loads((GITHUB_DATA / "rate-limit-exceeded.json").read_text())
            return self.answer(403, body, route["resource"], remaining=0, reset=int(time.time()) + 2)
        text = (GITHUB_DATA / route["file"]).read_text().replace(self.server.api, self.server.base)
        link = route.get("link", "").format(base=self.server.base, q=urllib.parse.quote_plus(params.get("q", "")),
                                            per_page=params.get("per_page", "30"))
        self.answer(route.get("status", 200), json.loads(text), route["resource"], link=link)

    def answer(self, status: int, body: Any, resource: str, remaining: int = 28, reset: int | None = None,
               link: str = "") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        headers = {
            "Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data)),
            "Date": formatdate(usegmt=True), "X-GitHub-Media-Type": "github.v3; format=json",
            "X-GitHub-Api-Version-Selected": "2022-11-28", "X-RateLimit-Limit": "30",
            "X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset": str(reset or int(time.time()) + 60),
            "X-RateLimit-Used": str(30 - remaining), "X-RateLimit-Resource": resource,
            "X-GitHub-Request-Id": "9F2C:3A1B7:1C2D3E4:1D2E3F5:6750A1B2",
        }
        if link:
            headers["Link"] = link
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def github() -> Iterator[ReplayServer]:
    server = ReplayServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def discover_github(server: ReplayServer, tmp_path: Path, *args: str, out: str = "repos.txt"):
    import os

    os.environ["GITHUB_TOKEN"] = TOKEN  # run_miner passes the environment on
    try:
        done = run_miner(tmp_path / "store", "discover", "--github", "topic:cli", "--github-url", server.base,
                         "--min-stars", "50", "--pushed-since", "2025-01-01", "--out", tmp_path / out, "--json",
                         *args, timeout=300)
    finally:
        del os.environ["GITHUB_TOKEN"]
    return done


def records(done) -> dict[str, dict[str, Any]]:
    assert done.returncode == 0, done.stdout + done.stderr
    return {r["name"]: r for r in json.loads(done.stdout)}


# -- GitHub -----------------------------------------------------------------------------------


def test_github_search_pages_rate_limit_and_verdicts(github: ReplayServer, tmp_path: Path) -> None:
    start = time.monotonic()
    done = discover_github(github, tmp_path)
    found = records(done)
    assert set(found) == {"acme-tools/fastcsv", "acme-tools/notes-site", "acme-tools/ryaml",
                          "acme-tools/webhook-relay", "acme-tools/envcheck"}  # both pages read
    fastcsv = found["acme-tools/fastcsv"]
    sha = json.loads((GITHUB_DATA / "branch-fastcsv.json").read_text())["commit"]["sha"]
    assert fastcsv["kept"] and fastcsv["line"] == f"https://github.com/acme-tools/fastcsv.git@{sha}"
    assert "2 test files" in fastcsv["reason"]
    assert not found["acme-tools/notes-site"]["kept"]
    assert "no test files" in found["acme-tools/notes-site"]["reason"]
    assert not found["acme-tools/ryaml"]["kept"] and "compiled build step: Rust" in found["acme-tools/ryaml"]["reason"]
    assert found["acme-tools/webhook-relay"]["kept"]  # its default branch is trunk
    assert found["acme-tools/envcheck"]["kept"]  # envcheck_test.py matches *_test.py
    # the query carries the conveniences, the token is sent, page 2 came through the Link header
    searches = [(params, headers) for path, params, headers in github.requests if path == "/search/repositories"]
    assert searches[0][0]["q"] == "topic:cli language:python stars:>=50 pushed:>=2025-01-01"
    assert all(TOKEN in headers.get("Authorization", "") for _, headers in searches)
    assert [p.get("page") for p, _ in searches] == [None, "2", "2"]  # page 2 asked again after the 403
    # the rate limit was waited out (reset 2 s ahead), said on stderr, and the run went on
    assert "rate limit" in done.stderr and time.monotonic() - start >= 1.5
    # the repos file is what `miner crawl` takes
    sources, errors = parse_repos(tmp_path / "repos.txt")
    assert not errors
    assert [(s.kind, s.ref) for s in sources] == [("git", sha)] + [("git", s.ref) for s in sources[1:]]
    assert len(sources) == 3
    assert "notes-site: no test files" in (tmp_path / "repos.txt").read_text()


def test_github_dockerized_keeps_only_repositories_with_a_dockerfile(github: ReplayServer, tmp_path: Path) -> None:
    found = records(discover_github(github, tmp_path, "--dockerized"))
    assert [name for name, r in found.items() if r["kept"]] == ["acme-tools/webhook-relay"]
    assert "no Dockerfile" in found["acme-tools/fastcsv"]["reason"]


def test_github_resume_skips_what_was_checked(github: ReplayServer, tmp_path: Path) -> None:
    first = records(discover_github(github, tmp_path, "--limit", "1"))
    assert [n for n, r in first.items() if r["kept"]] == ["acme-tools/fastcsv"]  # stopped at the first kept
    assert len(first) == 1
    github.requests.clear()
    second = records(discover_github(github, tmp_path))
    assert second["acme-tools/fastcsv"]["resumed"] and not second["acme-tools/notes-site"]["resumed"]
    checked = [p for p in github.paths() if p.startswith("/repos/")]
    assert not any("/fastcsv/" in p for p in checked)  # no API call for what the first run checked
    assert any("/notes-site/" in p for p in checked)
    assert len(parse_repos(tmp_path / "repos.txt")[0]) == 3


def test_github_refused_query_is_one_line(github: ReplayServer, tmp_path: Path) -> None:
    done = run_miner(tmp_path / "store", "discover", "--github", "user:nobody-here", "--github-url", github.base,
                     "--out", tmp_path / "r.txt", timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "Validation Failed" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- PyPI (real sdists from the index) --------------------------------------------------------


@pytest.mark.pypi
def test_pypi_keeps_a_project_with_tests_and_leaves_out_one_without(tmp_path: Path) -> None:
    names = tmp_path / "names.txt"
    names.write_text("# popularity order\niniconfig\nsortedcontainers==2.4.0\nno-such-project-miner-test-x1\n")
    done = run_miner(tmp_path / "store", "discover", "--pypi", names, "--out", tmp_path / "repos.txt", "--json",
                     timeout=300)
    found = records(done)
    assert found["iniconfig"]["kept"] and found["iniconfig"]["line"].startswith("pypi:iniconfig==")
    assert "test file" in found["iniconfig"]["reason"]
    assert not found["sortedcontainers"]["kept"]
    assert found["sortedcontainers"]["reason"] == "sortedcontainers==2.4.0: no test files pytest would collect"
    assert "no project named" in found["no-such-project-miner-test-x1"]["reason"]
    assert "[1/3] iniconfig: kept pypi:iniconfig==" in done.stderr  # a plain progress line per project
    sources, errors = parse_repos(tmp_path / "repos.txt")
    assert not errors and [s.raw.split()[0] for s in sources] == [found["iniconfig"]["line"]]
    assert list((tmp_path / "store" / "cache" / "sources" / "pypi").glob("iniconfig-*/*.tar.gz"))  # crawl reuses it
    again = records(run_miner(tmp_path / "store", "discover", "--pypi", names, "--out", tmp_path / "repos.txt",
                              "--json", timeout=300))
    assert all(r["resumed"] for r in again.values())


@pytest.mark.pypi
def test_pypi_range_and_version_spec(tmp_path: Path) -> None:
    names = tmp_path / "names.txt"
    names.write_text("six\npython-slugify\ndocopt==0.6.2\n")
    found = records(run_miner(tmp_path / "store", "discover", "--pypi", names, "--from", "2", "--to", "3",
                              "--version", "==9.2.0", "--out", tmp_path / "repos.txt", "--json", timeout=300))
    assert set(found) == {"python-slugify", "docopt"}
    assert found["python-slugify"]["line"] == "pypi:python-slugify==9.2.0"
    assert not found["docopt"]["kept"] and "docopt==0.6.2: no test files" in found["docopt"]["reason"]
    bad = run_miner(tmp_path / "store", "discover", "--pypi", names, "--from", "9", "--out", tmp_path / "x.txt")
    assert bad.returncode == 1 and "past the end" in bad.stderr and "Traceback" not in bad.stderr


# -- npm (real tarballs from the registry) ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm")
def test_npm_keeps_a_package_with_a_suite_and_says_why_others_are_left_out(tmp_path: Path) -> None:
    """`miner discover --npm`: a tape-tested package with runtime dependencies kept at its pinned
    version, one without runtime dependencies and a line naming no package left out with their
    reason; the run again takes every verdict from its state file."""
    names = tmp_path / "names.txt"
    names.write_text("qs@6.17.1\nminimist@1.2.8\nNot A Name!\n")
    args = ["discover", "--npm", names, "--out", tmp_path / "repos.txt", "--json"]
    found = records(run_miner(tmp_path / "store", *args, timeout=300))
    assert found["qs"]["kept"] and found["qs"]["line"] == "npm:qs@6.17.1", found["qs"]
    assert "runs tape" in found["qs"]["reason"]
    assert not found["minimist"]["kept"] and "no runtime dependencies" in found["minimist"]["reason"]
    assert found["Not A Name!"]["reason"] == "not an npm package name"
    sources, errors = parse_repos(tmp_path / "repos.txt")
    assert not errors and [s.raw.split()[0] for s in sources] == ["npm:qs@6.17.1"]
    again = records(run_miner(tmp_path / "store", *args, timeout=300))
    assert all(r["resumed"] for r in again.values())


# -- the checks themselves --------------------------------------------------------------------


def test_assess_fixture_projects() -> None:
    kept, reason = assess(folder_listing(FIXTURES / "textkit"), Options())
    assert kept and "pytest" in reason
    kept, reason = assess(folder_listing(FIXTURES / "bad" / "no-tests"), Options())
    assert not kept and "no test files" in reason


def test_assess_nose_compiled_and_empty_test_files(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from nose.tools import eq_\n\ndef test_a():\n    eq_(1, 1)\n")
    assert "nose" in assess(folder_listing(tmp_path), Options())[1]
    (tmp_path / "tests" / "test_a.py").write_text("import unittest\n\nclass A(unittest.TestCase):\n    pass\n")
    (tmp_path / "setup.py").write_text("from setuptools import setup, Extension\n"
                                       "setup(ext_modules=[Extension('x', ['x.c'])])\n")
    kept, reason = assess(folder_listing(tmp_path), Options())
    assert not kept and reason == "compiled build step: setup.py declares extension modules"
    kept, reason = assess(folder_listing(tmp_path), Options(allow_compiled=True))
    assert kept and "unittest" in reason
    (tmp_path / "tests" / "test_a.py").write_text("HELPERS = 1\n")
    assert "hold no test functions" in assess(folder_listing(tmp_path), Options())[1]
    listing = Listing(["pkg/__init__.py", "tests/check_things.py"])
    assert "pytest's patterns do not match" in assess(listing, Options())[1]


def test_choose_release_newest_with_sdist_for_this_python() -> None:
    def sdist(name: str, requires: str | None = None, yanked: bool = False) -> dict[str, Any]:
        return {"packagetype": "sdist", "filename": name, "requires_python": requires, "yanked": yanked}

    data = {"releases": {
        "1.0": [sdist("p-1.0.tar.gz")],
        "1.1": [sdist("p-1.1.tar.gz", yanked=True)],
        "2.0": [sdist("p-2.0.tar.gz", ">=3.99")],
        "2.1b1": [sdist("p-2.1b1.tar.gz")],
        "1.5": [{"packagetype": "bdist_wheel", "filename": "p-1.5-py3-none-any.whl"}],
    }}
    assert choose_release(data, "", Version("3.11.2"))[0] == "1.0"
    assert choose_release(data, "", Version("3.99.0"))[0] == "2.0"
    assert choose_release(data, "==1.5", Version("3.11.2")) == "no sdist on the index for its release (wheels only)"
    assert "needs >=3.99" in choose_release(data, ">=2", Version("3.11.2"))
    assert choose_release(data, "==3.0") == "no release matches ==3.0"


def test_reset_wait_follows_the_api_headers() -> None:
    assert reset_wait({"X-RateLimit-Reset": "1000", "X-RateLimit-Remaining": "0"}, now=997.5) == pytest.approx(3.5)
    assert reset_wait({"retry-after": "30"}) == 30
    assert reset_wait({}) == 60


def test_native_sources_count_only_inside_packages_and_ignored_tests_do_not() -> None:
    tests = ["tests/test_a.py"]
    launcher = Listing(["distlib/__init__.py", "PC/launcher.c", "examples/c_files/basic.c", *tests])
    assert assess(launcher, Options())[0]
    speedups = Listing(["src/markupsafe/__init__.py", "src/markupsafe/_speedups.c", *tests])
    assert assess(speedups, Options())[1] == "compiled build step: C sources (src/markupsafe/_speedups.c)"
    from miner.ecosystems.python.install import PytestConfig

    legacy = Listing(["pkg/__init__.py", "tests/_TODO_legacy/test_old.py"],
                     config=PytestConfig(addopts=["--ignore=tests/_TODO_legacy/"], source="setup.cfg"))
    assert not assess(legacy, Options())[0]


# -- pytest's own choice of test modules ------------------------------------------------------

LAYOUTS = {
    # a python_files pattern with a path, matched against the whole path
    "path-pattern": {"setup.cfg": "[tool:pytest]\npython_files = src/tests/test_*.py\n",
                     "src/tests/test_api.py": "def test_a():\n    pass\n",
                     "test_stray.py": "def test_b():\n    pass\n"},
    # testpaths: only under it, though a test-named file lies elsewhere
    "testpaths": {"pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"checks\"]\n",
                  "checks/test_x.py": "def test_x():\n    pass\n", "scripts/test_tool.py": "def test_t():\n    pass\n"},
    # [tool:pytest] with its own name pattern
    "setup-cfg": {"setup.cfg": "[tool:pytest]\npython_files = check_*.py\n",
                  "tests/check_one.py": "def test_one():\n    pass\n", "tests/test_no.py": "def test_no():\n    pass\n"},
    # pytest.ini with addopts naming a plugin not installed here, and an --ignore to keep
    "pytest-ini": {"pytest.ini": "[pytest]\naddopts = --cov=pkg --ignore=tests/slow\n",
                   "tests/test_fast.py": "def test_f():\n    pass\n", "tests/slow/test_s.py": "def test_s():\n    pass\n"},
}
CHOSEN = {"path-pattern": ["src/tests/test_api.py"], "testpaths": ["checks/test_x.py"],
          "setup-cfg": ["tests/check_one.py"], "pytest-ini": ["tests/test_fast.py"]}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_pytest_itself_chooses_the_test_modules_and_imports_none(tmp_path: Path, layout: str) -> None:
    """Each layout's modules as pytest picks them; nothing of the project is imported (every
    module and the conftest would fail if it were), and the project is kept."""
    from miner.ecosystems.python.discover import pytest_collected

    files = {**LAYOUTS[layout], "conftest.py": "raise SystemExit('a conftest was imported')\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        body = text if not rel.endswith(".py") else "import module_that_is_not_installed\n" + text
        (tmp_path / rel).write_text(body if rel != "conftest.py" else text)
    assert pytest_collected(tmp_path) == CHOSEN[layout]
    kept, reason = assess(folder_listing(tmp_path), Options())
    assert kept and reason.startswith("1 test file"), reason
