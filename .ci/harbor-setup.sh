#!/usr/bin/env bash
# Creates the Harbor harness venv (harbor needs Python >= 3.12) at $MINER_HARBOR_VENV
# (default ~/.cache/miner/harbor-venv). Idempotent: a venv holding another release is replaced.
set -euo pipefail
VENV="${MINER_HARBOR_VENV:-$HOME/.cache/miner/harbor-venv}"
VERSION=0.26.0  # the newest release on the package index (2026-12); exports are read by 0.25 too
if [ -x "$VENV/bin/harbor" ] && [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))')" = "$VERSION" ]; then
    echo "harbor: $VENV already set up ($VERSION)"
    exit 0
fi
rm -rf "$VENV"
PY=""
# pyenv shims answer `command -v` even when the version is not selected: try real binaries first.
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
for candidate in "$PYENV_ROOT"/versions/3.12*/bin/python3.12 "$PYENV_ROOT"/versions/3.13*/bin/python3.13 \
                 /usr/bin/python3.12 /usr/bin/python3.13 python3.12 python3.13; do
    if "$candidate" -c 'import venv' 2>/dev/null; then
        PY="$candidate"; break
    fi
done
if [ -z "$PY" ]; then
    echo "harbor: no Python >= 3.12 found"; exit 1
fi
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q "harbor==$VERSION"
echo "harbor: installed in $VENV"
