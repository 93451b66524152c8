"""The Python ecosystem: the build (install.py: pip, tox, uv.lock), pytest with per-test results
from its junit XML (pytest.py), and the code parser feeding the graph (code.py: tree-sitter's
Python grammar)."""
