"""miner.sandbox.docker.images and .layout: mirrors, pip forwarding, the image layout (build script,
healthy stage, broken-image Dockerfile), base image resolution, listing and pruning against a
real engine (tests marked `docker`: see `need` in conftest.py)."""

from __future__ import annotations

import os
import uuid

import pytest
from conftest import need

from miner.sandbox.base import BackendUnavailable, BuildError, BuildSpec
from miner.sandbox.docker import gateway, images, layout

# --- without an engine --------------------------------------------------------------------------


def test_debian_mirror_reads_deb822_sources_first(tmp_path, monkeypatch):
    monkeypatch.delenv("MINER_DEBIAN_MIRROR", raising=False)
    (tmp_path / "etc/apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n")
    assert images.debian_mirror(tmp_path) == "http://mirror.example/debian"


def test_debian_mirror_reads_sources_list(tmp_path, monkeypatch):
    monkeypatch.delenv("MINER_DEBIAN_MIRROR", raising=False)
    (tmp_path / "etc/apt").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text(
        "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://legacy.example/debian bookworm main\n")
    assert images.debian_mirror(tmp_path) == "http://legacy.example/debian"
    monkeypatch.setenv("MINER_DEBIAN_MIRROR", "http://override.example/debian")
    assert images.debian_mirror(tmp_path) == "http://override.example/debian"


def test_host_pip_settings_forward_remote_settings_only(tmp_path, monkeypatch):
    cert = tmp_path / "proxy-ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple https://user:token@private.example/simple "
                                             "https://extra.example/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_TRUSTED_HOST", "mirror.example")
    monkeypatch.setenv("PIP_CERT", str(cert))
    settings = images.host_pip_settings()
    assert settings.index_url == "https://mirror.example/simple"
    assert settings.extra_index_urls == ["https://extra.example/simple"]
    assert settings.find_links == []
    assert settings.cert == cert
    dropped = "\n".join(settings.dropped)
    assert "file:///opt/pypi/simple" in dropped and "/opt/wheels" in dropped
    assert "credentials are never baked" in dropped and "token" not in dropped
    env = settings.env()
    assert env["PIP_CERT"] == images.HOST_CA_PATH and env["PIP_TRUSTED_HOST"] == "mirror.example"
    assert "token" not in repr(env)
    context = tmp_path / "ctx"
    context.mkdir()
    source = images.copy_host_ca(settings, context)
    assert (context / source).read_bytes() == cert.read_bytes()
    stage = layout.healthy_stage("base:1", env=layout.image_env("", False) | env, project_source="project/",
                                 dockerized=False, ca_source=source).splitlines()
    assert stage[:3] == ["FROM base:1", "USER root", f"COPY {layout.HOST_CA_NAME} {layout.HOST_CA_PATH}"]
    assert stage[3].startswith("ENV ") and 'PIP_INDEX_URL="https://mirror.example/simple"' in "\n".join(stage)


def test_break_dockerfile_is_one_layer_that_removes_the_script():
    text = layout.break_dockerfile("miner/healthy-abc:1", "break.sh")
    assert text.splitlines() == [
        "FROM miner/healthy-abc:1",
        "USER root",
        "COPY break.sh /tmp/break.sh",
        "RUN bash -c 'cd /sandbox/project && bash /tmp/break.sh' && rm -f /tmp/break.sh",
    ]
    inline = layout.break_dockerfile("healthy", script="echo broken\n").splitlines()
    assert len([line for line in inline if line.startswith("RUN ")]) == 1  # written and removed in one layer
    assert inline[-1].endswith("rm -f /tmp/break.sh")


def test_layout_is_one_text_for_the_backend_and_the_exporter():
    """The healthy stage holds the sandbox layout: MINER_* variables, the venv first on PATH, the
    project where build.sh expects it; a Dockerized project's image keeps its locale and WORKDIR."""
    env = layout.image_env("/sandbox/venv/lib/python3.11/site-packages", dockerized=False)
    assert env["MINER_PROJECT"] == "/sandbox/project" and env["MINER_ENV_FILE"] == "/sandbox/home/.bashrc"
    assert env["PATH"].startswith("/sandbox/venv/bin:") and env["LANG"] == "C.UTF-8"
    assert env["HOME"] == "/sandbox/home" and env["BASH_ENV"] == "/sandbox/home/.bashrc"  # `bash -c` reads it
    assert "LANG" not in layout.image_env("", dockerized=True)
    generated = layout.healthy_stage("b", env=env, project_source="project.tar.gz", dockerized=False, name="healthy")
    assert "ADD project.tar.gz /sandbox/\n" in generated and generated.endswith("WORKDIR /sandbox/project\n")
    assert "RUN bash /sandbox/.build/build.sh && rm -rf /sandbox/.build\n" in generated
    dockerized = layout.healthy_stage("p", env=env, project_source="project/", dockerized=True)
    assert "COPY project/ /tmp/miner-project/" in dockerized and "WORKDIR" not in dockerized
    files = layout.build_files(BuildSpec(python="python3", install_script="pip install .\n", env={"A": "b c"}),
                               dockerized=False, constraints="six==1.16.0\n")
    assert set(files) == {"build.sh", "install.sh", "bashrc", "profile", "shell-hook.sh", "constraints.txt"}
    assert "export A='b c'" in files["bashrc"] and files["constraints.txt"] == "six==1.16.0\n"
    assert ". \"$HOME/.bashrc\"" in files["profile"]
    assert "install -m 0644 /sandbox/.build/bashrc /sandbox/home/.bashrc" in files["build.sh"]
    assert "/etc/profile.d/sandbox-env.sh" in files["build.sh"] and ">> /etc/bash.bashrc" in files["build.sh"]
    assert "rm -rf /sandbox/project/.git" in files["build.sh"] and "--system-site-packages" not in files["build.sh"]
    assert "--system-site-packages" in layout.build_script("python3", dockerized=True)
    inline = layout.healthy_stage("b", env=env, project_source=".", dockerized=False, build_inline=files)
    assert "COPY . /sandbox/project/" in inline and "COPY build/" not in inline and "base64 -d" in inline


def test_image_facts():
    config = {"Entrypoint": ["python3"], "Cmd": ["app.py"], "ExposedPorts": {"8000/tcp": {}, "53/udp": {}},
              "Healthcheck": {"Test": ["CMD-SHELL", "true"]}, "WorkingDir": "/app", "Env": ["APP_MODE=prod"]}
    assert layout.image_facts(config) == {"command": ["python3", "app.py"], "workdir": "/app", "user": "root",
                                          "ports": [8000], "healthcheck": ["CMD-SHELL", "true"],
                                          "env": {"APP_MODE": "prod"}}
    assert layout.image_facts({"Healthcheck": {"Test": ["NONE"]}})["healthcheck"] == []


def test_configured_base_image(monkeypatch):
    monkeypatch.delenv("MINER_BASE_IMAGE", raising=False)
    assert images.configured_base_image() == (images.DEFAULT_BASE_IMAGE, False)
    monkeypatch.setenv("MINER_BASE_IMAGE", "corp/python:3.11")
    assert images.configured_base_image() == ("corp/python:3.11", True)
    assert images.configured_base_image("mine:1") == ("mine:1", True)


def test_no_engine_message(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(BackendUnavailable, match="--backend local"):
        images.docker_client(timeout=5)


# --- with an engine -----------------------------------------------------------------------------

try:
    CLIENT = images.docker_client()
    NO_ENGINE = None
except BackendUnavailable as exc:
    CLIENT, NO_ENGINE = None, str(exc)
needs_engine = pytest.mark.docker


def _bootstrap_present() -> bool:
    return CLIENT is not None and gateway.find_image(CLIENT, images.BOOTSTRAP_TAG) is not None


@pytest.fixture
def fake_healthy():
    """A tiny image with the sandbox layout, labelled for this test only."""
    need("docker", None if _bootstrap_present() else f"{images.BOOTSTRAP_TAG} is missing: run `miner images bootstrap`")
    mark = uuid.uuid4().hex[:8]
    image = gateway.build_image(
        CLIENT,
        dockerfile_text=f"FROM {images.BOOTSTRAP_TAG}\nRUN mkdir -p /sandbox/project && touch /sandbox/env.sh"
                        f" && echo {mark} > /sandbox/project/data.txt\n",
        tag=f"miner/test-healthy-{mark}:latest",
        image_labels=images.labels("healthy", test=mark),
    )
    yield image, mark
    images.prune(CLIENT, healthy=True, match={"miner.test": mark})
    assert gateway.find_image(CLIENT, image.id) is None


@needs_engine
def test_broken_image_list_and_prune(fake_healthy):
    image, mark = fake_healthy
    broken = images.build_broken_image(CLIENT, image.id, "rm data.txt\n", tag=f"miner/test-broken-{mark}:latest")
    assert 0 <= broken.unique_bytes < 4096
    assert images.build_broken_image(CLIENT, image.id, "rm data.txt\n", tag=broken.tag).id == broken.id
    CLIENT.images.get(broken.id).tag(f"miner/test-broken-{mark}", "labelled")  # same image, two tags
    listed = {tag: info.kind for info in images.list_images(CLIENT) for tag in info.tags}
    assert listed[f"miner/test-healthy-{mark}:latest"] == "healthy"
    assert listed[broken.tag] == "broken"
    # the broken image carries the label of its healthy image, not the test mark: prune by its tag
    report = images.prune(CLIENT, match={"miner.healthy": image.id})
    assert gateway.find_image(CLIENT, broken.tag) is None
    assert gateway.find_image(CLIENT, image.id) is not None  # healthy kept without --healthy
    assert report.images


@needs_engine
def test_prune_removes_labelled_containers(fake_healthy):
    image, mark = fake_healthy
    container = CLIENT.containers.create(image.id, command=["true"], labels=images.labels("fork", test=mark))
    report = images.prune(CLIENT, match={"miner.test": mark})
    assert container.short_id in report.containers
    assert CLIENT.containers.list(all=True, filters={"label": f"miner.test={mark}"}) == []


@needs_engine
def test_failing_build_is_a_build_error_without_leftovers(fake_healthy):
    image, mark = fake_healthy
    before = {i.id for i in CLIENT.images.list(all=True)}
    with pytest.raises(BuildError) as err:
        gateway.build_image(CLIENT, dockerfile_text=f"FROM {image.id}\nLABEL miner=1 miner.test={mark}\n"
                                                   "RUN echo step-one\nRUN echo it-fails-here; exit 3\n")
    assert "it-fails-here" in err.value.log
    assert "returned a non-zero code: 3" in str(err.value)
    assert {i.id for i in CLIENT.images.list(all=True)} - before == set()


@needs_engine
def test_resolve_base_image(monkeypatch):
    monkeypatch.delenv("MINER_BASE_IMAGE", raising=False)
    with pytest.raises(BackendUnavailable, match="miner images bootstrap"):
        images.resolve_base_image(CLIENT, "miner/no-such-image:0")
    if gateway.find_image(CLIENT, images.DEFAULT_BASE_IMAGE) is None and _bootstrap_present():
        # the default cannot be pulled without a registry: the bootstrap image stands in
        assert images.resolve_base_image(CLIENT) == images.BOOTSTRAP_TAG
    monkeypatch.setenv("MINER_BASE_IMAGE", "miner/no-such-image:0")
    with pytest.raises(BackendUnavailable, match="miner/no-such-image:0"):
        images.resolve_base_image(CLIENT)


def _check_bootstrapped(tag: str) -> None:
    out = CLIENT.containers.run(tag, ["python3", "-c", "import venv, ssl; print('ok')"], remove=True)
    assert out.strip() == b"ok"
    assert CLIENT.images.get(tag).labels["miner.kind"] == "base"
    assert CLIENT.containers.run(tag, ["sh", "-c", "ls /var/cache/apt/archives/*.deb 2>/dev/null | wc -l"],
                                 remove=True).strip() == b"0"


@needs_engine
@pytest.mark.slow
def test_bootstrap_base_builds_a_python_image():
    """`miner images bootstrap` (debootstrap, no registry) gives a base image with Python, labelled,
    with no package archives left in it. Where the base image exists (CI builds it with that very
    command in .ci/docker-setup.sh), that image is checked; MINER_TEST_BOOTSTRAP=1 bootstraps a
    fresh one (minutes)."""
    if os.environ.get("MINER_TEST_BOOTSTRAP") != "1" and _bootstrap_present():
        _check_bootstrapped(images.BOOTSTRAP_TAG)
        return
    tag = "miner/test-bootstrap:bookworm"
    try:
        images.bootstrap_base(CLIENT, tag)
        _check_bootstrapped(tag)
    finally:
        if gateway.find_image(CLIENT, tag):
            CLIENT.images.remove(tag, force=True)


def test_images_cli_lists(monkeypatch):
    from click.testing import CliRunner

    from miner.cli import main

    if NO_ENGINE:
        result = CliRunner().invoke(main, ["images", "list"], env={"DOCKER_HOST": os.environ.get("DOCKER_HOST", "")})
        assert result.exit_code != 0 and "--backend local" in result.output
        return
    result = CliRunner().invoke(main, ["images", "list", "--json"])
    assert result.exit_code == 0, result.output
    import json

    rows = json.loads(result.output)
    assert all({"id", "tags", "kind", "size"} <= set(row) for row in rows)
    if _bootstrap_present():
        assert any(images.BOOTSTRAP_TAG in row["tags"] for row in rows)
    bad = CliRunner().invoke(main, ["images", "list"], env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert bad.exit_code != 0 and "no Docker engine answers" in bad.output
