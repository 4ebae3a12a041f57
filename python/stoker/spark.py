"""Spark reads and writes stoker datasets through PySpark's Python Data Source API (PySpark 4;
docs/engines.md). `pip install 'stoker[spark]'` and a Java 17 runtime.

    import stoker.spark
    stoker.spark.register(spark)                      # once per SparkSession
    df = spark.read.format("stoker").load("s3://bucket/train.stoker")
    df.write.format("stoker").mode("append").save("out.stoker")     # one new version

Reading: one partition per group of whole chunks (option "partitions": how many; default:
groups of about 128 MiB, Spark's own spark.sql.files.maxPartitionBytes), each chunk read once,
in CRC-checked range reads, its rows in index order; option "version" reads that version
(default: the newest when the read is planned).
Column datasets give their columns as Spark types (int → bigint, float → double, str and json
(its text) → string, bytes / jpeg / png → binary, tokens → array of the integer type that holds
them, ndarray → nested arrays, one level per dimension (arrays of any shape: a flat array);
file datasets give (path, label, data), tar-packed ones (path, label, files: map<string,
binary>).

Writing: every task attempt writes a part and the driver's commit publishes the parts of the
attempts Spark accepted as **one** version (stoker.engine_write): a task retried after its
executor died leaves no duplicate row; nothing is visible until every task is in. Save modes:
"append" writes the next version (or the first); "overwrite" is refused (a published version
never changes: write to a new path). Options: "columns" ("image=jpeg,caption=str?": stoker
types for some columns; the rest come from the DataFrame's schema as stoker.from_parquet infers
them), "label", "chunk_size", "order", "order_seed".
"""
from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _engines

_engines.require("pyspark", "pyspark.sql.datasource", (4, 0), "stoker[spark]",
                 "PySpark's Python Data Source API with Arrow batches")
from pyspark.sql.datasource import (  # noqa: E402  (after the version check)
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType  # noqa: E402

from . import engine_read, engine_write  # noqa: E402
from .sources import base_type, column_types  # noqa: E402
from .views import Dataset  # noqa: E402

# Spark has no unsigned integers: each token type goes to the smallest signed one that holds it
# (uint64 to bigint: values of 2^63 and more do not fit, and fail the read).
_TOKEN_SPARK = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
                "uint8": "smallint", "uint16": "int", "uint32": "bigint", "uint64": "bigint"}
_TOKEN_ARROW = {"tinyint": "int8", "smallint": "int16", "int": "int32", "bigint": "int64"}
_FLOAT_SPARK = {"float16": "float", "float32": "float", "float64": "double"}


def _spark_type(kind: str) -> str:
    """A stoker column type as Spark DDL."""
    base, _, rest = kind.rstrip("?").partition(":")
    param, _, shape = rest.partition(":")
    if base == "int":
        return "bigint"
    if base == "float":
        return "double"
    if base in ("str", "json"):
        return "string"
    if base == "tokens":
        return f"array<{_TOKEN_SPARK[param or 'int32']}>"
    if base == "ndarray":
        element = (_FLOAT_SPARK.get(param) or _TOKEN_SPARK.get(param)
                   or ("boolean" if param == "bool" else "binary"))
        if element == "binary":  # complex numbers: their bytes; any dtype: a .npy file
            return "binary"
        depth = len(shape.split("x")) if shape else 1
        return "array<" * depth + element + ">" * depth
    return "binary"  # bytes, jpeg, png


def _types(ds: Dataset) -> dict[str, str]:
    """The dataset's columns and their Spark types (DDL)."""
    if not ds.columns:
        third = ("files", "map<string, binary>") if ds.grouped else ("data", "binary")
        return dict([("path", "string"), ("label", "bigint"), third])
    return {name: _spark_type(kind) for name, kind in ds.columns.items()}


def _ddl(ds: Dataset) -> str:
    return ", ".join(f"`{name}` {t}" for name, t in _types(ds).items())


def _check_schema(ds: Dataset, schema: StructType) -> None:
    """A schema given to the reader (.schema(...)) must be some of the dataset's columns with
    their types: then only those are read (a projection). Said on the driver, naming the
    column, rather than as every task's failure."""
    types = _types(ds)
    for field in schema.fields:
        if field.name not in types:
            raise ValueError(f"schema: {field.name!r} is not a column of {ds.uri} ({_ddl(ds)})")
        given, have = field.dataType.simpleString(), types[field.name].replace(" ", "")
        if given != have:
            raise ValueError(f"schema: column {field.name!r} of {ds.uri} is {have}, not {given}")


def _batch(ds: Dataset, schema: Any, plan: np.ndarray, samples: list) -> Any:
    """An Arrow batch of `samples` (indices `plan`) in the Arrow form of the Spark schema, whose
    columns are the dataset's or some of them (_check_schema)."""
    import pyarrow as pa
    arrays = []
    for field in schema:
        name = field.name
        values: list[Any]
        if not ds.columns:
            if name == "path":
                values = engine_read.path_texts(samples)
            elif name == "files":
                values = [list(s[0].items()) for s in samples]
            else:
                values = [s[1] if name == "label" else s[0] for s in samples]
            arrays.append(pa.array(values, field.type))
            continue
        kind = ds.columns[name]
        base = base_type(kind)
        values = [s.get(name) for s in samples]
        if base == "json":
            values = engine_read.json_text(values)
        elif base in ("tokens", "ndarray"):
            values = [None if v is None else _spark_value(kind, v) for v in values]
        try:
            arrays.append(pa.array(values, field.type))
        except (OverflowError, pa.ArrowInvalid) as e:
            raise ValueError(f"{ds.uri}: column {name!r} ({kind}) of a sample in "
                             f"{plan.min()} .. {plan.max()} does not fit Spark's "
                             f"{_spark_type(kind)}: {e} (a .schema() without the column leaves "
                             "it out)") from e
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _spark_value(kind: str, v: np.ndarray) -> Any:
    """An array value in its Spark form (_spark_type): nested lists for a fixed shape, a flat
    list for any shape, the bytes for complex numbers, a .npy file for any dtype."""
    _, _, rest = kind.rstrip("?").partition(":")
    param, _, shape = rest.partition(":")
    if not param and kind.startswith("ndarray"):
        buf = io.BytesIO()
        np.save(buf, v, allow_pickle=False)
        return buf.getvalue()
    if v.dtype.kind == "c":
        return v.tobytes()
    return v.tolist() if shape else v.ravel().tolist()


@dataclass
class _Chunks(InputPartition):
    plans: list  # each chunk's samples (uint32 arrays), in index order


# What Spark's own file sources put in a partition at most (spark.sql.files.maxPartitionBytes).
_PARTITION_BYTES = 128 << 20


def _default_partitions(chunks: int, chunk_bytes: int) -> int:
    """Groups of whole chunks of about 128 MiB, never more than the chunks. Each Spark task
    costs ~80 ms to run a Python worker for: one partition per chunk of 4 MiB read 314 MB in
    5.2-5.7 s on the local cluster of docs/benchmarks.md §20, 3 partitions in 1.4 s. A
    reader planning sees no SparkSession (it runs in a Python worker), so the cluster's size
    does not count: option "partitions" sets more for a small dataset on a large cluster."""
    return max(1, min(chunks, -(-chunks * chunk_bytes // _PARTITION_BYTES)))


class _Reader(DataSourceReader):
    def __init__(self, uri: str, version: int, partitions: int | None, schema: StructType) -> None:
        self.uri, self.version, self.count, self.schema = uri, version, partitions, schema

    def partitions(self) -> list[InputPartition]:  # type: ignore[override]
        ds = Dataset(self.uri, self.version)
        plans = engine_read.chunk_plans(ds)
        return [_Chunks(group) for group in engine_read.task_groups(
            plans, self.count or _default_partitions(len(plans), ds.largest_chunk_bytes))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema
        ds = Dataset(self.uri, self.version)
        schema = to_arrow_schema(self.schema)
        yield from engine_read.read_blocks(ds, partition.plans,  # type: ignore[attr-defined]
                                           lambda plan, samples: _batch(ds, schema, plan,
                                                                        samples))


@dataclass
class _Part(WriterCommitMessage):
    payload: dict | None  # engine_write.write_part's message; None: the task had no rows


class _Writer(DataSourceArrowWriter):
    def __init__(self, uri: str, schema: StructType, options: dict[str, str]) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        self.uri = uri
        self.job = engine_write.new_job("spark")  # made once, on the driver: every task's
        overrides = _column_options(options.get("columns", ""))
        self.types, self.convert = column_types(to_arrow_schema(schema), overrides)
        engine_write.check_append(uri, self.types)
        self.writer_options: dict[str, Any] = {}
        for key in ("label", "chunk_size", "order"):
            if options.get(key):
                self.writer_options[key] = options[key]
        if options.get("order_seed"):
            self.writer_options["order_seed"] = int(options["order_seed"])

    def write(self, iterator: Iterator[Any]) -> _Part:  # type: ignore[override]
        import pyarrow as pa
        from pyspark import TaskContext

        def rows() -> Iterator[dict]:
            for batch in iterator:
                yield from engine_write.table_rows(pa.Table.from_batches([batch]))

        context = TaskContext.get()
        order = context.partitionId() if context is not None else 0
        return _Part(engine_write.write_part(self.uri, self.job, order, self.types, self.convert,
                                             rows(), self.writer_options))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        engine_write.commit_parts(self.uri, self.job,
                                  [m.payload if isinstance(m, _Part) else None for m in messages])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        engine_write.discard(self.uri, self.job)


def _column_options(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, eq, kind = item.partition("=")
        if not (name and eq and kind):
            raise ValueError(f"option columns: {item!r}: give NAME=TYPE, e.g. image=jpeg")
        out[name.strip()] = kind.strip()
    return out


class StokerDataSource(DataSource):
    """format("stoker"): a stoker dataset as a Spark data source (stoker.spark.register)."""

    @classmethod
    def name(cls) -> str:
        return "stoker"

    def _uri(self) -> str:
        uri = self.options.get("path")
        if not uri:
            raise ValueError('format("stoker") needs a path: .load(path) or .save(path)')
        return os.fspath(uri)

    def _number(self, key: str) -> int | None:
        text = self.options.get(key)
        if not text:
            return None
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"option {key}: {text!r} is not a whole number") from None
        if n < 1:
            raise ValueError(f"option {key}: {n} (it counts from 1)")
        return n

    def _dataset(self) -> Dataset:
        return Dataset(self._uri(), self._number("version"))

    def schema(self) -> str:  # type: ignore[override]
        return _ddl(self._dataset())

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_options(self.options, _READ_OPTIONS, "reading")
        ds = self._dataset()
        _check_schema(ds, schema)
        return _Reader(self._uri(), ds.version, self._number("partitions"), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ValueError('stoker never replaces a published version: use mode("append") '
                             "to write the next version, or save to a new path")
        _check_options(self.options, _WRITE_OPTIONS, "writing")
        return _Writer(self._uri(), schema, dict(self.options))


# The options format("stoker") takes (Spark lower-cases their names); "path" is load()'s or
# save()'s argument.
_READ_OPTIONS = ("path", "version", "partitions")
_WRITE_OPTIONS = ("path", "columns", "label", "chunk_size", "order", "order_seed")


def _check_options(options: Any, known: tuple[str, ...], doing: str) -> None:
    """A misspelled option is an error naming the known ones, not silently ignored."""
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise ValueError(f'format("stoker") {doing} takes no option {", ".join(unknown)} '
                         f"(its options: {', '.join(k for k in known if k != 'path')})")


def jar() -> str:
    """The path of stoker-spark.jar, format("stoker-jvm"): stoker's Spark writer in the
    executors' JVMs (no Python worker between Spark and the pack; docs/engines.md). Give it to
    the session before it starts: SparkSession.builder.config("spark.jars", stoker.spark.jar())."""
    path = Path(__file__).parent / "jars" / "stoker-spark.jar"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: this stoker was built without its Spark jar (building it needs javac, "
            "e.g. Debian's openjdk-17-jdk-headless, and pyspark installed); "
            'format("stoker") works without it')
    return str(path)


def register(spark: Any) -> None:
    """Makes format("stoker") known to `spark` (a SparkSession)."""
    spark.dataSource.register(StokerDataSource)


__all__ = ["StokerDataSource", "jar", "register"]
