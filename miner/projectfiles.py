"""What a project file is, and which of them are the judge: the one definition every stage uses.

Fetching (what is copied), the healthy state (what is hashed and protected), target enumeration
(what may be broken), the graph (what is parsed) and the exporters (what is archived and put
back by the verifier) all ask this module, so they agree on every path.

    files = project_files(root)                         # project-relative POSIX paths
    protected = [f for f in files if is_protected(f, test_files)]
    in_test_tree("tests/data/sample.csv")               # True: the tests are the judge (rule 7)

Kinds of project file:
  code         Python and native sources (.py, .pyx, .c, ...): protected (rule 3)
  test tree    anything under a test folder (test code, data, fixtures, snapshots, expected
               outputs), conftest.py, test_*.py / *_test.py and the files the healthy run
               collected tests from: protected (rule 7)
  runner config  pytest's and the build's configuration (pyproject.toml, setup.cfg, tox.ini,
               pytest.ini, noxfile.py, .coveragerc, Dockerfile, ...): protected (rule 7)
  packaging    metadata that never configures the running program (README, LICENSE,
               requirements files, CI files, lock files): neither protected nor a target
  docs         under docs/ or doc/: not a target
  other        config and data files the program reads: the legitimate inversion targets
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

# Folders that never hold project files: VCS data, caches, virtualenvs and build output
# (build/ and dist/ only at the top: src/build/ may be code). A folder holding pyvenv.cfg is a
# virtualenv under any name; *.egg-info folders are generated metadata.
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".eggs", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".hypothesis", "node_modules", "htmlcov", "wheelhouse",
})
TOP_LEVEL_BUILD_DIRS = frozenset({"build", "dist"})
TEST_DIR_NAMES = frozenset({"test", "tests", "testing", "testdata", "test_data", "test-data"})
DOC_DIRS = frozenset({"docs", "doc"})
CODE_SUFFIXES = frozenset({
    ".py", ".pyi", ".pyx", ".pxd", ".pyc", ".pyo", ".so", ".pyd", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs",
    ".sh",
})
# Files of a program's code in any language (what a traced run reads that is not its environment).
PROGRAM_SUFFIXES = frozenset({
    ".py", ".pyc", ".js", ".mjs", ".cjs", ".ts", ".node", ".rb", ".pl", ".pm", ".php", ".lua", ".sh", ".go",
    ".java", ".class", ".jar", ".so",
})
# The test runner's and the build's configuration: what decides how the judge runs.
RUNNER_CONFIG = frozenset({
    "pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "pytest.ini", ".pytest.ini", "conftest.py",
    "noxfile.py", ".coveragerc", "manifest.in", "dockerfile", ".dockerignore",
    ".mocharc.js", ".mocharc.cjs", ".mocharc.yaml", ".mocharc.yml", ".mocharc.jsonc", ".mocharc.json", "mocha.opts",
    "jest.config.js", "jest.config.ts", "jest.config.mjs", "jest.config.cjs", "jest.config.json",
})
# Files about the project rather than read by it (lower-cased names, and name prefixes).
PACKAGING_NAMES = frozenset({
    "mypy.ini", ".mypy.ini", "ruff.toml", ".ruff.toml", "hatch.toml", "pdm.toml", "pixi.toml", "poetry.lock",
    "pdm.lock", "pipfile", "pipfile.lock", ".flake8", ".pylintrc", "pylintrc", ".bumpversion.cfg",
    ".pre-commit-config.yaml", ".pre-commit-hooks.yaml", ".readthedocs.yml", ".readthedocs.yaml", "mkdocs.yml",
    "mkdocs.yaml", "codecov.yml", ".codecov.yml", "environment.yml", "environment.yaml", "package.json",
    "package-lock.json", "tsconfig.json", ".cruft.json", "renovate.json", ".zenodo.json", "appveyor.yml",
    ".travis.yml", "azure-pipelines.yml", ".gitlab-ci.yml", "readthedocs.yml", "conda.yml", "meta.yaml",
    "setup.json", "authors.md", "authors.rst", "contributing.md", "history.rst", "changes.rst",
})
PACKAGING_PREFIXES = ("requirements", "constraints", "license", "copying", "notice", "changelog", "readme")
PACKAGING_DIRS = frozenset({".github", ".gitlab", ".circleci", "ci", "benchmarks"})


def skipped_dir(name: str, path: Path | None = None, top: bool = False) -> bool:
    """Whether a folder of that name (at the top of the project when `top`) holds no project files."""
    if name in SKIP_DIRS or name.endswith(".egg-info") or (top and name in TOP_LEVEL_BUILD_DIRS):
        return True
    return path is not None and (path / "pyvenv.cfg").is_file()


def project_files(root: Path, symlinks: bool = False) -> list[str]:
    """Sorted project-relative POSIX paths of the project's regular files (and, with `symlinks`,
    its symbolic links), without skipped folders."""
    found: list[str] = []
    root = Path(root)
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        top = base == root
        dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink() and not skipped_dir(d, base / d, top))
        links = [d for d in os.listdir(base) if symlinks and (base / d).is_symlink()]
        for name in sorted(set(files) | set(links)):
            path = base / name
            if path.is_symlink() and not symlinks:
                continue
            if path.is_symlink() or path.is_file():
                found.append(path.relative_to(root).as_posix())
    return sorted(found)


def test_file_of(test_id: str) -> str | None:
    """The project-relative file a pytest node id was collected from (None for derived probes)."""
    if test_id.startswith("probe::"):
        return None
    path = test_id.split("::", 1)[0]
    return path or None


def is_test_file(rel: str) -> bool:
    """conftest.py, test_*.py and *_test.py."""
    name = PurePosixPath(rel).name
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))


def in_test_tree(rel: str, test_files: Iterable[str] = ()) -> bool:
    """Whether a project file belongs to the tests: under a test folder, a test module, or one of
    the files the healthy run collected tests from (`test_files`)."""
    parts = PurePosixPath(rel).parts
    if any(part.lower() in TEST_DIR_NAMES for part in parts[:-1]):
        return True
    return is_test_file(rel) or rel in set(test_files)


def is_code(rel: str) -> bool:
    return PurePosixPath(rel).suffix.lower() in CODE_SUFFIXES


def is_runner_config(rel: str) -> bool:
    """The test runner's or the build's configuration file (at any depth: tox.ini, conftest.py, ...)."""
    return PurePosixPath(rel).name.lower() in RUNNER_CONFIG


def is_packaging(rel: str) -> bool:
    """A file about the project (README, LICENSE, requirements, CI, lock files) or under a CI folder."""
    path = PurePosixPath(rel)
    name = path.name.lower()
    return (name in PACKAGING_NAMES or name.startswith(PACKAGING_PREFIXES)
            or any(part in PACKAGING_DIRS for part in path.parts[:-1]))


def is_doc(rel: str) -> bool:
    return PurePosixPath(rel).parts[0].lower() in DOC_DIRS


def is_protected(rel: str, test_files: Iterable[str] = ()) -> bool:
    """Rules 3 and 7: the project's code, its whole test tree and its runner configuration."""
    return is_code(rel) or is_runner_config(rel) or in_test_tree(rel, test_files)


def may_be_target(rel: str, test_files: Iterable[str] = ()) -> bool:
    """A file a break may change: not protected, not packaging or docs, not a dotfile nor under a
    dot folder (.vscode/, .devcontainer/: those configure tools, not the program)."""
    hidden = any(part.startswith(".") for part in PurePosixPath(rel).parts)
    return not (is_protected(rel, test_files) or is_packaging(rel) or is_doc(rel) or hidden)


def suffix_matches(text: str, index: dict[str, list[str]]) -> list[str]:
    """Paths of the index (keyed by last component) equal to text or ending/ended with it at a '/'."""
    return [rel for rel in index.get(PurePosixPath(text).name, [])
            if rel == text or text.endswith("/" + rel) or rel.endswith("/" + text)]


def nearest(matches: list[str], near: str) -> list[str]:
    """Of several same-named paths, those sharing the longest folder prefix with `near`."""
    if len(matches) < 2:
        return matches
    here = PurePosixPath(near).parent.parts

    def shared(rel: str) -> int:
        parts = PurePosixPath(rel).parts
        return next((i for i, (a, b) in enumerate(zip(parts, here)) if a != b), min(len(parts), len(here)))

    best = max(shared(m) for m in matches)
    return [m for m in matches if shared(m) == best]
