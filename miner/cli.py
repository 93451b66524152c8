"""The `miner` command line: parses options, calls one function per verb, prints the result.

Nothing pipeline-related lives here. Each command is a self-contained function that opens
what it needs from the `--store` root held (read-only) in the click context; new verbs are
added as one more `@main.command()` function.

    miner [--store DIR] tasks list [--type T] [--repo R] [--json]
    miner [--store DIR] tasks show ID [--json]
    miner [--store DIR] stats [--json]
    miner inversions [--family F] [--json]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from miner import __version__
from miner.models import Task
from miner.store import DEFAULT_ROOT, Store, StoreError, StoreMissing


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


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
        "difficulty": task.difficulty,
        "f2p_count": len(task.f2p),
        "p2p_count": len(task.p2p),
        "summary": task.summary,
        "created": task.created,
    }


@tasks.command("list")
@click.option("--type", "type_spec", metavar="T", help="Exact type id (deps/uninstall) or family (deps).")
@click.option("--repo", metavar="R", help="Exact repo, or a substring of it.")
@click.option("--difficulty", metavar="D", help="Exact difficulty (easy, medium, hard).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.pass_context
def tasks_list(
    ctx: click.Context, type_spec: str | None, repo: str | None, difficulty: str | None, as_json: bool
) -> None:
    """List stored tasks, optionally filtered."""
    with open_store(ctx) as store:
        found = store.list_tasks(type_spec=type_spec, repo=repo, difficulty=difficulty)
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
    table.add_column("f2p", justify="right")
    table.add_column("p2p", justify="right")
    for r in rows:
        table.add_row(r["id"], r["type"], r["repo"], r["target"], r["difficulty"],
                      str(r["f2p_count"]), str(r["p2p_count"]))
    Console().print(table)


@tasks.command("show")
@click.argument("task_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the task record as JSON.")
@click.pass_context
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one task (ID or a unique prefix): fields, scripts, instruction, folder."""
    with open_store(ctx) as store:
        try:
            task = store.get_task(task_id)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
        folder = store.task_dir(task.id)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if as_json:
        print_json({**task.model_dump(mode="json"), "path": str(folder), "files": files})
        return
    console = Console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    for name, value in [
        ("id", task.id),
        ("repo", task.repo),
        ("commit", task.commit),
        ("source", task.source.raw),
        ("type", f"{task.type_id} (family {task.family})"),
        ("target", task.target.key + (f"  [{task.target.path}]" if task.target.path else "")),
        ("summary", task.summary),
        ("difficulty", f"{task.difficulty} ({task.difficulty_score:.2f})"),
        ("graph depth", "" if task.graph_depth is None else str(task.graph_depth)),
        ("backend", task.backend),
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
        fields.add_row(name, value)
    console.print(Panel(fields, title=f"task {task.id}"))
    console.print(Panel(Syntax(task.break_script, "bash"), title="break.sh"))
    console.print(Panel(Syntax(task.fix_script, "bash"), title="fix.sh"))
    console.print(Panel(task.instruction or "(none)", title="instruction"))


# -- stats ------------------------------------------------------------------------------------


def rules_text(by_rule: dict[str, int]) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in sorted(by_rule.items(), key=lambda kv: -kv[1]))


def counts_table(title: str, key_name: str, buckets: dict[str, dict[str, Any]], extra: bool) -> Table:
    table = Table(title=title)
    table.add_column(key_name, overflow="fold")
    if extra:
        table.add_column("status")
    for name in ("tried", "validated", "rejected", "yield"):
        table.add_column(name, justify="right")
    table.add_column("rejected by rule", overflow="fold")
    if extra:
        table.add_column("reason", overflow="fold")
    for key, b in sorted(buckets.items()):
        cells = [key] + ([b.get("status", "")] if extra else [])
        cells += [str(b["tried"]), str(b["validated"]), str(b["rejected"]), percent(b["yield"])]
        cells.append(rules_text(b["by_rule"]))
        if extra:
            cells.append(b.get("reason", ""))
        table.add_row(*cells)
    return table


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Candidates tried, validated, rejected (by rule) and yield: total, per type, per project."""
    with open_store(ctx) as store:
        numbers = store.stats()
    if as_json:
        print_json(numbers)
        return
    console = Console()
    total = Table(title="total")
    for name in ("projects", "tried", "validated", "rejected", "yield", "tasks"):
        total.add_column(name, justify="right")
    total.add_row(str(numbers["projects"]), str(numbers["tried"]), str(numbers["validated"]),
                  str(numbers["rejected"]), percent(numbers["yield"]), str(numbers["tasks"]))
    console.print(total)
    by_rule = Table(title="rejected by rule")
    by_rule.add_column("rule")
    by_rule.add_column("candidates", justify="right")
    for rule, n in sorted(numbers["by_rule"].items(), key=lambda kv: -kv[1]):
        by_rule.add_row(rule, str(n))
    console.print(by_rule)
    console.print(counts_table("per inversion type", "type", numbers["by_type"], extra=False))
    console.print(counts_table("per project", "repo", numbers["by_project"], extra=True))


# -- inversions -------------------------------------------------------------------------------


@main.command()
@click.option("--family", metavar="F", help="Only this family (deps, config, data, fs, env, ...).")
@click.option(
    "--catalogue-dir",
    "extra_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Extra catalogue folder of inversion types (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the types (with templates) as JSON.")
def inversions(family: str | None, extra_dirs: tuple[Path, ...], as_json: bool) -> None:
    """List the catalogue of inversion types."""
    from miner.catalogue import CatalogueError, load_catalogue  # lazy: keeps `miner --help` fast

    try:
        catalogue = load_catalogue(extra_dirs=extra_dirs)
    except CatalogueError as exc:
        raise click.ClickException(str(exc)) from None
    types = sorted(catalogue.values(), key=lambda t: t.id)
    if family:
        families = sorted({t.family for t in types})
        types = [t for t in types if t.family == family]
        if not types:
            raise click.ClickException(
                f"no inversion types in family {family!r} (families: {', '.join(families)})"
            )
    if as_json:
        print_json([t.model_dump(mode="json") for t in types])
        return
    table = Table(title=f"{len(types)} inversion type(s)")
    table.add_column("id", no_wrap=True)
    table.add_column("target")
    table.add_column("backends")
    table.add_column("whole suite")
    table.add_column("description", overflow="fold")
    for t in types:
        table.add_row(t.id, t.target, ",".join(t.backends), "yes" if t.whole_suite else "",
                      t.description)
    Console().print(table)


@main.command()
@click.option("--repos", "repos", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default="repos.txt", show_default=True, help="Sources, one a line.")
@click.option("--types", default=None, help="Comma list of inversion types or families (default: all).")
@click.option("--max-tasks-per-repo", type=click.IntRange(min=1), default=None, help="Stop a project after N tasks.")
@click.option("--budget", type=click.IntRange(min=1), default=None, help="Candidates tried per project (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Order of candidates.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Projects mined in parallel.")
@click.option("--backend", type=click.Choice(["local", "docker", "auto"]), default="local", show_default=True)
@click.option("--select", type=click.Choice(["graph", "random"]), default="graph", show_default=True,
              help="Graph-guided choice of inversion points, or blind.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per test-suite run.")
@click.pass_context
def crawl(ctx: click.Context, repos: Path, types: str | None, max_tasks_per_repo: int | None,
          budget: int | None, seed: int, jobs: int, backend: str, select: str, timeout: float) -> None:
    """Mine repair tasks from every source of a repos file."""
    from miner.pipeline import CrawlOptions, crawl as run_crawl
    from miner.progress import CrawlProgress, print_summary

    console = Console()

    store = open_store(ctx, create=True)
    options = CrawlOptions(types=types, max_tasks_per_repo=max_tasks_per_repo, budget=budget, seed=seed,
                           jobs=jobs, backend=backend, select=select, timeout=timeout)
    with CrawlProgress(console) as progress:
        report = run_crawl(repos, store, options, on_phase=progress.phase)
    print_summary(console, report)


@main.command()
@click.argument("task_id")
@click.option("--keep", is_flag=True, help="Leave the broken sandbox and print its path.")
@click.option("--shell", is_flag=True, help="Open a shell inside the broken sandbox.")
@click.option("--backend", type=click.Choice(["local", "docker"]), default=None, help="Default: the task's own.")
@click.pass_context
def replay(ctx: click.Context, task_id: str, keep: bool, shell: bool, backend: str | None) -> None:
    """Rebuild, break step by step, test, fix and test one stored task again."""
    from miner.replay import replay as run_replay

    console = Console()

    def say(text: str) -> None:  # plain text: "[step 1]", test ids with [params], script output
        console.print(text, markup=False, highlight=False)

    store = open_store(ctx)
    result = run_replay(store, task_id, say=say, keep=keep, shell=shell, backend_name=backend)
    if not result.ok:
        raise click.ClickException("the replay differs from the stored task (see above)")
    console.print("[green]replay reproduces the stored task[/green]")


@main.command()
@click.argument("source_or_task")
@click.option("--format", "fmt", type=click.Choice(["json", "dot", "svg"]), default="svg", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: NAME.graph.FORMAT in the current folder).")
@click.option("--budget", type=click.IntRange(min=1), default=8, show_default=True, help="Inversion points chosen.")
@click.option("--seed", type=int, default=0, show_default=True, help="Order of the chosen points.")
@click.option("--backend", type=click.Choice(["local", "docker", "auto"]), default="local", show_default=True,
              help="Sandbox used when a source has no healthy state in the store yet.")
@click.pass_context
def graph(ctx: click.Context, source_or_task: str, fmt: str, output: Path | None, budget: int, seed: int,
          backend: str) -> None:
    """Write the dependency graph of a source or a stored task, with inversion points in red."""
    from miner.graph import GraphvizMissing, graph_command

    console = Console()
    store = open_store(ctx, create=True)
    try:
        report = graph_command(store, source_or_task, fmt=fmt, out=output, budget=budget, seed=seed,
                               backend=backend, say=lambda text: console.print(f"[dim]{text}[/dim]"))
    except (GraphvizMissing, ValueError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None
    console.print(f"wrote {report.path} ({report.nodes} nodes, {report.edges} edges)")
    table = Table(title="inversion points" + (f" of task {report.task}" if report.task else ""))
    for column in ("target", "predicted F2P", "depth"):
        table.add_column(column)
    for target, radius, depth in report.chosen:
        table.add_row(target.key, f"{len(radius)} of {report.passing}", str(depth))
    console.print(table)


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
    Console().print(table)


@images.command("prune")
@click.option("--healthy", is_flag=True, help="Also remove healthy and project images (rebuilt on the next crawl).")
@click.option("--base", is_flag=True, help="Also remove base images made by `miner images bootstrap`.")
def images_prune(healthy: bool, base: bool) -> None:
    """Remove miner's leftover containers, broken and dangling images (more on request)."""
    from miner.sandbox.docker.images import prune

    report = prune(_docker(), healthy=healthy, base=base)
    click.echo(f"removed {len(report.containers)} containers, {len(report.images)} images, "
               f"{report.reclaimed / 1e6:.1f} MB reclaimed")


# -- export / check ---------------------------------------------------------------------------


@main.command()
@click.option("--format", "fmt", type=click.Choice(["harbor", "terminal-bench", "jsonl"]), required=True,
              help="harbor = Terminal-Bench 2.0 task folders; terminal-bench = TB 1.0 folders; jsonl = one file.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Output folder.")
@click.option("--type", "types", multiple=True, metavar="T", help="Exact type id or family; repeatable.")
@click.option("--repo", metavar="R", help="Exact repo, or a substring of it.")
@click.option("--difficulty", metavar="D", help="Exact difficulty (easy, medium, hard).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Export at most N tasks (oldest first).")
@click.option("--overwrite", is_flag=True, help="Rewrite task folders (or records) that already exist.")
@click.option("--org", default="miner", show_default=True, help="Harbor task names are ORG/NAME.")
@click.option("--base-image", default="miner/base:bookworm", show_default=True, envvar="MINER_EXPORT_BASE_IMAGE",
              help="FROM image of the exported Dockerfiles (it needs bash and python3 with venv).")
@click.pass_context
def export(ctx: click.Context, fmt: str, out: Path, types: tuple[str, ...], repo: str | None,
           difficulty: str | None, limit: int | None, overwrite: bool, org: str, base_image: str) -> None:
    """Export stored tasks in bulk; rerunning it leaves existing folders alone (or rewrites them identically)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from miner.export import ExportOptions, export_tasks, select_tasks

    try:
        options = ExportOptions(org=org, base_image=base_image, overwrite=overwrite)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--org") from None
    console = Console()
    with open_store(ctx) as store:
        chosen = select_tasks(store, types, repo=repo, difficulty=difficulty, limit=limit)
        if not chosen:
            raise click.ClickException("no stored task matches the filters")
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            job = bar.add_task(f"exporting to {fmt}", total=len(chosen))
            summary = export_tasks(store, chosen, fmt, out, options,
                                   on_task=lambda outcome: bar.advance(job))
    table = Table(title=f"{fmt} export to {out}")
    for column in ("status", "tasks"):
        table.add_column(column, justify="right" if column == "tasks" else "left")
    for status in ("written", "updated", "unchanged", "kept", "failed"):
        if summary.count(status):
            table.add_row(status, str(summary.count(status)))
    console.print(table)
    for outcome in summary.failed:
        console.print(f"[red]failed[/red] {outcome.task_id} ({outcome.name}): {outcome.reason}")
    done = [o for o in summary.outcomes if o.bytes]
    size = sum(o.bytes for o in done) / max(len(done), 1) / 1e3
    console.print(f"{len(summary.outcomes)} task(s) in {summary.seconds:.1f}s, {summary.images_built} healthy "
                  f"image(s) built, {size:.0f} kB a task; kept = already there (use --overwrite to rewrite)")
    if summary.failed:
        raise click.ClickException(f"{len(summary.failed)} task(s) could not be exported (see above)")


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def check(dirs: tuple[Path, ...], as_json: bool) -> None:
    """Check exported Harbor tasks in Docker: the verifier scores 0 untouched and 1 after solution/solve.sh.

    DIRS are task folders, or folders holding task folders.
    """
    from miner.check import check_tasks

    console = Console()
    results = check_tasks(list(dirs), on_result=lambda r: as_json or console.print(
        f"{'[green]ok[/green]' if r.ok else '[red]FAIL[/red]'} {r.name or r.path}"))
    if as_json:
        print_json([{"path": str(r.path), "name": r.name, "ok": r.ok, "reason": r.reason,
                     "nop": r.nop.reward if r.nop else None, "oracle": r.oracle.reward if r.oracle else None,
                     "build_seconds": r.build_seconds} for r in results])
    else:
        table = Table(title=f"{sum(r.ok for r in results)}/{len(results)} task(s) pass")
        for column in ("task", "build s", "untouched", "after solve.sh", "result"):
            table.add_column(column)
        for r in results:
            show = lambda s: "-" if s is None else f"{s.reward} ({s.seconds:.0f}s)"  # noqa: E731
            table.add_row(r.name or str(r.path), f"{r.build_seconds:.0f}", show(r.nop), show(r.oracle),
                          "[green]ok[/green]" if r.ok else f"[red]{r.reason}[/red]")
        console.print(table)
    failing = [r for r in results if not r.ok]
    if failing:
        raise click.ClickException("; ".join(f"{r.name or r.path}: {r.reason}" for r in failing))
