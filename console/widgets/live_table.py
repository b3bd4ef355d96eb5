"""LiveTable: a keyed table that redraws only the rows that changed, and only when visible.

Rows are frozen dataclasses with a ``key``. ``show(rows)`` compares each row with the one
it had under the same key; an equal row keeps its rendered line, a changed row drops it and
repaints only if it is on screen. Lines are drawn on demand through the Line API, so a
table of 2,000 rows costs what its 40 visible rows cost. The header line stays put while
the rows scroll under it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, Optional, Sequence, TypeVar, Union

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..bindings import bindings

RowT = TypeVar("RowT")
Frag = tuple[str, Optional[Style]]
# plain text, rich Text, (text, style) fragments, or what a column of the width given shows: a cell
# that shrinks by its own rules (a GPU's name, flags, dollars) rather than be cut
Cell = Union[str, Text, Sequence[Frag], Callable[[int], Any]]

STYLE_NAMES = ("header", "cursor", "dim", "ok", "warn", "bad", "muted", "bar", "bar-empty", "spark", "accent",
               "node")


@dataclass(frozen=True)
class Column:
    label: str
    width: int  # 0: whatever width the other columns leave
    align: str = "left"  # left | right
    drop: int = 0  # 0: always shown; on a narrow screen the highest ``drop`` goes first
    least: int = 4  # a flexible column's least width: under it, a column is dropped


class LiveTable(ScrollView, Generic[RowT], can_focus=True):
    """Subclasses set ``COLUMNS`` and implement ``render_cells`` (or ``render_row``)."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()
    GAP = 1

    COMPONENT_CLASSES = {f"live-table--{n}" for n in STYLE_NAMES}

    # j k g G as in vim, less and k9s, beside the arrows (console/keymap.py); enter and d, describe,
    # are the screen's: they describe the row under the cursor of whichever table
    BINDINGS = bindings("table")

    class Highlighted(Message):
        """The cursor moved to another row."""

        def __init__(self, table: "LiveTable[Any]", key: Optional[str]) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> "LiveTable[Any]":
            return self.table

    class Selected(Message):
        """The operator double-clicked a row (enter and d are the screen's describe)."""

        def __init__(self, table: "LiveTable[Any]", key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> "LiveTable[Any]":
            return self.table

    def __init__(self, *, empty_text: str = "", name: Optional[str] = None, id: Optional[str] = None,
                 classes: Optional[str] = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.empty_text = empty_text
        self._keys: list[str] = []
        self._rows: dict[str, RowT] = {}
        self._index: dict[str, int] = {}
        self._lines: dict[str, tuple[int, bool, Strip]] = {}  # key -> (width, cursor, line)
        self._cursor = 0
        self._styles: Optional[dict[str, Style]] = None
        self._widths: Optional[tuple[int, list[int]]] = None
        self._header: Optional[tuple[int, Strip]] = None
        self.shown = 0  # rows drawn since mount: what the benchmark counts
        self.sort_mark: Optional[tuple[str, bool]] = None  # (column label, descending): ▲ or ▼ in the header
        self.columns: tuple[Column, ...] = self.COLUMNS  # as laid out now (a column may widen to its content)
        self.moved_by_operator = False  # the cursor was put somewhere by a key, a click or a jump

    # ------------------------------------------------------------ data in

    def show(self, rows: Sequence[RowT]) -> None:
        """Take the new rows; repaint what changed and is visible."""
        before = self.cursor_key
        rows_by_key: dict[str, RowT] = {}
        changed: list[str] = []
        old = self._rows
        lines = self._lines
        for r in rows:
            k = r.key  # type: ignore[attr-defined]
            rows_by_key[k] = r
            if old.get(k) != r:
                changed.append(k)
                lines.pop(k, None)
        self._rows = rows_by_key
        keys = list(rows_by_key)
        if keys != self._keys:
            self._keys = keys
            self._index = {k: i for i, k in enumerate(keys)}
            for k in [k for k in lines if k not in rows_by_key]:
                del lines[k]
            self._cursor = self._index.get(before, min(self._cursor, max(0, len(keys) - 1))) \
                if before is not None else 0
            self.virtual_size = Size(self.size.width, len(keys) + 1)
            self.refresh()
        elif changed:
            top, height = int(self.scroll_y), self.size.height
            visible = [self._index[k] for k in changed if top <= self._index[k] < top + height - 1]
            if len(visible) > 8:
                self.refresh()
            for i in visible if len(visible) <= 8 else ():
                self.refresh(Region(0, i - top + 1, self.size.width, 1))
        if self.cursor_key != before:
            self.post_message(self.Highlighted(self, self.cursor_key))

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_key(self) -> Optional[str]:
        return self._keys[self._cursor] if self._keys else None

    @property
    def cursor_row(self) -> Optional[RowT]:
        key = self.cursor_key
        return self._rows.get(key) if key is not None else None

    def row(self, key: str) -> Optional[RowT]:
        return self._rows.get(key)

    def rows(self) -> list[RowT]:
        return [self._rows[k] for k in self._keys]

    def move_cursor_to_key(self, key: str) -> bool:
        i = self._index.get(key)
        if i is None:
            return False
        self.moved_by_operator = True
        self._set_cursor(i)
        return True

    # ------------------------------------------------------------ cursor

    def _set_cursor(self, i: int) -> None:
        if not self._keys:
            return
        i = max(0, min(len(self._keys) - 1, i))
        moved = i != self._cursor
        if moved:
            top = int(self.scroll_y)
            for old in (self._cursor, i):
                if 0 <= old < len(self._keys):
                    self._lines.pop(self._keys[old], None)
                    self.refresh(Region(0, old - top + 1, self.size.width, 1))
            self._cursor = i
        self.scroll_to_cursor()  # also when it stays: End on the last row must bring that row into view
        if moved:
            self.post_message(self.Highlighted(self, self.cursor_key))

    def scroll_to_cursor(self) -> None:
        """Scroll just enough that the cursor's row is on screen, under the header."""
        top = int(self.scroll_y)
        rows_visible = max(1, self.size.height - 1)
        i = self._cursor
        if i < top:
            y = i
        elif i >= top + rows_visible:
            y = i - rows_visible + 1
        else:
            return
        # force: a ScrollView scrolls only once a layout has shown its scroll bar, and rows
        # that just arrived have none yet (the newest events stayed below the screen); the
        # position is clamped to the rows there are all the same
        self.scroll_to(y=y, animate=False, force=True, immediate=True)

    def action_cursor(self, step: int) -> None:
        self.moved_by_operator = True
        self._set_cursor(self._cursor + step)

    def action_page(self, direction: int) -> None:
        self.moved_by_operator = True
        self._set_cursor(self._cursor + direction * max(1, self.size.height - 2))

    def action_cursor_to(self, i: int) -> None:
        self.moved_by_operator = True
        self._set_cursor(len(self._keys) - 1 if i < 0 else i)

    def action_select_row(self) -> None:
        if self.cursor_key is not None:
            self.post_message(self.Selected(self, self.cursor_key))

    def on_click(self, event: events.Click) -> None:
        if event.y < 1:
            return
        i = int(self.scroll_y) + event.y - 1
        if i < len(self._keys):
            self.moved_by_operator = True
            self._set_cursor(i)
            if event.chain >= 2:
                self.action_select_row()

    def on_focus(self) -> None:
        self._drop_cursor_line()

    def on_blur(self) -> None:
        self._drop_cursor_line()

    def _drop_cursor_line(self) -> None:
        self._styles = None  # the cursor's style depends on focus
        if self._keys:
            self._lines.pop(self._keys[self._cursor], None)
            self.refresh()

    # ------------------------------------------------------------ drawing

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None
        self._header = None
        self._lines.clear()

    def on_resize(self, event: events.Resize) -> None:
        self._widths = None
        self.virtual_size = Size(event.size.width, len(self._keys) + 1)
        if self._keys:  # shorter now (a banner or a filter bar came up): the cursor's row stays in view
            self.scroll_to_cursor()

    def style(self, name: str) -> Style:
        if self._styles is None:
            self._styles = {n: self.get_component_rich_style(f"live-table--{n}", partial=True) for n in STYLE_NAMES}
            self._styles["base"] = self.rich_style  # walks the DOM: once per style change, not per line
        return self._styles[name]

    def column_widths(self, width: int) -> list[int]:
        if self._widths is not None and self._widths[0] == width:
            return self._widths[1]
        labels = [c.label for c in self.columns]
        keep = labels.index(self.sort_mark[0]) if self.sort_mark and self.sort_mark[0] in labels else None
        self._widths = (width, fit_columns(self.columns, width, self.GAP, keep))
        return self._widths[1]

    def render_cells(self, row: RowT) -> Sequence[Cell]:
        raise NotImplementedError

    def render_row(self, row: RowT, width: int) -> Union[Text, list[Segment]]:
        """One line of cells laid out in the columns; override for rows that span the width
        (return a Text then)."""
        return self.join_cells(self.render_cells(row), width)

    def join_cells(self, cells: Sequence[Cell], width: int) -> list[Segment]:
        """Cells padded or cut to their columns. Segments, not Text: at fleet scale every
        visible line is redrawn each second, and this is three times quicker. Unstyled text
        (plain cells, gaps, padding) runs into one segment: fewer segments for the strip and
        the compositor to cut and style."""
        out: list[Segment] = []
        plain: list[str] = []  # unstyled text not yet in a segment
        gap = " " * self.GAP
        first = True
        for col, w, cell in zip(self.columns, self.column_widths(width), cells):
            if w <= 0:
                continue  # dropped: the screen is too narrow for it
            if not first:
                plain.append(gap)
            first = False
            if callable(cell):
                cell = cell(w)
            if isinstance(cell, str):
                frags: Sequence[Frag] = ((cell, None),)
                used = cell_len(cell)
            elif isinstance(cell, Text):
                frags = [(seg.text, seg.style) for seg in cell.render(self.app.console, end="")]
                used = sum(cell_len(t) for t, _ in frags)
            else:
                frags = cell
                used = sum(cell_len(t) for t, _ in frags)
            if used > w:
                frags, used = _cut(frags, w)
            if col.align == "right" and used < w:
                plain.append(" " * (w - used))
            for t, st in frags:
                if st is None:
                    plain.append(t)
                    continue
                if plain:
                    out.append(Segment("".join(plain)))
                    plain = []
                out.append(Segment(t, st))
            if col.align != "right" and used < w:
                plain.append(" " * (w - used))
        if plain:
            out.append(Segment("".join(plain)))
        return out

    def widen(self, label: str, width: int) -> None:
        """Lay the column ``label`` out ``width`` wide (a job's name whole): the lines are drawn again."""
        columns = tuple(dataclasses.replace(c, width=width) if c.label == label else c for c in self.columns)
        if columns != self.columns:
            self.columns, self._widths, self._header = columns, None, None
            self._lines.clear()
            self.refresh()

    def mark_sort(self, label: Optional[str], descending: bool = False) -> None:
        """Show the sort on its column's header, as spreadsheets and k9s do: ▲ ascending (A to
        Z, least first), ▼ descending. The sorted column is never the one a narrow screen drops:
        sorting by what is not on screen would look like no order at all."""
        mark = (label, descending) if label else None
        if mark != self.sort_mark:
            kept = (mark or ("",))[0] != (self.sort_mark or ("",))[0]
            self.sort_mark, self._header = mark, None
            if kept:  # another column is kept: the columns may change
                self._widths = None
                self._lines.clear()
                self.refresh()
            else:
                self.refresh(Region(0, 0, self.size.width, 1))

    def render_header(self, width: int) -> list[Segment]:
        mark = self.sort_mark
        labels = []
        for col, w in zip(self.columns, self.column_widths(width)):
            label = col.label
            if mark and mark[0] == label:
                arrow = "▼" if mark[1] else "▲"
                label = (label if cell_len(label) < w else set_cell_size(label, max(0, w - 1))) + arrow
            labels.append(label)
        return self.join_cells(labels, width)

    def row_style(self, row: RowT) -> Optional[Style]:
        """A style laid over the whole row (greyed, say); None for none."""
        return None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.style("base")
        if y == 0:
            header = self._header
            if header is None or header[0] != width:
                header = self._header = (width, self._strip(self.render_header(width), width, base,
                                                            self.style("header")))
            return header[1]
        i = int(self.scroll_y) + y - 1
        if i >= len(self._keys):
            if i == 0 and self.empty_text:
                return self._strip([Segment(self.empty_text)], width, base, self.style("muted"))
            return Strip.blank(width, base)
        key = self._keys[i]
        is_cursor = i == self._cursor
        cached = self._lines.get(key)
        if cached is not None and cached[0] == width and cached[1] == is_cursor:
            return cached[2]
        row = self._rows[key]
        # the cursor is laid under the cells' own colours: a bar or a sparkline keeps them
        strip = self._strip(self.render_row(row, width), width,
                            base + self.style("cursor") if is_cursor else base, self.row_style(row))
        self._lines[key] = (width, is_cursor, strip)
        self.shown += 1
        return strip

    def _strip(self, line: Union[Text, list[Segment]], width: int, base: Style, over: Optional[Style]) -> Strip:
        if isinstance(line, Text):
            line = list(line.render(self.app.console, end=""))
        segments = list(Segment.apply_style(line, base, over))
        return Strip(segments).adjust_cell_length(width, base)


def fit_columns(columns: Sequence[Column], width: int, gap: int = 1, keep: Optional[int] = None) -> list[int]:
    """Each column's width in ``width`` cells: fixed ones as declared, flexible ones share
    what is left; while they do not fit, the column with the highest ``drop`` gets 0, never
    the column ``keep`` (the sorted one)."""
    shown = list(range(len(columns)))
    while True:
        fixed = sum(columns[i].width for i in shown) + gap * max(0, len(shown) - 1)
        flex = [i for i in shown if columns[i].width == 0]
        least = sum(columns[i].least for i in flex)
        droppable = [i for i in shown if columns[i].drop and i != keep]
        if fixed + least <= width or not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    widths = [0] * len(columns)
    left = max(0, width - fixed)
    for i in shown:
        widths[i] = columns[i].width
    for n, i in enumerate(flex):
        widths[i] = left // len(flex) + (1 if n < left % len(flex) else 0)
    return widths


def _cut(frags: Sequence[Frag], width: int) -> tuple[list[Frag], int]:
    """The fragments cut to ``width`` cells, the last one ending in an ellipsis."""
    out: list[Frag] = []
    used = 0
    for text, style in frags:
        n = cell_len(text)
        if used + n < width:
            out.append((text, style))
            used += n
            continue
        room = width - used - 1
        out.append((set_cell_size(text, room) + "…" if room >= 0 else "", style))
        return out, width
    return out, used
