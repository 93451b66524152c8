"""Run pytest for miner's verifier under a guard plugin (standalone; run by the project's venv).

    python verifier_pytest.py GUARD_REPORT ALLOWED_JSON -- PYTEST_ARGS...

Behaves like `python -m pytest PYTEST_ARGS` (the current folder first on sys.path), plus a guard
that writes GUARD_REPORT (JSON) with:
  outcomes    node id -> passed | failed | error | skipped, from the guard's own report hook
              (a second opinion next to the junit XML);
  violations  a plugin whose code lives outside the healthy runner, the restored tests and the
              protected project files; pytest / pluggy imported from an unexpected place; a
              function of pytest's internals replaced or re-coded during the run.
The verifier (verifier.py) treats any violation as a failed task.
"""

import importlib
import inspect
import json
import os
import pkgutil
import sys
import time

CHECK_EVERY = 0.5  # seconds between checks of pytest's functions while tests run


def _file_of(obj):
    """The source file that defines a plugin (a module, a class or function, or an instance), or None."""
    if inspect.ismodule(obj):
        module = obj
    elif inspect.isclass(obj) or inspect.isfunction(obj):
        module = sys.modules.get(getattr(obj, "__module__", ""), None)
    else:
        module = sys.modules.get(getattr(type(obj), "__module__", ""), None)
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if path else None


def _function(member):
    """The plain function behind a class member (method, classmethod, staticmethod, property)."""
    if isinstance(member, (classmethod, staticmethod)):
        member = member.__func__
    elif isinstance(member, property):
        member = member.fget
    return member if inspect.isfunction(member) else None


class Guard:
    """The guard plugin: records outcomes and checks what runs inside the pytest session."""

    def __init__(self, report_path, allowed):
        self.report_path = report_path
        self.plugin_files = set(allowed["plugin_files"])
        self.runner = set(allowed["runner"])
        self.outcomes = {}
        self.violations = []
        self.snapshot = {}
        self.last_check = 0.0

    def violate(self, text):
        if text not in self.violations:
            self.violations.append(text)

    # -- before the session -------------------------------------------------------------------
    def check_imports(self):
        import _pytest
        import pluggy
        import pytest

        for module in (pytest, _pytest, pluggy):
            path = _file_of(module)
            if path not in self.runner:
                self.violate(f"{module.__name__} was imported from {path}, not from the healthy venv")

    def take_snapshot(self):
        """Every function of _pytest, pytest and pluggy with its code object, before plugins load."""
        import _pytest
        import pluggy

        for package in (_pytest, pluggy):
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                try:
                    importlib.import_module(info.name)
                except Exception:  # optional internals (e.g. needing extras) are simply not guarded
                    continue
        self.snapshot = self._functions()

    def _functions(self):
        found = {}
        for name, module in list(sys.modules.items()):
            ours = name in ("pytest", "_pytest", "pluggy") or name.startswith(("_pytest.", "pluggy."))
            if module is None or not ours:
                continue
            for attr, value in list(vars(module).items()):
                if inspect.isfunction(value):
                    found[f"{name}.{attr}"] = (value, value.__code__)
                elif inspect.isclass(value) and getattr(value, "__module__", "") == name:
                    for key, member in list(vars(value).items()):
                        func = _function(member)
                        if func is not None:
                            found[f"{name}.{attr}.{key}"] = (func, func.__code__)
        return found

    def check_snapshot(self):
        """Compare pytest's functions with the snapshot taken before any plugin or test code ran.

        A function may be replaced only by code from the healthy runner's own files: pytest does
        that itself (its legacypath plugin), and so do some healthy plugins (hypothesis).
        """
        self.last_check = time.monotonic()
        now = self._functions()
        for key, (func, code) in self.snapshot.items():
            current = now.get(key)
            if current is not None and current[0] is func and func.__code__ is code:
                continue
            if func.__code__ is not code:
                self.violate(f"pytest internals were re-coded during the run: {key}")
            elif current is None:
                self.violate(f"pytest internals were removed during the run: {key}")
            elif os.path.realpath(current[1].co_filename) not in self.runner:
                self.violate(f"pytest internals were patched during the run: {key} "
                             f"(by {current[1].co_filename})")

    def check_plugins(self, config):
        for name, plugin in config.pluginmanager.list_name_plugin():
            if plugin is None or plugin is self:
                continue
            path = _file_of(plugin)
            if path is None or path not in self.plugin_files:
                self.violate(f"unexpected pytest plugin {name!r} from {path}")

    # -- hooks -------------------------------------------------------------------------------------
    def pytest_collection_finish(self, session):
        self.check_plugins(session.config)

    def pytest_runtest_logreport(self, report):
        rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 2}
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        previous = self.outcomes.get(report.nodeid)
        if previous is None or rank[outcome] > rank[previous]:
            self.outcomes[report.nodeid] = outcome
        if time.monotonic() - self.last_check > CHECK_EVERY:
            self.check_snapshot()

    def pytest_sessionfinish(self, session):
        self.check_plugins(session.config)
        self.check_snapshot()
        self.write()

    def write(self):
        with open(self.report_path, "w", encoding="utf-8") as handle:
            json.dump({"outcomes": self.outcomes, "violations": self.violations}, handle)


def main():
    report_path, allowed_path = sys.argv[1], sys.argv[2]
    args = sys.argv[sys.argv.index("--") + 1:]
    sys.path[0] = os.getcwd()  # as `python -m pytest` does
    with open(allowed_path, encoding="utf-8") as handle:
        guard = Guard(report_path, json.load(handle))
    guard.write()  # an empty report until the session ends
    guard.check_imports()
    guard.take_snapshot()
    import pytest

    code = pytest.main(args, plugins=[guard])
    guard.check_snapshot()
    guard.write()
    sys.exit(int(code))


if __name__ == "__main__":
    main()
