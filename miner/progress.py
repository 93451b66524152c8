"""Display of a crawl: on a terminal a live line per project with its phase; in a pipe one
timestamped line per phase and per candidate result, flushed as it happens; then the closing
summary (a table: see miner.display)."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from miner.display import plain_line, print_table, stamp
from miner.pipeline import CrawlReport


class CrawlProgress:
    """One progress row per project; `phase` is safe to call from worker threads."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[project]:<24}"),
                                 TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                                 transient=False)
        self.rows: dict[str, TaskID] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> CrawlProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def phase(self, project: str, text: str) -> None:
        with self.lock:
            if project not in self.rows:
                self.rows[project] = self.progress.add_task(text, project=project[:24], total=None)
            row = self.rows[project]
            done = text.startswith(("mined", "skipped"))
            self.progress.update(row, description=text, total=1 if done else None, completed=1 if done else 0)


class PlainProgress:
    """In a pipe: `TIME PROJECT PHASE` lines, e.g. `2026-12-03T14:02:11 textkit candidate 3/15
    deps/uninstall on six: validated`; safe to call from worker threads."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lock = threading.Lock()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def phase(self, project: str, text: str) -> None:
        with self.lock:
            plain_line(self.console, f"{stamp()} {project} {text}")


def crawl_progress(console: Console) -> CrawlProgress | PlainProgress:
    """The live display on a terminal, plain lines elsewhere."""
    return CrawlProgress(console) if console.is_terminal else PlainProgress(console)


def print_summary(console: Console, report: CrawlReport) -> None:
    """The closing table: each project mined or skipped with its reason, and counts by type."""
    for error in report.errors:
        console.print(f"[red]{escape(error)}[/red]")
    table = Table(title=f"crawl finished in {report.seconds:.0f}s")
    for column in ("project", "status", "tried", "validated", "resumed", "time", "reason / by type"):
        table.add_column(column, overflow="fold")
    for p in report.projects:
        by_type = ", ".join(f"{t} {v}/{n}" for t, (n, v) in sorted(p.by_type.items()) if n)
        table.add_row(escape(p.repo or p.source),
                      "[green]mined[/green]" if p.status == "mined" else "[yellow]skipped[/yellow]",
                      str(p.tried), str(p.validated), str(p.resumed), f"{p.seconds:.0f}s", escape(p.reason or by_type))
    print_table(console, table)
    tried = sum(p.tried for p in report.projects)
    validated = sum(p.validated for p in report.projects)
    console.print(f"{len(report.projects)} projects, {tried} candidates tried, {validated} tasks validated"
                  + (f", yield {validated / tried:.0%}" if tried else ""))
    compounds = sum(p.compound_tried for p in report.projects)
    if compounds:
        made = sum(p.compound_validated for p in report.projects)
        console.print(f"compound tasks: {compounds} tried, {made} validated (counted apart from the tasks above)")
    for p in report.projects:
        if p.compound_note:
            console.print(f"no compound for {escape(p.repo or p.source)}: {escape(p.compound_note)}")
