"""Tables on an 80-column terminal: names are never cut; columns that do not fit are left
out from the right and named."""

from __future__ import annotations

import io

from rich.console import Console

from swarm._commands._tables import table
from swarm._commands.providers import _TERMINAL, _cell, rows
from swarm.catalog import PROVIDERS


def _render(title: str, columns: list[str], cells: list[list[object]], width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    table(title, columns, cells, console=console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_providers_at_80_columns_keep_every_name_whole() -> None:
    models, _ = rows(None, {})
    cells: list[list[object]] = [[_cell(r[k]) for k in _TERMINAL.values()] for r in models]
    out = _render("swarm providers", list(_TERMINAL), cells, 80)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for name, info in PROVIDERS.items():
        for model in info.models:
            assert any(name in line and f" {model} " in line for line in out.splitlines())
    assert "keyed" in out.splitlines()[1]  # the columns most wanted come first
    assert "not shown: " in out and "key env" in out


def test_a_wide_table_drops_columns_not_names() -> None:
    columns = ["key", *(f"figure {k}" for k in range(12))]
    cells: list[list[object]] = [
        ["openrouter/moonshotai/kimi-k2.6-thinking", *(1234.5 * k for k in range(12))],
        ["speed", *range(12)],
    ]
    out = _render("by model", columns, cells, 80)
    assert "openrouter/moonshotai/kimi-k2.6-thinking" in out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "figure 11" in out.rsplit("not shown: ", 1)[1]
    wide = _render("by model", columns, cells, 250)
    assert "not shown" not in wide and "figure 11" in wide
