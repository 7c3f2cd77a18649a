"""Small helpers the subcommands share: budget lists, JSON output, tables, progress bars."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from fleet.agent.models.names import model_mismatch
from fleet.common.errors import InputError
from fleet.method.budget import parse_budget
from fleet.reports.report import json_safe

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table


class _LazyConsole:
    """rich's Console, made on first use: a ``--json`` run never imports rich (start-up time)."""

    _real: Any = None

    @property  # type: ignore[misc]  # mypy refuses any __class__ override; this one is lazy
    def __class__(self) -> type:  # noqa: F811 - callers build siblings: console.__class__(stderr=True)
        return type(self._console())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console(), name)

    @classmethod
    def _console(cls) -> Any:
        if cls._real is None:
            from rich.console import Console

            real = Console()
            if not real.is_terminal:
                # Piped or captured output: wide enough that tables never fold into columns.
                real = Console(width=200)
            cls._real = real
        return cls._real


console: Any = _LazyConsole()


def note(command: str, message: str) -> None:
    """A one-line remark on stderr (stdout stays clean for --json)."""
    print(f"powerfleet {command}: note: {message}", file=sys.stderr)


def warn_other_model(command: str, flag: str, path: str, recorded: str, model: str) -> None:
    """One line where a file given to ``flag`` was recorded for another model than ``--model``:
    its numbers are that model's. Said, not refused, as a fleet's device round says it
    (``device_round.model_note``): a rehearsal may train a small model on a big one's table."""
    if model_mismatch(recorded, model):
        note(
            command, f"warning: {flag} {path} was recorded for {recorded!r}, not --model {model!r}"
        )


def parse_budgets(raw: str, flag: str = "--budgets") -> list[float | None]:
    """'4.5,7,none' -> budgets, each read by the one grammar (``fleet.method.budget``). Every
    item is read, so ``4.5,,7`` or an empty list is refused (it was a shorter list, silently),
    and a budget named twice is refused as a batch size named twice is (``checks.number_list``).
    """
    budgets: list[float | None] = []
    for item in raw.split(","):
        budget = parse_budget(item, flag)
        if budget in budgets:
            raise InputError(f"{flag}: {item.strip()} is named twice in {raw!r:.80}")
        budgets.append(budget)
    return budgets


def parse_caps(raw: str | None) -> dict[float | None, float]:
    """'4.5=307.2,7=614.4,none=921.6' -> {4.5: 307.2, 7.0: 614.4, None: 921.6}."""
    caps: dict[float | None, float] = {}
    if not raw:
        return caps
    for item in raw.split(","):
        if "=" not in item:
            raise InputError(f"--caps: {item!r} is not BUDGET=MHZ (e.g. 4.5=307.2)")
        budget, mhz = item.split("=", 1)
        try:
            cap = float(mhz)
        except ValueError:
            cap = math.nan
        if not (math.isfinite(cap) and cap > 0):
            raise InputError(f"--caps: {mhz!r} is not a frequency in MHz (a number > 0)")
        caps[parse_budget(budget, "--caps")] = cap
    return caps


def budget_label(budget: float | None) -> str:
    return "none" if budget is None else f"{budget:g} W"


def emit_json(obj: Any) -> None:
    """One JSON object on stdout; NaN/inf become null so every JSON parser accepts it."""
    json.dump(json_safe(obj), sys.stdout, indent=None, sort_keys=False)
    sys.stdout.write("\n")


def mhz(value: Any) -> str:
    """Frequencies as the board reports them (1300.5, 828.75), never rounded to 4 digits."""
    return "-" if value is None else f"{value:g}"


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.{digits}g}"
    return str(value)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="right" if c not in ("method", "status", "device") else "left")
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    return t


def progress_bar(command: str, *, elapsed: bool = True, transient: bool = True) -> Progress:
    """The progress bar every long command shows on stderr (stdout stays clean for --json).

    ``[command] ━━━━  done/total  what  elapsed``; the caller adds a task and updates it with
    ``completed``/``total``/``description``. Off when stderr is not a terminal.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    err = Console(stderr=True)
    columns = [
        TextColumn(f"[bold]{command}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
    ]
    if elapsed:
        columns.append(TimeElapsedColumn())
    return Progress(*columns, console=err, transient=transient, disable=not err.is_terminal)


def model_help(what: str = "model") -> str:
    """``--model``'s help, listing the registry's models (``fleet.agent.models.names``, the one
    list the registry checks itself against; a list written by hand here drifted once). Without
    torch: building a parser must not cost its import."""
    from fleet.agent.models.names import MODEL_NAMES

    return f"{what}: {', '.join(MODEL_NAMES)}"
