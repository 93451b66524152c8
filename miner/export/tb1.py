"""Terminal-Bench 1.0 task folders (laude-institute/terminal-bench 0.2.x layout).

    <out>/<name>/
      task.yaml             instruction, author, difficulty, category, tags, parser, timeouts
      Dockerfile            build context = the task folder; the files live in environment/
      docker-compose.yaml   the harness's single "client" service
      environment/          project.tar.gz, build/, break.sh (as for Harbor)
      run-tests.sh          runs miner's verifier, prints a pytest-style summary line
      solution.sh           the validated fix script
      tests/                the verifier, its guard, spec.json, manifest.json, originals/

The TB1 harness needs tmux and asciinema in the image, so a first stage installs them with apt.
Its tests run in a tmux session whose server is not an ancestor of the verifier, so the
verifier does not kill stray processes here (Harbor runs it with that protection on).
Registered as the format "terminal-bench" (miner.export.registry).
"""

from __future__ import annotations

import yaml

from miner.export.archive import project_tarball
from miner.export.common import (
    CATEGORY,
    ExportOptions,
    ManifestCache,
    PipForwarding,
    TaskSource,
    agent_timeout,
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
    test_script,
    verifier_files,
    verifier_timeout,
)
from miner.export.registry import FolderFormat, register

TOOLS_STAGE = (
    "FROM {base} AS tools\n"
    "RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
    "tmux asciinema && rm -rf /var/lib/apt/lists/*\n\n"
)
REWARD = "/tmp/miner-verifier/reward.txt"
ESTIMATES = {"easy": (5, 20), "medium": (15, 60), "hard": (30, 120)}  # expert, junior minutes

COMPOSE = """services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    # as in the sandboxes that validated the task: no capabilities, no new privileges
    cap_drop:
      - ALL
    security_opt:
      - no-new-privileges:true
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""

SUMMARY_FAILED = (
    '\necho "=========================== short test summary info ============================"'
    '\necho "FAILED tests/verifier.py::test_environment_repaired - the verifier could not start"'
)


def task_yaml(ts: TaskSource, pip_env: dict[str, str] | None = None) -> str:
    """task.yaml: TB1's fields, plus the evidence and the hosts the repair needs (TB1 ignores extra keys)."""
    task = ts.task
    expert, junior = ESTIMATES.get(task.difficulty, ESTIMATES["medium"])
    data = {
        "instruction": instruction(ts),
        "author_name": "miner",
        "author_email": "unknown",
        "difficulty": task.difficulty if task.difficulty in ESTIMATES else "unknown",
        "category": CATEGORY,
        "tags": ["environment-repair", task.family, task.type_id, "python", f"instruction-variant:{ts.variant}"],
        "parser_name": "pytest",
        "max_agent_timeout_sec": agent_timeout(task),
        "max_test_timeout_sec": verifier_timeout(task),
        "run_tests_in_same_shell": False,
        "expert_time_estimate_min": expert,
        "junior_time_estimate_min": junior,
        **evidence_metadata(task),
        "allowed_hosts": list(network_route(task, pip_env).hosts),
    }
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def run_tests(ts: TaskSource, manifest: dict) -> str:
    """run-tests.sh: the Harbor test.sh, printing its verdict as a pytest summary line for TB1's parser.

    The boot tool prints the line itself (--summary-line), right after writing the reward, so the
    output the harness parses says what the reward file says.
    """
    script = test_script(ts, manifest, reward=REWARD, tests_dir='"$TEST_DIR"', options=" --no-kill --summary-line",
                         refused=SUMMARY_FAILED)
    return script.replace("#!/bin/bash\n", '#!/bin/bash\nTEST_DIR="${TEST_DIR:-/tests}"\n', 1)


def task_files(ts: TaskSource, options: ExportOptions, pip: PipForwarding,
               manifests: ManifestCache) -> dict[str, bytes]:
    """Every file of the TB1 task folder, by folder-relative path."""
    runner_spec(ts.task.test_command)  # fail fast: the verifier must be able to run the tests
    context = environment_files(ts, pip, project_tarball(ts.project.path))
    # measured on the image the task runs in: the harness's tools (tmux) change the loader's cache
    manifest = manifests.get(healthy_stage(ts, options.base_image, pip, tools_stage=TOOLS_STAGE), context,
                             ts.task.test_command, has_tests(ts.task))
    ts = judged_in_image(ts, manifest)
    text = dockerfile(ts, options.base_image, pip, prefix="environment/", tools_stage=TOOLS_STAGE)
    files: dict[str, bytes] = {
        "task.yaml": task_yaml(ts, pip.env).encode(),
        "Dockerfile": text.encode(),
        "docker-compose.yaml": COMPOSE.encode(),
        "run-tests.sh": run_tests(ts, manifest).encode(),
        "solution.sh": solve_script(ts.task).encode(),
    }
    files |= {f"environment/{k}": v for k, v in context.items()}
    files |= {f"tests/{k}": v for k, v in verifier_files(ts, manifest, manifests.boot()).items()}
    return files


@register("terminal-bench")
class TerminalBench(FolderFormat):
    """Terminal-Bench 1.0 task folders."""

    def task_files(self, ts: TaskSource, options: ExportOptions, pip: PipForwarding,
                   manifests: ManifestCache) -> dict[str, bytes]:
        return task_files(ts, options, pip, manifests)
