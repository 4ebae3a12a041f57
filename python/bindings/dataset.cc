// stoker.Dataset: a map-style view of one dataset version.
//
//   ds = stoker.Dataset("/data/imagenet.stoker")
//   data, label, path = ds[i]           # sample i (negative i counts from the end)
//   ds.read("train/a/x.jpg")            # bytes of one file (by path or file index)
//   ds.read_buffer(7)                   # the same without a copy into bytes: a memoryview
//
// Samples vs files: a sample is one file, except in datasets packed from tar shards (WebDataset),
// where the files sharing a key ("dir/x.jpg", "dir/x.cls") form one sample; ds[i] then returns
// ({"jpg": b"...", "cls": b"..."}, label, "dir/x"); in a column dataset (stoker.Writer) ds[i] is
// a dict of typed values, {"image": b"...", "label": 3, "emb": array(...)}. Indices given to
// find/stat/read/read_buffer are file indices. Labels are -1 for unlabelled data.
//
// Every call that touches storage releases the GIL. Pickling keeps only (uri, version): the copy
// reopens lazily on first use (so DataLoader workers each open their own), and refuses to
// continue if a different version has been published since, because indices would then name
// different samples.
#include "dataset.h"

#include <Python.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "columns.h"
#include "dataset/column_sample.h"
#include "dataset/version_view.h"
#include "errors.h"
#include "fs_path.h"
#include "node_client/node_storage.h"
#include "stoker/dataset.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// A (possibly negative) index of `n` items, as Python's sequences take one (an int, or what has
// __index__: np.int64): out of range, however large, an IndexError naming it.
uint64_t IndexInRange(nb::handle key, uint64_t n, std::string_view what) {
  nb::object index = nb::steal(PyNumber_Index(key.ptr()));
  if (!index.is_valid()) throw nb::python_error();  // TypeError: not an integer
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (i == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow == 0 && i < 0) i += static_cast<long long>(n);
  if (overflow != 0 || i < 0 || static_cast<uint64_t>(i) >= n) {
    throw nb::index_error((std::string(what) + " index " + nb::cast<std::string>(nb::repr(index)) +
                           " out of range (dataset has " + std::to_string(n) + " " +
                           std::string(what) + "s)")
                              .c_str());
  }
  return static_cast<uint64_t>(i);
}

class PyDataset {
 public:
  // Opens now, so a bad URI or version fails at construction. Version 0: the newest.
  explicit PyDataset(std::string uri, uint64_t version = 0)
      : uri_(std::move(uri)), pinned_version_(version) {
    Get();
  }
  // Unpickling: reopen on first use, the pickled version (versions never change).
  struct Lazy {};
  PyDataset(std::string uri, uint64_t version, Lazy)
      : uri_(std::move(uri)), pinned_version_(version) {}

  const std::string& uri() const { return uri_; }

  const Dataset& Get() {
    if (const Dataset* d = ready_.load(std::memory_order_acquire)) return *d;
    Status status;
    {
      // Lock order: the GIL is released before mu_ is taken, and mu_ is unlocked before the GIL
      // is taken back (destruction order), so two threads opening at once cannot deadlock.
      nb::gil_scoped_release release;
      std::lock_guard lock(mu_);
      if (ready_.load(std::memory_order_relaxed) == nullptr) {
        DatasetOpenOptions options;
        // Lookups read a block or two; the loaders read every location when they start
        // (loader::PrepareToLoad), so opening a billion-file dataset to read one file is cheap.
        options.read_locations = false;
        if (pinned_version_ != 0) options.version = pinned_version_;
        auto opened = Dataset::Open(uri_, options);
        if (!opened) {
          status = opened.error();
        } else {
          dataset_ = std::move(*opened);
          ready_.store(dataset_.get(), std::memory_order_release);
        }
      }
    }
    ThrowIfError(status);
    return *ready_.load(std::memory_order_acquire);
  }

  uint64_t version() {
    // A pickled copy knows its version without opening anything.
    if (ready_.load(std::memory_order_acquire) == nullptr && pinned_version_ != 0) {
      return pinned_version_;
    }
    return Get().version();
  }

  // A file index from a path (str, bytes or os.PathLike), or a (possibly negative) file index
  // checked against the count.
  uint64_t FileIndex(nb::handle key) {
    const Dataset& ds = Get();
    if (!PyLong_Check(key.ptr())) return ValueOrThrow(ds.Find(FsPath(key)));
    return IndexInRange(key, ds.file_count(), "file");
  }

  uint64_t SampleIndex(nb::handle key) { return IndexInRange(key, Get().sample_count(), "sample"); }

  // The file's bytes in a new bytes object, filled with the GIL released (no second copy).
  nb::bytes ReadBytes(uint64_t file) {
    const Dataset& ds = Get();
    const FileInfo info = ValueOrThrow(ds.Stat(file));
    // The chunk first (its real size checked): the metadata's size alone never sizes a buffer.
    // Opening may block (a network round trip, a FIFO put in a chunk's place): without the GIL.
    Status opened;
    {
      nb::gil_scoped_release release;
      if (auto chunk = ds.ChunkFile(info.chunk); !chunk) {
        opened = chunk.error().WithContext("reading " + info.path);  // as ReadFile says it
      }
    }
    ThrowIfError(opened);
    const uint64_t size = info.size;
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (raw == nullptr) throw nb::python_error();
    nb::bytes out = nb::steal<nb::bytes>(raw);
    // Nobody else can see `out` yet, so writing into it without the GIL is safe.
    std::byte* dst = reinterpret_cast<std::byte*>(PyBytes_AsString(raw));  // stable ABI: no macro
    Status status;
    {
      nb::gil_scoped_release release;
      status = ds.ReadFileInto(file, {dst, size});
    }
    ThrowIfError(status);
    return out;
  }

  // Zero-copy: a memoryview over a C++-owned buffer that lives as long as the view.
  nb::ndarray<nb::memview, const uint8_t, nb::ndim<1>> ReadBuffer(uint64_t file) {
    const Dataset& ds = Get();
    Result<std::vector<std::byte>> bytes = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      bytes = ds.ReadFile(file);
    }
    auto* owned = new std::vector<std::byte>(ValueOrThrow(std::move(bytes)));
    nb::capsule owner(owned,
                      [](void* p) noexcept { delete static_cast<std::vector<std::byte>*>(p); });
    const size_t shape[1] = {owned->size()};
    return {reinterpret_cast<const uint8_t*>(owned->data()), 1, shape, owner};
  }

  nb::object GetItem(nb::handle index) {
    const uint64_t sample = SampleIndex(index);
    const auto [first, count] = ValueOrThrow(Get().SampleFiles(sample));
    return SampleValue(Get(), first, count, ValueOrThrow(Get().SampleLabel(sample)),
                       [this](uint64_t f) { return ReadBytes(f); });
  }

  nb::dict StatDict(nb::handle key) {
    const Dataset& ds = Get();
    const FileInfo info = ValueOrThrow(ds.Stat(FileIndex(key)));
    nb::dict d;
    d["index"] = info.index;
    d["path"] = FsName(info.path);
    d["size"] = info.size;
    d["crc32c"] = info.crc32c;
    d["label"] = info.label;
    if (info.label >= 0) {
      const std::string_view name = ds.ClassName(static_cast<uint32_t>(info.label));
      d["class"] = FsName(name);
    } else {
      d["class"] = nb::none();
    }
    d["chunk"] = info.chunk_id;
    d["chunk_index"] = info.chunk;
    d["offset"] = info.offset;
    nb::dict attrs;
    for (const auto& [k, v] : ValueOrThrow(ds.FileAttributes(info.index))) {
      attrs[nb::str(k.data(), k.size())] = nb::str(v.data(), v.size());
    }
    d["attributes"] = attrs;
    return d;
  }

  nb::list ListDir(nb::handle path) {
    nb::list names;
    for (const auto& e : ValueOrThrow(Get().List(FsPath(path)))) names.append(FsName(e.name));
    return names;
  }

  // Class names are directory names (or .cls texts): any bytes, like paths.
  nb::list Classes() {
    const Dataset& ds = Get();
    nb::list out;
    for (uint32_t c = 0; c < ds.class_count(); ++c) out.append(FsName(ds.ClassName(c)));
    return out;
  }

 private:
  const std::string uri_;
  const uint64_t pinned_version_ = 0;  // 0: the newest when opened
  std::mutex mu_;
  std::unique_ptr<Dataset> dataset_;  // guarded by mu_ until published in ready_
  std::atomic<const Dataset*> ready_ = nullptr;
};

}  // namespace

namespace {

// Dataset(version=...): None is the newest (0 inside); versions count from 1, so 0, a negative
// number and one past 2**64 are mistakes, said as such rather than as a signature mismatch.
uint64_t VersionArgument(nb::handle version) {
  if (version.is_none()) return 0;
  if (PyBool_Check(version.ptr()) || !PyIndex_Check(version.ptr())) {
    throw nb::type_error(
        ("version must be an int or None, not " + nb::cast<std::string>(nb::repr(version)))
            .c_str());
  }
  nb::object index = nb::steal(PyNumber_Index(version.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  const unsigned long long n = PyLong_AsUnsignedLongLong(index.ptr());
  if (PyErr_Occurred() || n == 0) {
    PyErr_Clear();
    throw nb::value_error(("version=" + nb::cast<std::string>(nb::repr(index)) +
                           ": versions count from 1 (None: the newest)")
                              .c_str());
  }
  return n;
}

nb::dict ColumnValues(const Dataset& ds, const format::Schema& schema, uint64_t first,
                      uint64_t count, const std::function<nb::bytes(uint64_t)>& file_bytes) {
  const auto files = ValueOrThrow(dataset::ColumnFiles(ds, schema, first, count));
  // By column, so the dict lists the columns in the schema's order whichever a sample has.
  nb::dict out;
  for (size_t i = 0; i < files.size(); ++i) {
    const format::Column& column = schema.columns[i];
    const std::optional<uint64_t>& at = files[i];
    if (!at) {
      out[column.name.c_str()] = nb::none();
      continue;
    }
    const uint64_t file = *at;
    out[column.name.c_str()] =
        ColumnObject(column, file_bytes(file), [&] { return ds.FilePath(file); });
  }
  return out;
}

}  // namespace

nb::object SampleValue(const Dataset& ds, uint64_t first, uint64_t count, int32_t label,
                       const std::function<nb::bytes(uint64_t)>& file_bytes) {
  const dataset::VersionView& view = dataset::ViewOf(ds);
  if (!view.columns().empty()) return ColumnValues(ds, view.columns(), first, count, file_bytes);
  if (!view.grouped()) {
    return nb::make_tuple(file_bytes(first), label, FsName(ValueOrThrow(ds.Path(first))));
  }
  // WebDataset sample: {extension: bytes}, keyed by the text after the key's first '.'.
  nb::dict members;
  std::string key;
  for (uint64_t f = first; f < first + count; ++f) {
    auto [file_key, ext] = dataset::SplitSampleKey(ValueOrThrow(ds.Path(f)));
    if (key.empty()) key = std::move(file_key);
    members[FsName(ext)] = file_bytes(f);
  }
  return nb::make_tuple(members, label, FsName(key));
}

const Dataset& UnwrapDataset(nb::handle obj) {
  PyDataset* dataset = nullptr;
  if (!nb::try_cast<PyDataset*>(obj, dataset) || dataset == nullptr) {
    throw nb::type_error("expected a stoker.Dataset");
  }
  return dataset->Get();
}

void AddNodeStats(const Dataset& dataset, nb::dict& stats) {
  const auto node = node::GetNodeStorageStats(dataset.storage());
  if (!node) return;
  stats["node_reads"] = node->node_reads;
  stats["store_reads"] = node->store_reads;
  stats["node_failures"] = node->node_failures;
}

void RegisterDataset(nb::module_& m) {
  m.def(
      "node_reads",
      [](nb::handle dataset) -> std::optional<std::tuple<uint64_t, uint64_t>> {
        const auto node = node::GetNodeStorageStats(UnwrapDataset(dataset).storage());
        if (!node) return std::nullopt;
        return std::tuple(node->node_reads, node->store_reads);
      },
      nb::arg("dataset"),
      "(chunk reads served by the node daemon's cache, chunk reads from the store) of a dataset "
      "read through `stoker node` ($STOKER_NODE), since it was opened; None without one.");
  nb::class_<PyDataset>(m, "Dataset",
                        "A packed dataset (one version), map-style: len(ds) samples, "
                        "ds[i] -> (bytes, label, path); for tar-packed datasets "
                        "ds[i] -> ({ext: bytes}, label, key); for column datasets "
                        "(stoker.Writer) ds[i] -> {column: value}. Labels are -1 when absent.")
      .def(
          "__init__",
          [](PyDataset* self, nb::handle uri, nb::handle version) {
            new (self) PyDataset(FsPath(uri), VersionArgument(version));
          },
          nb::sig("def __init__(self, uri: object, version: int | None = None) -> None"),
          nb::arg("uri"), nb::arg("version").none() = nb::none(),
          "Opens a version (the newest by default) at a path or URI: str, bytes or any "
          "os.PathLike.")
      .def("__len__", [](PyDataset& self) { return self.Get().sample_count(); })
      .def("__getitem__", &PyDataset::GetItem,
           nb::sig("def __getitem__(self, index: int) -> object"), nb::arg("index"))
      .def(
          "find",
          [](PyDataset& self, nb::handle path) {
            return ValueOrThrow(self.Get().Find(FsPath(path)));
          },
          nb::arg("path"),
          "File index of a path (str, bytes or os.PathLike); "
          "FileNotFoundError if absent.")
      .def("stat", &PyDataset::StatDict, nb::arg("path_or_index"),
           "dict(index, path, size, crc32c, label, class, chunk (id), chunk_index, offset, "
           "attributes)")
      .def(
          "read",
          [](PyDataset& self, nb::handle key) { return self.ReadBytes(self.FileIndex(key)); },
          nb::arg("path_or_index"), "A file's bytes (CRC-checked) by path or file index.")
      .def(
          "read_buffer",
          [](PyDataset& self, nb::handle key) { return self.ReadBuffer(self.FileIndex(key)); },
          nb::arg("path_or_index"),
          "Like read(), as a read-only memoryview over the C++ buffer (no copy into bytes).")
      .def("listdir", &PyDataset::ListDir, nb::arg("path") = "",
           "Names in a directory: subdirectories first, then files, each sorted.")
      .def(
          "sample_files",
          [](PyDataset& self, nb::handle index) {
            const Dataset& ds = self.Get();
            const auto [first, count] = ValueOrThrow(ds.SampleFiles(self.SampleIndex(index)));
            nb::list paths;
            for (uint64_t f = first; f < first + count; ++f) {
              paths.append(FsName(ValueOrThrow(ds.Path(f))));
            }
            return paths;
          },
          nb::sig("def sample_files(self, index: int) -> list"), nb::arg("index"),
          "Paths of the files making up sample `index`.")
      .def_prop_ro("uri", [](PyDataset& self) { return FsName(self.uri()); })
      .def_prop_ro("version", &PyDataset::version)
      .def_prop_ro("num_files", [](PyDataset& self) { return self.Get().file_count(); })
      .def_prop_ro("num_samples", [](PyDataset& self) { return self.Get().sample_count(); })
      .def_prop_ro("num_chunks",
                   [](PyDataset& self) { return dataset::ViewOf(self.Get()).chunk_count(); })
      .def_prop_ro("classes", &PyDataset::Classes, "Class names; label i is classes[i].")
      .def_prop_ro(
          "columns",
          [](PyDataset& self) { return SchemaDict(dataset::ViewOf(self.Get()).columns()); },
          "A column dataset's schema {name: type} (stoker.Writer); {} for other datasets.")
      .def_prop_ro(
          "label_column",
          [](PyDataset& self) -> std::optional<std::string> {
            const std::string& label = dataset::ViewOf(self.Get()).columns().label;
            return label.empty() ? std::nullopt : std::optional(label);
          },
          "The column whose values label a column dataset's samples, or None.")
      .def_prop_ro(
          "grouped", [](PyDataset& self) { return dataset::ViewOf(self.Get()).grouped(); },
          "True for tar-packed datasets, whose samples are groups of files.")
      .def_prop_ro(
          "largest_chunk_bytes",
          [](PyDataset& self) {
            const auto& snap = dataset::ViewOf(self.Get());
            uint64_t largest = 0;
            for (uint32_t c = 0; c < snap.chunk_count(); ++c) {
              largest = std::max(largest, ValueOrThrow(snap.chunk(c)).file_size);
            }
            return largest;
          },
          "Size of the largest chunk file: sizes the read pipeline's memory for chunk shuffle.")
      .def("__repr__",
           [](PyDataset& self) {
             return nb::str("stoker.Dataset({!r}, version={})")
                 .format(FsName(self.uri()), self.version());
           })
      .def("__getstate__",
           [](PyDataset& self) { return nb::make_tuple(FsName(self.uri()), self.version()); })
      .def("__setstate__", [](PyDataset& self, const nb::tuple& state) {
        new (&self) PyDataset(FsPath(state[0]), nb::cast<uint64_t>(state[1]), PyDataset::Lazy{});
      });
}

}  // namespace stoker::python
