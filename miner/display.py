"""How miner's output reaches the user: on a terminal, rich tables and panels; in a pipe (a batch
job's log, `| cut -f1`), plain lines that never wrap and tables as tab-separated lines.

The terminal test is rich's (`Console.is_terminal`: stdout is a tty, or FORCE_COLOR is set).

A table in a pipe prints as a "# title" line, a header line and one line a row, the cells
tab-separated with their markup, tabs and newlines flattened; a titled block (a script) as a
"==> title <==" line and its text. `--json` output does not come through here: it is the same
everywhere.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that, when it is not a terminal, never wraps a line."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def stamp() -> str:
    """The local time, to the second, that starts each progress line in a pipe."""
    return datetime.now().isoformat(timespec="seconds")


def plain_line(console: Console, text: str) -> None:
    """Text as it is (no markup, no wrapping, tabs kept), written at once to the console's file."""
    console.file.write(text + "\n")
    console.file.flush()


def _plain(console: Console, cell: Any) -> str:
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = console.render_str(cell).plain  # the cell's markup, as the table would show it
    else:
        text = str(cell)
    return " ".join(text.replace("\t", " ").splitlines())


def print_table(console: Console, table: Table) -> None:
    """The table as rich draws it on a terminal; tab-separated lines elsewhere."""
    if console.is_terminal:
        console.print(table)
        return
    lines = [f"# {_plain(console, table.title)}"] if table.title else []
    if table.show_header:
        lines.append("\t".join(_plain(console, column.header) for column in table.columns))
    for row in zip(*(list(column.cells) for column in table.columns)):
        lines.append("\t".join(_plain(console, cell) for cell in row))
    plain_line(console, "\n".join(lines))


def print_block(console: Console, title: str, body: str | Table, lexer: str | None = None) -> None:
    """A titled block (a table of fields, a script, an instruction): a panel on a terminal; in a
    pipe a "==> title <==" line, then the text as it is or the table's tab-separated lines."""
    if console.is_terminal:
        if isinstance(body, Table):
            console.print(Panel(body, title=title))
        else:
            console.print(Panel(Syntax(body, lexer) if lexer else Text(body), title=title))
        return
    plain_line(console, f"==> {title} <==")
    if isinstance(body, Table):
        print_table(console, body)
    else:
        plain_line(console, body.rstrip())
