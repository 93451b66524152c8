"""The rewrite of a Dockerized project's own Dockerfile for export (miner.export.dockerized):
no Docker needed; the exported tasks themselves are built and checked in test_pipeline_docker.py."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from miner.export.archive import project_tarball
from miner.export.dockerized import (
    CONTEXT_STAGE,
    PROJECT_STAGE,
    DockerfileError,
    context_tarball,
    image_config,
    logical_lines,
    rewrite,
)

SERVICE = """\
# a service
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
WORKDIR /app
COPY . /app
COPY --chown=1000 requirements.txt ./conf/*.ini /etc/app/
RUN pip install -r requirements.txt \\
    # a comment inside the instruction
    && rm -rf /root/.cache
ADD https://example.org/x.tar.gz /opt/
EXPOSE 8000
CMD ["python3", "server.py"]
"""


def test_logical_lines_join_continuations_and_drop_comments() -> None:
    lines = logical_lines(SERVICE)
    assert lines[0] == "ARG BASE_IMAGE=python:3.11-slim"
    assert "RUN pip install -r requirements.txt && rm -rf /root/.cache" in lines
    assert not any(line.startswith("#") for line in lines)


def test_copies_read_the_exported_context_and_the_base_is_the_exports() -> None:
    text, last = rewrite(SERVICE, "miner/base:bookworm", prefix="environment/")
    lines = text.splitlines()
    assert last == PROJECT_STAGE
    # global ARG first (it must precede every FROM), then the context stage, then the project's stages
    assert lines[:3] == ["ARG BASE_IMAGE=miner/base:bookworm", f"FROM scratch AS {CONTEXT_STAGE}",
                         "ADD environment/project.tar.gz /"]
    assert f"FROM ${{BASE_IMAGE}} AS {PROJECT_STAGE}" in lines
    assert f'COPY --from={CONTEXT_STAGE} ["/project", "/app"]' in lines
    assert f'COPY --from={CONTEXT_STAGE} --chown=1000 ["/project/requirements.txt", "/project/conf/*.ini", "/etc/app/"]' in lines
    assert "ADD https://example.org/x.tar.gz /opt/" in lines  # remote sources stay as they are
    assert lines[-1] == 'CMD ["python3", "server.py"]'


def test_a_named_last_stage_keeps_its_name_and_earlier_stages_are_untouched() -> None:
    text, last = rewrite("FROM base AS build\nCOPY src/ /src/\nFROM base AS final\n"
                         "COPY --from=build /src/ /app/\n", "b")
    assert last == "final"
    assert f'COPY --from={CONTEXT_STAGE} ["/project/src/", "/src/"]' in text
    assert "COPY --from=build /src/ /app/" in text


def test_a_checkout_context_keeps_the_copies() -> None:
    text, _ = rewrite(SERVICE, "b", checkout=True)
    assert CONTEXT_STAGE not in text and "COPY . /app" in text


@pytest.mark.parametrize("dockerfile, why", [
    ("RUN true\n", "no FROM"),
    ("FROM b\nCOPY ../secret /x\n", "leaves the build context"),
    ("FROM b\nADD vendor.tar.gz /opt/\n", "local archive"),
])
def test_what_cannot_be_rewritten_is_named(dockerfile: str, why: str) -> None:
    with pytest.raises(DockerfileError, match=why):
        rewrite(dockerfile, "b")


def tar_names(data: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return set(tar.getnames())


def test_the_context_honours_the_dockerignore(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "draft.txt").write_text("x\n")
    (tmp_path / "secret.env").write_text("TOKEN=1\n")
    (tmp_path / ".dockerignore").write_text("# local files\nnotes\n*.env\n")
    names = tar_names(context_tarball(tmp_path, project_tarball(tmp_path)))
    assert "project/app.py" in names and "project/.dockerignore" in names
    assert not {"project/notes", "project/notes/draft.txt", "project/secret.env"} & names
    (tmp_path / ".dockerignore").unlink()
    assert "project/secret.env" in tar_names(context_tarball(tmp_path, project_tarball(tmp_path)))


def test_image_config_keeps_what_the_probes_need() -> None:
    attrs = {"Config": {"Cmd": ["python3", "server.py"], "Entrypoint": None, "WorkingDir": "/app", "User": "",
                        "ExposedPorts": {"8000/tcp": {}, "53/udp": {}},
                        "Healthcheck": {"Test": ["CMD-SHELL", "curl -f localhost:8000"]},
                        "Env": ["PATH=/usr/bin:/bin", "APP_CONFIG=/app/conf=prod.ini"]}}
    assert image_config(attrs) == {"command": ["python3", "server.py"], "workdir": "/app", "user": "root",
                                   "ports": [8000], "healthcheck": ["CMD-SHELL", "curl -f localhost:8000"],
                                   "env": {"PATH": "/usr/bin:/bin", "APP_CONFIG": "/app/conf=prod.ini"}}
