"""The Docker backend against a real engine: builds, forks, confinement, cleanup, probes, what it
observes beneath a project, system and service inversions whose fixes recover from the evidence
(the Debian archive, the package index, the project's own files), broken images and errors.

Healthy images are cached by tag across runs (the project key hashes the fixture's files), so
only the first run pays for the builds. Skipped, with the reason, when no engine answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from miner.catalogue import load_catalogue, render
from miner.ecosystems import build_spec
from miner.models import Project, Source, Target
from miner.sandbox.base import BackendUnavailable, BuildError, Limits
from miner.sandbox.docker import gateway, images
from miner.solver_view import read_view, view_script
from miner.testing import run_suite

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # builds an image per fixture


def fixture_project(name: str) -> Project:
    """A Project for fixtures/NAME whose commit is a hash of its files (cache key of its image)."""
    root = FIXTURES / name
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    source = Source(raw=str(root), kind="local", location=str(root))
    return Project(source=source, repo=f"fixtures/{name}", commit=digest.hexdigest()[:16], path=root)


@pytest.fixture(scope="module")
def backend():
    from miner.sandbox.docker import DockerBackend

    return DockerBackend(limits=Limits(timeout=300, memory_mb=1024, processes=256, cpus=1.0), probe_wait=15)


@pytest.fixture(scope="module")
def built(backend, tmp_path_factory):
    """name -> Healthy, built (or reused) once per module."""
    cache = {}

    def get(name: str):
        if name not in cache:
            project = fixture_project(name)
            spec = build_spec(project, backend="docker")
            cache[name] = backend.build(project, spec, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def leftovers(client, session: str | None = None) -> list:
    from miner.sandbox.docker import SESSION

    return client.containers.list(all=True, filters={"label": f"miner.session={session or SESSION}"})


# --- build and layout -----------------------------------------------------------------------


def test_build_is_reused_and_labelled(backend, built, tmp_path):
    healthy = built("docker-cli")
    project = fixture_project("docker-cli")
    again = backend.build(project, build_spec(project, backend="docker"), tmp_path)
    assert again.ref == healthy.ref
    image = backend.client.images.get(healthy.ref)
    assert image.labels["miner"] == "1" and image.labels["miner.kind"] == "healthy"
    assert healthy.info["tag"].startswith(f"miner/healthy-{project.key}:")
    assert healthy.info["dockerized"] is True
    assert healthy.site_packages.startswith("/sandbox/venv/lib/python3")


def test_layout_and_environment(backend, built):
    with backend.fork(built("docker-cli")) as box:
        result = box.run('pwd; echo "$MINER_PROJECT|$MINER_VENV|$MINER_PYTHON|$MINER_ENV_FILE|$MINER_SITE_PACKAGES"; '
                         'ls report.py; test -f /sandbox/home/.bashrc && command -v python')
        lines = result.output.splitlines()
        assert result.exit_code == 0, result.output
        assert lines[0] == "/sandbox/project"
        assert lines[1] == ("/sandbox/project|/sandbox/venv|/sandbox/venv/bin/python|/sandbox/home/.bashrc|"
                            + box.healthy.site_packages)
        assert lines[-1] == "/sandbox/venv/bin/python"
        # the image's WORKDIR now points at /sandbox/project
        assert box.run("readlink /app").output.strip() == "/sandbox/project"


def test_env_file_is_sourced_before_every_command(backend, built):
    with backend.fork(built("docker-cli")) as box:
        box.run("echo 'export GREETING=from-env-file' >> \"$MINER_ENV_FILE\"")
        assert box.run("echo $GREETING").output.strip() == "from-env-file"


def test_every_solver_shell_reads_the_environment_as_root_and_as_another_user(backend, built):
    """A login shell (terminus-2) and `bash -c` (Harbor's exec), from the bare environment of a new
    exec, as root and as another user, and with a HOME a harness reset: the venv's python first on
    PATH and the project's variables from $MINER_ENV_FILE, in each."""
    command = "python -c 'import os, sys; print(sys.prefix, os.environ.get(\"GREETING\"))'"
    with backend.fork(built("docker-cli")) as box:
        box.run("echo \"export GREETING='from rc'\" >> \"$MINER_ENV_FILE\"")
        for user, env in (("root", None), ("nobody", None), ("nobody", {"HOME": "/tmp"})):
            _, out, _ = box._exec(["bash", "-c", view_script(command, 60)], timeout=120, user=user, env=env)
            runs = read_view(out)
            assert [(r.user, r.shell) for r in runs] == [(user, "login"), (user, "bash -c")], out
            for run in runs:
                assert run.exit_code == 0 and run.stdout == "/sandbox/venv from rc\n", (env, run)


def test_run_reports_exit_code_and_interleaved_output(backend, built):
    with backend.fork(built("docker-cli")) as box:
        result = box.run("echo out; echo err >&2; exit 3")
        assert result.exit_code == 3
        # stdout and stderr are separate streams: their relative order is not guaranteed under load
        assert sorted(result.output.splitlines()) == ["err", "out"]
        assert not result.timed_out


def test_timeout_kills_the_command_and_the_sandbox_stays_usable(backend, built):
    with backend.fork(built("docker-cli")) as box:
        start = time.monotonic()
        result = box.run("sleep 60 & sleep 60; echo never", timeout=2)
        assert result.timed_out
        assert time.monotonic() - start < 15
        assert "never" not in result.output
        assert box.run("echo alive").output.strip() == "alive"
        assert "sleep 60" not in box.run("ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '").output


def test_read_and_put(backend, built):
    with backend.fork(built("docker-cli")) as box:
        box.put("/sandbox/home/deep/new.txt", b"hello\x00bytes", mode=0o600)
        assert box.read("/sandbox/home/deep/new.txt") == b"hello\x00bytes"
        assert box.run("stat -c %a /sandbox/home/deep/new.txt").output.strip() == "600"
        assert box.read("/sandbox/project/missing.txt") is None
        assert box.read("/app/report.ini") == (FIXTURES / "docker-cli" / "report.ini").read_bytes()
        with pytest.raises(IsADirectoryError):
            box.read("/sandbox/project")


def test_forks_are_independent(backend, built):
    healthy = built("docker-cli")
    with backend.fork(healthy) as first, backend.fork(healthy) as second:
        first.run("rm report.ini")
        assert first.read("/sandbox/project/report.ini") is None
        assert second.read("/sandbox/project/report.ini") is not None


# --- confinement ------------------------------------------------------------------------------


def test_confinement(backend, built):
    with backend.fork(built("docker-cli")) as box:
        interfaces = box.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").output.split()
        assert interfaces == ["lo"]
        assert box.run("getent hosts pypi.org").exit_code != 0
        # all capabilities dropped: root cannot read a chmod-000 file it does not own... nor its own
        unreadable = box.run("echo secret > /tmp/x && chmod 000 /tmp/x && cat /tmp/x")
        assert unreadable.exit_code != 0 and "secret" not in unreadable.output
        assert box.run("grep CapEff /proc/self/status").output.split()[-1] == "0000000000000000"
        host = box.container.attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert host["Memory"] == 1024 * 1024 * 1024
        assert host["NanoCpus"] == 1_000_000_000
        assert host["PidsLimit"] == 256
        assert "no-new-privileges" in host["SecurityOpt"]


def test_network_only_for_commands_that_ask(backend, built):
    with backend.fork(built("docker-cli")) as box:
        online = box.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", network=True).output.split()
        assert "lo" in online and len(online) == 2
        offline = box.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").output.split()
        assert offline == ["lo"]


# --- cleanup ----------------------------------------------------------------------------------


def test_close_and_exceptions_remove_containers(backend, built):
    healthy = built("docker-cli")
    box = backend.fork(healthy)
    cid = box.container.id
    box.close()
    box.close()  # idempotent
    with pytest.raises(RuntimeError):
        with backend.fork(healthy) as other:
            cid2 = other.container.id
            raise RuntimeError("a step failed")
    names = {c.id for c in backend.client.containers.list(all=True)}
    assert cid not in names and cid2 not in names
    assert leftovers(backend.client) == []


def test_sigterm_and_exit_remove_containers_of_the_process(built, tmp_path):
    healthy = built("docker-cli")
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, pickle
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from miner.sandbox.docker import DockerBackend, SESSION
        from miner.models import Project
        from miner.sandbox.base import Healthy
        healthy = pickle.loads(bytes.fromhex(sys.argv[1]))
        box = DockerBackend().fork(healthy)
        print(SESSION, flush=True)
        if sys.argv[2] == "term":
            os.kill(os.getpid(), signal.SIGTERM)
        # "exit": leave without close()
    """))
    import pickle

    client = images.docker_client()
    for how in ("term", "exit"):
        done = subprocess.run([sys.executable, str(script), pickle.dumps(healthy).hex(), how],
                              capture_output=True, text=True, timeout=120)
        session = done.stdout.strip().splitlines()[0]
        assert leftovers(client, session) == [], f"{how}: containers left behind"


def test_stale_containers_of_dead_processes_are_pruned(backend, built):
    from miner.sandbox.docker import prune_stale

    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid now belongs to no process
    labels = images.labels("fork", session="stale-test", pid=str(dead.pid), host=os.uname().nodename)
    container = backend.client.containers.create(built("docker-cli").ref, entrypoint=["true"], labels=labels)
    report = prune_stale(backend.client)
    assert container.short_id in report.containers
    assert leftovers(backend.client, "stale-test") == []


# --- derived probes ---------------------------------------------------------------------------


def test_cli_probe_is_recorded_and_stable(backend, built):
    from miner.sandbox.docker import docker_probes, run_docker_probes

    with backend.fork(built("docker-cli")) as box:
        probes = docker_probes(box)
        assert [p.id for p in probes] == ["probe::cmd"]
        assert probes[0].expected_exit == 0 and probes[0].argv[:2] == ["python3", "report.py"]
        results = run_docker_probes(box, probes)
        assert results["probe::cmd"].outcome == "passed"
        box.run("rm data/sales.csv")
        assert run_docker_probes(box, probes)["probe::cmd"].outcome == "failed"
    with backend.fork(built("docker-cli")) as box:
        assert docker_probes(box) == probes


def test_service_probes(backend, built):
    from miner.sandbox.docker import docker_probes, run_docker_probes

    with backend.fork(built("docker-service")) as box:
        probes = docker_probes(box)
        assert [p.id for p in probes] == ["probe::healthcheck", "probe::http::8000/"]
        http = probes[1]
        assert http.kind == "http" and http.expected_exit == 200
        import json

        assert http.expected_digest == hashlib.sha256(
            json.dumps({"greeting": "Hello, world!", "six": "1.17.0"}).encode()).hexdigest()
        results = run_docker_probes(box, probes)
        assert {k: v.outcome for k, v in results.items()} == {"probe::healthcheck": "passed",
                                                             "probe::http::8000/": "passed"}
        # the service was stopped after probing: nothing listens any more
        assert box.run("(exec 3<>/dev/tcp/127.0.0.1/8000)").exit_code != 0


def test_local_style_projects_get_no_docker_probes(backend, tmp_path):
    from miner.sandbox.docker import docker_probes

    root = tmp_path / "plain"
    root.mkdir()
    (root / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo="plain-test-project",
                      commit="v1", path=root)
    healthy = backend.build(project, build_spec(project, backend="docker"), tmp_path / "work")
    assert healthy.info["dockerized"] is False
    assert backend.client.images.get(healthy.ref).labels["miner.base"] in (images.BOOTSTRAP_TAG, images.DEFAULT_BASE_IMAGE,
                                                                           os.environ.get("MINER_BASE_IMAGE"))
    with backend.fork(healthy) as box:
        assert docker_probes(box) == []
        assert box.run("readlink -f /sandbox/venv/bin/python").exit_code == 0
        suite = run_suite(box, "python -m pytest")
        assert suite.outcomes() == {"test_one.py::test_one": "passed"}
    # discard drops the tag it was given (here a second tag, so the cached image stays for later runs)
    copy_tag = "miner/discard-test:latest"
    backend.client.images.get(healthy.ref).tag(copy_tag)
    backend.discard(healthy.__class__(backend="docker", ref=healthy.ref, project=project, info={"tag": copy_tag}))
    assert gateway.find_image(backend.client, copy_tag) is None
    assert gateway.find_image(backend.client, healthy.info["tag"]) is not None


# --- system and service inversions ----------------------------------------------------------


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


@pytest.fixture(scope="module")
def observed(backend, built):
    """fixture name -> what the backend observed beneath it (Backend.observe)."""
    return {name: backend.observe(built(name)) for name in ("docker-cli", "docker-service")}


@pytest.fixture(scope="module")
def targets(observed):
    from miner.inverters.system import service_targets, system_targets

    service_tests = [p.relative_to(FIXTURES / "docker-service").as_posix()
                     for p in (FIXTURES / "docker-service" / "tests").glob("test_*.py")]
    return {"docker-cli": system_targets(observed["docker-cli"]),
            "docker-service": service_targets(observed["docker-service"], FIXTURES / "docker-service", service_tests)}


def test_observation_holds_facts_and_versions_not_contents(observed):
    cli, service = observed["docker-cli"], observed["docker-service"]
    sqlite = cli["libraries"]["libsqlite3.so.0"]
    assert sqlite["package"].startswith("libsqlite3-0") and cli["packages"][sqlite["package"]]["version"]
    assert cli["system"]["locale"]["package"] == "libc-bin" and cli["system"]["locale"]["version"]
    assert cli["zone_packages"]["Europe/Paris"]["package"] == "tzdata"
    assert cli["tools"]["apt-get"] and "libapt-pkg.so.6.0" in cli["recovery_libraries"]
    assert cli["service"] is None
    assert service["service"]["ports"] == [8000]
    message = next(e for e in service["service"]["config"] if e["key"] == "message")
    assert message == {"path": "service.ini", "line": 6, "key": "message", "value": "Hello", "answered": True}
    six = next(e for e in service["service"]["imports"] if e["module"] == "six")
    assert six["python"]["dist"] == "six" and six["python"]["version"] == "1.17.0"
    assert six["python"]["installer"] == "pip" and six["python"]["pip"]
    text = json.dumps(observed)
    assert "b64" not in text and "import sqlite3" not in text  # names and versions, never contents


def pick(targets: list[Target], kind: str, name: str) -> Target:
    for target in targets:
        if target.kind == kind and target.name == name:
            return target
    raise AssertionError(f"no {kind} target {name}: {[t.key for t in targets]}")


def state(box, probes) -> dict[str, str]:
    from miner.sandbox.docker import run_docker_probes

    outcomes = run_suite(box, "python -m pytest", timeout=300).outcomes()
    outcomes.update({k: v.outcome for k, v in run_docker_probes(box, probes).items()})
    return outcomes


CASES = [
    ("system/syslib-remove", "docker-cli", "syslib", "libsqlite3.so.0", "tests/test_report.py::test_totals_per_region"),
    ("system/syslib-corrupt", "docker-cli", "syslib", "libsqlite3.so.0", "tests/test_report.py::test_totals_per_region"),
    ("system/debpkg-remove", "docker-cli", "debpkg", "libsqlite3-0", "tests/test_report.py::test_totals_per_region"),
    ("system/ld-library-path", "docker-cli", "syslib", "libsqlite3.so.0", "tests/test_report.py::test_totals_per_region"),
    ("system/ld-so-conf", "docker-cli", "syslib", "libsqlite3.so.0", "tests/test_report.py::test_totals_per_region"),
    ("system/ca-bundle-empty", "docker-cli", "system", "ca-bundle", "tests/test_report.py::test_trust_store_has_authorities"),
    ("system/locale-removed", "docker-cli", "system", "locale:C.utf8", "tests/test_report.py::test_locale_is_available"),
    ("system/zoneinfo-removed", "docker-cli", "system", "zoneinfo:Europe/Paris",
     "tests/test_report.py::test_local_time_uses_the_configured_zone"),
    ("system/interpreter-symlink", "docker-cli", "system", "python-symlink", "probe::cmd"),
    ("system/interpreter-symlink", "docker-cli", "system", "venv-python", "tests/test_report.py::test_config_is_read"),
    ("service/port-changed", "docker-service", "service", "port:service.ini:port", "probe::http::8000/"),
    ("service/config-value", "docker-service", "service", "value:service.ini:message", "probe::http::8000/"),
    ("service/dependency-removed", "docker-service", "service", "dependency:six", "probe::healthcheck"),
]


FILE_OF = {  # the file a target's fix must restore byte for byte (an interpreter symlink has none)
    "syslib": lambda t: t.path,
    "system": lambda t: t.path if t.attrs["role"] != "interpreter-symlink" else None,
    "service": lambda t: t.path if t.path.startswith("/") else f"/sandbox/project/{t.path}",
}


@pytest.mark.parametrize("type_id,fixture,kind,name,must_fail", CASES, ids=[f"{c[0]}:{c[3]}" for c in CASES])
def test_break_fails_and_fix_restores(backend, built, catalogue, targets, type_id, fixture, kind, name, must_fail):
    """Each system and service type on a real container: the break fails its tests, the fix (with
    the network its type declares: the Debian archive, the package index) restores every outcome
    and the broken file byte for byte, from the evidence alone (no fix embeds an original)."""
    from miner.sandbox.docker import docker_probes

    itype = catalogue[type_id]
    assert itype.backends == ["docker"]
    target = pick(targets[fixture], kind, name)
    inversion = render(itype, target, {})
    assert "b64" not in inversion.fix_script and len(inversion.fix_script) < 2000
    path = FILE_OF.get(kind, lambda t: None)(target)
    digest = f"sha256sum {path} | cut -d' ' -f1" if path else "true"
    with backend.fork(built(fixture)) as box:
        probes = docker_probes(box)
        healthy = state(box, probes)
        assert set(healthy.values()) == {"passed"}, healthy
        before = box.run(digest).output
        broke = box.run(inversion.break_script)
        assert broke.exit_code == 0, broke.output
        broken = state(box, probes)
        assert broken.get(must_fail, "missing") != "passed", broken
        if not itype.whole_suite:
            assert "passed" in broken.values(), "the break should leave something passing"
        fixed = box.run(inversion.fix_script, network=itype.network.get("fix", False), timeout=600)
        assert fixed.exit_code == 0, fixed.output
        assert state(box, probes) == healthy
        assert box.run(digest).output == before


@pytest.mark.parametrize("kind,name", [("syslib", "libsqlite3.so.0"), ("system", "zoneinfo:Europe/Paris")])
def test_removed_originals_leave_no_copy_in_the_filesystem(backend, built, catalogue, targets, kind, name):
    target = pick(targets["docker-cli"], kind, name)
    type_id = "system/syslib-remove" if kind == "syslib" else "system/zoneinfo-removed"
    inversion = render(catalogue[type_id], target, {})
    with backend.fork(built("docker-cli")) as box:
        original, size = box.run(f"sha256sum {target.path}; stat -c %s {target.path}").output.split()[::2]
        assert box.run(inversion.break_script).exit_code == 0
        copies = box.run(f"find / -xdev -type f -size {size}c -exec sha256sum {{}} + 2>/dev/null | grep {original} || true")
        assert copies.output.strip() == ""


def test_debpkg_removal_is_recorded_by_dpkg_and_restored_from_the_archive(backend, built, catalogue, targets):
    target = pick(targets["docker-cli"], "debpkg", "libsqlite3-0")
    inversion = render(catalogue["system/debpkg-remove"], target, {})
    with backend.fork(built("docker-cli")) as box:
        status = "dpkg-query -W -f '${Status} ${Version}' libsqlite3-0"
        before = box.run(status).output
        assert box.run(inversion.break_script).exit_code == 0
        assert "install ok installed" not in box.run(status).output
        offline = box.run(inversion.fix_script)  # nothing in the container holds the package
        assert offline.exit_code != 0 and "install ok installed" not in box.run(status).output
        assert box.run(inversion.fix_script, network=True, timeout=600).exit_code == 0
        assert box.run(status).output == before
        assert box.run("dpkg --verify libsqlite3-0").output.strip() == ""  # every file as the package has it


def test_a_system_break_that_keeps_a_copy_under_var_is_answer_leaked(backend, built, catalogue, targets):
    """Rule 6 on Docker scans what the backend declares a break may touch: the whole container (not
    just /sandbox), so a library moved aside under /var is found and the candidate is rejected."""
    from miner.healthy import measure_project
    from miner.models import Inversion
    from miner.validate import Context, healthy_manifest, validate

    assert backend.capabilities.scan_roots == ("/",) and "/proc" in backend.capabilities.scan_exclude
    healthy = built("docker-cli")
    project = healthy.project
    state = measure_project(backend, healthy, project, build_spec(project, backend="docker"), 300)
    ctx = Context(backend, healthy, state, healthy_manifest(backend, healthy), timeout=300,
                  extra=backend.run_derived_probes)
    assert any(path.startswith("/usr/lib/") for path in ctx.manifest)
    target = pick(targets["docker-cli"], "syslib", "libsqlite3.so.0")
    moved = "/var/backups/libsqlite3.keep"
    real = render(catalogue["system/syslib-remove"], target, {})
    inversion = Inversion(type_id="system/syslib-remove", family="system", target=target, network_fix=True,
                          break_script=f"set -e\nmkdir -p /var/backups\nmv {target.path} {moved}\n",
                          fix_script=real.fix_script, evidence=real.evidence,
                          summary="moves the library aside instead of deleting it")
    candidate = validate(ctx, inversion)
    assert (candidate.status, candidate.rule) == ("rejected", "answer-leaked"), (candidate.rule, candidate.detail)
    assert moved in candidate.detail and target.path in candidate.detail


# --- broken snapshots ---------------------------------------------------------------------------


def test_broken_image_rebuilds_deterministically_and_is_small(backend, built, catalogue, targets):
    from miner.sandbox.docker import docker_probes, run_docker_probes

    healthy = built("docker-cli")
    target = pick(targets["docker-cli"], "syslib", "libsqlite3.so.0")
    inversion = render(catalogue["system/syslib-remove"], target, {})
    broken = backend.build_broken(healthy, inversion.break_script)
    try:
        assert broken.unique_bytes < 64 * 1024  # a deletion layer: whiteouts, no copy
        again = backend.build_broken(healthy, inversion.break_script)
        assert again.id == broken.id
        image = backend.client.images.get(broken.id)
        assert image.labels["miner.kind"] == "broken"
        with backend.fork(healthy) as box:
            probes = docker_probes(box)
        with backend.fork_image(healthy, broken.id) as box:
            assert box.read(target.path) is None
            assert box.read("/tmp/break.sh") is None
            assert run_docker_probes(box, probes)["probe::cmd"].outcome == "failed"
            assert box.run(inversion.fix_script, network=True, timeout=600).exit_code == 0
            assert run_docker_probes(box, probes)["probe::cmd"].outcome == "passed"
    finally:
        backend.client.images.remove(broken.tag, force=True)


def test_broken_image_with_a_failing_break_is_a_build_error(backend, built):
    with pytest.raises(BuildError) as err:
        backend.build_broken(built("docker-cli"), "echo about to fail; exit 7\n")
    assert "about to fail" in err.value.log


# --- errors -------------------------------------------------------------------------------------


def test_no_engine_is_one_clear_message(monkeypatch):
    from miner.sandbox.docker import DockerBackend

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    with pytest.raises(BackendUnavailable) as err:
        DockerBackend()
    message = str(err.value)
    assert "no Docker engine answers" in message and "--backend local" in message and "dockerd" in message


def test_missing_base_image_names_bootstrap(backend, tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "test_x.py").write_text("def test_x():\n    pass\n")
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo="x", commit="1", path=root)
    from miner.sandbox.docker import DockerBackend

    other = DockerBackend(base_image="miner/no-such-base:0", client=backend.client)
    with pytest.raises(BackendUnavailable) as err:
        other.build(project, build_spec(project, backend="docker"), tmp_path / "w")
    assert "miner images bootstrap" in str(err.value)


def test_bad_dockerfile_is_a_build_error_with_the_log_tail(backend, tmp_path):
    root = tmp_path / "broken-docker"
    root.mkdir()
    (root / "Dockerfile").write_text(
        "ARG BASE_IMAGE=miner/base:bookworm\nFROM ${BASE_IMAGE}\nLABEL miner=1\n"
        "RUN echo preparing-step\nRUN echo the-build-breaks-here && false\n")
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo="bad-dockerfile-test",
                      commit=str(time.time()), path=root)
    before = {i.id for i in backend.client.images.list(all=True)}
    with pytest.raises(BuildError) as err:
        backend.build(project, build_spec(project, backend="docker"), tmp_path / "w")
    assert "the Dockerfile of bad-dockerfile-test" in str(err.value)
    assert "the-build-breaks-here" in err.value.log
    after = {i.id for i in backend.client.images.list(all=True)}
    new = [backend.client.images.get(i) for i in after - before]
    assert [i.id for i in new if not i.tags] == [], "the failed build left step images behind"


def test_git_history_never_enters_the_image(backend, tmp_path):
    from conftest import copy_fixture, make_git_repo

    folder = copy_fixture("docker-cli", tmp_path / "docker-cli")
    repo = make_git_repo(folder)
    project = Project(source=Source(raw=str(folder), kind="git", location=str(folder)), repo=str(folder),
                      commit=repo.head.commit.hexsha, path=folder)
    healthy = backend.build(project, build_spec(project, backend="docker"), tmp_path / "work")
    try:
        with backend.fork(healthy) as box:
            assert box.read("/sandbox/project/report.py") is not None
            assert box.run("find / -xdev -name .git -print 2>/dev/null | head -1").output.strip() == ""
    finally:
        backend.discard(healthy)
