"""stoker C++ core: datasets, pack, verify and the sampler"""

from collections.abc import Sequence
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray

from stoker import CorruptionError as CorruptionError
from stoker._core import image as image


def node_reads(dataset: object) -> tuple[int, int] | None:
    """
    (chunk reads served by the node daemon's cache, chunk reads from the store) of a dataset read through `stoker node` ($STOKER_NODE), since it was opened; None without one.
    """

class Dataset:
    """
    A packed dataset (one version), map-style: len(ds) samples, ds[i] -> (bytes, label, path); for tar-packed datasets ds[i] -> ({ext: bytes}, label, key); for column datasets (stoker.Writer) ds[i] -> {column: value}. Labels are -1 when absent.
    """

    def __init__(self, uri: object, version: int | None = None) -> None:
        """
        Opens a version (the newest by default) at a path or URI: str, bytes or any os.PathLike.
        """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> object: ...

    def find(self, path: object) -> int:
        """
        File index of a path (str, bytes or os.PathLike); FileNotFoundError if absent.
        """

    def stat(self, path_or_index: object) -> dict:
        """
        dict(index, path, size, crc32c, label, class, chunk (id), chunk_index, offset, attributes)
        """

    def read(self, path_or_index: object) -> bytes:
        """A file's bytes (CRC-checked) by path or file index."""

    def read_buffer(self, path_or_index: object) -> Annotated[memoryview, dict(dtype='uint8', shape=(None,), writable=False)]:
        """
        Like read(), as a read-only memoryview over the C++ buffer (no copy into bytes).
        """

    def listdir(self, path: object = '') -> list:
        """Names in a directory: subdirectories first, then files, each sorted."""

    def sample_files(self, index: int) -> list:
        """Paths of the files making up sample `index`."""

    @property
    def uri(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def num_files(self) -> int: ...

    @property
    def num_samples(self) -> int: ...

    @property
    def num_chunks(self) -> int: ...

    @property
    def classes(self) -> list:
        """Class names; label i is classes[i]."""

    @property
    def columns(self) -> dict:
        """
        A column dataset's schema {name: type} (stoker.Writer); {} for other datasets.
        """

    @property
    def label_column(self) -> str | None:
        """The column whose values label a column dataset's samples, or None."""

    @property
    def grouped(self) -> bool:
        """True for tar-packed datasets, whose samples are groups of files."""

    @property
    def largest_chunk_bytes(self) -> int:
        """
        Size of the largest chunk file: sizes the read pipeline's memory for chunk shuffle.
        """

    def __repr__(self) -> str: ...

    def __getstate__(self) -> tuple: ...

    def __setstate__(self, arg: tuple, /) -> None: ...

def transform_images(samples: list, options: dict, indices: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)], seed: int = 0, epoch: int = 0, threads: int = 1, paths: Sequence[str] | None = None) -> tuple:
    """
    Decodes and transforms `samples` (a list of JPEG/PNG bytes) as stoker.ImageLoader would, with `options` (the transform's, as parse_transform_options takes them); sample i's random parameters come from (seed, epoch, indices[i]). With `paths` (the samples' file names), a file that is no image at all (no JPEG/PNG signature, no image extension: a README) is left out as ImageLoader leaves it out. Returns (array (N, ...) in the options' dtype and layout, [(i, error), ...] for the samples that failed, [i, ...] for those that are no image; their slots are zeros).
    """

def transform_options() -> list:
    """
    The image transform's options, each a dict: name, kind (bool, unsigned, number, choice, pair, triple, size), doc, choices, default, text. stoker.ImageLoader's signature and docs are generated from it (scripts/gen_options.py).
    """

def parse_transform_options(values: dict) -> dict:
    """
    Every transform option's value after setting `values` (a dict of some of them) over the defaults, as the image pipeline would; TypeError / ValueError naming the option for a bad value, ValueError for a combination the transform refuses.
    """

def image_sample_params(options: dict, width: int, height: int, sample: int) -> dict:
    """
    The augmentation parameters sample `sample` (an image of width x height) gets under `options` (as ImagePipeline's, with 'epoch'): box (x0, y0, x1, y1) in source pixels, clip_to_box, flip, angle, zoom.
    """

def maker_version() -> str:
    """
    What makes this build's pixels (stoker and its codecs' versions): a trainer and its feeders must agree on it (docs/protocol.md, "Feeders").
    """

def cuda_devices() -> int:
    """
    CUDA devices this process can use for ImagePipeline's GPU path (0 without a driver, a GPU, or a build with it).
    """

def built_with_cuda() -> bool:
    """
    Whether this build has the GPU path (nvJPEG + CUDA; STOKER_CUDA=ON, docs/gpu.md).
    """

class ImagePipeline:
    """
    Decodes and transforms `plan` into batches in C++ threads; iterating yields (images, labels, samples, consumed, errors, sources, waited, read_waited, not_images).
    """

    @overload
    def __init__(self, dataset: object, plan: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)], options: dict) -> None: ...

    @overload
    def __init__(self, sources: list, order: Annotated[NDArray[numpy.uint16], dict(shape=(None,), order='C', device='cpu', writable=False)], options: dict) -> None:
        """
        A mix: `sources` a list of (dataset, plan, memory_budget or 0), `order` (uint16) the source of each position of the batches' sequence.
        """

    def __iter__(self) -> object: ...

    def __next__(self) -> tuple: ...

    def stats(self) -> dict:
        """
        Counters: samples, batches, skipped, not_images, threads, read_wait_seconds, decode_seconds, resize_seconds, output_seconds, idle_seconds, gpu_seconds, consumer_wait_seconds, bytes_read, ranges, peak_bytes_held.
        """

    def close(self) -> None:
        """Stops the threads; delivered batches stay valid."""

def loader_options() -> list:
    """
    stoker.Loader's options but its callables (transform, collate), each a dict: name, kind, doc, choices, default (None: chosen by the loader), text. stoker.Loader's signature and docstring, and those of the options stoker.ImageLoader shares with it, are generated from it (scripts/gen_options.py).
    """

def parse_loader_options(values: dict) -> dict:
    """
    Every loader option's value after setting `values` (a dict of some of them) over the defaults (None where the loader chooses); TypeError / ValueError naming the option for a bad value, ValueError for a rank not below world_size.
    """

def log_next() -> tuple[int, str] | None:
    """
    The next queued log line of the library as (logging level, text); None if there is none.
    """

def pack(src: object, dst: object, *, chunk_size: int | str = '64MiB', append: bool = False, labels: str = 'auto', threads: int = 0, order: str = 'shuffled', order_seed: int = 0, mix_memory: int | str = '2GiB', layout: str = 'auto', exclude: Sequence[str] = [], progress: bool = True) -> dict:
    """
    Packs a directory tree (labels from its first level) or a list of tar shards into the dataset at `dst`, as a new version, as `stoker pack` does (each keyword argument is the flag of the same name). A directory holding .cls members is a WebDataset folder and packs as the same files in a tar would (samples grouped by key, labelled by their .cls). Returns a summary dict (open_chunks: how many chunks were filled at once).

    chunk_size: target chunk file size: bytes, or text like 64MiB.
    append: add the files to the existing dataset as a new version (its chunks and indices kept).
    labels: auto: labels from the first directory level (files beside the class directories are left out, and said so), or from .cls members (tar, WebDataset); none: no labels.
    threads: parallel file reads of a directory (0: the cores, at least 2; at most 1024).
    order: where files land in chunks: shuffled (every chunk a random mix of the input, so chunk-wise shuffle mixes classes; tar input: 1024 chunks filled at once) or path (path or archive order: an ImageFolder tree class by class).
    order_seed: the seed of the shuffled order.
    mix_memory: tar input to S3, shuffled order: memory for the part buffers of the chunks filled at once (32 MiB each; 2GiB: 64 chunks, 8GiB: 256).
    layout: a directory's samples: tree (a file each, labels from the first directory level), webdataset (files sharing a key form a sample labelled by its .cls, as in a tar), auto (webdataset when .cls members are there).
    exclude: leave out files and directories whose name or path in the source matches this glob (repeatable: --exclude '*.txt' --exclude 'tmp/*'); the usual OS litter (.DS_Store, ._*, __MACOSX, Thumbs.db, desktop.ini) always is. The summary says what was left out.
    progress: the CLI's progress bar on stderr when it is a terminal.
    """

def pack_options() -> list:
    """
    stoker.pack's options but progress (`stoker pack`'s shared flags), each a dict: name, kind, doc, choices, default, text (the default as the CLI writes it). stoker.pack's signature and docstring are made from it, the table in README.md is generated from it (scripts/gen_options.py).
    """

def parse_pack_options(values: dict) -> dict:
    """
    Every pack option's value after setting `values` (a dict of some of stoker.pack's keyword arguments) over the defaults, as stoker.pack would; TypeError / ValueError naming the option for a bad value.
    """

def byte_size(size: int | str, name: str = 'size') -> int:
    """
    A size as bytes: an int, or text like '64MiB', '48G' or '65536' (binary multiples), as the CLI takes it. ValueError naming `name` otherwise.
    """

def commit(dst: object, job: str = 'default', parts: int | Sequence[int] = 0) -> dict:
    """
    Publishes every part of `job` (stoker.Writer(..., part=...) or `stoker pack --part`) as one new version, as `stoker commit` does; `parts`: how many to expect (0: as their names say), or the list of part indices to publish (an engine's accepted task attempts: the job's other parts are removed, and the job stays closed, so a part written later is refused). Returns stoker.pack's summary dict.
    """

def discard_parts(dst: object, job: str, close_empty: bool = False) -> dict:
    """
    Ends `job` without publishing: removes its parts and refuses any written later (an engine's failed write); their chunks are garbage for `stoker gc`. Returns {'parts_removed', 'already_closed'} (closed: committed, being committed or discarded before; nothing is done). FileNotFoundError when the job has no parts directory, unless close_empty=True: then it is closed all the same (an engine's attempt that starts after the discard is refused).
    """

def verify(uri: object) -> dict:
    """
    Re-reads the current version and checks every CRC. Returns a report dict with 'ok', 'problems', 'corrupt_chunks' and 'corrupt_files' (each a list of {'path', 'message'}); raises only if the dataset cannot be read at all.
    """

class ReadPipeline:
    """
    Reads `plan` (sample indices) ahead of the consumer with coalesced, CRC-checked range reads under a memory budget; iterating yields what ds[i] yields, in plan order.
    """

    def __init__(self, dataset: object, plan: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)], memory_budget: int = 1073741824, io_depth: int = 8, engine: str = 'auto') -> None: ...

    def __iter__(self) -> object: ...

    def __next__(self) -> object: ...

    def stats(self) -> dict:
        """
        Counters: samples, ranges, bytes_read, payload_bytes, consumer_waits, consumer_wait_seconds (time spent waiting for data), peak_bytes_held, engine.
        """

    @property
    def wait_seconds(self) -> float:
        """Seconds __next__ has waited for data so far (consumer_wait_seconds)."""

    def close(self) -> None:
        """Stops reading ahead and frees the buffers."""

class Sampler:
    """
    Which samples each rank reads, in which order, every epoch (docs/sampler.md). Immutable; orders are uint32 memoryviews.
    """

    def __init__(self, dataset: object, *, mode: str = 'chunk', seed: int = 0, window: int = 16, drop_last: bool = False, block_size: int = 0) -> None:
        """
        A sampler over a stoker.Dataset's samples. mode: 'sequential', 'full' or 'chunk'; window: chunks per shuffle window (chunk mode); block_size: the shuffle unit in bytes (blocks of a chunk, docs/sampler.md), 0 for whole chunks. The window then holds W chunks' worth of blocks (the `window` property counts units).
        """

    @staticmethod
    def from_chunks(sample_chunks: Sequence[int], dataset_version: int, *, mode: str = 'chunk', seed: int = 0, window: int = 16, drop_last: bool = False) -> Sampler:
        """
        A sampler over synthetic samples: sample_chunks[s] is sample s's chunk.
        """

    @property
    def num_samples(self) -> int: ...

    @property
    def mode(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def window(self) -> int: ...

    @property
    def drop_last(self) -> bool: ...

    def global_order(self, epoch: int, world_size: int = 1) -> Annotated[memoryview, dict(dtype='uint32', shape=(None,), writable=False)]:
        """
        The epoch's global order G, planned for world_size ranks: a permutation of range(num_samples).
        """

    def plan_rank(self, epoch: int, position: int, planned_world_size: int, world_size: int, rank: int) -> tuple:
        """
        What `rank` of `world_size` reads from `position` of the epoch's order (built for planned_world_size ranks) to the epoch's end: (samples, padded, dropped).
        """

def sample_chunks(dataset: object) -> Annotated[memoryview, dict(dtype='uint32', shape=(None,), writable=False)]:
    """
    The chunk of each sample's first file (uint32 memoryview): what Sampler.from_chunks takes, for a subset of the samples (stoker.Dataset.subset). Reads every file's location once.
    """

def shuffle_unit(dataset: object, window: int = 16, batch_size: int = 256, block_size: int | None = None) -> dict:
    """
    The shuffle unit chunk mode uses on `dataset` (docs/sampler.md): with block_size None, whole chunks when they mix classes within `target` of a full shuffle, else the largest block of a chunk that does; with an int, that block size (0: whole chunks). Returns {block_size, units_per_window, mixes_well, target, whole_chunks, chosen}, the last two with the expected distinct classes per batch and a full shuffle's.
    """

def shuffle_report(dataset: object, batch_size: int = 256, windows: Sequence[int] = [1, 4, 16, 64], seed: int = 0, epoch: int = 0, default_window: int = 16) -> list:
    """
    How random each order is on `dataset` (a stoker.Dataset): one dict per order — sequential, full, chunk mode per window (whole chunks), then the loader's default (loader_default: chunk mode, window default_window, the shuffle unit stoker.Loader picks: block_bytes, expected classes per batch vs a full shuffle's) — with per-batch label entropy (bits; NaN without labels) and distinct classes, mean displacement, rank correlation with storage order, the fraction of same-chunk neighbours, the window's memory, and reads per epoch with their mean size. See `stoker shuffle-report`.
    """

class EpochCursor:
    """
    Where one rank's reading stands in its epochs (src/loader/epoch_cursor.h): the loaders count what they yield with the token of the pass they run in; it moves the epoch and position on a pass's start and end, set_epoch and load.
    """

    def __init__(self, num_samples: int, world_size: int, drop_last: bool) -> None: ...

    @property
    def epoch(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def planned_world_size(self) -> int: ...

    @property
    def yielded(self) -> int: ...

    @property
    def pass_token(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...

    def begin_pass(self) -> int:
        """Starts a pass; returns its token."""

    def end_pass(self, token: int) -> None: ...

    def add_yielded(self, token: int, count: int) -> None: ...

    def set_yielded(self, count: int) -> None: ...

    def consumed_position(self, consumed: int) -> int: ...

    def pass_samples(self) -> int: ...

    def load(self, epoch: int, position: int, planned_world_size: int) -> None: ...

    def __getstate__(self) -> tuple: ...

    def __setstate__(self, arg: tuple, /) -> None: ...

class TokenStream:
    """
    A tokens column as one stream, chunk after chunk (the samples that start in a chunk, in order): what stoker.TokenLoader reads.
    """

    def __init__(self, dataset: object, column: str, samples: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | None = None) -> None:
        """
        `samples`: the dataset's samples whose documents the stream holds (a view's indices, uint32); None: all.
        """

    @property
    def chunk_tokens(self) -> Annotated[NDArray[numpy.uint64], dict(shape=(None,), writable=False)]:
        """Tokens per chunk (uint64)."""

    @property
    def dtype(self) -> str:
        """The column's element type ('uint16', ...)."""

    def read_chunk(self, chunk: int) -> object:
        """
        Chunk `chunk`'s tokens, CRC-checked: a read-only NumPy array over a C++ buffer.
        """

class TokenBatches:
    """
    Batches of token blocks in a plan's order, made in C++ (chunks read ahead by two threads): what stoker.TokenLoader iterates.
    """

    def __init__(self, stream: object, plan: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)], block_size: int, batch_size: int, ahead: int) -> None: ...

    def next(self) -> object:
        """
        The next batch, a read-only (count, block_size + 1) array; None at the end.
        """

    def fill(self, out: Annotated[NDArray, dict(shape=(None, None), order='C', device='cpu')], rows: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> int:
        """
        Writes the next len(rows) blocks into those rows of `out` (a writable (n, block_size + 1) array of the column's element size); returns how many it wrote.
        """

    @property
    def chunks_read(self) -> int: ...

    @property
    def wait_seconds(self) -> float:
        """Seconds next()/fill() waited for chunks still being read."""

def trace_start(path: str, process: str) -> None:
    """
    Starts writing Chrome trace events to `path` (OSError if it cannot be written).
    """

def trace_stop() -> None:
    """
    Finishes the trace file (OSError if its last events could not be written).
    """

def trace_enabled() -> bool:
    """Whether a trace is being written."""

def trace_name_thread(name: str) -> None:
    """Names the calling thread's track in the trace."""

def trace_complete(name: str, category: str, start_ns: int, end_ns: int, args: str = '') -> None:
    """
    A complete event on the calling thread; times from time.monotonic_ns(); `args` the members of a JSON object without its braces.
    """

class Writer:
    """
    Writes typed samples into a new dataset (or, with append=True, the next version of an existing one).

        with stoker.Writer('out.stoker', columns={'image': 'jpeg', 'label': 'int',
                                                  'caption': 'str?'}) as w:
            w.write({'image': jpeg_bytes, 'label': 3, 'caption': 'a cat'})

    Column types: bytes, str, int, float, json, ndarray, jpeg, png, tokens; 'ndarray:float32' fixes an array's dtype, 'tokens:uint16' a token column's (default int32), 'float:nan' lets NaN and infinities in, and a trailing '?' makes a column optional (None or absent). `label` names an int column whose values label the samples (classes 0 .. 2^22-1); an int column called 'label' does by default. Other keyword arguments are stoker.pack's (chunk_size, append, order, order_seed, mix_memory), progress, name (the directory the samples go in; default: a random id), and part=(k, n) / 'K/N' / 'env' with job= (write part k of n of one version, published by stoker.commit, as `stoker pack --part`).

    A bad value raises TypeError/ValueError naming the sample and column, and that sample is left out. Nothing is visible until close() (the end of a `with` block without an exception) publishes the version; an exception or abort() publishes nothing.
    """

    def __init__(self, output: object, columns: dict, *, label: str | None = None, **kwargs) -> None: ...

    def write(self, sample: object) -> None:
        """Adds one sample: a dict {column: value}."""

    def close(self) -> dict:
        """Publishes the version; returns stoker.pack's summary dict."""

    def abort(self) -> None:
        """Stops without publishing; removes what was written."""

    def __enter__(self) -> object: ...

    def __exit__(self, type: object | None, value: object | None, traceback: object | None) -> None: ...

    @property
    def columns(self) -> dict:
        """The schema: {name: type}."""

    @property
    def label(self) -> str | None:
        """The label column, or None."""

    @property
    def samples_written(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def summary(self) -> object:
        """close()'s summary once closed, else None."""
