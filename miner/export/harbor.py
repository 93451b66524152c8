"""Harbor (Terminal-Bench 2.0) task folders.

    <out>/<name>/
      task.toml             [task] ORG/NAME, [metadata], [verifier]/[agent] timeouts, [environment]
      instruction.md        the symptom-based instruction (no answer in it)
      environment/          Dockerfile + build context (see miner.export.common), and a
                            docker-compose.yaml dropping every capability of the container
      tests/test.sh         writes /logs/verifier/reward.txt: 0 first, 1 only when verifier.py agrees
      tests/...             verifier.py, verifier_pytest.py, probe.py, spec.json, manifest.json, originals/
      solution/solve.sh     the validated fix script

Registered as the format "harbor" (miner.export.registry).
"""

from __future__ import annotations

import tomli_w

from miner import __version__
from miner.export.archive import project_tarball
from miner.export.common import (
    CATEGORY,
    ExportOptions,
    ManifestCache,
    PipForwarding,
    TaskSource,
    agent_timeout,
    compose_override,
    dockerfile,
    environment_files,
    healthy_stage,
    instruction,
    pytest_args,
    solve_script,
    test_script,
    verifier_files,
    verifier_timeout,
)
from miner.export.registry import FolderFormat, register

SCHEMA_VERSION = "1.1"


def task_name(ts: TaskSource, options: ExportOptions) -> str:
    return f"{options.org}/{ts.name}"


def task_config(ts: TaskSource, options: ExportOptions) -> dict:
    """The task.toml table: Harbor's TaskConfig fields plus free-form metadata."""
    task = ts.task
    project = ts.project.source.name
    return {
        "schema_version": SCHEMA_VERSION,
        "task": {
            "name": task_name(ts, options),
            "description": f"Repair the broken Python environment of {project} so its tests pass again "
                           f"({task.family} inversion, {task.difficulty}).",
            "keywords": ["environment-repair", task.family, "python"],
        },
        "metadata": {
            "author_name": "miner",
            "difficulty": task.difficulty,
            "category": CATEGORY,
            "tags": ["environment-repair", task.family, task.type_id, "python"],
            "inversion_type": task.type_id,
            "inversion_family": task.family,
            "inversion_category": task.category,
            "instruction_variant": ts.variant,
            "compound_parts": [f"{p.type_id} on {p.target.key}" for p in task.parts],
            "repository": task.repo,
            "commit": task.commit,
            "source": task.source.raw,
            "target": task.target.key,
            "difficulty_score": task.difficulty_score,
            "f2p_count": len(task.f2p),
            "p2p_count": len(task.p2p),
            "suite_seconds": round(task.suite_seconds, 3),
            "miner_version": __version__,
            "miner_task_id": task.id,
            "mined_with_backend": task.backend,
        },
        "verifier": {"timeout_sec": verifier_timeout(task)},
        "agent": {"timeout_sec": agent_timeout(task)},
        "environment": {
            "build_timeout_sec": options.build_timeout_sec,
            "cpus": options.cpus,
            "memory_mb": options.memory_mb,
            "storage_mb": options.storage_mb,
        },
    }


def task_files(ts: TaskSource, options: ExportOptions, pip: PipForwarding,
               manifests: ManifestCache) -> dict[str, bytes]:
    """Every file of the task folder, by folder-relative path."""
    pytest_args(ts.task.test_command)  # fail fast: the verifier must be able to run the tests
    context = environment_files(ts, pip, project_tarball(ts.project.path))
    manifest = manifests.get(healthy_stage(ts, options.base_image, pip), context)
    files: dict[str, bytes] = {
        "task.toml": tomli_w.dumps(task_config(ts, options)).encode(),
        "instruction.md": instruction(ts).encode(),
        "environment/Dockerfile": dockerfile(ts, options.base_image, pip).encode(),
        "environment/docker-compose.yaml": compose_override("main").encode(),
        "tests/test.sh": test_script(ts, manifest).encode(),
        "solution/solve.sh": solve_script(ts.task).encode(),
    }
    files |= {f"environment/{k}": v for k, v in context.items()}
    files |= {f"tests/{k}": v for k, v in verifier_files(ts, manifest).items()}
    return files


@register("harbor")
class Harbor(FolderFormat):
    """Harbor task folders (Terminal-Bench 2.0)."""

    def task_files(self, ts: TaskSource, options: ExportOptions, pip: PipForwarding,
                   manifests: ManifestCache) -> dict[str, bytes]:
        return task_files(ts, options, pip, manifests)
