"""One version from an engine's write tasks (Ray Data's Datasink, Spark's data source writer):
what both engines share, so that their retries mean the same thing (docs/engines.md).

An engine runs a write task once per partition of its data, and again when the task failed
(a worker died, an executor was lost, speculation). Each *attempt* writes a part of its own
(docs/format.md §5.3) under a random part index; its samples go in the directory
`<job>-<order:010d>`, so that the published version holds the tasks' rows in task order, and
all attempts of one task write the same paths. The engine's driver commits exactly the parts
of the attempts it accepted, one per task, as one version; the others are removed with them,
and an attempt still running after the commit is refused. A failed write discards the job.

    job = new_job("ray")                                        # on the driver
    msg = write_part(uri, job, order, columns, rows, options)   # in each task (attempt)
    commit_parts(uri, job, [msg, ...])                          # on the driver, once
"""
from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._core import Writer, commit, discard_parts  # type: ignore[attr-defined]  # see pyproject
from .sources import _WRITER_KEYS, converted
from .views import Dataset

# stoker.Writer's options an engine's sink passes through (the part, job and name are its own;
# it publishes the next version, or the first).
WRITER_OPTIONS = tuple(k for k in _WRITER_KEYS if k not in ("append", "progress", "part", "job"))
# A part index is drawn at random for each attempt: two attempts share one with odds 2^-31.
_PART_BITS = 31


def new_job(engine: str) -> str:
    """A job name used once: `<engine>-<24 hex digits>`."""
    return f"{engine}-{secrets.token_hex(12)}"


def table_rows(table: Any) -> Iterable[dict[str, Any]]:
    """A pyarrow Table's rows as dicts; extension (tensor) columns as numpy arrays."""
    import pyarrow as pa
    columns: dict[str, list] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if isinstance(column.type, pa.ExtensionType):
            chunks = [c.to_numpy() if hasattr(c, "to_numpy") else c.to_pylist()
                      for c in column.chunks]
            columns[name] = [v for chunk in chunks for v in chunk]
        else:
            columns[name] = column.to_pylist()
    names = list(columns)
    for values in zip(*columns.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def write_part(uri: str, job: str, order: int, columns: dict[str, str],
               convert: dict[str, Callable[[Any], Any]], rows: Iterable[dict[str, Any]],
               options: dict[str, Any], unseen: Sequence[str] = ()) -> dict[str, Any] | None:
    """One task attempt's part of `job`: its rows, in the directory that puts them at place
    `order` among the tasks. Returns what the driver commits ({part, order, rows, columns,
    unseen}), or None for a task without rows (it writes nothing). `unseen`: the columns whose
    type this task could not see (only nulls), for the commit's message if the tasks
    disagree."""
    part = secrets.randbits(_PART_BITS)
    writer = Writer(uri, columns=columns, part=(part, 0), job=job, name=f"{job}-{order:010d}",
                    progress=False, **options)
    written = 0
    try:
        for row in converted(rows, convert):
            writer.write(row)
            written += 1
    except (TypeError, ValueError, OverflowError) as e:
        writer.abort()
        # The Writer counts this task's samples; say so, and which task.
        raise type(e)(f"write task {order}, its row {written} (counted from the task's first): "
                      f"{e}") from e
    except BaseException:
        writer.abort()
        raise
    if written == 0:
        writer.abort()
        return None
    writer.close()
    return {"part": part, "order": order, "rows": written, "columns": columns,
            "unseen": list(unseen)}


def commit_parts(uri: str, job: str, messages: Sequence[dict[str, Any] | None]) -> dict | None:
    """Publishes the parts the engine accepted as one version (one per task, by `order`: a task
    whose two attempts both reported keeps the first); returns stoker.commit's summary, or None
    when no task wrote a row (nothing is published, the job is closed)."""
    chosen: dict[int, dict[str, Any]] = {}
    for m in messages:
        if m is not None:
            chosen.setdefault(m["order"], m)
    tasks = sorted(chosen.values(), key=lambda m: m["order"])
    for m in tasks[1:]:
        if m["columns"] != tasks[0]["columns"]:
            discard(uri, job)
            unseen = sorted(set(tasks[0].get("unseen", ())) | set(m.get("unseen", ())))
            why = (f"; {', '.join(map(repr, unseen))} held only nulls in one task's rows, whose "
                   "type could therefore not be seen there" if unseen else "")
            raise ValueError(
                f"the write tasks' columns disagree: task {tasks[0]['order']} wrote "
                f"{_schema_text(tasks[0]['columns'])}, task {m['order']} wrote "
                f"{_schema_text(m['columns'])}{why} (give the types: columns={{name: type}})")
    if not chosen:
        discard(uri, job)
        return None
    return commit(uri, job, parts=[m["part"] for m in chosen.values()])


def check_append(uri: str, columns: dict[str, str]) -> None:
    """On the driver, before any task writes: a dataset already at `uri` must have `columns`,
    as the commit would require after every task had written its part."""
    try:
        ds = Dataset(uri)
    except FileNotFoundError:
        return  # the first version
    if ds.columns != columns:
        have = _schema_text(ds.columns) if ds.columns else "files, not columns"
        raise ValueError(f"{uri} holds {have}; this write's columns are {_schema_text(columns)}:"
                         " an append needs the same (give the types: columns={name: type})")


def _schema_text(columns: dict[str, str]) -> str:
    return " ".join(f"{name}:{kind}" for name, kind in sorted(columns.items()))


def discard(uri: str, job: str) -> None:
    """A failed write: its parts go, and its attempts still running are refused, also when no
    task had written a part yet (the job is closed all the same)."""
    discard_parts(uri, job, close_empty=True)
