"""A pytest plugin for discovery (miner.ecosystems.python.discover.pytest_collected): pytest's own choice of test
modules, without importing any of them.

pytest decides which files are test modules (python_files, testpaths, norecursedirs, --ignore,
rootdir and ini-file discovery) and then asks `pytest_pycollect_makemodule` for each; this hook
answers first with an empty node, so no module of the project is imported, and prints the path.
"""

import pytest


class Unimported(pytest.File):
    def collect(self):  # noqa: ANN201 - pytest's signature
        return []


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):  # noqa: ANN001, ANN201
    print(f"miner-collect\t{module_path}", flush=True)
    return Unimported.from_parent(parent, path=module_path)
