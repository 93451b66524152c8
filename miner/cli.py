"""The `miner` command line: parses options, calls one function per verb, prints the result.

Nothing pipeline-related lives here. Each command is a self-contained function that opens
what it needs from the `--store` root held (read-only) in the click context; new verbs are
added as one more `@main.command()` function.

    miner [--store DIR] tasks list [--type T] [--category C] [--repo R] [--json]
    miner [--store DIR] tasks show ID [--json]
    miner [--store DIR] stats [--json]
    miner [--store DIR] compound --k K [--repo R] [--budget N]
    miner inversions [--family F] [--category C] [--json]
    miner inversions learn TASK_ID --model NAME [--out DIR]
    miner crawl [--inverter procedural|agent|both --model NAME ...]
    miner discover --pypi NAMES_FILE | --npm NAMES_FILE | --github QUERY [--out FILE] [--limit N] [--json]
    miner [--store DIR] gc [--dry-run] [--cache-limit-gb N] [--json]
    miner [--store DIR] graph SOURCE_OR_TASK [--format json|dot|svg] [-o FILE] [--budget N]

Every error a user can cause (a bad option, an unknown type or task id, a folder with no task,
no Docker engine) ends as one line on stderr, `Error: ...`, and a non-zero exit. Output is rich
on a terminal and plain in a pipe (miner.display).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
from rich.markup import escape
from rich.table import Table

from miner import __version__
from miner.display import make_console, print_block, print_table
from miner.evidence import EVIDENCE_KINDS, evidence_filter
from miner.models import Task
from miner.store import DB_NAME, DEFAULT_ROOT, Store, StoreError, StoreMissing

if TYPE_CHECKING:
    from miner.check import CheckResult

DIFFICULTIES = ("easy", "medium", "hard")


def evidence_options(command: Callable) -> Callable:
    """--evidence KIND (repeatable) and --offline: filters on what a task's repair recovers from (rule 8)."""
    command = click.option("--offline", is_flag=True,
                           help="Only tasks whose repair needs no network (no index, archive or sdist).")(command)
    return click.option("--evidence", "evidence", multiple=True, type=click.Choice(EVIDENCE_KINDS), metavar="KIND",
                        help=f"Only tasks whose evidence is of this kind ({', '.join(EVIDENCE_KINDS)}); "
                             "repeatable.")(command)


def ladder_options(command: Callable) -> Callable:
    """--repaired-by RUNG (repeatable) and --min-rung RUNG: filters on the measured difficulty."""
    command = click.option("--min-rung", metavar="RUNG",
                           help="Only tasks no blind repair weaker than RUNG repairs (needs-diagnosis: none does); "
                                "unmeasured tasks are left out.")(command)
    return click.option("--repaired-by", "repaired_by", multiple=True, metavar="RUNG",
                        help="Measured difficulty (`miner ladder`): the first blind repair that repairs the task, "
                             "or needs-diagnosis (repeatable).")(command)


# miner's own exceptions carry messages written for the user. They are found by name, in the
# modules already imported, so that `miner --help` does not import what defines them.
USER_ERRORS = (("miner.store", "StoreError"), ("miner.catalogue", "CatalogueError"),
               ("miner.sandbox.base", "SandboxError"), ("miner.sources", "FetchError"),
               ("miner.check", "CheckError"), ("miner.executors.base", "ExecutorError"),
               ("miner.attacks", "CatalogueError"), ("miner.importer", "DatasetError"),
               ("miner.export.common", "ExportError"))
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2: help, not an error


def is_user_error(exc: Exception) -> bool:
    return any(isinstance(exc, getattr(sys.modules.get(module), name, ())) for module, name in USER_ERRORS)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Usage errors and miner's own errors become `Error: <one line>` (click prints it, exits non-zero)."""
    try:
        yield
    except NO_ARGS_IS_HELP:
        raise
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} -h`)" if exc.ctx else ""
        error = click.ClickException(exc.format_message() + hint)
        error.exit_code = exc.exit_code
        raise error from None
    except Exception as exc:
        if not is_user_error(exc):
            raise
        raise click.ClickException(" ".join(str(exc).split()) or type(exc).__name__) from None


class MinerGroup(click.Group):
    """The root group: parsing and running every command under `one_line_errors`."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors():
            return super().invoke(ctx)


@dataclass(frozen=True)
class Settings:
    """The group's options, shared read-only with every command."""

    store_root: Path


def open_store(ctx: click.Context, create: bool = False) -> Store:
    """The store named by --store; a listing command on a missing store is a clear error."""
    settings: Settings = ctx.find_object(Settings)
    try:
        return Store(settings.store_root, create=create)
    except StoreMissing:
        raise click.ClickException(
            f"no store at {settings.store_root.resolve()}: run `miner crawl` first "
            "(or point --store / MINER_STORE at an existing one)"
        ) from None


def model_options(command: Callable) -> Callable:
    """The options of commands that call a model (crawl --inverter agent, inversions learn)."""
    options = [
        click.option("--model", envvar="MINER_MODEL", default=None, metavar="NAME",
                     help="Model name; the server is $OPENAI_BASE_URL (key: $OPENAI_API_KEY)."),
        click.option("--llm-timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
                     help="Seconds per model request."),
        click.option("--llm-retries", type=click.IntRange(min=0), default=4, show_default=True,
                     help="Retries (with backoff) on 429, 5xx and timeouts."),
        click.option("--llm-concurrency", type=click.IntRange(min=1), default=4, show_default=True,
                     help="Model calls in flight at once."),
        click.option("--json-mode", type=click.Choice(["off", "schema", "object"]), default="off", show_default=True,
                     help="Structured replies: OpenAI json_schema, llama.cpp json_object+schema, or off."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def make_client(store: Any, model: str | None, seed: int, token_budget: int | None, **kw: Any) -> Any:
    """The model client of a command, caching under the store; a one-line error without --model."""
    from miner.llm import LLMClient, LLMSettings, TokenBudget

    if not model:
        raise click.ClickException("a model is needed: pass --model NAME (the server is $OPENAI_BASE_URL)")
    settings = LLMSettings(model=model, timeout=kw["llm_timeout"], retries=kw["llm_retries"],
                           concurrency=kw["llm_concurrency"], json_mode=kw["json_mode"], seed=seed)
    return LLMClient(settings, cache_dir=store.cache_root / "llm", budget=TokenBudget(token_budget))


def optional_store(ctx: click.Context) -> Store | None:
    """The store when --store or MINER_STORE names one (created if missing) or the default one
    exists; None otherwise, so that a read-only verb leaves no store behind as a side effect."""
    settings: Settings = ctx.find_object(Settings)
    named = ctx.find_root().get_parameter_source("store_root") != click.core.ParameterSource.DEFAULT
    if named or (settings.store_root / DB_NAME).is_file():
        return Store(settings.store_root, create=True)
    return None


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


@click.group(cls=MinerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="MINER_STORE",
    default=DEFAULT_ROOT,
    show_default=True,
    show_envvar=True,
    help="Store folder (miner.db, tasks/, work/, cache/).",
)
@click.version_option(__version__, prog_name="miner")
@click.pass_context
def main(ctx: click.Context, store_root: Path) -> None:
    """Mine verified environment-repair tasks from working Python projects."""
    ctx.obj = Settings(store_root=store_root)


# -- tasks ------------------------------------------------------------------------------------


@main.group()
def tasks() -> None:
    """List and inspect stored tasks."""


def task_row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "type": task.type_id,
        "family": task.family,
        "repo": task.repo,
        "commit": task.commit,
        "target": task.target.key,
        "category": task.category,
        "parts": [p.type_id for p in task.parts],
        "difficulty": task.difficulty,
        "blind_repair": task.blind_repair,
        "f2p_count": len(task.f2p),
        "p2p_count": len(task.p2p),
        "summary": task.summary,
        "model": task.model,
        "evidence": [e.model_dump() for e in task.evidence],
        "created": task.created,
    }


def ladder_filter(repaired_by: tuple[str, ...], min_rung: str | None) -> Callable[[Task], bool]:
    """The --repaired-by / --min-rung test of a task (its measured blind-repair label)."""
    from miner.ladder import labels

    known = labels()
    for label in [*repaired_by, *([min_rung] if min_rung else [])]:
        if label not in known:
            raise click.BadParameter(f"{label!r} is no rung of the ladder ({', '.join(known)})")

    def keep(task: Task) -> bool:
        if repaired_by and task.blind_repair not in repaired_by:
            return False
        if min_rung and (task.blind_repair not in known or known.index(task.blind_repair) < known.index(min_rung)):
            return False
        return True

    return keep


def check_type_specs(store: Store, specs: list[str]) -> None:
    """Every spec names a type or family of the catalogue or of the store, or this is an error."""
    from miner.catalogue import load_catalogue

    types = set(load_catalogue()) | set(store.stats()["by_type"])
    families = {t.split("/")[0] for t in types}
    unknown = [spec for spec in specs if spec not in types | families]
    if unknown:
        raise click.ClickException(f"unknown inversion type or family {unknown[0]!r} "
                                   f"(families: {', '.join(sorted(families))})")


def category_type_ids(categories: list[str] | tuple[str, ...]) -> set[str] | None:
    """The catalogue's type ids in any of the categories (None: no category filter)."""
    if not categories:
        return None
    from miner.catalogue import load_catalogue, types_in_categories

    return types_in_categories(load_catalogue(), categories)


def check_repo(store: Store, repo: str | None) -> None:
    """A --repo filter that matched nothing names a repo the store knows, or this is an error."""
    known = {p["repo"] for p in store.projects()} | {t.repo for t in store.list_tasks()}
    if repo and not any(repo in name for name in known):
        raise click.ClickException(f"no project in the store matches --repo {repo!r}"
                                   + (f" (projects: {', '.join(sorted(known))})" if len(known) <= 5 else ""))


@tasks.command("list")
@click.option("--type", "type_spec", metavar="T", help="Exact type id (deps/uninstall) or family (deps).")
@click.option("--category", "categories", multiple=True, metavar="C",
              help="A category of the catalogue (network-security, ...; repeatable): its types' tasks, and "
                   "compound tasks with a part of one.")
@click.option("--repo", metavar="R", help="Exact repo, or a substring of it.")
@click.option("--difficulty", type=click.Choice(DIFFICULTIES), help="Exact difficulty.")
@ladder_options
@evidence_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_context
def tasks_list(
    ctx: click.Context, type_spec: str | None, categories: tuple[str, ...], repo: str | None,
    difficulty: str | None, repaired_by: tuple[str, ...], min_rung: str | None, evidence: tuple[str, ...],
    offline: bool, as_json: bool
) -> None:
    """List stored tasks, optionally filtered."""
    type_ids = category_type_ids(categories)
    measured = ladder_filter(repaired_by, min_rung)  # a rung the ladder does not have is an error first
    with open_store(ctx) as store:
        if type_spec:
            check_type_specs(store, [type_spec])
        found = store.list_tasks(type_spec=type_spec, repo=repo, difficulty=difficulty)
        if type_ids is not None:
            found = [t for t in found if set(t.type_ids) & type_ids]
        if not found:
            check_repo(store, repo)
        found = [task for task in found if evidence_filter(evidence, offline)(task)]
        found = [task for task in found if measured(task)]
    rows = [task_row(t) for t in found]
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"{len(rows)} task(s)")
    table.add_column("id", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("repo", overflow="fold")
    table.add_column("target", overflow="fold")
    table.add_column("difficulty", no_wrap=True)
    table.add_column("repaired by", no_wrap=True)
    table.add_column("evidence", overflow="fold")
    table.add_column("f2p", justify="right")
    table.add_column("p2p", justify="right")
    for r in rows:
        kinds = ", ".join(dict.fromkeys(e["kind"] for e in r["evidence"])) or "-"
        table.add_row(r["id"], r["type"], escape(r["repo"]), escape(r["target"]), r["difficulty"],
                      r["blind_repair"] or "-", kinds,
                      str(r["f2p_count"]), str(r["p2p_count"]))
    print_table(make_console(), table)


@tasks.command("show")
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the task record as JSON.")
@click.pass_context
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one task (ID or a unique prefix): fields, scripts, instruction, folder."""
    with open_store(ctx) as store:
        task = store.get_task(task_id)
        folder = store.task_dir(task.id)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if as_json:
        print_json({**task.model_dump(mode="json"), "path": str(folder), "files": files})
        return
    console = make_console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    for name, value in [
        ("id", task.id),
        ("repo", task.repo),
        ("commit", task.commit),
        ("source", task.source.raw),
        ("type", f"{task.type_id} (family {task.family}, category {task.category or '-'})"),
        ("parts", "; ".join(f"{p.type_id} on {p.target.key} ({len(p.f2p)} f2p)" for p in task.parts)),
        ("target", task.target.key + (f"  [{task.target.path}]" if task.target.path else "")),
        ("summary", task.summary),
        ("difficulty", f"{task.difficulty} ({task.difficulty_score:.2f})"),
        ("graph depth", "" if task.graph_depth is None else str(task.graph_depth)),
        ("backend", task.backend),
        ("made by", f"model {task.model}" if task.model else "procedural inverter (no model)"),
        ("evidence", "; ".join(map(str, task.evidence))),
        ("test command", task.test_command),
        ("whole suite", "yes" if task.whole_suite else "no"),
        ("f2p", f"{len(task.f2p)}: " + ", ".join(task.f2p)),
        ("p2p", f"{len(task.p2p)}: " + ", ".join(task.p2p)),
        ("predicted f2p", "" if task.predicted_f2p is None else ", ".join(task.predicted_f2p)),
        ("probes", ", ".join(p.id for p in task.probes)),
        ("protected files", str(len(task.protected))),
        ("suite seconds", f"{task.suite_seconds:.1f}"),
        ("created", task.created),
        ("folder", str(folder)),
        ("files", ", ".join(files)),
    ]:
        fields.add_row(name, escape(value))
    print_block(console, f"task {task.id}", fields)
    print_block(console, "break.sh", task.break_script, "bash")
    print_block(console, "fix.sh", task.fix_script, "bash")
    print_block(console, "instruction", task.instruction or "(none)")
    for variant, text in sorted(task.instructions.items()):
        if variant != "symptom":
            print_block(console, f"instruction ({variant})", text)


# -- stats ------------------------------------------------------------------------------------


def rules_text(by_rule: dict[str, int]) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in sorted(by_rule.items(), key=lambda kv: -kv[1]))


def counts_table(title: str, key_name: str, buckets: dict[str, dict[str, Any]], extra: bool) -> Table:
    table = Table(title=title)
    table.add_column(key_name, overflow="fold")
    if extra:
        table.add_column("status")
    for name in ("tried", "validated", "rejected", "yield") + (("tasks", "distinct F2P sets") if extra else ()):
        table.add_column(name, justify="right")
    table.add_column("rejected by rule", overflow="fold")
    if extra:
        table.add_column("reason", overflow="fold")
    for key, b in sorted(buckets.items()):
        cells = [escape(key)] + ([b.get("status", "")] if extra else [])
        cells += [str(b["tried"]), str(b["validated"]), str(b["rejected"]), percent(b["yield"])]
        if extra:
            cells += [str(b.get("tasks", 0)), str(b.get("distinct_f2p", 0))]
        cells.append(rules_text(b["by_rule"]))
        if extra:
            cells.append(escape(b.get("reason", "")))
        table.add_row(*cells)
    return table


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
@click.option("--coverage", is_flag=True,
              help="Per project: the environment nodes its tests reach, which have a task, and why the others have none.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool, coverage: bool) -> None:
    """Candidates tried, validated, rejected (by rule) and yield: total, per type, per project."""
    if coverage:
        _coverage(ctx, as_json)
        return
    with open_store(ctx) as store:
        numbers = store.stats()
        numbers["llm"] = store.llm_stats()
        numbers["by_blind_repair"] = blind_repair_shares(store.list_tasks())
    if as_json:
        print_json(numbers)
        return
    console = make_console()
    total = Table(title="total")
    for name in ("projects", "tried", "validated", "rejected", "yield", "tasks"):
        total.add_column(name, justify="right")
    total.add_row(str(numbers["projects"]), str(numbers["tried"]), str(numbers["validated"]),
                  str(numbers["rejected"]), percent(numbers["yield"]), str(numbers["tasks"]))
    print_table(console, total)
    by_rule = Table(title="rejected by rule")
    by_rule.add_column("rule")
    by_rule.add_column("candidates", justify="right")
    for rule, n in sorted(numbers["by_rule"].items(), key=lambda kv: -kv[1]):
        by_rule.add_row(rule, str(n))
    print_table(console, by_rule)
    print_table(console, counts_table("per inversion type", "type", numbers["by_type"], extra=False))
    print_table(console, counts_table("per category", "category", by_category(numbers["by_type"]), extra=False))
    print_table(console, counts_table("per project", "repo", numbers["by_project"], extra=True))
    if numbers["by_blind_repair"]:
        ladder = Table(title="measured difficulty: the first blind repair that repairs the task (miner ladder)")
        for name in ("repaired by", "tasks", "share"):
            ladder.add_column(name, justify="right" if name != "repaired by" else "left")
        for label, row in numbers["by_blind_repair"].items():
            ladder.add_row(label, str(row["tasks"]), percent(row["share"]))
        print_table(console, ladder)
    if numbers["llm"]["calls"]:
        print_llm_stats(console, numbers["llm"])


def blind_repair_shares(found: list[Task]) -> dict[str, dict[str, float]]:
    """Tasks and their share per ladder label, of the measured tasks (unmeasured counted apart)."""
    from miner.ladder import labels

    measured = [t for t in found if t.blind_repair]
    if not measured:
        return {}
    shares = {label: {"tasks": n, "share": n / len(measured)}
              for label in labels() if (n := sum(t.blind_repair == label for t in measured))}
    if len(measured) < len(found):
        shares["unmeasured"] = {"tasks": len(found) - len(measured), "share": 0.0}
    return shares


def _coverage(ctx: click.Context, as_json: bool) -> None:
    """`miner stats --coverage`: miner.coverage's table (or JSON)."""
    from miner.coverage import project_coverage

    with open_store(ctx) as store:
        rows = project_coverage(store)
    if as_json:
        print_json([row.public() for row in rows])
        return
    table = Table(title="environment coverage per project")
    for column in ("repo", "nodes reached", "with a task", "share", "by kind (with a task / reached)", "why none"):
        table.add_column(column, overflow="fold")
    for row in rows:
        kinds = ", ".join(f"{k} {v['with_task']}/{v['reached']}" for k, v in sorted(row.by_kind.items()))
        why = row.error or ", ".join(f"{reason} {n}" for reason, n in sorted(row.reasons.items(), key=lambda kv: -kv[1]))
        table.add_row(escape(row.repo), str(row.reached), str(row.with_task), percent(row.share), kinds, escape(why))
    print_table(make_console(), table)


def by_category(by_type: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The per-type counts summed per category of the catalogue (compound types: "compound")."""
    from miner.catalogue import load_catalogue

    catalogue = load_catalogue()
    buckets: dict[str, dict[str, Any]] = {}
    for type_id, counts in by_type.items():
        category = "compound" if type_id.startswith("compound/") else (
            catalogue[type_id].category if type_id in catalogue else "other")
        bucket = buckets.setdefault(category, {"tried": 0, "validated": 0, "rejected": 0, "by_rule": {}})
        for key in ("tried", "validated", "rejected"):
            bucket[key] += counts[key]
        for rule, n in counts["by_rule"].items():
            bucket["by_rule"][rule] = bucket["by_rule"].get(rule, 0) + n
    for bucket in buckets.values():
        bucket["yield"] = bucket["validated"] / bucket["tried"] if bucket["tried"] else 0.0
    return buckets


def print_llm_stats(console: Any, llm: dict[str, Any]) -> None:
    """Model calls: tokens in total, per project, per validated agent task; the agent's yield by round."""
    per_task = llm["tokens_per_validated"]
    total = Table(title="model calls (tokens spent; cache hits cost none)")
    for name in ("calls", "cached", "prompt tokens", "completion tokens", "tokens", "agent tasks", "tokens / task"):
        total.add_column(name, justify="right")
    total.add_row(str(llm["calls"]), str(llm["cached_calls"]), str(llm["prompt_tokens"]),
                  str(llm["completion_tokens"]), str(llm["tokens"]), str(llm["agent_validated"]),
                  "-" if per_task is None else f"{per_task:.0f}")
    print_table(console, total)
    projects = Table(title="tokens per project")
    for name in ("repo", "calls", "cached", "tokens", "agent tasks", "tokens / task"):
        projects.add_column(name, justify="left" if name == "repo" else "right", overflow="fold")
    for repo, b in llm["by_project"].items():
        each = b["tokens_per_validated"]
        projects.add_row(repo, str(b["calls"]), str(b["cached_calls"]), str(b["tokens"]), str(b["validated"]),
                         "-" if each is None else f"{each:.0f}")
    print_table(console, projects)
    rounds = Table(title="agent yield by round (a submission counts at its first round)")
    for name in ("round", "tried", "validated", "yield"):
        rounds.add_column(name, justify="right")
    for number, b in sorted(llm["by_round"].items(), key=lambda kv: int(kv[0])):
        rounds.add_row(number, str(b["tried"]), str(b["validated"]), percent(b["yield"]))
    print_table(console, rounds)
    console.print("models: " + ", ".join(f"{m} ({b['calls']} calls, {b['tokens']} tokens)"
                                         for m, b in llm["by_model"].items())
                  + "; outcomes: " + ", ".join(f"{o} {n}" for o, n in llm["by_outcome"].items()))


# -- inversions -------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@click.option("--family", metavar="F", help="Only this family (deps, config, data, fs, env, ...).")
@click.option("--category", metavar="C", help="Only this category (python-environment, network-security, ...).")
@click.option(
    "--catalogue-dir",
    "extra_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Extra catalogue folder of inversion types (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the types (with templates) as JSON.")
@click.pass_context
def inversions(ctx: click.Context, family: str | None, category: str | None, extra_dirs: tuple[Path, ...],
               as_json: bool) -> None:
    """List the catalogue of inversion types (`inversions learn` makes new ones from agent tasks)."""
    from miner.catalogue import load_catalogue, types_in_categories  # lazy: keeps `miner --help` fast

    if ctx.invoked_subcommand is not None:
        return
    catalogue = load_catalogue(extra_dirs=extra_dirs)
    types = sorted(catalogue.values(), key=lambda t: t.id)
    if family:
        families = sorted({t.family for t in types})
        types = [t for t in types if t.family == family]
        if not types:
            raise click.ClickException(
                f"no inversion types in family {family!r} (families: {', '.join(families)})"
            )
    if category:
        chosen = types_in_categories(catalogue, [category])
        types = [t for t in types if t.id in chosen]
    if as_json:
        print_json([t.model_dump(mode="json") for t in types])
        return
    table = Table(title=f"{len(types)} inversion type(s)")
    table.add_column("id", no_wrap=True)
    table.add_column("category", no_wrap=True)
    table.add_column("target")
    table.add_column("backends")
    table.add_column("whole suite")
    table.add_column("evidence")
    table.add_column("description", overflow="fold")
    for t in types:
        evidence = ",".join("(per target)" if "{{" in e.kind else e.kind for e in t.evidence) or "none"
        table.add_row(t.id, t.category, t.target, ",".join(t.backends), "yes" if t.whole_suite else "", evidence,
                      escape(t.description))
    print_table(make_console(), table)


@inversions.command("learn")
@click.argument("task_id")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("learned"), show_default=True,
              help="Catalogue folder the learned type is written to (use it with crawl --catalogue-dir).")
@click.option("--budget", type=click.IntRange(min=0), default=5, show_default=True,
              help="Candidates of the learned type tried on each other project of the store (0: none).")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Attempts the model gets to write a type that reproduces the task.")
@click.option("--seed", type=int, default=0, show_default=True)
@model_options
@click.pass_context
def inversions_learn(ctx: click.Context, task_id: str, out: Path, budget: int, rounds: int, seed: int,
                     model: str | None, **llm: Any) -> None:
    """Generalise a validated agent task into a catalogue type, check it reproduces the task, mine it elsewhere."""
    from miner.learn import LearnError, learn
    from miner.sandbox.base import SandboxError

    console = make_console()
    with open_store(ctx) as store:
        client = make_client(store, model, seed, None, **llm)
        try:
            report = learn(store, task_id, client, out, budget=budget, rounds=rounds, seed=seed,
                           mine_others=budget > 0)
        except (LearnError, StoreError, SandboxError) as exc:
            raise click.ClickException(str(exc)) from None
        store.record_llm_calls("", store.get_task(report.task_id).repo,
                               [{**c.row(), "purpose": "learn", "goal": report.task_id} for c in report.calls])
    for number, problem in enumerate(report.attempts, 1):
        console.print(f"attempt {number}: " + ("[green]reproduces the task[/green]" if not problem else problem),
                      markup=not problem, highlight=False)
    if not report.reproduced:
        raise click.ClickException(f"no learned type reproduced task {report.task_id} in {len(report.attempts)} "
                                   f"attempt(s) ({report.tokens} tokens)")
    console.print(f"wrote {report.path} ({report.type_id}, {report.tokens} tokens)")
    table = Table(title=f"{report.type_id} mined procedurally on the other projects")
    for column in ("project", "status", "tried", "validated", "reason"):
        table.add_column(column, overflow="fold")
    for p in report.others:
        table.add_row(p.repo or p.source, p.status, str(p.tried), str(p.validated), p.reason)
    console.print(table)


@main.command()
@click.option("--repos", "repos", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default="repos.txt", show_default=True, help="Sources, one a line.")
@click.option("--types", default=None, help="Comma list of inversion types or families (default: all).")
@click.option("--max-tasks-per-repo", type=click.IntRange(min=1), default=None,
              help="Stop a project after N tasks (compound tasks are counted apart: --compound-budget).")
@click.option("--budget", type=click.IntRange(min=1), default=40, show_default=True,
              help="Candidates tried per project (every one of a project's candidates, with 67 types, can take hours).")
@click.option("--seed", type=int, default=0, show_default=True, help="Order of candidates.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Units mined in parallel (--executor local; for ray, the CPUs of a local instance).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="A thread pool here, or Ray tasks on a cluster (pip install 'miner[ray]').")
@click.option("--address", default=None, metavar="ADDR",
              help="--executor ray: the cluster to join (HOST:PORT, or auto); default: start a local instance.")
@click.option("--batch-size", type=click.IntRange(min=1), default=30, show_default=True,
              help="A project with more candidates to try is mined in batches of this many (units of their own).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None, envvar="MINER_CACHE_DIR",
              help="Fetch and build here, shared across stores and crawls (sdists, wheels, built workspaces); "
                   "default: the store's cache/ and work/. With --executor ray, each node's own folder.")
@click.option("--cache-limit-gb", type=click.FloatRange(min=0), default=None,
              help="After the crawl, trim --cache-dir to this size, least recently used first.")
@click.option("--backend", type=click.Choice(["local", "docker", "auto"]), default="local", show_default=True)
@click.option("--select", type=click.Choice(["graph", "random"]), default="graph", show_default=True,
              help="Graph-guided choice of inversion points, or blind.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per test-suite run.")
@click.option("--catalogue-dir", "catalogue_dirs", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Extra catalogue folder of inversion types, e.g. learned ones (repeatable).")
@click.option("--per-symptom", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tasks kept per project with the same family and failing-test set (more are duplicate-symptom).")
@click.option("--min-free-gb", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Stop when the store's file system has less free space (checked before each project and candidate).")
@click.option("--inverter", type=click.Choice(["procedural", "agent", "both"]), default="procedural",
              show_default=True, help="Catalogue templates, the model agent, or both.")
@model_options
@click.option("--token-budget", type=click.IntRange(min=1), default=None, help="Model tokens for the whole crawl.")
@click.option("--goal-tokens", type=click.IntRange(min=1), default=60_000, show_default=True,
              help="Model tokens per agent goal.")
@click.option("--agent-goals", type=click.IntRange(min=1), default=3, show_default=True,
              help="Agent goals per project.")
@click.option("--agent-rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Submissions per goal (a rejection is explained and may be revised).")
@click.option("--agent-steps", type=click.IntRange(min=1), default=12, show_default=True, help="Model calls per goal.")
@click.option("--model-instructions", is_flag=True, help="Agent tasks get a model-written instruction (leak-checked).")
@click.option("--compound", type=click.IntRange(min=0), default=0, show_default=True, metavar="K",
              help="Also stack K validated inversions of each project into compound tasks (0: none).")
@click.option("--compound-budget", type=click.IntRange(min=1), default=5, show_default=True,
              help="Compound candidates tried per project (those stored by an earlier crawl count).")
@click.option("--refuse-trivial", "refuse_trivial", is_flag=False, flag_value="reset-permissions", default=None,
              metavar="[RUNG]", help="Refuse a validated task that a task-blind repair of the ladder up to RUNG "
                                     "(default: reset-permissions) repairs (`miner ladder`).")
@click.pass_context
def crawl(ctx: click.Context, repos: Path, types: str | None, max_tasks_per_repo: int | None,
          budget: int | None, seed: int, jobs: int, backend: str, select: str, timeout: float,
          catalogue_dirs: tuple[Path, ...], inverter: str, model: str | None, token_budget: int | None,
          goal_tokens: int, agent_goals: int, agent_rounds: int, agent_steps: int, model_instructions: bool,
          per_symptom: int, min_free_gb: float, executor: str, address: str | None, batch_size: int,
          cache_dir: Path | None, cache_limit_gb: float | None, compound: int, compound_budget: int,
          refuse_trivial: str | None, **llm: Any) -> None:
    """Mine repair tasks from every source of a repos file.

    On a terminal a live line per project; in a pipe one timestamped line per phase and per
    candidate result, as it happens. Then a summary table.
    """
    from miner.catalogue import load_catalogue, select_types
    from miner.inverters.agent import AgentOptions, AgentSettings
    from miner.pipeline import CrawlOptions, crawl as run_crawl
    from miner.progress import crawl_progress, print_summary
    from miner.sources import parse_repos

    select_types(load_catalogue(catalogue_dirs), types)  # an unknown type is an error before anything starts
    from miner.ladder import ladder_upto

    try:
        ladder_upto(refuse_trivial)  # a rung the ladder does not have is an error before anything starts
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--refuse-trivial") from None
    if executor == "ray" and inverter != "procedural":
        raise click.ClickException("--inverter agent/both runs with --executor local only (the model client "
                                   "and its token budget live in this process)")
    if address and executor != "ray":
        raise click.ClickException("--address names a Ray cluster: it needs --executor ray")
    sources, errors = parse_repos(repos)
    if not sources:
        for error in errors:
            click.echo(str(error), err=True)
        raise click.ClickException(f"{repos}: no source to crawl (one a line: a git URL, a folder, pypi:NAME==VERSION)")
    console = make_console()
    store = open_store(ctx, create=True)
    agent = None
    if compound == 1:
        raise click.BadParameter("a compound task stacks at least 2 inversions (0 builds none)",
                                 param_hint="--compound")
    if inverter != "procedural":
        settings = AgentSettings(goals=agent_goals, rounds=agent_rounds, steps=agent_steps, goal_tokens=goal_tokens)
        agent = AgentOptions(make_client(store, model, seed, token_budget, **llm), settings, model_instructions)
    options = CrawlOptions(types=types, max_tasks_per_repo=max_tasks_per_repo, budget=budget, seed=seed,
                           jobs=jobs, backend=backend, select=select, timeout=timeout, inverter=inverter,
                           agent=agent, catalogue_dirs=catalogue_dirs, per_symptom=per_symptom,
                           min_free_gb=min_free_gb, executor=executor, address=address, batch_size=batch_size,
                           cache_dir=cache_dir.resolve() if cache_dir else None, cache_limit_gb=cache_limit_gb,
                           compound=compound, compound_budget=compound_budget, refuse_trivial=refuse_trivial)
    with crawl_progress(console) as progress:
        report = run_crawl(repos, store, options, on_phase=progress.phase)
    print_summary(console, report)
    stopped = next((p.reason for p in report.projects if p.stopped), None)
    if stopped:
        raise click.ClickException(stopped)


@main.command()
@click.option("--k", "k", type=click.IntRange(min=2), default=2, show_default=True,
              help="Validated inversions stacked into each compound task.")
@click.option("--repo", metavar="R", help="Only the projects whose repo is R, or contains it.")
@click.option("--budget", type=click.IntRange(min=1), default=5, show_default=True,
              help="Compound candidates tried per project (those already stored count: raise it to try more).")
@click.option("--seed", type=int, default=0, show_default=True, help="Order of the combinations.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per test-suite run.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-project figures as JSON.")
@click.pass_context
def compound(ctx: click.Context, k: int, repo: str | None, budget: int, seed: int, timeout: float,
             as_json: bool) -> None:
    """Stack K validated tasks of each project into compound tasks, validated as a whole.

    The parts are the project's stored single tasks, on different targets and branches of its
    dependency graph; a compound is kept only when every part is necessary (fixing all the
    others still fails a test).
    """
    from miner.pipeline import compound_stored

    console = make_console(stderr=as_json)
    with open_store(ctx) as store:
        if not store.list_tasks(repo=repo):
            check_repo(store, repo)
            raise click.ClickException("no stored task to build compounds from: run `miner crawl` first")
        reports = compound_stored(store, k, budget, seed=seed, repo=repo, timeout=timeout,
                                  phase=lambda name, text: console.print(f"{escape(name)}: {escape(text)}"))
    rows = [{"repo": r.repo, "tried": r.tried, "validated": r.validated, "already_tried": r.resumed,
             "refused": r.refused, "skipped": r.reason, "note": r.note} for r in reports]
    skipped = [r for r in reports if r.reason]
    if as_json:
        print_json(rows)
    else:
        _compound_table(console, k, rows)
    if skipped:
        raise click.ClickException("; ".join(f"{r.repo} skipped: {r.reason.splitlines()[0]}" for r in skipped))


def _compound_table(console: Any, k: int, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"compound tasks of {k} parts")
    for column in ("repo", "tried", "validated", "already tried", "refused by rule"):
        table.add_column(column, overflow="fold")
    for row in rows:
        refused = f"skipped: {row['skipped']}" if row["skipped"] else rules_text(row["refused"]) or row["note"]
        table.add_row(escape(row["repo"]), str(row["tried"]), str(row["validated"]), str(row["already_tried"]),
                      escape(refused))
    print_table(console, table)


@main.command()
@click.option("--pypi", "names", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file of PyPI names, one a line (NAME, or a requirement like NAME==1.2 or NAME<3).")
@click.option("--github", "query", default=None, help="A GitHub repository search query (passed to the search API).")
@click.option("--npm", "npm_names", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file of npm package names, one a line (NAME, or NAME@RANGE).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("repos.discovered.txt"),
              show_default=True, help="The repos file to write (its state, for resuming, goes to OUT.state.jsonl).")
@click.option("--from", "start", type=click.IntRange(min=1), default=None,
              help="--pypi: first position in the names file.")
@click.option("--to", "end", type=click.IntRange(min=1), default=None, help="--pypi: last position in the names file.")
@click.option("--version", "version", default=None, metavar="SPEC",
              help="--pypi: a version specifier for names without one (default: the newest release).")
@click.option("--index-url", default="https://pypi.org/pypi", show_default=True, envvar="MINER_PYPI_JSON_URL",
              help="--pypi: the JSON API of the package index.")
@click.option("--language", default="python", show_default=True, help="--github: language: qualifier ('' for none).")
@click.option("--min-stars", type=click.IntRange(min=0), default=None, help="--github: stars:>=N qualifier.")
@click.option("--pushed-since", default=None, metavar="YYYY-MM-DD", help="--github: pushed:>=DATE qualifier.")
@click.option("--dockerized", is_flag=True, help="--github: keep only repositories with a Dockerfile at the top.")
@click.option("--github-url", default="https://api.github.com", show_default=True, envvar="GITHUB_API_URL",
              help="--github: API base URL (GitHub Enterprise: https://HOST/api/v3). "
                   "The token comes from GITHUB_TOKEN or GH_TOKEN.")
@click.option("--allow-compiled", is_flag=True, help="Keep projects with a compiled build step (C/C++/Cython/Rust).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Stop after N kept projects.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record per project (name, kept, reason, line).")
@click.pass_context
def discover(ctx: click.Context, names: Path | None, query: str | None, npm_names: Path | None, out: Path,
             start: int | None,
             end: int | None, version: str | None, index_url: str, language: str, min_stars: int | None,
             pushed_since: str | None, dockerized: bool, github_url: str, allow_compiled: bool, limit: int | None,
             as_json: bool) -> None:
    """Find projects with a test suite miner can run (on PyPI, npm or GitHub) and write a repos file for `miner crawl`."""
    import sys

    from miner import discover as found

    if sum(x is not None for x in (names, query, npm_names)) != 1:
        raise click.UsageError("give exactly one of --pypi NAMES_FILE, --npm NAMES_FILE or --github QUERY")
    if names is None and (start or end or version):
        raise click.UsageError("--from, --to and --version go with --pypi")
    options = found.Options(allow_compiled=allow_compiled, dockerized=dockerized, limit=limit)
    console = make_console(stderr=True)
    say = (lambda text: console.print(text, markup=False, highlight=False)) if sys.stderr.isatty() else (
        lambda text: click.echo(text, err=True))
    try:
        cache = ctx.find_object(Settings).store_root / "cache" / "sources"
        if npm_names is not None:
            result = found.discover_names("npm", npm_names, out, cache, options, say)
        elif names is not None:
            result = found.discover_names("pypi", names, out, cache, options, say, start, end, version, index_url)
        else:
            text = found.github_query(query or "", language or None, min_stars, pushed_since)
            result = found.discover_github(text, out, options, say, github_url, found.github_token())
    except found.DiscoverError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        print_json([r.public() for r in result.records])
    left = len(result.records) - len(result.kept)
    click.echo(f"{len(result.kept)} kept, {left} left out; wrote {out}", err=as_json)


@main.command()
@click.argument("task_ids", nargs=-1, metavar="[ID]...")
@click.option("--again", is_flag=True, help="Measure tasks already labelled too.")
@click.option("--backend", type=click.Choice(["local", "docker"]), default=None, help="Default: the task's own.")
@click.pass_context
def ladder(ctx: click.Context, task_ids: tuple[str, ...], again: bool, backend: str | None) -> None:
    """Label stored tasks (all unlabelled ones without IDs) by the first task-blind repair of the
    ladder that repairs them (inversions/_ladder: clear caches, drop suspect variables, reset
    permissions, reinstall), or needs-diagnosis; `tasks list --min-rung` filters on it."""
    from miner.healthy import SkipProject
    from miner.ladder import labels, measure_store
    from miner.sandbox.base import SandboxError
    from miner.sources import FetchError

    console = make_console()
    with open_store(ctx) as store:
        try:
            chosen = [store.get_task(i) for i in task_ids] if task_ids else store.list_tasks()
            chosen = [t for t in chosen if again or task_ids or t.blind_repair is None]
            found = measure_store(store, chosen, say=lambda text: console.print(text, markup=False, highlight=False),
                                  backend_name=backend)
        except (StoreError, FetchError, SandboxError, SkipProject) as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    counts = {label: sum(v == label for v in found.values()) for label in labels()}
    console.print(f"{len(found)} task(s) measured: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


@main.command()
@click.argument("task_id")
@click.option("--keep", is_flag=True, help="Leave the broken sandbox and print its path.")
@click.option("--shell", is_flag=True, help="Open a shell inside the broken sandbox.")
@click.option("--backend", type=click.Choice(["local", "docker"]), default=None, help="Default: the task's own.")
@click.pass_context
def replay(ctx: click.Context, task_id: str, keep: bool, shell: bool, backend: str | None) -> None:
    """Rebuild, break step by step, test, fix and test one stored task again."""
    from miner.replay import replay as run_replay

    console = make_console()

    def say(text: str) -> None:  # plain text: "[step 1]", test ids with [params], script output
        console.print(text, markup=False, highlight=False)

    from miner.healthy import SkipProject
    from miner.sandbox.base import SandboxError
    from miner.sources import FetchError

    store = open_store(ctx)
    try:
        result = run_replay(store, task_id, say=say, keep=keep, shell=shell, backend_name=backend)
    except (StoreError, FetchError, SandboxError, SkipProject) as exc:
        raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    if not result.ok:
        raise click.ClickException("the replay differs from the stored task (see above)")
    console.print("[green]replay reproduces the stored task[/green]")


@main.command()
@click.argument("source_or_task")
@click.option("--format", "fmt", type=click.Choice(["json", "dot", "svg"]), default="svg", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default=None,
              help="Output file (default: NAME.graph.FORMAT in the current folder; - for standard output).")
@click.option("--budget", type=click.IntRange(min=1), default=8, show_default=True, help="Inversion points chosen.")
@click.option("--seed", type=int, default=0, show_default=True, help="Order of the chosen points.")
@click.option("--backend", type=click.Choice(["local", "docker", "auto"]), default="local", show_default=True,
              help="Sandbox used when a source has no healthy state in the store yet.")
@click.pass_context
def graph(ctx: click.Context, source_or_task: str, fmt: str, output: Path | None, budget: int, seed: int,
          backend: str) -> None:
    """Write the dependency graph of a source or a stored task (on its own backend), with inversion points in red.

    A task id draws its project with the task's target; a source (a folder, a git URL,
    pypi:NAME==VERSION) is fetched, built and measured unless the store holds its healthy state,
    and the first BUDGET of the targets the crawl would enumerate, ranked by the graph, are drawn.
    A store is used when --store or MINER_STORE names one or it exists; none is created.
    """
    from contextlib import nullcontext

    from miner.graph import GraphvizMissing, build_graph, depth, predict, select_targets, write_graph
    from miner.healthy import SkipProject
    from miner import ecosystems
    from miner.inverters.system import targets_beneath
    from miner.inverters.targets import enumerate_targets
    from miner.prepare import prepare
    from miner.projectfiles import project_files, test_file_of
    from miner.sandbox import get_backend
    from miner.sandbox.base import SandboxError
    from miner.sources import FetchError, parse_source
    from miner.store import UnknownTask

    to_stdout = output == Path("-")
    console = make_console(stderr=to_stdout)  # standard output holds the graph alone
    store = optional_store(ctx)
    with store if store is not None else nullcontext(), tempfile.TemporaryDirectory(prefix="miner-graph-") as scratch:
        try:
            task = store.get_task(source_or_task) if store is not None else None
        except UnknownTask:
            task = None
        try:
            source = task.source if task else parse_source(source_or_task, Path.cwd())
            if source is None:
                raise ValueError(f"not a task id nor a source: {source_or_task!r}")
            # a task's project is prepared on the backend it was mined on: its healthy state (with the
            # container's system, on Docker) is then the stored one
            prepared = prepare(source, get_backend(task.backend if task else backend), store,
                               commit=task.commit if task else None,
                               work=Path.home() / ".cache" / "miner",
                               say=lambda text: console.print(f"[dim]{escape(text)}[/dim]"))
            project, healthy = prepared.project, prepared.state
            dependencies = build_graph(project, healthy)
            passing = set(healthy.passing)
            if task is not None:
                radius = predict(dependencies, task.target) & passing
                chosen = [(task.target, radius, depth(dependencies, task.target, task.f2p) or 0)]
            else:
                tests = {f for f in map(test_file_of, healthy.outcomes) if f}
                observed = ecosystems.observed(project_files(project.path), healthy)
                beneath = targets_beneath(healthy.system, project.path, tests, observed)  # a container's system
                targets = enumerate_targets(project, healthy, beneath)
                chosen = select_targets(dependencies, healthy, targets, budget, seed)
            default = Path.cwd() / f"{task.id[:12] if task else source.name}.graph.{fmt}"
            path = Path(scratch, f"graph.{fmt}") if to_stdout else (output or default)
            write_graph(dependencies, fmt, path, [target for target, _, _ in chosen])
        except (GraphvizMissing, FetchError, SandboxError, SkipProject, ValueError, StoreError) as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        if to_stdout:
            click.echo(path.read_text(), nl=False)
    where = "standard output" if to_stdout else path
    console.print(f"wrote {escape(str(where))} ({dependencies.number_of_nodes()} nodes, "
                  f"{dependencies.number_of_edges()} edges)")
    table = Table(title="inversion points" + (f" of task {task.id}" if task else ""))
    for column in ("target", "predicted F2P", "depth"):
        table.add_column(column)
    for target, radius, distance in chosen:
        table.add_row(escape(target.key), f"{len(radius)} of {len(passing)}", str(distance))
    print_table(console, table)


@main.group()
def images() -> None:
    """Docker images of miner (label miner=1): bootstrap a base image, list, prune."""


def _docker() -> Any:
    from miner.sandbox.base import BackendUnavailable
    from miner.sandbox.docker.images import docker_client

    try:
        return docker_client()
    except BackendUnavailable as exc:
        raise click.ClickException(str(exc)) from None


@images.command("bootstrap")
@click.option("--tag", default="miner/base:bookworm", show_default=True, help="Name of the image to create.")
@click.option("--mirror", default=None, help="Debian mirror (default: the one apt uses on this host).")
@click.option("--suite", default="bookworm", show_default=True, help="Debian release.")
@click.option("--force", is_flag=True, help="Rebuild even when the image exists.")
def images_bootstrap(tag: str, mirror: str | None, suite: str, force: bool) -> None:
    """Build a Debian base image with debootstrap (no container registry needed)."""
    from miner.sandbox.base import SandboxError
    from miner.sandbox.docker.images import bootstrap_base, debian_mirror, find_image

    client = _docker()
    if find_image(client, tag) and not force:
        click.echo(f"{tag} already exists (use --force to rebuild)")
        return
    mirror = mirror or debian_mirror()
    click.echo(f"debootstrap {suite} from {mirror} (a few minutes)...")
    try:
        image_id = bootstrap_base(client, tag, mirror=mirror, suite=suite)
    except SandboxError as exc:
        raise click.ClickException(f"{exc}\n{getattr(exc, 'log', '')}".rstrip()) from None
    click.echo(f"built {tag} ({image_id[:19]})")


@images.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def images_list(as_json: bool) -> None:
    """miner's images with their kind (base, project, healthy, broken) and size."""
    from dataclasses import asdict

    from miner.sandbox.docker.images import list_images

    found = list_images(_docker())
    if as_json:
        print_json([asdict(i) for i in found])
        return
    table = Table(title=f"{len(found)} miner images")
    for column in ("kind", "tags", "id", "size", "created"):
        table.add_column(column)
    for item in found:
        table.add_row(item.kind, ", ".join(item.tags) or "-", item.id, f"{item.size / 1e6:.1f} MB", item.created)
    print_table(make_console(), table)


@images.command("prune")
@click.option("--healthy", is_flag=True, help="Also remove healthy and project images (rebuilt on the next crawl).")
@click.option("--base", is_flag=True, help="Also remove base images made by `miner images bootstrap`.")
def images_prune(healthy: bool, base: bool) -> None:
    """Remove miner's leftover containers, broken and dangling images (more on request)."""
    from miner.sandbox.docker.images import prune

    report = prune(_docker(), healthy=healthy, base=base)
    click.echo(f"removed {len(report.containers)} containers, {len(report.images)} images, "
               f"{report.reclaimed / 1e6:.1f} MB reclaimed")


@main.command()
@click.option("--dry-run", is_flag=True, help="Say what would be freed, remove nothing.")
@click.option("--cache-limit-gb", type=click.FloatRange(min=0), default=20.0, show_default=True,
              help="Trim fetched sources and the pip cache, least recently used first, to this size.")
@click.option("--no-images", is_flag=True, help="Leave Docker images alone.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None, envvar="MINER_CACHE_DIR",
              help="Also trim this shared cache folder (crawl --cache-dir: sources, wheels, built workspaces) "
                   "to --cache-limit-gb.")
@click.option("--json", "as_json", is_flag=True, help="Print what was freed as JSON.")
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, cache_limit_gb: float, no_images: bool, cache_dir: Path | None,
       as_json: bool) -> None:
    """Free work folders and Docker images no stored task needs, and caches over a size limit."""
    from dataclasses import asdict

    from miner.disk import GB
    from miner.gc import collect, summary, trim_cache

    with open_store(ctx) as store:
        report = collect(store, cache_limit=int(cache_limit_gb * GB), dry_run=dry_run, images=not no_images)
    if cache_dir is not None:
        shared = trim_cache(cache_dir, int(cache_limit_gb * GB), dry_run=dry_run)
        report.freed += shared.freed
        report.notes += shared.notes
    if as_json:
        print_json({"dry_run": dry_run, "bytes": report.bytes(), "count": report.count(),
                    "freed": [asdict(f) for f in report.freed], "notes": report.notes})
        return
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(summary(report))


# -- export / check ---------------------------------------------------------------------------


@main.command()
@click.option("--format", "fmt", type=click.Choice(["harbor", "terminal-bench", "jsonl", "hf"]), required=True,
              help="harbor = Terminal-Bench 2.0 task folders; terminal-bench = TB 1.0 folders; jsonl = one file; "
                   "hf = a dataset hub's layout (rows the `datasets` library loads, with the Harbor folders).")
@click.option("-o", "--out", type=click.Path(file_okay=False, allow_dash=True, path_type=Path), required=True,
              help="Output folder (jsonl: - writes the records to standard output).")
@click.option("--type", "types", multiple=True, metavar="T", help="Exact type id or family; repeatable.")
@click.option("--category", "categories", multiple=True, metavar="C",
              help="A category of the catalogue (repeatable): its types' tasks and compounds with such a part.")
@click.option("--repo", metavar="R", help="Exact repo, or a substring of it.")
@click.option("--difficulty", type=click.Choice(DIFFICULTIES), help="Exact difficulty.")
@click.option("--variant", type=click.Choice(["symptom", "hard", "hinted"]), default="symptom", show_default=True,
              help="The instruction: the symptom (failing command and its error), hard (the command only) or "
                   "hinted (the symptom and the area of the cause).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Export at most N tasks (oldest first).")
@ladder_options
@evidence_options
@click.option("--overwrite", is_flag=True, help="Rewrite task folders (or records) that already exist.")
@click.option("--org", default="miner", show_default=True, help="Harbor task names are ORG/NAME.")
@click.option("--base-image", default="miner/base:bookworm", show_default=True, envvar="MINER_EXPORT_BASE_IMAGE",
              help="FROM image of the exported Dockerfiles (it needs bash and python3 with venv).")
@click.option("--network-policy", type=click.Choice(["compose", "harbor"]), default="compose", show_default=True,
              help="harbor: a task also declares the network its repair needs as Harbor's [environment] "
                   "network_mode/allowed_hosts (Harbor's docker environment then needs its egress-control "
                   "sidecar); compose: an offline task's compose file cuts its network.")
@click.option("--verifier-mode", type=click.Choice(["separate", "shared"]), default="separate", show_default=True,
              help="Harbor: separate runs the verifier in a fresh container of the task's image, the agent's "
                   "changes carried over as data and none of its processes; shared in the agent's container.")
@click.option("--dataset", metavar="ORG/NAME",
              help="Harbor: also make the folder a dataset Harbor's registry takes (dataset.toml listing every "
                   "task folder in it by digest) with its card (README.md).")
@click.option("--author", "authors", multiple=True, metavar="'NAME <EMAIL>'",
              help="Author of the tasks and the dataset (repeatable; default: miner).")
@click.option("--task-version", default="1.0.0", show_default=True,
              help="Harbor: the version of each task and of the dataset.")
@click.option("--images", is_flag=True,
              help="Harbor: also build each task's image once, named by the digest of what it is built from, "
                   "written into task.toml as docker_image; pushed to --registry, else saved in DIR/images.tar.")
@click.option("--registry", metavar="HOST[:PORT]/PREFIX",
              help="With --images: push the images there (a registry the engine can push to).")
@click.pass_context
def export(ctx: click.Context, fmt: str, out: Path, types: tuple[str, ...], categories: tuple[str, ...],
           repo: str | None, difficulty: str | None, variant: str, limit: int | None, repaired_by: tuple[str, ...],
           min_rung: str | None, evidence: tuple[str, ...], offline: bool, overwrite: bool, org: str,
           base_image: str, network_policy: str, verifier_mode: str, dataset: str | None, authors: tuple[str, ...],
           task_version: str, images: bool, registry: str | None) -> None:
    """Export stored tasks in bulk; rerunning it leaves existing folders alone (or rewrites them identically)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from miner.export import ExportOptions, export_tasks, select_tasks

    try:
        options = ExportOptions(org=org, base_image=base_image, overwrite=overwrite, network_policy=network_policy,
                                variant=variant, verifier_mode=verifier_mode, dataset=dataset,
                                authors=authors or ("miner",), version=task_version, images=images,
                                registry=registry)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if (images or registry) and fmt not in ("harbor", "hf"):
        raise click.BadParameter("task images are named in Harbor's task.toml: use --images with --format harbor or hf",
                                 param_hint="--images")
    if registry and not images:
        raise click.BadParameter("--registry is where --images pushes: give --images too", param_hint="--registry")
    if dataset and fmt not in ("harbor", "hf"):
        raise click.BadParameter("a Harbor dataset holds Harbor task folders: use it with --format harbor or hf",
                                 param_hint="--dataset")
    measured = ladder_filter(repaired_by, min_rung)
    to_stdout = out == Path("-")
    if to_stdout and fmt != "jsonl":
        raise click.BadParameter("- (standard output) works only with --format jsonl", param_hint="--out")
    console = make_console(stderr=to_stdout)  # standard output holds the records alone
    with open_store(ctx) as store, tempfile.TemporaryDirectory(prefix="miner-export-") as scratch:
        check_type_specs(store, list(types))
        chosen = select_tasks(store, types, repo=repo, difficulty=difficulty, evidence=evidence,
                              offline=offline, type_ids=category_type_ids(categories))
        chosen = [task for task in chosen if measured(task)][:limit]
        if not chosen:
            check_repo(store, repo)
            raise click.ClickException("no stored task matches the filters")
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            job = bar.add_task(f"exporting to {fmt}", total=len(chosen))
            summary = export_tasks(store, chosen, fmt, Path(scratch) if to_stdout else out, options,
                                   on_task=lambda outcome: bar.advance(job))
        if to_stdout:
            for records in sorted(Path(scratch).glob("*.jsonl")):
                click.echo(records.read_text(), nl=False)
    table = Table(title=f"{fmt} export to {'standard output' if to_stdout else out}")
    for column in ("status", "tasks"):
        table.add_column(column, justify="right" if column == "tasks" else "left")
    for status in ("written", "updated", "unchanged", "kept", "failed"):
        if summary.count(status):
            table.add_row(status, str(summary.count(status)))
    print_table(console, table)
    for outcome in summary.failed:
        console.print(f"[red]failed[/red] {outcome.task_id} ({outcome.name}): {escape(outcome.reason)}")
    done = [o for o in summary.outcomes if o.bytes]
    size = sum(o.bytes for o in done) / max(len(done), 1) / 1e3
    console.print(f"{len(summary.outcomes)} task(s) in {summary.seconds:.1f}s, {summary.images_built} healthy "
                  f"image(s) built, {size:.0f} kB a task; kept = already there (use --overwrite to rewrite)")
    folders = out / "tasks" if fmt == "hf" else out  # where the task folders are (miner.export.hf)
    if images:
        where = f"pushed to {registry}" if registry else f"saved in {folders / 'images.tar'} (docker load -i)"
        console.print(f"task images: built for every task folder of {folders}, named in its task.toml, {where}")
    if summary.dataset:
        console.print(f"dataset {dataset or 'rows'}: {summary.dataset} and the card {out / 'README.md'} list every "
                      f"task folder in {folders}")
    if summary.failed:
        raise click.ClickException(f"{len(summary.failed)} task(s) could not be exported (see above)")


def solver_view_cell(result: CheckResult) -> str:
    """The check table's solver's-view cell: fails untouched and passes after solve.sh, in every shell."""
    views = [s.view for s in (result.nop, result.oracle) if s is not None]
    if len(views) < 2 or any(v is None for v in views):
        return "-"
    return "ok" if not any(views) else "[red]wrong[/red]"


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--attacks", is_flag=True,
              help="Also run the catalogue of known shortcuts against each task, each in a fresh container.")
@click.option("--attack-file", "attack_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="More shortcuts (YAML, as miner/assets/attacks.yaml); repeatable; implies --attacks.")
@click.option("--only", multiple=True, metavar="ID",
              help="Only these shortcuts or classes; repeatable; implies --attacks.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tasks checked at the same time (with --attacks: shortcuts run at the same time), "
                   "one container each.")
@click.option("--verifier-mode", type=click.Choice(["separate", "shared"]), default="separate", show_default=True,
              help="separate: verify in a fresh container holding the agent's changes and none of its "
                   "processes (as the task declares: Harbor's collect and artifacts, or a committed snapshot); "
                   "shared: inside the agent's container, as a harness that only shares does.")
@click.option("--generated", is_flag=True,
              help="With --attacks: also the generated shortcuts (every hook point with every payload).")
@click.option("--ladder", is_flag=True,
              help="Instead: measure each task's difficulty on the exported task, the blind-repair ladder's rungs "
                   "run as the agent in fresh containers and scored by the task's verifier, against the label "
                   "measured when it was mined.")
def check(dirs: tuple[Path, ...], as_json: bool, attacks: bool, attack_files: tuple[Path, ...], only: tuple[str, ...],
          jobs: int, verifier_mode: str, generated: bool, ladder: bool) -> None:
    """Check exported Harbor tasks in Docker: the verifier scores 0 untouched and 1 after solution/solve.sh.

    DIRS are task folders, or folders holding task folders. With --attacks, every shortcut of the
    catalogue runs too (as the agent, before the verifier) and must score 0. A task folder whose
    tests/ changed since the export is refused, the file named, and nothing of it is scored.
    """
    from miner.check import check_tasks, task_dirs

    if not task_dirs(list(dirs)):
        raise click.ClickException(f"no exported task in {', '.join(map(str, dirs))} "
                                   "(a task folder holds task.toml; give it or the folder holding it)")
    if ladder:
        return check_ladder(list(dirs), jobs, as_json)
    if attacks or attack_files or only or generated:
        return check_attacks(list(dirs), list(attack_files), list(only), jobs, as_json, verifier_mode, generated)
    console = make_console()
    results = check_tasks(list(dirs), jobs=jobs, verifier_mode=verifier_mode, on_result=lambda r: as_json or console.print(
        f"{'[green]ok[/green]' if r.ok else '[red]FAIL[/red]'} {escape(str(r.name or r.path))}"))
    if as_json:
        print_json([{"path": str(r.path), "name": r.name, "ok": r.ok, "reason": r.reason,
                     "nop": r.nop.reward if r.nop else None, "oracle": r.oracle.reward if r.oracle else None,
                     "solver_view": {"untouched": r.nop.view if r.nop else None,
                                     "after_solve": r.oracle.view if r.oracle else None},
                     "build_seconds": r.build_seconds} for r in results])
    else:
        table = Table(title=f"{sum(r.ok for r in results)}/{len(results)} task(s) pass")
        for column in ("task", "build s", "untouched", "after solve.sh", "solver's view", "result"):
            table.add_column(column)
        for r in results:
            show = lambda s: "-" if s is None else f"{s.reward} ({s.seconds:.0f}s)"  # noqa: E731
            table.add_row(escape(r.name or str(r.path)), f"{r.build_seconds:.0f}", show(r.nop), show(r.oracle),
                          solver_view_cell(r), "[green]ok[/green]" if r.ok else f"[red]{escape(r.reason)}[/red]")
        print_table(console, table)
    failing = [r for r in results if not r.ok]
    if failing:
        raise click.ClickException("; ".join(f"{r.name or r.path}: {r.reason}" for r in failing))


@main.command()
@click.argument("dataset", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tasks re-checked at the same time, one container each.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
def revalidate(dataset: Path, jobs: int, as_json: bool) -> None:
    """Re-check an exported Harbor dataset (`export --dataset`): rebuild every task with no cached layer,
    rerun it untouched (must score 0), with solution/solve.sh (1) and its solver's view; a task folder
    changed since the export is named and not run. The verdicts go to DATASET/checks.json and its card
    (README.md); the exit status is 1 when any task decayed."""
    from dataclasses import asdict

    from miner.revalidate import revalidate as run

    console = make_console()
    try:
        verdicts = run(dataset, jobs=jobs, on_verdict=lambda v: as_json or console.print(
            f"{'[green]ok[/green]' if v.ok else '[red]DECAYED[/red]'} {escape(v.name)}"
            + ("" if v.ok else f": {escape(v.reason)}")))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        print_json([asdict(v) for v in verdicts])
    decayed = [v for v in verdicts if not v.ok]
    if not as_json:
        console.print(f"{len(verdicts) - len(decayed)}/{len(verdicts)} task(s) as exported; verdicts in "
                      f"{dataset / 'checks.json'}, the card {dataset / 'README.md'} updated")
    if decayed:
        raise click.ClickException(f"{len(decayed)} task(s) decayed: "
                                   + "; ".join(f"{v.name}: {v.reason}" for v in decayed[:5]))


@main.command("import")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to put the task folders in.")
@click.option("--overwrite", is_flag=True, help="Replace task folders that exist with other contents.")
def import_(source: Path, out: Path, overwrite: bool) -> None:
    """Task folders from a dataset in the hub's layout (`export --format hf`; a local folder, e.g. a
    downloaded hub snapshot): its rows read with the `datasets` library, each folder checked against
    its row's digest."""
    from miner.importer import import_tasks

    done = import_tasks(source, out, overwrite=overwrite)
    click.echo(f"{len(done.written)} task folder(s) written to {out}, {len(done.kept)} already there")
    for name, why in done.refused.items():
        click.echo(f"refused {name}: {why}", err=True)
    if done.refused:
        raise click.ClickException(f"{len(done.refused)} task(s) refused (see above)")


def check_ladder(dirs: list[Path], jobs: int, as_json: bool) -> None:
    """`check --ladder`: each exported task's label, and whether it is the one measured at mining."""
    from dataclasses import asdict

    from miner.check import ladder_tasks

    console = make_console()
    results = ladder_tasks(dirs, jobs=jobs, on_result=lambda r: as_json or console.print(
        f"{escape(r.name or str(r.path))}: {r.label or escape(r.error)}"))
    if as_json:
        print_json([asdict(r) | {"path": str(r.path)} for r in results])
        return
    table = Table(title="the blind-repair ladder on the exported tasks")
    for column in ("task", "first rung that repairs", "measured at mining", "same"):
        table.add_column(column)
    for r in results:
        same = "-" if not r.mined or r.error else "yes" if r.mined == r.label else "[red]no[/red]"
        table.add_row(escape(r.name or str(r.path)), r.label or f"[red]{escape(r.error)}[/red]", r.mined or "-", same)
    print_table(console, table)
    failed = [r for r in results if r.error]
    if failed:
        raise click.ClickException("; ".join(f"{r.name or r.path}: {r.error}" for r in failed))


def check_attacks(dirs: list[Path], attack_files: list[Path], only: list[str], jobs: int, as_json: bool,
                  verifier_mode: str, generated: bool) -> None:
    """`check --attacks`: the baseline and every shortcut per task; a table per task and per shortcut."""
    from miner.attacks import attack_tasks, load_catalogue, report_json

    catalogue = load_catalogue(attack_files, generated=generated).select(only)
    console = make_console()

    def progress(report, outcome) -> None:  # noqa: ANN001
        if not as_json:
            mark = "[red]SCORED[/red]" if outcome.scored else "0"
            console.print(f"{escape(report.name)} {outcome.attack.id}: {mark} ({outcome.seconds:.0f}s)")

    reports = attack_tasks(dirs, catalogue, jobs=jobs, on_outcome=progress, verifier_mode=verifier_mode)
    data = report_json(reports)
    if as_json:
        print_json(data)
    else:
        print_attack_tables(console, reports, data["totals"])
    broken = [r for r in reports if not r.baseline_ok]
    holes = [(r.name, o.attack.id) for r in reports for o in r.holes]
    if broken or holes:
        parts = [f"{len(holes)} shortcut run(s) scored above 0: "
                 + ", ".join(f"{name} {attack}" for name, attack in holes[:10])] if holes else []
        parts += [f"{r.name or r.path}: {r.error or 'the baseline is wrong (untouched must score 0, solved 1)'}"
                  for r in broken]
        raise click.ClickException("; ".join(parts))


def print_attack_tables(console, reports, totals: dict) -> None:  # noqa: ANN001
    show = lambda s: "-" if s is None else str(s.reward)  # noqa: E731
    table = Table(title="shortcuts per task (the baseline: untouched must score 0, solved 1)")
    for column in ("task", "untouched", "solved", "shortcuts", "scored > 0"):
        table.add_column(column)
    for r in reports:
        scored = [o.attack.id + (" (harness)" if o.attack.reach != "verifier" else "") for o in r.outcomes if o.scored]
        table.add_row(escape(r.name or str(r.path)), show(r.nop), show(r.oracle),
                      escape(r.error) if r.error else str(len(r.outcomes)), escape(", ".join(scored)) or "none")
    print_table(console, table)
    by_attack: dict[str, list] = {}
    for r in reports:
        for o in r.outcomes:
            by_attack.setdefault(o.attack.id, []).append(o)
    table = Table(title="per shortcut")
    for column in ("shortcut", "class", "tasks", "scored > 0", "how the verifier refused (first task)"):
        table.add_column(column)
    for attack_id, outcomes in by_attack.items():
        first = outcomes[0]
        label = f"{first.attack.klass}{' (harness: out of reach)' if first.attack.reach != 'verifier' else ''}"
        table.add_row(attack_id, label, str(len(outcomes)), str(sum(o.scored for o in outcomes)),
                      escape(first.why[:100]))
    print_table(console, table)
    console.print(f"{totals['tasks']} task(s), baseline right on {totals['baseline_ok']}; {totals['runs']} shortcut "
                  f"run(s), {totals['holes']} scored above 0 within the verifier's reach, "
                  f"{totals['out_of_reach_scored']} out of its reach (the harness runs the container's bash)")
