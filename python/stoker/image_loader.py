"""stoker.ImageLoader: ready training batches of images — read, decoded, augmented, normalized
and batched in C++ threads, handed to PyTorch without a copy.

    loader = stoker.ImageLoader("/data/train.stoker", batch_size=256, train=True, size=224)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:       # float32 (B, 3, 224, 224), int64 (B,)
            ...
    val = stoker.ImageLoader("/data/val.stoker", batch_size=256, train=False)

train=True is torchvision's RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(flip)
[+ RandomRotation(rotation) + RandomAffine(scale=zoom)] + ToTensor + Normalize(mean, std);
train=False is Resize(resize) + CenterCrop(size) + ToTensor + Normalize (center_crop=False:
Resize((h, w)) of the whole image instead). Every sample's random
parameters come from (seed, epoch, sample index), so batches are reproducible and a resumed job
(load_state_dict) continues with exactly the augmentations the interrupted one would have used.
See docs/augment.md.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from . import metrics
from ._core import (
    Dataset,
    ImagePipeline,
    built_with_cuda,
    cuda_devices,
    image_sample_params,
    parse_loader_options,
    parse_transform_options,
)
from ._reading import (
    DEFAULT_MIN_BUDGET,
    SampleReading,
    Step,
    read_budget,
    renamed_arguments,
    run_pass,
    sample_order,
    warn_user,
)
from .mix import Mix, mix_label
from .stalls import StallMeter
from .views import DatasetView

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_ON_ERROR = ("raise", "skip", "log")

log = logging.getLogger("stoker")


def _require_torch() -> None:
    """Batches are torch tensors: without PyTorch, say so when the loader is made, not at its
    first batch."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "stoker.ImageLoader yields torch tensors and needs PyTorch: "
            "pip install 'stoker[torch]' (or a torch build of your choice, e.g. for CUDA)") from e


def _cuda_device(device: Any, interpolation: str) -> int:
    """The CUDA device ordinal `device` names ('cuda', 'cuda:N', a torch.device), or -1 for the
    CPU (None, 'cpu'). Raises, when the loader is made, if the GPU path cannot run here."""
    if device is None:
        return -1
    text = str(device)
    if text == "cpu":
        return -1
    if text != "cuda" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")
    if not built_with_cuda():
        raise RuntimeError(
            f"device={text!r}: this stoker was built without the GPU path (STOKER_CUDA=OFF); "
            "build it with CUDA and nvJPEG (docs/gpu.md), or leave device out to decode on "
            "the CPU")
    count = cuda_devices()
    if count == 0:
        raise RuntimeError(
            f"device={text!r}: no CUDA device is visible to this process (no NVIDIA driver, no "
            "GPU, or CUDA_VISIBLE_DEVICES hides them); leave device out to decode on the CPU")
    if text == "cuda":
        import torch
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    else:
        index = int(text[5:])
    if index >= count:
        raise ValueError(f"device={text!r}: this process sees {count} CUDA device(s)")
    if interpolation == "nearest":
        raise ValueError("the GPU path resamples bilinear or bicubic: interpolation='nearest' "
                         "needs device='cpu'")
    return index


class _PinnedAhead:
    """Iterates `batches` (the pipeline's tuples) in a background thread that pins each batch's
    images, `depth` batches ahead of the consumer, as DataLoader's pin-memory thread does:
    pinning a 150 MB batch is a copy of tens of milliseconds, which the training loop would
    otherwise wait for at every step. close() stops the thread (before the pipeline may be
    closed: the thread may be inside its next())."""

    _END = object()

    def __init__(self, batches: Any, depth: int = 2) -> None:
        import queue
        import threading
        self._queue: Any = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(batches,),
                                        name="stoker pin memory", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        import queue
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, batches: Any) -> None:
        try:
            for item in batches:
                if not self._put((item[0].pin_memory(),) + tuple(item[1:])):
                    return
        except BaseException as e:  # handed to the consumer, raised there
            self._put(e)
            return
        self._put(self._END)

    def __iter__(self) -> Iterator[tuple]:
        return self

    def __next__(self) -> tuple:
        item = self._queue.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def feeder_addresses(feeders: str | os.PathLike | Sequence[str] | None) -> list[str]:
    """The "host:port" of each feeder (`stoker feed`) named by ImageLoader's `feeders`: a list
    of addresses; a text of them separated by commas; or a file with one per line (what
    `stoker feed --announce FILE` writes; read again at every pass, so feeders that start later
    join at the next epoch); None: $STOKER_FEEDERS, in either text form, else no feeders."""
    if feeders is None:
        feeders = os.environ.get("STOKER_FEEDERS", "")
    if isinstance(feeders, (str, os.PathLike)):
        text = os.fspath(feeders)
        if os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                lines = [line.split("#", 1)[0].strip() for line in f]
            return sorted({line for line in lines if line})
        return [a.strip() for a in text.split(",") if a.strip()]
    return [os.fspath(a) for a in feeders]


def _members(ds: Dataset, image: str | None, label: str | None) -> tuple[str, str]:
    """The members holding the image and the label ('' outside column datasets; a label
    member only for an int column other than the label column, whose labels the metadata
    holds), checking `image` and `label` against a column dataset's schema."""
    columns = ds.columns
    if not columns:
        if image is not None or label is not None:
            raise ValueError("image= and label= choose columns of a column dataset "
                             "(stoker.Writer); this dataset has none")
        return "", ""
    images = [name for name, kind in columns.items() if kind.rstrip("?") in ("jpeg", "png")]
    if image is None:
        if len(images) != 1:
            raise ValueError(f"pass image= to choose the column to decode; the dataset's image "
                             f"columns: {images or 'none (jpeg or png)'}")
        image = images[0]
    elif image not in images and columns.get(image, "").rstrip("?") != "bytes":
        # A bytes column named explicitly is decoded by its bytes' signature (JPEG and PNG
        # mixed, as a Parquet column may hold them); what is no image follows on_error.
        raise ValueError(f"image={image!r} is not a jpeg, png or bytes column of the dataset "
                         f"(its columns: {columns})")
    if label is None or label == ds.label_column:
        return image, ""
    if label not in columns or columns[label].rstrip("?") != "int":
        raise ValueError(f"label={label!r} is not an int column of the dataset (its columns: "
                         f"{columns})")
    # Read from each sample's file (a few bytes more per sample than the metadata's label).
    return image, label


class ImageLoader(SampleReading):
    """Batches of (images, labels) torch tensors from one rank's share of a packed image dataset.

    Args:
      source: a path / file:// URI, an open stoker.Dataset (JPEG or PNG files, whatever their
        names; for tar-packed samples, the file with an image extension), a view of one, or a
        stoker.Mix of them. (Its old name, uri_or_dataset=, still works, with a warning.)
      batch_size: images per batch. The last batch may be smaller (drop_last drops it).

    The transform (each option is described once, in C++, in
    src/decode/transform_option_table.cc; this list, the signature and docs/augment.md's table
    are generated from it by scripts/gen_options.py):
      train: the training transform (random crop, flip, ...) or the validation one (resize, centre
        crop).
      size: output size in pixels: an int (square) or (height, width).
      scale: training: RandomResizedCrop's range of the crop's area, as a fraction of the image's.
      ratio: training: RandomResizedCrop's range of the crop's aspect ratio (width / height).
      flip: training: the probability of a horizontal flip (validation never flips).
      rotation: training: degrees; the angle is uniform in [-rotation, rotation] (0: off).
      zoom: training: (min, max) RandomAffine-style scale about the centre ((1, 1): off).
      resize: validation: the shorter side before the centre crop (0: the larger side of size * 8 /
        7, 256 for 224).
      center_crop: validation: Resize(resize) then CenterCrop(size), or (False) the whole image
        resized to size, its aspect ratio not kept (torchvision's Resize((h, w)),
        ray.data.read_images' size).
      interpolation: resampling filter: bilinear (torchvision's default), bicubic or nearest.
      mean: per-channel mean subtracted from the [0, 1] values (float32 output).
      std: per-channel standard deviation the values are divided by (float32 output).
      dtype: float32 (normalized) or uint8 (raw pixels, e.g. to normalize on the GPU).
      layout: NCHW (PyTorch's default) or NHWC (channels_last).
      dct_scaling: let JPEG decoding downscale in the DCT domain when the crop will be shrunk by 2x
        or more anyway (faster; off gives torchvision's pixels exactly).
      max_pixels: images whose header claims more pixels are errors, before anything is allocated.

    Reading:
      shuffle: "chunk" (default when training), "full" or "sequential" (default otherwise:
        storage order, chunk after chunk — index order only for data packed with --order path).
      threads: decode threads (default: the CPUs this process may use).
      prefetch_batches: batches made ahead of the consumer.
      on_error: what a sample that cannot be decoded (corrupt, truncated, not an image, over
        max_pixels) or read does: "raise" (default; the exception names the sample's path),
        "skip" (left out of its batch, which is then smaller; recorded in `errors`), "log"
        (skip, and log a warning naming it on the "stoker" logger).
      pin_memory: copy each batch into page-locked memory (torch's Tensor.pin_memory(), in a
        background thread a few batches ahead, as DataLoader(pin_memory=True) does) so
        .cuda(non_blocking=True) overlaps; default: when CUDA is available (and device is the
        CPU).
      device: where batches are made: None / "cpu" (the C++ decode threads), or "cuda" /
        "cuda:N" (nvJPEG decodes the JPEGs, CUDA kernels crop, resize, flip and normalize them
        into a device buffer: images and labels are CUDA tensors, no host copy; the samples the
        GPU does not decode — PNG, CMYK, rotation, zoom — are made on the CPU and uploaded).
        Needs a build with the GPU path (docs/gpu.md); without one, or without a GPU, the
        loader says so when it is made.
      gpu_threads: with device="cuda", host threads driving the GPU, each with a batch in
        flight (default 2).
      batch_transform: a Python callable applied to every (images, labels) before it is
        yielded (e.g. mixup, or moving to the GPU); it runs in the consumer's thread, off the
        C++ fast path. For arbitrary per-sample Python decoding use stoker.Loader(transform=...).
      image: a column dataset's (stoker.Writer) jpeg or png column to decode (or a bytes column,
        named explicitly: decoded by signature); default: its only jpeg or png one.
      label: a column dataset's int column holding the labels; default: its label column
        (ds.label_column; -1 where it has none). A sample without the column is labelled -1.
      feeders: other machines' CPUs making part of every batch (`stoker feed`, docs/feeders.md):
        a list of "host:port", a text of them separated by commas, or a file with one per line
        (`stoker feed --announce FILE`; read again every pass); default: $STOKER_FEEDERS, else
        none. The job's secret comes from $STOKER_SECRET_FILE or $STOKER_SECRET. The batches
        are byte for byte those made without feeders, whatever they do: a feeder that fails,
        hangs or is unreachable only costs time (its slices are made here or by another
        feeder), and is warned about once. Needs the dataset by path or URI (a feeder opens
        it so) and the CPU path (not device="cuda").

    Reading, as for stoker.Loader (these lines and the signature are generated from
    src/loader/loader_option_table.cc):
      seed: the order of epoch e is a function of (seed, e, dataset version, options, the number of
        ranks the epoch was planned for), identical on every machine.
      window: chunks per shuffle window (chunk mode): the window holds `window` chunks' worth of
        bytes.
      drop_last: skip the last N mod world_size samples of the epoch instead of padding the last
        round with samples from its start (either way every rank yields the same count, so
        distributed training never hangs on a short rank); with batch_size, also drop the last
        incomplete batch.
      rank: this process's rank; None: torchrun's RANK environment variable, else 0.
      world_size: the number of ranks; None: torchrun's WORLD_SIZE environment variable, else 1.
      memory_budget: the most bytes the read pipeline holds (samples still referenced by the
        consumer included): bytes, or text like 2GiB. None: 2 x window x the largest chunk in chunk
        mode (whole-chunk reads), at least 256MiB. Less still works, with smaller reads; in chunk
        mode a warning says that a window's chunks are then read in pieces, and up to about twice
        per epoch.
      io_depth: concurrent reads of the read pipeline.
      block_size: the shuffle unit of chunk mode, in bytes. None: chosen from the labels in the
        metadata (whole chunks when they mix classes, as `stoker pack` stores them by default, else
        the largest block of a chunk, 1/4 ... 1/256 of one, whose windows mix classes within 5 % of
        a full shuffle, with a warning that names the cost and the fix). 0: whole chunks always; an
        int: blocks of that many bytes. See docs/sampler.md.

    Iterating yields (images, labels): images share memory with a C++ buffer that is recycled
    once the tensor is freed (no copy), labels are int64 (-1 for unlabelled samples). stats()
    has counters of the last pass: samples, images/s, time waiting for reads vs decoding.
    Prints nothing by default.

    Passed a stoker.Mix of image datasets (stoker.mix), it yields (images, labels, sources):
    sources[i] (int64) is the dataset image i came from; with batch_transform,
    (batch_transform(images, labels), sources). Each source keeps its own labels and is read by
    its own read pipeline (memory_budget each); the decode threads are shared.
    """

    @renamed_arguments(uri_or_dataset="source")
    def __init__(self, source: str | os.PathLike | Dataset | DatasetView | Mix,
                 batch_size: int = 256, *,
                 # BEGIN GENERATED signature
                 train: bool = True, size: int | Sequence[int] = 224,
                 scale: float | Sequence[float] = (0.08, 1.0),
                 ratio: float | Sequence[float] = (0.75, 1.3333333333333333), flip: float = 0.5,
                 rotation: float = 0.0, zoom: float | Sequence[float] = (1.0, 1.0),
                 resize: int = 0, center_crop: bool = True, interpolation: str = "bilinear",
                 mean: Sequence[float] = (0.485, 0.456, 0.406),
                 std: Sequence[float] = (0.229, 0.224, 0.225), dtype: str = "float32",
                 layout: str = "NCHW", dct_scaling: bool = True, max_pixels: int = 67108864,
                 # END GENERATED signature
                 # Options of stoker.Loader's table whose default differs here (batch_size, the
                 # positional 256 above; shuffle, by train) are this class's own.
                 shuffle: str | None = None, threads: int | None = None,
                 prefetch_batches: int = 2, on_error: str = "raise",
                 pin_memory: bool | None = None, device: Any = None,
                 gpu_threads: int | None = None,
                 batch_transform: Callable[[Any, Any], Any] | None = None,
                 image: str | None = None, label: str | None = None,
                 feeders: str | os.PathLike | Sequence[str] | None = None,
                 # BEGIN GENERATED shared-signature
                 seed: int = 0, window: int = 16, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, memory_budget: int | str | None = None,
                 io_depth: int = 8, block_size: int | None = None,
                 # END GENERATED shared-signature
                 ) -> None:
        _require_torch()
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1")
        # Checked (type, choices, ranges) and normalized by the C++ table now, not at the
        # first batch.
        transform = parse_transform_options({
            # BEGIN GENERATED dict
            'train': train,
            'size': size,
            'scale': scale,
            'ratio': ratio,
            'flip': flip,
            'rotation': rotation,
            'zoom': zoom,
            'resize': resize,
            'center_crop': center_crop,
            'interpolation': interpolation,
            'mean': mean,
            'std': std,
            'dtype': dtype,
            'layout': layout,
            'dct_scaling': dct_scaling,
            'max_pixels': max_pixels,
            # END GENERATED dict
        })
        if shuffle is None:
            shuffle = "chunk" if transform["train"] else "sequential"
        reading = parse_loader_options({
            "batch_size": batch_size,
            "shuffle": shuffle,
            # BEGIN GENERATED shared-dict
            'seed': seed,
            'window': window,
            'drop_last': drop_last,
            'rank': rank,
            'world_size': world_size,
            'memory_budget': memory_budget,
            'io_depth': io_depth,
            'block_size': block_size,
            # END GENERATED shared-dict
        })
        if reading["batch_size"] is None:
            raise TypeError("batch_size must be an int, not None")
        cuda_device = _cuda_device(device, transform["interpolation"])
        self._start_reading(sample_order(source, reading), reading["rank"],
                            reading["world_size"], reading["drop_last"])
        image_member, label_member = self._members(image, label)
        self._batch_size: int = reading["batch_size"]
        self._on_error = on_error
        # Files left out as no image (README.txt in a file dataset), said once: _say_not_images.
        self._not_images, self._said_not_images = 0, False
        self._not_image_names: list[str] = []
        self._memory_budget: int | None = reading["memory_budget"]
        self._batch_transform = batch_transform
        self._pin_memory = pin_memory
        self._options: dict[str, Any] = {
            "batch_size": self._batch_size,
            "drop_last": reading["drop_last"],
            "threads": 0 if threads is None else int(threads),
            "prefetch_batches": int(prefetch_batches),
            "seed": reading["seed"],
            "on_error": "raise" if on_error == "raise" else "skip",
            "io_depth": reading["io_depth"],
            "image_member": image_member,
            "label_member": label_member,
            "cuda_device": cuda_device,
            "gpu_threads": 0 if gpu_threads is None else int(gpu_threads),
            **transform,
        }
        self._feeders = feeders
        if feeder_addresses(feeders):
            if cuda_device >= 0:
                raise ValueError("feeders make batches for the CPU path: device='cuda' cannot "
                                 "use them")
            if not (os.environ.get("STOKER_SECRET_FILE") or os.environ.get("STOKER_SECRET")):
                raise ValueError("feeders need the job's secret: set STOKER_SECRET_FILE (a file "
                                 "holding it, as `stoker feed --secret-file` reads) or "
                                 "STOKER_SECRET")
        self._stats: dict[str, Any] = {}
        self.errors: list[tuple[int, int, str]] = []  # (position, sample, message), last pass

    def _members(self, image: str | None, label: str | None) -> tuple[str, str]:
        """The members holding the image and the label (see _members), the same in every
        source of a Mix."""
        sources = self._order.sources if self.mixed else [self._order]
        members = {_members(s.dataset(), image, label) for s in sources}
        if len(members) > 1:
            raise ValueError(f"the sources keep their images or labels in different columns "
                             f"({sorted(members)}); mix datasets that name them alike, or "
                             "pass image= and label=")
        return members.pop()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def __len__(self) -> int:
        """Batches this rank yields in the current pass, or in the next one."""
        return self._units_in_pass(self._batch_size)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        token, sources, samples = self._begin()
        options = dict(self._options, epoch=self._cursor.epoch)
        feeders = feeder_addresses(self._feeders)
        if feeders:
            options["feeders"] = feeders
        if sources is None:
            ds = self._order.dataset()
            budget = read_budget(ds, self._order.shuffle, self._order.window,
                                 self._memory_budget)
            pipe = ImagePipeline(ds, samples, dict(options, memory_budget=budget))
            first, label = ds, self._order.uri
        else:
            plans = []
            for i, s in enumerate(self._order.sources):
                ds = s.dataset()
                plans.append((ds, np.ascontiguousarray(samples[sources == i]),
                              read_budget(ds, s.shuffle, s.window, self._memory_budget)))
            pipe = ImagePipeline(plans, np.ascontiguousarray(sources, dtype=np.uint16),
                                 dict(options, memory_budget=plans[0][2]))
            first, label = plans[0][0], mix_label(self._order.mix)
        return self._batches(pipe, token, first, label, bool(feeders))

    def _batches(self, pipe: ImagePipeline, token: int, first: Dataset, label: str,
                 fed: bool) -> Iterator[tuple[Any, ...]]:
        """The pass over `pipe`'s batches (pinned if asked): (images, labels), over a Mix with
        the sources, through batch_transform if given; skipped samples go to `errors` —
        (position, sample, message), and the source in a mix. `first`: the (first) dataset,
        `label` what metrics and warnings call the data; `fed`: with feeders."""
        import torch
        pin = self._pin_memory
        if pin is None:
            pin = torch.cuda.is_available()
        cuda = self._options["cuda_device"]
        label_device = torch.device("cuda", cuda) if cuda >= 0 else None
        if label_device is not None:
            pin = False
        self.errors = []
        meter = self._meter = StallMeter(first, "ImageLoader", label)
        start = time.perf_counter()
        batches: Any = _PinnedAhead(pipe) if pin else pipe
        seen: dict[str, dict[str, Any]] = {}  # the feeders' counters last recorded

        def count_feeders() -> None:
            if fed:
                metrics.record_feeders("ImageLoader", label, pipe.stats()["feeders"], seen)

        def finish() -> None:
            if pin:
                batches.close()
            elapsed = time.perf_counter() - start
            count_feeders()
            self._stats = dict(pipe.stats(), seconds=elapsed)
            self._stats["images_per_second"] = (self._stats["samples"] / elapsed
                                                if elapsed > 0 else 0.0)
            pipe.close()
            self._say_not_images(label)

        return run_pass(self._cursor, token, meter,
                        self._steps(batches, label_device, count_feeders), finish)

    def _steps(self, batches: Iterator[tuple], label_device: Any,
               count_feeders: Callable[[], None]) -> Iterator[Step]:
        """Each batch as the loader yields it, with what it consumed and how long the consumer
        waited for reads, decoding and feeders; labels to `label_device` (the GPU path's); the
        feeders' metrics brought up to date every second."""
        mixed = self.mixed
        counted = time.monotonic()
        for (images, labels, _samples, consumed, errors, sources, waited, read,
             not_images, feeders) in batches:
            if not_images:
                self._note_not_images(not_images)
            if errors:
                self.errors.extend(e if mixed else e[:3] for e in errors)
                if self._on_error == "log":
                    for e in errors:
                        log.warning("stoker: skipped a sample: %s", e[2])
            if label_device is not None:
                labels = labels.to(label_device)
            if self._batch_transform is not None:
                out: Any = self._batch_transform(images, labels)
                item = (out, sources) if mixed else out
            else:
                item = (images, labels, sources) if mixed else (images, labels)
            if time.monotonic() - counted >= 1.0:
                count_feeders()
                counted = time.monotonic()
            yield item, consumed, read, waited - read - feeders, feeders

    def _note_not_images(self, not_images: list) -> None:
        """Counts files left out as no image this pass, keeping a few names for the warning."""
        self._not_images += len(not_images)
        for e in not_images[:3 - len(self._not_image_names)]:
            self._not_image_names.append(e[2].split(": not an image")[0])

    def _say_not_images(self, label: str) -> None:
        """Once per loader, at the end of the first pass that left files out: how many, and
        which. A file dataset's README.txt is not a training error (ImageFolder skips it too),
        but it must not vanish unsaid."""
        if self._not_images and not self._said_not_images:
            self._said_not_images = True
            more = ", ..." if self._not_images > len(self._not_image_names) else ""
            warn_user(
                f"ImageLoader left out {self._not_images} file(s) of {label} that are no "
                f"images (no JPEG or PNG signature, no image extension), as torchvision's "
                f"ImageFolder does: {', '.join(self._not_image_names)}{more}; "
                f"stats()['not_images'] counts them. Leave them out of the pack with "
                f"`stoker pack --exclude GLOB`.")
        self._not_images = 0
        self._not_image_names = []

    def sample_params(self, sample: int, width: int, height: int,
                      epoch: int | None = None) -> dict[str, Any]:
        """The augmentation sample `sample` (an image of width x height) gets in `epoch`
        (default: the current one): box (x0, y0, x1, y1) in source pixels, clip_to_box, flip,
        angle, zoom — what the C++ threads draw, for inspection and tests."""
        options = dict(self._options, epoch=self.epoch if epoch is None else int(epoch),
                       memory_budget=DEFAULT_MIN_BUDGET)
        return image_sample_params(options, int(width), int(height), int(sample))

    def stats(self) -> dict[str, Any]:
        """Counters of the last (or current) pass: samples, batches, skipped, threads,
        images_per_second, seconds, read_wait_seconds (the dispatcher waiting for storage),
        decode_seconds / resize_seconds / output_seconds (summed over threads),
        idle_seconds (threads without work), gpu_seconds (device="cuda": the GPU threads
        making batches), consumer_wait_seconds (training waiting for a
        batch), bytes_read, ranges, peak_bytes_held; with a node daemon also node_reads,
        store_reads, node_failures (see Loader.stats). Is training waiting for data:
        starved_fraction, wall_seconds, waiting_seconds, stall_seconds ({"storage", "cache",
        "decode", "queue", "feeders": seconds}; see stoker.stalls; batch_transform's time is the
        consumer's). With feeders: feeders (per feeder: address, slices, samples, pixel_bytes,
        failures, seconds, in_flight, reachable), local_slices, redone_slices (made again after
        a feeder failed them), feeder_wait_seconds."""
        return self._with_stalls(self._stats)

    def state_dict(self) -> dict[str, Any]:
        """As stoker.Loader.state_dict(): the position in the epoch's global order."""
        return self._state(self._cursor.yielded)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """As stoker.Loader.load_state_dict(): continues exactly, with any world size."""
        self._load(state)

    def __repr__(self) -> str:
        o = self._options
        source = repr(self._order.mix) if self.mixed else f"'{self._order.uri}'"
        return (f"stoker.ImageLoader({source}, train={o['train']}, size={o['size']}, "
                f"batch_size={self._batch_size}, shuffle='{self._order.shuffle}', "
                f"rank={self._rank}, world_size={self._world_size}, epoch={self.epoch})")
