"""Harbor (Terminal-Bench 2.0) task folders.

    <out>/<name>/
      task.toml             [task] ORG/NAME, [metadata] (with the evidence and the network the repair
                            needs), [verifier]/[agent] timeouts, [environment]
      instruction.md        the symptom-based instruction (no answer in it)
      environment/          Dockerfile + build context (see miner.export.common), and a
                            docker-compose.yaml dropping every capability of the container (and
                            its network, when the repair's evidence is all inside the environment)
      tests/test.sh         execs tests/boot, which checks the verifier's runtime, runs verifier.py and
                            writes /logs/verifier/reward.txt once, last (1 only when verifier.py agrees)
      tests/...             boot, runtime.txt, verifier.py, verifier_system.py, verifier_pytest.py,
                            probe.py, spec.json, manifest.json, originals/,
                            solver_view.json (the instruction's command as `miner check` runs it)
      solution/solve.sh     the validated fix script

task.toml follows Harbor's current schema (1.4: [task] ORG/NAME, version, description, authors,
keywords); with ExportOptions.images it names the task's pre-built image ([environment]
docker_image, miner.export.images); with ExportOptions.dataset the folder also gets the registry's
dataset.toml and the dataset card (miner.export.dataset).

The network, rule 8: a task whose repair needs the package index or the Debian archive keeps the
network and lists the hosts in [metadata] allowed_hosts; any other task runs with none
(`network_mode: none` in its compose file, which Harbor's docker environment honours as it is).
With ExportOptions.network_policy "harbor" the task also declares it as Harbor's policy,
[environment] network_mode "no-network", or "allowlist" with allowed_hosts; Harbor 0.25's docker
environment enforces those only through its egress-control sidecar (built from an image on Docker
Hub), and refuses the task where that cannot run, so it is not the default.

Registered as the format "harbor" (miner.export.registry).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import tomli_w

from miner import __version__, ecosystems
from miner.export.archive import project_tarball
from miner.export.common import (
    CATEGORY,
    ExportOptions,
    ManifestCache,
    PipForwarding,
    SNAPSHOT,
    TESTS_DIGEST_KEY,
    TaskSource,
    agent_timeout,
    compose_override,
    dockerfile,
    environment_files,
    evidence_metadata,
    has_tests,
    healthy_stage,
    judged_in_image,
    instruction,
    network_route,
    runner_spec,
    solve_script,
    solver_view_file,
    test_script,
    tests_sums,
    verifier_files,
    verifier_timeout,
)
from miner.export.dataset import KEEP_ALL, MANIFEST, author_table, ignored_by_default, write_dataset
from miner.export.images import build_task_images, context_digest, image_ref
from miner.export.registry import FolderFormat, register

# The task format of Harbor 0.25 and 0.26 (the newest on the package index): [task] has org/name,
# version, description, authors and keywords; both releases read it.
SCHEMA_VERSION = "1.4"


def task_name(ts: TaskSource, options: ExportOptions) -> str:
    return f"{options.org}/{ts.name}"


def offline(ts: TaskSource, pip_env: dict[str, str]) -> bool:
    """The task's repair needs no network (a task recorded without evidence keeps it, as before rule 8)."""
    return bool(ts.task.evidence) and not network_route(ts.task, pip_env).needed


def network_policy(ts: TaskSource, pip_env: dict[str, str]) -> dict:
    """Harbor's [environment] network settings for the task's repair (rule 8)."""
    route = network_route(ts.task, pip_env)
    if offline(ts, pip_env):
        return {"network_mode": "no-network"}
    if route.needed:
        return {"network_mode": "allowlist", "allowed_hosts": list(route.hosts)}
    return {}


def task_config(ts: TaskSource, options: ExportOptions, pip_env: dict[str, str] | None = None) -> dict:
    """The task.toml table: Harbor's TaskConfig fields plus free-form metadata."""
    task = ts.task
    project = ts.project.source.name
    pip_env = pip_env or {}
    route = network_route(task, pip_env)
    environment = {
        "build_timeout_sec": options.build_timeout_sec,
        "cpus": options.cpus,
        "memory_mb": options.memory_mb,
        "storage_mb": options.storage_mb,
    }
    if options.network_policy == "harbor":
        environment |= network_policy(ts, pip_env)
    # the language of the suite's runner; a project judged by its probes alone is named by none
    language = [ecosystems.runner_for(task.test_command).language.lower()] if has_tests(task) else []
    return {
        "schema_version": SCHEMA_VERSION,
        "task": {
            "name": task_name(ts, options),
            "version": options.version,
            "description": f"Repair the broken environment of {project} so its checks pass again "
                           f"({task.family} inversion, {task.difficulty}).",
            "keywords": ["environment-repair", task.family, *language],
            "authors": [author_table(a) for a in options.authors],
        },
        "metadata": {
            "author_name": "miner",
            "difficulty": task.difficulty,
            "category": CATEGORY,
            "tags": ["environment-repair", task.family, task.type_id, *language],
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
            **({"blind_repair": task.blind_repair} if task.blind_repair else {}),
            "f2p_count": len(task.f2p),
            "p2p_count": len(task.p2p),
            # healthy-passing where the task was mined, not in the healthy image: they judge nothing
            "p2p_not_passing_in_image": ts.dropped,
            "suite_seconds": round(task.suite_seconds, 3),
            "miner_version": __version__,
            "miner_task_id": task.id,
            "mined_with_backend": task.backend,
            **evidence_metadata(task),
            "repair_network": "none" if offline(ts, pip_env) else "allowlist" if route.needed else "unknown",
            "allowed_hosts": list(route.hosts),
        },
        "verifier": verifier_table(task, options),
        "agent": {"timeout_sec": agent_timeout(task)},
        "environment": environment,
    }


def verifier_table(task, options: ExportOptions) -> dict:  # noqa: ANN001 - a Task
    """[verifier]: its time limit and, in the separate mode, Harbor's own verifier container (a fresh
    copy of environment/) with the agent's changes collected as data (miner/assets/restore.py)."""
    table: dict = {"timeout_sec": verifier_timeout(task)}
    if options.verifier_mode == "separate":
        table |= {"environment_mode": "separate", "collect": [{"command": SNAPSHOT, "timeout_sec": 600.0}]}
    return table


def task_files(ts: TaskSource, options: ExportOptions, pip: PipForwarding,
               manifests: ManifestCache) -> dict[str, bytes]:
    """Every file of the task folder, by folder-relative path."""
    runner_spec(ts.task.test_command)  # fail fast: the verifier must be able to run the tests
    separate = options.verifier_mode == "separate"
    context = environment_files(ts, pip, project_tarball(ts.project.path))
    manifest = manifests.get(healthy_stage(ts, options.base_image, pip), context, ts.task.test_command,
                             has_tests(ts.task))
    ts = judged_in_image(ts, manifest)
    boot_options = " --kill-ancestors" + (" --restore /logs/artifacts" if separate else "")
    tests = {"test.sh": test_script(ts, manifest, options=boot_options).encode()}
    tests |= verifier_files(ts, manifest, manifests.boot()) | solver_view_file(ts, manifest)
    sums = tests_sums(tests)
    config = task_config(ts, options, pip.env)
    config["metadata"][TESTS_DIGEST_KEY] = hashlib.sha256(sums).hexdigest()
    files: dict[str, bytes] = {
        "instruction.md": instruction(ts).encode(),
        "environment/Dockerfile": dockerfile(ts, options.base_image, pip, marker=separate).encode(),
        "environment/docker-compose.yaml": compose_override("main", offline=offline(ts, pip.env)).encode(),
        "solution/solve.sh": solve_script(ts.task).encode(),
        "tests/SHA256SUMS": sums,
    }
    files |= {f"environment/{k}": v for k, v in context.items()}
    files |= {f"tests/{k}": v for k, v in tests.items()}
    if options.images:  # named by what it is built from: miner.export.images
        config["environment"]["docker_image"] = image_ref(options.registry, ts.name, context_digest(files))
    files["task.toml"] = tomli_w.dumps(config).encode()
    if any(ignored_by_default(rel) for rel in files):  # Harbor's publisher would leave it out
        files[".gitignore"] = KEEP_ALL.encode()
    return files


@register("harbor")
class Harbor(FolderFormat):
    """Harbor task folders (Terminal-Bench 2.0)."""

    def task_files(self, ts: TaskSource, options: ExportOptions, pip: PipForwarding,
                   manifests: ManifestCache) -> dict[str, bytes]:
        return task_files(ts, options, pip, manifests)

    def finish(self, out: Path, options: ExportOptions) -> Path | None:
        """With options.images: every task's image built and pushed or archived (miner.export.images);
        with options.dataset: the folder's dataset.toml and card (miner.export.dataset)."""
        if options.images:
            build_task_images(out, options.registry)
        if not options.dataset:
            return None
        write_dataset(out, options.dataset, options.version, [author_table(a) for a in options.authors])
        return out / MANIFEST
