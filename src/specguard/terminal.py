"""How every command writes to a terminal or a pipe.

On a terminal, output fits its width: a table too wide for it is printed as one
record per row (the first cell, then ``header: value`` pairs, wrapped), so at
80 columns no cell is cut or emptied. In a pipe, nothing is wrapped: a finding
is one line, greppable in a CI log; tables take ``COLUMNS`` when it is set.
Every name, path and config string is data, never rich markup: ``escape`` it
(or pass ``rich.text.Text``) before it reaches the console.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

__all__ = ["console", "escape", "print_table"]

PIPE_WIDTH = 4096  # wide enough that no table row of ours wraps in a pipe
INDENT = 4  # a record's fields, under its first cell


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader has gone (``| head``): rich would exit 1, the code for findings; the CLI
        ends instead with the command's own code (usage.reader_gone)."""
        self.quiet = True
        raise BrokenPipeError


def console(file: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A console for stdout (or ``file``/stderr): the terminal's width, or unwrapped in a pipe."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    if _isatty(stream):
        return _Console(file=stream, highlight=False)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH
    return _Console(file=stream, width=width, soft_wrap=True, highlight=False)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def print_table(out: Console, table: Table) -> None:
    """``table`` as it is where it fits ``out``'s width, else one wrapped record per row."""
    if Measurement.get(out, out.options.update_width(PIPE_WIDTH * 4), table).maximum <= out.width:
        out.print(table)
        return
    if table.title:
        out.print(table.title if isinstance(table.title, Text) else Text.from_markup(str(table.title)),
                  soft_wrap=False)
    for row in _rows(table):
        out.print(row[0][1], soft_wrap=False)
        for line in _pack([_field(header, cell) for header, cell in row[1:]], out.width - INDENT):
            out.print(Padding(line, (0, 0, 0, INDENT), expand=False), soft_wrap=False)
    if table.caption:
        out.print(table.caption, soft_wrap=False)


def _pack(fields: list[Text], width: int) -> list[Text]:
    """Fields joined by `` · `` into lines of ``width``; a field breaks only if it alone is wider."""
    lines: list[Text] = []
    for f in fields:
        if lines and lines[-1].cell_len + 3 + f.cell_len <= width:
            lines[-1].append(" · ").append_text(f)
        else:
            lines.append(f.copy())
    return lines


def _rows(table: Table) -> list[list[tuple[str, Text]]]:
    columns = [(_plain(c.header), [_text(cell) for cell in c.cells]) for c in table.columns]
    n = max((len(cells) for _, cells in columns), default=0)
    return [[(header, cells[i]) for header, cells in columns] for i in range(n)]


def _field(header: str, cell: Text) -> Text:
    out = Text(f"{header}: ", style="dim") if header else Text()
    out.append_text(cell)
    return out


def _text(cell: RenderableType) -> Text:
    if isinstance(cell, Text):
        return cell
    return Text.from_markup(cell) if isinstance(cell, str) else Text(str(cell))


def _plain(header: RenderableType) -> str:
    return header.plain if isinstance(header, Text) else Text.from_markup(str(header)).plain


def percent(x: float) -> str:
    """A fraction as the reports print it: ``0.515`` -> ``51.5 %``."""
    return f"{100 * x:.1f} %"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 hard link``, ``2 hard links``: the count and the noun in the number it takes."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"
