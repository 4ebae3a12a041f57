"""Ray Data reads and writes stoker datasets, and Ray clusters lend their CPUs as feeders
(docs/engines.md). `pip install 'stoker[ray]'` (Ray 2.60 or newer).

    import stoker.ray
    ds = stoker.ray.read("s3://bucket/train.stoker")            # a ray.data.Dataset
    ds = stoker.ray.read_images(uri, size=224)                  # decoded in the read tasks (C++)
    for batch in ds.iter_torch_batches(batch_size=256): ...
    ds.map_batches(fn).write_datasink(stoker.ray.Datasink("out.stoker"))   # one new version
    with stoker.ray.start_feeders(8, job="resnet42") as feeders:           # `stoker feed` actors
        ... stoker.ImageLoader(uri, feeders=feeders.addresses) in the trainers ...

Reading: one read task per group of whole chunks (each chunk is read once, by one task, in
CRC-checked range reads); a block per chunk, its rows in index order; the version is fixed when
`read` is called, so every task reads the same one. Column datasets give their columns as Arrow
types (int → int64, float → float64, str → string, json → string (the JSON text), bytes / jpeg /
png → binary, tokens → list of their integer type, ndarray → Ray's tensor type); an optional
column's missing value is a null. File datasets give {path, label, data}; tar-packed (grouped)
ones {path (the sample's key), label, files (a map of extension to bytes)}.

Writing: each write task's attempt writes a part (docs/format.md §5.3) and the driver publishes
the parts of the attempts Ray accepted as **one** version (stoker.engine_write): a task retried
after its worker died leaves no duplicate row, and nothing is visible until every task is in.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import _engines

log = logging.getLogger("stoker")

# Ray Data's Datasink with WriteResult, ReadTask's row limit.
ray = _engines.require("ray", "ray.data", (2, 60), "stoker[ray]",
                       "Ray Data's Datasink (WriteResult) and ReadTask's row limit")
from ray.data import Datasink as _RayDatasink  # noqa: E402  (after the version check)
from ray.data import Datasource, ReadTask  # noqa: E402
from ray.data.block import BlockAccessor, BlockMetadata  # noqa: E402

from . import _core, engine_read, engine_write  # noqa: E402
from ._core import parse_transform_options, transform_images  # noqa: E402
from .sources import base_type, column_types  # noqa: E402
from .views import Dataset, DatasetView  # noqa: E402

# --- reading ------------------------------------------------------------------------------


def _arrow_schema(ds: Dataset, names: list[str] | None = None) -> Any:
    """The blocks' schema (of a column dataset's columns `names`, default all), or None where
    Ray's tensor type for a column of arrays of any shape depends on the values."""
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray
    if not ds.columns:
        if ds.grouped:
            return pa.schema([("path", pa.string()), ("label", pa.int64()),
                              ("files", pa.map_(pa.string(), pa.binary()))])
        return pa.schema([("path", pa.string()), ("label", pa.int64()), ("data", pa.binary())])
    fields = []
    for name in names if names is not None else ds.columns:
        base, _, rest = ds.columns[name].rstrip("?").partition(":")
        param, _, shape = rest.partition(":")
        if base == "int":
            t = pa.int64()
        elif base == "float":
            t = pa.float64()
        elif base in ("str", "json"):
            t = pa.string()
        elif base == "tokens":
            t = pa.list_(pa.from_numpy_dtype(np.dtype(param or "int32")))
        elif base == "ndarray" and param and shape:
            # The type Ray makes for such arrays (its tensor type's version varies by release).
            dims = tuple(int(d) for d in shape.split("x"))
            t = ArrowTensorArray.from_numpy(np.zeros((1, *dims), dtype=param)).type
        elif base == "ndarray":
            return None
        else:  # bytes, jpeg, png
            t = pa.binary()
        fields.append(pa.field(name, t))
    return pa.schema(fields)


def _column_array(name: str, kind: str, values: list, schema: Any) -> Any:
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray
    base = base_type(kind)
    if base == "ndarray":
        if any(v is None for v in values):
            raise ValueError(f"column {name!r}: Ray's tensor columns hold no nulls, and a sample "
                             "lacks a value")
        if schema is not None:  # every value has the column's shape
            return ArrowTensorArray.from_numpy(np.stack(values))
        ragged = np.empty(len(values), dtype=object)
        ragged[:] = values
        return ArrowTensorArray.from_numpy(ragged)
    if base == "json":
        values = engine_read.json_text(values)
    if base == "tokens":
        values = [None if v is None else np.asarray(v) for v in values]
    return pa.array(values, type=schema.field(name).type if schema is not None else None)


def _block(ds: Dataset, schema: Any, samples: list, names: list[str] | None = None) -> Any:
    """A chunk's block: a column dataset's columns `names` (default all), only those converted;
    a file dataset's path, label and data (or files)."""
    import pyarrow as pa
    if ds.columns:
        names = list(ds.columns) if names is None else names
        arrays = [_column_array(name, ds.columns[name], [s.get(name) for s in samples], schema)
                  for name in names]
        if schema is not None:
            return pa.Table.from_arrays(arrays, schema=schema)
        return pa.Table.from_arrays(arrays, names=names)
    if ds.grouped:
        rows = {"path": engine_read.path_texts(samples), "label": [s[1] for s in samples],
                "files": [list(s[0].items()) for s in samples]}
    else:
        rows = {"path": engine_read.path_texts(samples), "label": [s[1] for s in samples],
                "data": [s[0] for s in samples]}
    return pa.table(rows, schema=schema)


def _read_chunks(ds: Dataset, plans: list[np.ndarray], names: list[str] | None) -> Iterator[Any]:
    """The blocks of a read task: one per chunk, its samples in index order."""
    schema = _arrow_schema(ds, names)
    yield from engine_read.read_blocks(ds, plans,
                                       lambda _, samples: _block(ds, schema, samples, names))


class StokerDatasource(Datasource):
    """A stoker dataset as a Ray Data source (what stoker.ray.read and read_images read)."""

    def __init__(self, source: str | os.PathLike | _core.Dataset | DatasetView,
                 version: int | None = None, images: _ImageDecode | None = None,
                 columns: list[str] | None = None) -> None:
        super().__init__()
        # The version is fixed here, for every task.
        self._dataset, self._indices = _open(source, version)
        self._images = images
        # A column dataset's columns to read (the others are never converted); None: all.
        self._columns = None
        if columns is not None:
            ds = self._dataset
            known = list(ds.columns) or ["path", "label", "files" if ds.grouped else "data"]
            missing = [c for c in columns if c not in known]
            if missing or not columns:
                raise ValueError(f"columns {missing or columns} are not in {ds.uri} ({known})")
            self._columns = columns if ds.columns else None
        self._by_chunk: list[np.ndarray] | None = None

    def get_name(self) -> str:
        return "StokerImages" if self._images else "Stoker"

    def _chunks(self) -> list[np.ndarray]:
        if self._by_chunk is None:  # Ray plans several times: list the samples once
            self._by_chunk = engine_read.chunk_plans(self._dataset, self._indices)
        return self._by_chunk

    def _bytes(self, plans: list[np.ndarray]) -> int:
        """What reading these chunks' samples makes, estimated."""
        if self._images:
            return sum(len(p) for p in plans) * self._images.sample_bytes
        return len(plans) * self._dataset.largest_chunk_bytes

    def estimate_inmemory_data_size(self) -> int | None:
        return self._bytes(self._chunks()) or None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        ds = self._dataset
        schema = self._images.schema(ds) if self._images else _arrow_schema(ds, self._columns)
        # Decoding may leave rows out (a README, on_error="skip"): Ray must count them.
        exact = not self._images or (ds.columns and self._images.on_error == "raise")
        tasks = []
        for plans in engine_read.task_groups(self._chunks(), parallelism):
            meta = BlockMetadata(num_rows=sum(len(p) for p in plans) if exact else None,
                                 size_bytes=self._bytes(plans), exec_stats=None,
                                 input_files=None)
            read = (functools.partial(self._images.read_chunks, ds, plans) if self._images
                    else functools.partial(_read_chunks, ds, plans, self._columns))
            tasks.append(ReadTask(read, meta, schema=schema,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


def _open(source: str | os.PathLike | _core.Dataset | DatasetView,
          version: int | None) -> tuple[Dataset, np.ndarray | None]:
    """The dataset a read reads, and the samples of it (None: all)."""
    if isinstance(source, (_core.Dataset, DatasetView)):
        base = source.base if isinstance(source, DatasetView) else source
        if version is not None and version != base.version:
            raise ValueError(f"version={version}, but the dataset given is version {base.version} "
                             f"of {base.uri}")
        ds = base if isinstance(base, Dataset) else Dataset(base.uri, base.version)
        return ds, source.indices if isinstance(source, DatasetView) else None
    return Dataset(source, version), None


def _default_read_tasks(source: StokerDatasource) -> int:
    """Twice the CPUs the cluster has when the read is made (one of the terms of Ray Data's own
    rule, without its floor of 200), at least 2, never more than the chunks. A task reads its
    chunks one after another, a block each, so a few tasks keep every CPU busy; each more costs
    Ray ~20 ms to schedule and start (on the 2-core machine of docs/benchmarks.md §19, one task
    per chunk was 1.5-2.7x slower). A cluster that will grow (an autoscaler) should say
    override_num_blocks. The number is always passed to Ray explicitly: with fewer tasks than it
    would choose itself, Ray splits each task's output (SplitBlocks), and a split read is never
    fused with a map_batches after it."""
    if not ray.is_initialized():
        ray.init()  # as ray.data's reads do on first use
    cpus = ray.cluster_resources().get("CPU", 0)
    return max(1, min(len(source._chunks()), max(2, math.ceil(2 * cpus))))


def _read(source: StokerDatasource, override_num_blocks: int | None,
          concurrency: int | None, ray_remote_args: dict | None) -> Any:
    options: dict[str, Any] = {
        "override_num_blocks": override_num_blocks if override_num_blocks is not None
        else _default_read_tasks(source)}
    if concurrency is not None:
        options["concurrency"] = concurrency
    if ray_remote_args:
        options.update(ray_remote_args)
    return ray.data.read_datasource(source, **options)


def read(path_or_uri: str | os.PathLike | _core.Dataset | DatasetView,
         columns: Sequence[str] | str | None = None,
         version: int | None = None, *, override_num_blocks: int | None = None,
         concurrency: int | None = None, ray_remote_args: dict | None = None) -> Any:
    """A stoker dataset (a path or URI of any store stoker reads, a stoker.Dataset, or a view of
    one: its samples, chunk by chunk) as a ray.data.Dataset, one read task per group of whole
    chunks. `columns` keeps those columns only; `version` reads that version (default: the
    newest, fixed now). `override_num_blocks` sets the number of read tasks (at most one per
    chunk; default: twice the cluster's CPUs); each yields a block per chunk."""
    if isinstance(columns, str):
        columns = [columns]  # one column, as Ray's select_columns takes it
    source = StokerDatasource(path_or_uri, version,
                              columns=None if columns is None else list(columns))
    out = _read(source, override_num_blocks, concurrency, ray_remote_args)
    if columns is not None and not source._dataset.columns:
        out = out.select_columns(list(columns))  # a file dataset's three: Ray cuts them
    return out


def read_images(path_or_uri: str | os.PathLike | _core.Dataset | DatasetView, *,
                column: str | None = None,
                include_paths: bool = False, on_error: str = "raise", seed: int | None = None,
                threads: int = 1, version: int | None = None,
                override_num_blocks: int | None = None, concurrency: int | None = None,
                ray_remote_args: dict | None = None, **transform: Any) -> Any:
    """A stoker dataset's images decoded and transformed in its read tasks, by stoker's C++
    decoder and resampler (what stoker.ImageLoader runs): a ray.data.Dataset whose `image`
    column (or `column`'s) holds fixed-shape arrays, ready for iter_torch_batches.

    `transform` takes stoker.ImageLoader's image options (docs/augment.md), with defaults of its
    own: train=False, size=224 (Resize(256) + CenterCrop(224)), dtype="uint8", layout="NHWC"
    (Ray's (H, W, 3) images, 4x smaller than float32 in the object store); center_crop=False
    resizes the whole image to `size` as ray.data.read_images(size=...) does; train=True is
    RandomResizedCrop + flip, each sample's parameters drawn from (seed, its index): the same
    crops on every pass with a `seed`, new ones on every pass (every execution of a read task)
    with seed=None.

    File datasets give {image, label} (+ path with include_paths), leaving out files that are no
    image at all (a README: no JPEG/PNG signature, no image extension) as ImageLoader does;
    column datasets every column, the image column decoded (default: the one jpeg or png
    column); tar-packed datasets {image, label} (+ path) from member `column` (default: the
    sample's first member with an image extension, as ImageLoader picks it). `on_error`:
    "raise" (a ValueError naming the sample) or "skip" (the row is left out, with a warning in
    the task's log). `threads`: decoding threads per read task, which then asks Ray for as many
    CPUs unless ray_remote_args says otherwise. Other arguments as read()."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    if not 1 <= threads <= 1024:
        raise ValueError("threads must be 1 .. 1024")
    if seed is not None and not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in 0 .. 2**64 - 1, not {seed}")
    try:
        options = parse_transform_options(
            {"train": False, "size": 224, "dtype": "uint8", "layout": "NHWC", **transform})
    except KeyError as e:
        name = str(e.args[0]).removeprefix("unknown image option ")
        raise TypeError(f"read_images() got an unexpected keyword argument {name!r} (the image "
                        "options are stoker.ImageLoader's: docs/augment.md)") from None
    images = _ImageDecode(options, column, include_paths, on_error, seed, threads)
    source = StokerDatasource(path_or_uri, version, images)
    images.check(source._dataset)
    remote = dict(ray_remote_args or {})
    if threads > 1 and "num_cpus" not in remote:
        remote["num_cpus"] = threads
        # A task asking for more CPUs than any node has would wait for ever (Ray only warns).
        # ray_remote_args={"num_cpus": ...} is not checked: an autoscaler may add such nodes.
        if not ray.is_initialized():
            ray.init()
        most = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")),
                   default=0)
        if most and threads > most:
            raise ValueError(f"threads={threads}: each read task would ask Ray for {threads} "
                             f"CPUs, and no node of this cluster has more than {most:g} (pass "
                             "fewer threads, or ray_remote_args={'num_cpus': ...})")
    return _read(source, override_num_blocks, concurrency, remote)


# The members ImageLoader takes for a tar-packed sample's image (image_members.cc, ImageFile).
_IMAGE_MEMBERS = ("jpg", "jpeg", "png")


def _extension_path(path: str) -> str:
    """A name with `path`'s extension only, for transform_images' rule that tells a README from
    a damaged image (NotAnImage): any file name, even one not valid UTF-8 (kept as surrogate
    escapes), goes as text; an extension that is not text is no image extension."""
    _, dot, ext = path.rsplit("/", 1)[-1].rpartition(".")
    return "f." + (ext if dot else "").encode("utf-8", "replace").decode("utf-8")


class _ImageDecode:
    """read_images' settings, and how its read tasks turn a chunk's samples into a block."""

    def __init__(self, options: dict, column: str | None, include_paths: bool, on_error: str,
                 seed: int | None, threads: int) -> None:
        self.options, self.column, self.include_paths = options, column, include_paths
        self.on_error, self.seed, self.threads = on_error, seed, threads
        height, width = (options["size"], options["size"]) if isinstance(options["size"], int) \
            else options["size"]
        self.shape = (height, width, 3) if options["layout"] == "NHWC" else (3, height, width)
        self.dtype = np.dtype(options["dtype"])
        self.sample_bytes = math.prod(self.shape) * self.dtype.itemsize

    def check(self, ds: Dataset) -> None:
        """Chooses the image column (or member) of `ds`, or says why there is none."""
        if not ds.columns:
            if self.column is not None and not ds.grouped:
                raise ValueError(f"{ds.uri} is a file dataset: its images are its files "
                                 "(column= names a column of a column dataset)")
            return
        images = [n for n, k in ds.columns.items()
                  if base_type(k) in ("jpeg", "png")]
        if self.column is None:
            if len(images) > 1:
                raise ValueError(f"{ds.uri} has {len(images)} jpeg/png columns ({images}): say "
                                 "which with column=")
            if not images:
                raw = [n for n, k in ds.columns.items() if base_type(k) == "bytes"]
                raise ValueError(
                    f"{ds.uri} has no jpeg or png column ({ds.columns})" + (
                        f": if bytes column {raw[0]!r} holds images, say column={raw[0]!r} (a "
                        "writer that infers types stores image bytes as bytes; columns="
                        f"{{{raw[0]!r}: 'jpeg'}} types them)" if raw else ""))
            self.column = images[0]
        kind = ds.columns.get(self.column)
        if kind is None:
            raise ValueError(f"column {self.column!r} is not in {ds.uri} ({list(ds.columns)})")
        if base_type(kind) not in ("jpeg", "png", "bytes"):
            raise ValueError(f"column {self.column!r} holds {kind}, not encoded images")

    def schema(self, ds: Dataset) -> Any:
        import pyarrow as pa
        from ray.data.extensions import ArrowTensorArray
        image = pa.field(self.column if ds.columns else "image",
                         ArrowTensorArray.from_numpy(np.zeros((1, *self.shape), self.dtype)).type)
        if ds.columns:
            rest = _arrow_schema(ds)
            if rest is None:
                return None
            return pa.schema([image if f.name == self.column else f for f in rest])
        fields = [image, pa.field("label", pa.int64())]
        return pa.schema(fields + [pa.field("path", pa.string())] if self.include_paths else fields)

    def read_chunks(self, ds: Dataset, plans: list[np.ndarray]) -> Iterator[Any]:
        seed = self.seed if self.seed is not None else secrets.randbits(64)
        rest = _arrow_schema(ds) if ds.columns else None
        blocks = engine_read.read_blocks(
            ds, plans, lambda plan, samples: self._block(ds, rest, seed, plan, samples))
        yield from (b for b in blocks if b is not None)

    def _block(self, ds: Dataset, rest: Any, seed: int, plan: np.ndarray, samples: list) -> Any:
        """The chunk's block, or None when on_error="skip" left every sample out (an empty
        block of arrays cannot say its arrays' shape)."""
        import pyarrow as pa
        from ray.data.extensions import ArrowTensorArray
        paths = None  # a file's name tells a README from a damaged image (ImageLoader's rule)
        if ds.columns:
            encoded = [s.get(self.column) for s in samples]
        elif ds.grouped:
            members = [self._member(s[0]) for s in samples]
            encoded = [s[0].get(m) if m is not None else None
                       for s, m in zip(samples, members, strict=True)]
            if self.column is None:  # a sample without files fails below, named: "f.jpg"
                paths = [_extension_path(f"f.{m}" if m is not None else "f.jpg")
                         for m in members]
        else:
            encoded = [s[0] for s in samples]
            paths = [_extension_path(s[2]) for s in samples]
        missing = {i for i, e in enumerate(encoded) if e is None}
        for i in missing:
            encoded[i] = b""  # fails below as "not an image", named with the others
        pixels, failed, not_images = transform_images(encoded, self.options, plan, seed, 0,
                                                      self.threads, paths)
        keep = np.ones(len(samples), dtype=bool)
        keep[not_images] = False  # left out whatever on_error says, as ImageLoader does
        for i, error in failed:
            name = self._name(ds, plan[i], samples[i])
            why = (f"has no {self.column or 'image member'!r}" if i in missing
                   else f"cannot be decoded: {error}")
            if self.on_error == "raise":
                raise ValueError(f"{ds.uri}: {name} {why}")
            # A read task's warning would stay in its worker: a log line reaches the driver.
            log.warning("stoker.ray.read_images: skipping %s of %s: it %s", name, ds.uri, why)
            keep[i] = False
        if not keep.any():
            return None
        if not keep.all():
            pixels = pixels[keep]
            samples = [s for s, k in zip(samples, keep, strict=True) if k]
        image = ArrowTensorArray.from_numpy(pixels)
        if ds.columns:
            arrays = [image if name == self.column
                      else _column_array(name, kind, [s.get(name) for s in samples], rest)
                      for name, kind in ds.columns.items()]
            return pa.Table.from_arrays(arrays, names=list(ds.columns))
        table = {"image": image, "label": pa.array([s[1] for s in samples], pa.int64())}
        if self.include_paths:
            table["path"] = pa.array(engine_read.path_texts(samples), pa.string())
        return pa.table(table)

    def _member(self, files: dict) -> str | None:
        """A tar-packed sample's image member: `column`; else its only one, its first whose
        extension (after the last dot: "left.jpg") is jpg, jpeg or png, or its first, as
        ImageLoader picks it (src/loader/image_members.cc, ImageFile)."""
        if self.column is not None:
            return self.column
        return next((m for m in files if m.rsplit(".", 1)[-1].lower() in _IMAGE_MEMBERS),
                    next(iter(files), None))

    @staticmethod
    def _name(ds: Dataset, index: int, sample: Any) -> str:
        return f"sample {index}" if ds.columns else f"sample {index} ({sample[2]})"


# --- writing ------------------------------------------------------------------------------


class Datasink(_RayDatasink):
    """Writes a ray.data.Dataset as one new version of a column dataset:
    `ds.write_datasink(stoker.ray.Datasink(path, columns=None, append=False, **options))`.

    Column types come from the data's Arrow schema as stoker.from_parquet infers them (every
    column optional); `columns={name: type}` sets any (e.g. {"image": "jpeg"}). `append=True`
    adds a version to an existing dataset (else the path must not hold one). Other options are
    stoker.Writer's: label, chunk_size, order, order_seed, mix_memory. After the write,
    `summary` is stoker.commit's summary (None when the data had no rows: nothing is written).
    """

    def __init__(self, path: str | os.PathLike, columns: dict[str, str] | None = None, *,
                 append: bool = False, **options: Any) -> None:
        unknown = set(options) - set(engine_write.WRITER_OPTIONS)
        if unknown:
            raise TypeError(f"unexpected keyword arguments {sorted(unknown)} (stoker.Writer's: "
                            f"{', '.join(engine_write.WRITER_OPTIONS)})")
        self.path = os.fspath(path)
        self.columns = dict(columns) if columns else None
        self.append = append
        self.options = options
        self.summary: dict | None = None
        self._job: str | None = None
        self._types: dict[str, str] | None = None

    def get_name(self) -> str:
        return "Stoker"

    def on_write_start(self, schema: Any = None) -> None:
        context = ray.data.DataContext.get_current()
        if getattr(context, "max_errored_blocks", 0) != 0:
            raise ValueError("stoker.ray.Datasink writes every row or none: set "
                             "DataContext.max_errored_blocks to 0 (it would drop failed blocks)")
        _check_destination(self.path, self.append)
        self._job = engine_write.new_job("ray")
        # Each task infers its types from its own rows (a disagreement fails the commit, naming
        # both tasks); the first rows' schema only types a task's columns that hold no value.
        if schema is not None:
            self._types = column_types(schema, self.columns)[0]

    def write(self, blocks: Any, ctx: Any) -> dict | None:
        # Blocks without rows (what a filter() left empty) have no columns to type: skipped.
        tables = (t for t in (BlockAccessor.for_block(b).to_arrow() for b in blocks)
                  if t.num_rows)
        if self._job is None:  # Ray calls on_write_start before any task: never drop rows
            raise RuntimeError("stoker.ray.Datasink.write ran before on_write_start")
        first = next(tables, None)
        if first is None:
            return None
        types, convert = column_types(first.schema, self.columns)
        unseen = []
        for field in first.schema:
            if str(field.type) != "null" or field.name in (self.columns or {}):
                continue
            known = (self._types or {}).get(field.name)
            if known is not None and base_type(known) != "json":
                types[field.name] = known
            else:
                unseen.append(field.name)

        def rows() -> Iterator[dict]:
            yield from engine_write.table_rows(first)
            for t in tables:
                yield from engine_write.table_rows(t)

        return engine_write.write_part(self.path, self._job, ctx.task_idx, types, convert,
                                       rows(), self.options, unseen)

    def on_write_complete(self, write_result: Any) -> None:
        if self._job is None:  # no block ever came: nothing was written
            return
        self.summary = engine_write.commit_parts(self.path, self._job,
                                                 list(write_result.write_returns))

    def on_write_failed(self, error: Exception) -> None:
        if self._job is not None:
            try:
                engine_write.discard(self.path, self._job)
            except OSError as e:  # the write's own error is the one to see
                warnings.warn(f"stoker.ray.Datasink: discarding the parts of {self._job} "
                              f"failed: {e}", stacklevel=2)


def _check_destination(path: str, append: bool) -> None:
    """A write without append=True creates a dataset: refuse one that exists, before any task."""
    try:
        Dataset(path)
        exists = True
    except FileNotFoundError:
        exists = False
    if exists and not append:
        raise FileExistsError(f"{path} holds a dataset: pass append=True to add a version")

# --- feeders ------------------------------------------------------------------------------


def _stoker_cli() -> str:
    """The `stoker` CLI installed beside this Python (pip install puts it in its bin/)."""
    here = os.path.join(os.path.dirname(sys.executable), "stoker")
    found = here if os.access(here, os.X_OK) else shutil.which("stoker")
    if not found:
        raise FileNotFoundError("the stoker CLI is not installed beside "
                                f"{sys.executable} nor on PATH (pip install stoker)")
    return found


def _die_with_parent() -> None:
    """In the feeder's child, before exec: SIGTERM when the actor's process dies, however it
    dies (a feeder outliving its actor would hold the node's CPUs for nothing)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@ray.remote
class _Feeder:
    """One `stoker feed` process on a Ray node, reachable at `address`."""

    def __init__(self, job: str, secret: tuple[str, bytes], args: list[str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="stoker-feeder-")
        try:
            self._start(job, secret, args)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _start(self, job: str, secret: tuple[str, bytes], args: list[str]) -> None:
        # The secret as the trainers have it: the file's bytes as they are (stoker feed reads
        # them exactly as the trainers do), or $STOKER_SECRET.
        env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SECRET_FILE",
                                                                  "STOKER_SECRET")}
        kind, value = secret
        if kind == "file":
            secret_file = os.path.join(self._dir, "secret")
            fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            args = ["--secret-file", secret_file, *args]
        else:
            env["STOKER_SECRET"] = value.decode()
        # The address Ray knows this node by, which the cluster's other nodes reach.
        host = ray.util.get_node_ip_address()
        self._stderr = open(os.path.join(self._dir, "stderr"), "w+")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [_stoker_cli(), "feed", "--job", job, "--listen", f"{host}:0", "--json", *args],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
            preexec_fn=_die_with_parent)
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line:
            self._proc.wait(timeout=30)
            self._stderr.seek(0)
            raise RuntimeError(f"stoker feed did not start: {self._stderr.read().strip()}")
        self.address = f"{host}:{json.loads(line)['listening'].rpartition(':')[2]}"

    def where(self) -> str:
        return self.address

    def stop(self) -> dict:
        """SIGTERM; the feeder's counters ({"slices", "samples", ...})."""
        try:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
            try:
                out, _ = self._proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                out, _ = self._proc.communicate()
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            counters = json.loads(lines[-1]) if lines else {}
            counters["exit_code"] = self._proc.returncode
            if self._proc.returncode != 0:
                self._stderr.seek(0)
                counters["stderr"] = self._stderr.read().strip()[-2000:]
            return counters
        finally:
            self._stderr.close()
            shutil.rmtree(self._dir, ignore_errors=True)


def _stop_all(actors: list) -> list[dict]:
    stops = [a.stop.remote() for a in actors]
    out = []
    for actor, stop in zip(actors, stops, strict=True):
        try:
            out.append(ray.get(stop))
        except Exception as e:  # a dead actor: its feeder died with it (_die_with_parent)
            out.append({"error": str(e).splitlines()[0] if str(e) else type(e).__name__})
        ray.kill(actor)
    return out


class Feeders:
    """Feeders running as Ray actors (start_feeders): `addresses` for ImageLoader(feeders=...);
    stop() (or leaving a `with` block) stops them and returns each one's counters."""

    def __init__(self, actors: list, addresses: list[str]) -> None:
        self._actors = actors
        self.addresses = addresses
        self.counters: list[dict] | None = None

    def stop(self) -> list[dict]:
        """Stops every feeder, one by one: one whose actor died gives {"error": why}."""
        if self.counters is None:
            self.counters = _stop_all(self._actors)
        return self.counters

    def __enter__(self) -> Feeders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"stoker.ray.Feeders({self.addresses})"


def start_feeders(n: int, job: str, *, secret_file: str | os.PathLike | None = None,
                  num_cpus: float = 1, threads: int | None = None,
                  memory_limit: str | int | None = None, announce: str | os.PathLike | None = None,
                  extra_args: Sequence[str] = ()) -> Feeders:
    """Starts `n` feeders (`stoker feed`, docs/feeders.md) as Ray actors, spread over the
    cluster's nodes, each holding `num_cpus` CPUs of Ray's (and decoding with that many threads
    unless `threads` says otherwise). The job's secret comes from `secret_file`, else
    $STOKER_SECRET_FILE / $STOKER_SECRET, exactly as the trainers read it. `announce` appends
    their addresses to a file that ImageLoader(feeders=FILE) reads every epoch. `extra_args`
    are more `stoker feed` flags (e.g. ["--store", uri, "--peers", ...]). Returns a Feeders
    handle once all listen (a feeder that cannot start, e.g. a secret `stoker feed` refuses,
    raises RuntimeError with its message, and stops the others)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    secret = _job_secret(secret_file)
    args = ["--threads", str(threads if threads is not None else max(1, int(num_cpus)))]
    if memory_limit is not None:
        args += ["--memory-limit", str(memory_limit)]
    if announce is not None:  # each feeder appends itself, as `stoker feed --announce` does
        args += ["--announce", os.path.abspath(announce)]
    args += list(extra_args)
    actors = [_Feeder.options(num_cpus=num_cpus, scheduling_strategy="SPREAD").remote(  # type: ignore[attr-defined]
        job, secret, args) for _ in range(n)]
    try:
        addresses = ray.get([a.where.remote() for a in actors])
    except Exception:
        _stop_all(actors)  # those that started stop, and remove their copy of the secret
        raise
    return Feeders(actors, addresses)


def _job_secret(secret_file: str | os.PathLike | None) -> tuple[str, bytes]:
    """("file", its bytes as they are) or ("env", $STOKER_SECRET): what the feeders get, for
    `stoker feed` to read exactly as the trainers read theirs (it checks them too)."""
    path = secret_file or os.environ.get("STOKER_SECRET_FILE")
    if path:
        with open(path, "rb") as f:
            return "file", f.read(64 << 10)
    if os.environ.get("STOKER_SECRET"):
        return "env", os.environ["STOKER_SECRET"].encode()
    raise ValueError("feeders need the job's secret: pass secret_file= or set "
                     "STOKER_SECRET_FILE (or STOKER_SECRET), as the trainers do")


__all__ = ["Datasink", "Feeders", "StokerDatasource", "read", "read_images", "start_feeders"]
