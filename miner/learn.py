"""Learned inversion types: a validated agent task generalised into a catalogue type, then mined.

`learn` shows the model the task's concrete break and fix, its target (kind, path, attributes)
and the template variables the catalogue offers for that kind, and asks for a type file
(description, preconditions, summary, break and fix templates). The answer must load as a
catalogue type (miner.catalogue.load_type), apply to the task's own target, and, rendered for
it, be validated with the task's own F2P set: it must reproduce the task. A failing check goes
back to the model, up to `rounds` times. Only a type that reproduces its task is written, at
OUT/<family>/<name>.yaml, where `miner crawl --catalogue-dir OUT` finds it. Then it is mined
procedurally (graph selection, `budget` candidates) on every other project of the store, whose
candidates and tasks are stored like any crawl's: tokens spent once, tasks mined for free.

    report = learn(store, "3f2a", client, Path("learned"), budget=5)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from miner.catalogue import CatalogueError, load_catalogue, load_type
from miner.inverters.procedural import ProceduralInverter, matches
from miner.inverters.targets import enumerate_targets
from miner.llm import Call, LLMClient, LLMError
from miner.models import Candidate, HealthyState, InversionType, Project, Target, Task
from miner.pipeline import CrawlOptions, ProjectReport, mine_source
from miner.prepare import PinError, prepare
from miner.sandbox import get_backend
from miner.sandbox.base import Backend
from miner.sources import FetchError, parse_source
from miner.store import Store
from miner.validate import Context, healthy_manifest, validate

VARIABLES = {  # what templates see besides `target` (see inversions/README.md)
    "distribution": "dist, version; attrs: version, depth, project_own, top_level, has_console_scripts",
    "module": "dist, version; target.path is the site-packages-relative file; attrs: dist, version, package",
    "script": "dist, version; target.path is bin/NAME; attrs: dist, entry, project_own",
    "config": "mode (octal), size; target.path is project-relative; attrs: format, ext, size, "
              "mode, is_text, has_crlf, lines",
    "data": "mode (octal), size; target.path is project-relative; attrs: ext, size, mode, is_text, "
            "has_crlf, lines",
    "envvar": "value; attrs: value, value_kind (bool/int/url/path/str)",
}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "description": {"type": "string"},
        "preconditions": {"type": "object"}, "summary": {"type": "string"},
        "break_script": {"type": "string"}, "fix_script": {"type": "string"},
        "network": {"type": "object", "properties": {"break": {"type": "boolean"}, "fix": {"type": "boolean"}}},
    },
    "required": ["name", "description", "summary", "break_script", "fix_script"],
}
PROMPT = """Generalise a concrete environment break into a reusable inversion type: jinja2 templates (strict
undefined variables; filters `q` = shell quoting, `b64`) over the variables of the target's kind, so the
same kind of break applies to other targets of other projects. Scripts use $MINER_PROJECT, $MINER_VENV,
$MINER_PYTHON, $MINER_SITE_PACKAGES, $MINER_ENV_FILE only, start with `set -euo pipefail`, check that what
they break exists, leave no backup, never touch code or tests; the fix restores healthy behaviour exactly,
from the same evidence as the concrete fix. Preconditions: {attr: value}, {attr: [a, b]}, {min_attr: n},
{max_attr: n} over the target's attrs. Reply with one JSON object: name (lowercase-dashes), description,
preconditions, summary, break_script, fix_script, network ({"break": bool, "fix": bool})."""


class LearnError(Exception):
    """The task cannot be learned from (not an agent task, no healthy state, no type reproduced it)."""


@dataclass
class LearnReport:
    task_id: str
    type_id: str = ""
    path: Path | None = None  # the written type file (only when it reproduced the task)
    reproduced: bool = False
    attempts: list[str] = field(default_factory=list)  # why each attempt failed ("" for the one that worked)
    calls: list[Call] = field(default_factory=list)
    own: Candidate | None = None
    others: list[ProjectReport] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.calls)


def learn(store: Store, task_id: str, client: LLMClient, out: Path, budget: int = 5, rounds: int = 3,
          seed: int = 0, backend_name: str | None = None, mine_others: bool = True) -> LearnReport:
    """Ask for a type file until one reproduces the task; write it; mine it on the store's other projects."""
    task = store.get_task(task_id)
    if not task.type_id.startswith("agent/"):
        raise LearnError(f"task {task.id} is a {task.type_id} task: only agent tasks are learned from")
    report = LearnReport(task_id=task.id)
    backend = get_backend(backend_name or task.backend)
    project, ctx = own_context(store, task, backend)
    messages = [{"role": "system", "content": PROMPT},
                {"role": "user", "content": task_prompt(task, project, ctx.state)}]
    for _ in range(rounds):
        try:
            reply = client.chat(messages, response_format=client.json_format(SCHEMA), max_tokens=1500)
        except LLMError as exc:
            if exc.call is not None:
                report.calls.append(exc.call)
            raise LearnError(f"model call failed: {exc}") from None
        report.calls.append(reply.call)
        problem, itype, text = check_reply(reply.content, task, project, ctx, report)
        report.attempts.append(problem)
        if not problem:
            report.type_id, report.reproduced = itype.id, True
            report.path = write_type(out, itype, text)
            break
        messages += [{"role": "assistant", "content": reply.content},
                     {"role": "user", "content": f"That type does not reproduce the task: {problem}\nFix it."}]
    if report.reproduced and mine_others:
        report.others = mine_elsewhere(store, project, backend, itype, budget, seed)
    return report


def own_context(store: Store, task: Task, backend: Backend) -> tuple[Project, Context]:
    """The task's project at its commit, built with its healthy state (reused from the store)."""
    try:
        prepared = prepare(task.source, backend, store, commit=task.commit)
    except (FetchError, PinError) as exc:
        raise LearnError(f"cannot fetch the task's project: {exc}") from None
    state = prepared.state
    assert state is not None  # prepare measures unless asked not to
    return prepared.project, Context(backend, prepared.env, state, healthy_manifest(backend, prepared.env))


def task_prompt(task: Task, project: Project, state: HealthyState) -> str:
    target = _target(task, project, state)
    example = _example(task)
    return "\n".join([
        f"Target kind: {target.kind}; template variables: target.name, target.path, target.attrs.*, "
        f"{VARIABLES.get(target.kind, '(none)')}.",
        f"This target: name {target.name!r}, path {target.path!r}, attrs {json.dumps(target.attrs, default=str)}.",
        f"Concrete summary: {task.summary}",
        f"Evidence: {'; '.join(map(str, task.evidence)) or 'none recorded'}",
        "Concrete break script:", task.break_script.strip(),
        "Concrete fix script:", task.fix_script.strip(),
        *(["A catalogue type of the same kind, for the format:", example] if example else []),
    ])


def _target(task: Task, project: Project, state: HealthyState) -> Target:
    """The task's target with attributes as the procedural inverter enumerates them now."""
    return {t.key: t for t in enumerate_targets(project, state)}.get(task.target.key, task.target)


def _example(task: Task) -> str:
    same = [t for t in load_catalogue().values() if t.target == task.target.kind]
    if not same:
        return ""
    pick = sorted(same, key=lambda t: (t.family != task.family, len(t.break_script)))[0]
    return yaml.safe_dump({"description": pick.description, "target": pick.target,
                           "preconditions": pick.preconditions, "summary": pick.summary,
                           "break_script": pick.break_script, "fix_script": pick.fix_script}, sort_keys=False)


def parse_type(content: str, task: Task) -> tuple[InversionType, str]:
    """The reply as a catalogue type of the task's family and kind, and its YAML text."""
    text = content.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise CatalogueError("the reply holds no JSON object")
    try:
        data = json.loads(text[start:end + 1])
    except ValueError as exc:
        raise CatalogueError(f"the reply is not valid JSON: {exc.msg} at char {exc.pos}") from None
    if not isinstance(data, dict):
        raise CatalogueError("the reply is not a JSON object")
    name = re.sub(r"[^a-z0-9]+", "-", str(data.pop("name", "") or "learned").lower()).strip("-") or "learned"
    if name in {t.id.split("/", 1)[1] for t in load_catalogue().values() if t.family == task.family}:
        name += "-learned"
    fields = {k: data[k] for k in ("description", "preconditions", "summary", "break_script", "fix_script",
                                   "network") if k in data}
    fields["target"] = task.target.kind
    fields["backends"] = [task.backend]
    fields["evidence"] = [{"kind": e.kind} for e in task.evidence]  # rule 8: what the task's fix recovers from
    type_text = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, width=1000)
    type_id = f"{task.family}/{name}"
    return load_type(type_id, type_text, f"learned type {type_id}"), type_text


def check_reply(content: str, task: Task, project: Project, ctx: Context,
                report: LearnReport) -> tuple[str, InversionType | None, str]:
    """("" when the reply's type reproduces the task, else why not), the type, its YAML text."""
    try:
        itype, text = parse_type(content, task)
    except CatalogueError as exc:
        return str(exc), None, ""
    target = _target(task, project, ctx.state)
    if not matches(itype.preconditions, target):
        return f"its preconditions {itype.preconditions} reject the task's own target {target.attrs}", itype, text
    try:
        inversion = ProceduralInverter([itype]).apply(project, ctx.state, target, itype)
    except CatalogueError as exc:
        return f"cannot render it for the task's target: {exc}", itype, text
    if inversion is None:
        return "its context providers found nothing for the task's target", itype, text
    report.own = validate(ctx, inversion, whole_suite_ok=itype.whole_suite)
    if report.own.status != "validated":
        return f"rendered for the task's target, it is rejected by rule {report.own.rule}: {report.own.detail}", \
            itype, text
    if sorted(report.own.f2p) != sorted(task.f2p):
        diff = sorted(set(report.own.f2p) ^ set(task.f2p))
        return f"it fails other tests than the task (differs in {', '.join(diff[:5])})", itype, text
    return "", itype, text


def write_type(out: Path, itype: InversionType, text: str) -> Path:
    family, name = itype.id.split("/", 1)
    path = Path(out) / family / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def mine_elsewhere(store: Store, own: Project, backend: Backend, itype: InversionType, budget: int,
                   seed: int) -> list[ProjectReport]:
    """Mine the learned type procedurally on the store's other mined projects (stored like a crawl's)."""
    options = CrawlOptions(types=itype.id, budget=budget, seed=seed, backend=backend.name)
    reports = []
    for row in store.projects():
        if row["status"] != "mined" or row["key"] == own.key or not row["source_raw"]:
            continue
        origin = row["origin"].rsplit(":", 1)[0]
        try:
            source = parse_source(row["source_raw"], Path(origin).parent if origin else Path.cwd(), row["origin"])
        except ValueError:
            continue
        if source is None or backend.name not in itype.backends:
            continue
        reports.append(mine_source(source, store.root, backend, [itype], options, lambda name, text: None))
    return reports
