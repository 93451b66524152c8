"""Tests for miner.sources: repos.txt parsing and fetching real git repos, folders and sdists."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import git
import pytest

from conftest import REPO_ROOT, commit_all, copy_fixture, make_git_repo
import subprocess
import sys

from miner.ecosystems.python.registry import _pip_reason, index_sdist
from miner.archives import unpack_archive
from miner.sources import FetchError, fetch, parse_repos, parse_source, tree_hash


def write_repos(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "repos.txt"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Parsing: every accepted form


@pytest.mark.parametrize(
    "line,location,ref,name",
    [
        ("https://github.com/pallets/click", "https://github.com/pallets/click", None, "click"),
        ("https://github.com/pallets/click.git@8.1.7", "https://github.com/pallets/click.git", "8.1.7", "click"),
        ("http://git.example.org/team/app@feature/login", "http://git.example.org/team/app", "feature/login", "app"),
        ("https://user@git.example.org/team/app.git", "https://user@git.example.org/team/app.git", None, "app"),
        ("https://user@git.example.org/team/app@v2", "https://user@git.example.org/team/app", "v2", "app"),
        ("ssh://git@git.example.org:2222/team/app.git@0a1b2c3", "ssh://git@git.example.org:2222/team/app.git",
         "0a1b2c3", "app"),
        ("git@github.com:owner/name.git", "git@github.com:owner/name.git", None, "name"),
        ("git@github.com:owner/name.git@main", "git@github.com:owner/name.git", "main", "name"),
        ("file:///srv/git/tool", "file:///srv/git/tool", None, "tool"),
        ("file:///srv/git/tool@v1.0", "file:///srv/git/tool", "v1.0", "tool"),
    ],
)
def test_git_forms(line: str, location: str, ref: str | None, name: str) -> None:
    source = parse_source(line, base=Path("/"))
    assert source is not None
    assert (source.kind, source.location, source.ref, source.name) == ("git", location, ref, name)


def test_local_folder_relative_to_repos_file(tmp_path: Path) -> None:
    (tmp_path / "projects" / "app").mkdir(parents=True)
    repos = write_repos(tmp_path, "projects/app\n./projects/app/../app/\n" + f"{tmp_path}/projects\n")
    sources, errors = parse_repos(repos)
    assert [s.location for s in sources] == [str(tmp_path / "projects" / "app"), str(tmp_path / "projects")]
    assert all(s.kind == "local" for s in sources)
    assert sources[0].name == "app"
    # The second line names the same folder: reported, not kept.
    assert [str(e) for e in errors] == [f"{repos}:2: duplicate of {repos}:1"]


def test_pypi_form() -> None:
    source = parse_source("pypi:Python-Dateutil==2.9.0.post0", base=Path("/"))
    assert source is not None
    assert (source.kind, source.location, source.ref) == ("pypi", "Python-Dateutil==2.9.0.post0", None)
    assert source.name == "python-dateutil"


def test_comments_blank_lines_and_origins(tmp_path: Path) -> None:
    repos = write_repos(tmp_path, (
        "# crawl list\n"
        "\n"
        "   \n"
        "pypi:six==1.16.0   # trailing comment\n"
        "https://example.org/repo#frag@main\n"  # a # inside a word is not a comment
        "    # indented comment\n"
    ))
    sources, errors = parse_repos(repos)
    assert errors == []
    assert [s.origin for s in sources] == [f"{repos}:4", f"{repos}:5"]
    assert sources[0].location == "six==1.16.0"
    assert sources[0].raw == "pypi:six==1.16.0   # trailing comment"
    assert (sources[1].location, sources[1].ref) == ("https://example.org/repo#frag", "main")


def test_overrides(tmp_path: Path) -> None:
    line = ('pypi:attrs==23.2.0 test="pytest -x tests/unit" extras=tests,cov python=3.11 '
            "install='pip install -e .' timeout=90 tox_env= env.TZ=UTC env.EMPTY=  # note")
    source = parse_source(line, base=tmp_path)
    assert source is not None
    assert source.overrides == {
        "test": "pytest -x tests/unit", "extras": "tests,cov", "python": "3.11",
        "install": "pip install -e .", "timeout": "90", "tox_env": "", "env.TZ": "UTC", "env.EMPTY": "",
    }


# --------------------------------------------------------------------------------------------
# Parsing: malformed lines give FILE:LINE errors and the other lines still parse


MALFORMED = [
    ("pypi:six", "exact pin NAME==VERSION"),
    ("pypi:six>=1.0", "exact pin"),
    ("pypi:six==1.*", "exact pin"),
    ("pypi:six===1.0", "exact pin"),
    ("pypi:-six-==1.0", "invalid package name"),
    ("pypi:six==one.two", "invalid version"),
    ("pypi:six==1.16.0 colour=blue", "unknown override 'colour'"),
    ("pypi:six==1.16.0 timeout", "expected key=value"),
    ("pypi:six==1.16.0 =3", "expected key=value"),
    ("pypi:six==1.16.0 test=a test=b", "given twice"),
    ("pypi:six==1.16.0 env.1BAD=x", "bad environment variable name"),
    ("pypi:six==1.16.0 test=", "empty value"),
    ("pypi:six==1.16.0 timeout=soon", "number of seconds"),
    ("pypi:six==1.16.0 timeout=-5", "must be positive"),
    ("pypi:six==1.16.0 python=snake", "version like 3.11"),
    ("pypi:six==1.16.0 extras=ok,b@d", "bad extra name"),
    ("https://github.com/a/b@", "empty ref"),
    ("https://github.com/a/b@bad..ref", "bad ref"),
    ("https://github.com/a/b@x~1", "bad ref"),
    ("git@github.com:a/b.git@feature.lock", "bad ref"),
    ("https:///no-host", "no host"),
    ("https://github.com", "no repository path"),
    ("ftp://example.org/repo", "unknown source form"),
    ("svn+ssh://example.org/repo", "unknown source form"),
    ("no/such/folder", "folder not found"),
    ("a-file.txt", "not a folder"),
    ('pypi:six==1.16.0 test="unclosed', "No closing quotation"),
]


def test_malformed_lines_report_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a-file.txt").write_text("not a project")
    lines = ["pypi:iniconfig==2.3.1"] + [line for line, _ in MALFORMED] + ["pypi:six==1.16.0"]
    repos = write_repos(tmp_path, "\n".join(lines) + "\n")
    sources, errors = parse_repos(repos)
    assert [s.location for s in sources] == ["iniconfig==2.3.1", "six==1.16.0"]
    assert len(errors) == len(MALFORMED)
    for number, (error, (line, reason)) in enumerate(zip(errors, MALFORMED), start=2):
        assert error.origin == f"{repos}:{number}"
        assert error.line == line
        assert reason in error.reason, (line, error.reason)
        assert str(error).startswith(f"{repos}:{number}: ")


def test_duplicates_keep_the_first(tmp_path: Path) -> None:
    repos = write_repos(tmp_path, (
        "https://github.com/owner/app@v1\n"
        "pypi:Six==1.16.0\n"
        "https://GitHub.com/owner/app.git/@v1\n"  # same repo and ref, spelled differently
        "https://github.com/owner/app@v2\n"  # another ref: another source
        "pypi:six==1.16.0 test=pytest\n"  # same package and version, other overrides
        "git@github.com:owner/app.git\n"
        "git@github.com:owner/app\n"
    ))
    sources, errors = parse_repos(repos)
    assert [(s.location, s.ref) for s in sources] == [
        ("https://github.com/owner/app", "v1"),
        ("Six==1.16.0", None),
        ("https://github.com/owner/app", "v2"),
        ("git@github.com:owner/app.git", None),
    ]
    assert [str(e) for e in errors] == [
        f"{repos}:3: duplicate of {repos}:1",
        f"{repos}:5: duplicate of {repos}:2",
        f"{repos}:7: duplicate of {repos}:6",
    ]


def test_default_repos_file_parses() -> None:
    sources, errors = parse_repos(REPO_ROOT / "repos.txt")
    assert errors == []
    kinds = [s.kind for s in sources]
    assert kinds.count("local") == 4 and kinds.count("pypi") >= 3
    # only fixtures have overrides: the variables their READMEs tell users to export
    assert {s.name: s.overrides for s in sources if s.overrides} == {
        "inventory-app": {"env.INVENTORY_CURRENCY": "EUR"}, "weather-report": {"env.WEATHER_UNITS": "metric"},
        "stocksync": {"env.SSL_CERT_FILE": "/sandbox/project/certs/dev-ca.pem"}}


# --------------------------------------------------------------------------------------------
# Fetching git repositories


@pytest.fixture
def history(tmp_path: Path) -> dict:
    """A real repo from the inventory-app fixture: a tagged first commit, main moved on, a branch."""
    repo = make_git_repo(copy_fixture("inventory-app", tmp_path / "upstream"))
    work = Path(repo.working_tree_dir)
    first = repo.head.commit.hexsha
    repo.create_tag("v1.4.0")
    (work / "settings.ini").write_text("[report]\ntitle = Second\n")
    second = commit_all(repo, "retitle").hexsha
    repo.git.checkout("-b", "feature")
    (work / "NOTES.md").write_text("feature work\n")
    feature = commit_all(repo, "notes").hexsha
    repo.git.checkout("main")
    return {"repo": repo, "url": f"file://{work}", "first": first, "second": second, "feature": feature}


def fetch_line(line: str, cache: Path):
    source = parse_source(line, base=Path("/"))
    assert source is not None
    return fetch(source, cache)


def test_fetch_git_default_branch_branch_tag_and_commit(history: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    url = history["url"]
    default = fetch_line(url, cache)
    assert (default.repo, default.commit) == (url, history["second"])
    assert "title = Second" in (default.path / "settings.ini").read_text()
    assert not (default.path / ".git").exists()

    branch = fetch_line(f"{url}@feature", cache)
    assert branch.commit == history["feature"]
    assert (branch.path / "NOTES.md").read_text() == "feature work\n"

    tag = fetch_line(f"{url}@v1.4.0", cache)
    assert tag.commit == history["first"]
    assert "title = Stock report" in (tag.path / "settings.ini").read_text()
    assert not (tag.path / "NOTES.md").exists()

    for ref in (history["first"], history["first"][:10]):
        pinned = fetch_line(f"{url}@{ref}", cache)
        assert (pinned.commit, pinned.path) == (history["first"], tag.path)

    # One checkout folder per commit, all from one cached clone that keeps its .git data.
    assert len({default.path, branch.path, tag.path}) == 3
    assert len(list((cache / "git").glob("*/repo.git"))) == 1


def test_fetch_git_reuses_the_cache_and_sees_new_commits(history: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = fetch_line(f"{history['url']}@main", cache)
    repo: git.Repo = history["repo"]
    (Path(repo.working_tree_dir) / "config.yaml").write_text("warehouse: {name: South}\n")
    third = commit_all(repo, "move warehouse").hexsha
    after = fetch_line(f"{history['url']}@main", cache)
    assert before.commit == history["second"]
    assert after.commit == third
    assert "South" in (after.path / "config.yaml").read_text()
    assert "North Dock" in (before.path / "config.yaml").read_text()  # older checkout untouched

    repo.git.checkout("feature")  # the remote's default branch changes
    assert fetch_line(history["url"], cache).commit == history["feature"]


def test_fetch_git_cached_commit_needs_no_remote(history: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pinned = fetch_line(f"{history['url']}@{history['first']}", cache)
    shutil.rmtree(history["repo"].working_tree_dir)  # the remote is gone
    assert fetch_line(f"{history['url']}@{history['first']}", cache).path == pinned.path
    with pytest.raises(FetchError, match="cannot fetch"):
        fetch_line(f"{history['url']}@main", cache)  # a branch may have moved: must ask


def test_fetch_git_missing_ref(history: dict, tmp_path: Path) -> None:
    with pytest.raises(FetchError) as info:
        fetch_line(f"{history['url']}@no-such-branch", tmp_path / "cache")
    assert "ref 'no-such-branch' not found" in info.value.reason
    with pytest.raises(FetchError, match="not found"):
        fetch_line(f"{history['url']}@{'0' * 40}", tmp_path / "cache")


def test_fetch_git_unreachable_url(tmp_path: Path) -> None:
    with pytest.raises(FetchError) as info:
        fetch_line(f"file://{tmp_path}/nowhere.git", tmp_path / "cache")
    assert info.value.reason.startswith(f"cannot clone file://{tmp_path}/nowhere.git: fatal:")
    assert not list((tmp_path / "cache" / "git").glob("*/repo.git*"))  # nothing half-cloned left


# --------------------------------------------------------------------------------------------
# Fetching local folders


def add_clutter(folder: Path) -> None:
    """Things a developer's folder holds that must not reach later stages."""
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (folder / "my-env").mkdir()
    (folder / "my-env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (folder / "build").mkdir()
    (folder / "build" / "lib.txt").write_text("stale")
    (folder / "textkit_old.egg-info").mkdir()


def test_fetch_local_folder_by_content(tmp_path: Path) -> None:
    folder = copy_fixture("textkit", tmp_path / "textkit")
    add_clutter(folder)
    (folder / "src" / "textkit" / "build").mkdir()  # a build/ below the root may be code: kept
    (folder / "src" / "textkit" / "build" / "__init__.py").write_text("")
    cache = tmp_path / "cache"

    project = fetch_line(str(folder), cache)
    assert project.repo == str(folder)
    assert len(project.commit) == 64 and project.commit == tree_hash(project.path)
    copied = {p.relative_to(project.path).as_posix() for p in project.path.rglob("*")}
    assert "src/textkit/resources/stopwords.txt" in copied
    assert "src/textkit/build/__init__.py" in copied
    assert not {"__pycache__", "my-env", "build", "textkit_old.egg-info"} & copied

    assert fetch_line(str(folder), cache).commit == project.commit  # same content, same id
    (folder / "pytest.ini").write_text("[pytest]\n")
    changed = fetch_line(str(folder), cache)
    assert changed.commit != project.commit and changed.path != project.path


def test_fetch_local_git_repo_uses_head_and_marks_dirty(fixture_repo, tmp_path: Path) -> None:
    repo = fixture_repo("weather-report")
    folder = Path(repo.working_tree_dir)
    clean = fetch_line(str(folder), tmp_path / "cache")
    assert clean.commit == repo.head.commit.hexsha
    assert not (clean.path / ".git").exists()
    assert (clean.path / "weather.toml").is_file()

    (folder / "weather.toml").write_text('schema_version = "2.2"\n')
    dirty = fetch_line(str(folder), tmp_path / "cache")
    assert dirty.commit.startswith(f"{repo.head.commit.hexsha}-dirty-")
    assert (dirty.path / "weather.toml").read_text() == 'schema_version = "2.2"\n'


# --------------------------------------------------------------------------------------------
# Fetching sdists from the package index


def test_fetch_pypi_sdist(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    project = fetch_line("pypi:iniconfig==2.3.1", cache)
    assert project.repo == "pypi:iniconfig"
    assert project.path.name == "iniconfig-2.3.1"
    assert (project.path / "pyproject.toml").is_file()
    assert (project.path / "testing" / "test_iniconfig.py").is_file()  # this sdist ships its tests
    [sdist] = (cache / "pypi" / "iniconfig-2.3.1").glob("*.tar.gz")
    assert project.commit == hashlib.sha256(sdist.read_bytes()).hexdigest()
    again = fetch_line("pypi:iniconfig==2.3.1", cache)  # from the cache, no second download
    assert (again.commit, again.path) == (project.commit, project.path)


def test_fetch_pypi_takes_the_index_file_without_building_it(tmp_path: Path) -> None:
    """The sdist comes straight from the index's JSON API: its sha256 is the index's, and an sdist
    whose build dependencies pip could not install here (filelock 4.3.2's build needs
    python-sbom, which this machine's indexes lack) is fetched all the same; `pip download` built
    its metadata first and reported "no sdist"."""
    listed = index_sdist("iniconfig", "2.3.1")
    assert listed and listed["filename"] == "iniconfig-2.3.1.tar.gz"
    project = fetch_line("pypi:iniconfig==2.3.1", tmp_path / "cache")
    assert project.commit == listed["digests"]["sha256"]
    assert index_sdist("iniconfig", "99.0.0") is None
    filelock = fetch_line("pypi:filelock==4.3.2", tmp_path / "cache")
    assert (filelock.path / "pyproject.toml").is_file()


def test_an_index_that_does_not_answer_is_asked_once() -> None:
    """A JSON API answering 500 (or not at all) leaves the fetch to pip, and is not asked again."""
    import http.server
    import threading

    asked = []

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.append(self.path)
            self.send_error(500)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/pypi"
        assert index_sdist("iniconfig", "2.3.1", index) is None
        assert index_sdist("six", "1.17.0", index) is None
    finally:
        server.shutdown()
    assert asked == ["/pypi/iniconfig/json"]


def test_pip_reason_names_build_dependencies(tmp_path: Path) -> None:
    """pip's own output for an sdist whose build backend cannot be installed is not "no sdist"."""
    root = tmp_path / "needs-missing-backend-1.0"
    root.mkdir()
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["no-such-backend-for-miner-tests>=1"]\n'
                                         'build-backend = "no_such_backend"\n')
    archive = tmp_path / "needs-missing-backend-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "out"),
                           str(archive)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    reason = _pip_reason("needs-missing-backend", "1.0", done.stdout + done.stderr)
    assert reason.startswith("the build dependencies of needs-missing-backend==1.0's sdist cannot be installed")
    assert "no-such-backend-for-miner-tests" in reason


def test_fetch_pypi_missing_version(tmp_path: Path) -> None:
    with pytest.raises(FetchError) as info:
        fetch_line("pypi:iniconfig==99.0.0", tmp_path / "cache")
    assert info.value.reason.startswith("no sdist of iniconfig==99.0.0 on the package index")


# --------------------------------------------------------------------------------------------
# Archives are unpacked safely


def tar_with(tmp_path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    path = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_unpack_refuses_path_traversal(tmp_path: Path) -> None:
    evil = tar_with(tmp_path, {"pkg-1.0/setup.py": b"", "../escaped.txt": b"x"})
    with pytest.raises(FetchError, match="unsafe archive member"):
        unpack_archive(evil, tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "out").exists()


def test_unpack_refuses_links_out_of_the_folder(tmp_path: Path) -> None:
    evil = tar_with(tmp_path, {"pkg-1.0/setup.py": b""}, links={"pkg-1.0/passwd": "/etc/passwd"})
    with pytest.raises(FetchError, match="unsafe archive member"):
        unpack_archive(evil, tmp_path / "out")


def test_unpack_zip(tmp_path: Path) -> None:
    good = tmp_path / "pkg-1.0.zip"
    with zipfile.ZipFile(good, "w") as archive:
        archive.writestr("pkg-1.0/setup.py", "print('hi')\n")
    unpack_archive(good, tmp_path / "out")
    assert (tmp_path / "out" / "pkg-1.0" / "setup.py").read_text() == "print('hi')\n"

    evil = tmp_path / "evil-1.0.zip"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../../escaped.txt", "x")
    with pytest.raises(FetchError, match="leaves the folder"):
        unpack_archive(evil, tmp_path / "out2")
