#!/usr/bin/env bash
# Creates the Harbor harness venv (harbor needs Python >= 3.12) at $MINER_HARBOR_VENV
# (default ~/.cache/miner/harbor-venv). Idempotent.
set -euo pipefail
VENV="${MINER_HARBOR_VENV:-$HOME/.cache/miner/harbor-venv}"
if [ -x "$VENV/bin/harbor" ]; then
    echo "harbor: $VENV already set up"
    exit 0
fi
PY=""
for candidate in python3.12 python3.13; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import venv' 2>/dev/null; then
        PY="$candidate"; break
    fi
done
if [ -z "$PY" ]; then
    echo "harbor: no Python >= 3.12 found"; exit 1
fi
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q harbor==0.25.0
echo "harbor: installed in $VENV"
