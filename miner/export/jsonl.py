"""JSON Lines export: one SWE-bench-style record a task, in <out>/tasks.jsonl.

Fields: instance_id, repo, base_commit, environment_setup_commit, FAIL_TO_PASS, PASS_TO_PASS
(JSON-encoded lists, as in the SWE-bench datasets), problem_statement, hints_text, created_at,
version, plus miner's own: inversion_type, inversion_family, inversion_category, compound_parts,
instruction_variant (which instruction problem_statement holds), target, difficulty, blind_repair (miner ladder),
difficulty_score, dockerfile, break_script, fix_script, test_command, probes, summary, and rule 8's
evidence_kinds, evidence (one "kind: detail" line each) and allowed_hosts (what the repair must
reach: the package index pip's defaults name, the Debian archive; empty for an offline repair).

`dockerfile` builds the broken environment with a checkout of repo@base_commit as its build
context: the install and break scripts are embedded in it (base64), nothing else is needed.
Rewriting the file is idempotent: records are keyed by instance_id and written sorted.
Registered as the format "jsonl" (miner.export.registry).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from miner import __version__
from miner.export.common import (
    ENV_FILE,
    ExportOptions,
    PipForwarding,
    TaskSource,
    evidence_metadata,
    final_lines,
    healthy_stage,
    instruction,
    network_route,
)
from miner.export.registry import RecordsFormat, register
from miner.sandbox.docker.layout import break_dockerfile

FILE_NAME = "tasks.jsonl"


def checkout_dockerfile(ts: TaskSource, options: ExportOptions) -> str:
    """A Dockerfile whose build context is the project checkout itself (no other files needed):
    the layout's build files and the break script are written by the Dockerfile."""
    stage = healthy_stage(ts, options.base_image, PipForwarding(), checkout=True)
    breaking = break_dockerfile("healthy", "break.sh", script=ts.task.break_script)
    header = f"# miner task {ts.task.id}: build context = a checkout of {ts.task.repo} at {ts.task.commit}\n"
    return header + stage + "\n" + breaking + final_lines(ts)


def task_record(ts: TaskSource, options: ExportOptions) -> dict:
    """The JSON record of one task."""
    task = ts.task
    return {
        "instance_id": f"{options.org}__{ts.name}",
        "repo": task.repo,
        "base_commit": task.commit,
        "environment_setup_commit": task.commit,
        "problem_statement": instruction(ts),
        "instruction_variant": ts.variant,
        "hints_text": "",
        "created_at": task.created,
        "version": __version__,
        "FAIL_TO_PASS": json.dumps(task.f2p),
        "PASS_TO_PASS": json.dumps(task.p2p),
        "inversion_type": task.type_id,
        "inversion_family": task.family,
        "inversion_category": task.category,
        "compound_parts": json.dumps([{"type": p.type_id, "target": p.target.key} for p in task.parts]),
        "target": task.target.key,
        "summary": task.summary,
        "difficulty": task.difficulty,
        "difficulty_score": task.difficulty_score,
        "blind_repair": task.blind_repair,
        "test_command": task.test_command,
        "probes": json.dumps([p.model_dump() for p in task.probes]),
        "env_file": ENV_FILE,
        "dockerfile": checkout_dockerfile(ts, options),
        "break_script": task.break_script,
        "fix_script": task.fix_script,
        **evidence_metadata(task),
        "allowed_hosts": list(network_route(task).hosts),  # the record's Dockerfile uses pip's defaults
    }


def write_records(path: Path, records: list[dict], overwrite: bool) -> dict[str, str]:
    """Merge records into the file by instance_id; returns {instance_id: written|unchanged|kept}."""
    existing: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                existing[record["instance_id"]] = record
    status = {}
    for record in records:
        key = record["instance_id"]
        old = existing.get(key)
        if old is None or (overwrite and old != record):
            status[key] = "written" if old is None else "updated"
            existing[key] = record
        else:
            status[key] = "unchanged" if old == record else "kept"
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    with tmp.open("w", encoding="utf-8") as handle:
        for key in sorted(existing):
            handle.write(json.dumps(existing[key], sort_keys=True) + "\n")
    tmp.replace(path)
    return status


@register("jsonl")
class JsonLines(RecordsFormat):
    """One JSON record per task in tasks.jsonl."""

    file_name = FILE_NAME

    def task_record(self, ts: TaskSource, options: ExportOptions) -> dict:
        return task_record(ts, options)

    def write_records(self, path: Path, records: list[dict], overwrite: bool) -> dict[str, str]:
        return write_records(path, records, overwrite)
