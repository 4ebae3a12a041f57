// stoker.pack(src, dst, ...) and stoker.verify(uri): the `stoker pack` / `stoker verify`
// commands as functions returning dicts (the same fields as the CLI's --json output).
// Both run with the GIL released. stoker.pack's keyword arguments, signature and docstring come
// from the pack option table (dataset/pack_option_table.h), but for progress, which only Python
// has.
#include "pack.h"

#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common/progress.h"
#include "dataset/pack_option_table.h"
#include "dataset/packer.h"
#include "dataset/parts.h"
#include "dataset/verify.h"
#include "errors.h"
#include "fs_path.h"
#include "options.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// Python's own keyword argument; the others are the table's.
constexpr const char* kProgress = "progress";
constexpr const char* kOwnKeys[] = {kProgress};

// Asks Python, at most every 100 ms, whether a signal handler raised (Ctrl-C's
// KeyboardInterrupt): the pack, running without the GIL, then stops cleanly, and the exception
// stays set for the caller to raise.
class PythonSignals {
 public:
  bool Raised() {
    const auto now = std::chrono::steady_clock::now();
    if (raised_ || now - checked_ < std::chrono::milliseconds(100)) return raised_;
    checked_ = now;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      raised_ = true;
      error_ = std::make_unique<nb::python_error>();  // takes the exception out of the thread
    }
    return raised_;
  }
  // Raises what a signal handler raised, if one did (with the GIL held).
  void Rethrow() {
    if (error_) {
      error_->restore();
      throw nb::python_error();
    }
  }

 private:
  bool raised_ = false;
  std::chrono::steady_clock::time_point checked_{};
  std::unique_ptr<nb::python_error> error_;
};

Result<dataset::PackSummary> RunPack(const std::vector<std::string>& sources,
                                     const std::string& dst, const dataset::PackSettings& settings,
                                     bool progress, PythonSignals& signals) {
  dataset::PackOptions options = settings.pack;
  options.stop_requested = [&signals] { return signals.Raised(); };
  auto source = dataset::OpenPackSource(sources, settings.source, &options.group_samples);
  if (!source) return Err(source.error());
  STOKER_ASSIGN_OR_RETURN(auto storage, OpenStorage(dst));
  // The CLI's progress bar, drawn on stderr only when it is a terminal (never in a log).
  ProgressBar bar("pack", progress);
  options.progress = dataset::ShowProgressOn(bar);
  auto summary = dataset::Pack(**source, *storage, options);
  bar.Finish();
  return summary;
}

}  // namespace

// The packer's messages name the CLI's flags; a Python caller is told the keyword instead.
Status SpokenInPython(const Status& status) {
  static const std::pair<std::string_view, std::string_view> kFlags[] = {
      {"--append", "append=True"}, {"--labels none", "labels='none'"}};
  std::string message(status.message());
  for (const auto& [flag, keyword] : kFlags) {
    for (size_t at; (at = message.find(flag)) != std::string::npos;) {
      message.replace(at, flag.size(), keyword);
    }
  }
  return Status(status.code(), std::move(message));
}

nb::dict PackSummaryDict(const std::string& dst, const dataset::PackSummary& s) {
  nb::dict d;
  d["dataset"] = FsName(dst);
  d["version"] = s.version;
  d["files_added"] = s.files_added;
  d["bytes_added"] = s.bytes_added;
  d["files"] = s.files_total;
  d["bytes"] = s.bytes_total;
  d["samples"] = s.samples;
  d["classes"] = s.classes;
  d["chunks_added"] = s.chunks_added;
  d["chunks"] = s.chunks_total;
  d["open_chunks"] = s.open_chunks;
  d["classes_added"] = s.classes_added;
  d["segment_bytes"] = s.segment_bytes;
  d["metadata_bytes"] = s.metadata_bytes;
  d["segments"] = s.segments;
  d["publish_attempts"] = s.publish_attempts;
  d["seconds"] = s.seconds;
  if (!s.part_path.empty()) d["part"] = s.part_path;
  return d;
}

namespace {

// stoker.pack's keyword arguments, all but progress, set over the table's defaults.
dataset::PackSettings ParsePackOptions(const nb::dict& kwargs) {
  dataset::PackSettings settings;
  SetOptions(kwargs, kOwnKeys, dataset::PackOptionTable(),
             {PyExc_TypeError, "pack() got an unexpected keyword argument "}, settings);
  return settings;
}

bool Progress(const nb::dict& kwargs) {
  if (!kwargs.contains(kProgress)) return true;
  const nb::object value = kwargs[kProgress];
  return std::get<bool>(OptionFromPython(kProgress, OptionKind::kBool, {}, value));
}

nb::dict Pack(nb::handle src_arg, nb::handle dst_arg, const nb::kwargs& kwargs) {
  const dataset::PackSettings settings = ParsePackOptions(kwargs);
  const bool progress = Progress(kwargs);
  const std::vector<std::string> sources = FsPaths(src_arg);
  const std::string dst = FsPath(dst_arg);
  Result<dataset::PackSummary> result = Err(Status::Internal("unset"));
  PythonSignals signals;
  {
    nb::gil_scoped_release release;
    result = RunPack(sources, dst, settings, progress, signals);
  }
  signals.Rethrow();  // KeyboardInterrupt: the pack removed what it wrote
  if (!result) ThrowStatus(SpokenInPython(result.error()));
  nb::dict summary = PackSummaryDict(dst, *result);
  // What was left out, or labels not found: a warning, as the CLI's note on stderr.
  nb::list notes;
  for (const std::string& note : dataset::PackNotes(*result)) {
    const std::string text =
        "stoker.pack: " + std::string(SpokenInPython(Status::InvalidArgument(note)).message());
    if (PyErr_WarnEx(PyExc_UserWarning, text.c_str(), 1) != 0) throw nb::python_error();
    notes.append(note);
  }
  summary["notes"] = notes;
  const auto names = [](const dataset::LeftOutNames& n) {
    nb::list examples;
    for (const std::string& name : n.examples) examples.append(FsName(name));
    nb::dict d;
    d["count"] = n.count;
    d["examples"] = examples;
    return d;
  };
  nb::dict left_out;
  left_out["excluded"] = names(result->left_out.excluded);
  left_out["outside_class_dirs"] = names(result->left_out.outside_classes);
  summary["left_out"] = left_out;
  summary["labels_found"] = !result->no_labels_found;
  return summary;
}

nb::dict Commit(nb::handle dst_arg, const std::string& job, nb::handle parts) {
  const std::string dst = FsPath(dst_arg);
  dataset::CommitOptions options;
  options.job = job;
  // A count, or an engine's accepted attempts by part index: each an int in 0 .. 2^32-1.
  const auto index = [](nb::handle k) {
    uint32_t out = 0;
    if (!nb::try_cast(nb::int_(k), out) || nb::int_(k) < nb::int_(0)) {
      throw nb::value_error(
          fmt::format("parts: {} is not a part index (an int from 0)", nb::str(nb::repr(k)).c_str())
              .c_str());
    }
    return out;
  };
  if (PyIndex_Check(parts.ptr())) {
    options.parts = index(parts);
  } else {
    if (!PyIter_Check(parts.ptr()) && !PySequence_Check(parts.ptr())) {
      throw nb::type_error("parts: a count (int) or a list of part indices");
    }
    for (nb::handle k : nb::iter(parts)) options.only.push_back(index(k));
    if (options.only.empty()) throw nb::value_error("parts: an empty list names no part to commit");
  }
  Result<dataset::PackSummary> result = Err(Status::Internal("unset"));
  {
    nb::gil_scoped_release release;
    auto storage = OpenStorage(dst);
    result = storage ? dataset::Commit(**storage, options) : Err(storage.error());
  }
  if (!result) ThrowStatus(SpokenInPython(result.error()));
  return PackSummaryDict(dst, *result);
}

nb::dict DiscardParts(nb::handle dst_arg, const std::string& job, bool close_empty) {
  const std::string dst = FsPath(dst_arg);
  Result<dataset::DiscardResult> result = Err(Status::Internal("unset"));
  {
    nb::gil_scoped_release release;
    auto storage = OpenStorage(dst);
    result = storage ? dataset::DiscardParts(**storage, job, close_empty) : Err(storage.error());
  }
  if (!result) ThrowStatus(SpokenInPython(result.error()));
  nb::dict out;
  out["parts_removed"] = result->parts_removed;
  out["already_closed"] = result->already_closed;
  return out;
}

nb::dict Verify(nb::handle uri_arg) {
  const std::string uri = FsPath(uri_arg);
  Result<dataset::VerifyReport> result = Err(Status::Internal("unset"));
  {
    nb::gil_scoped_release release;
    auto storage = OpenStorage(uri);
    result = storage ? dataset::Verify(**storage) : Err(storage.error());
  }
  const dataset::VerifyReport r = ValueOrThrow(std::move(result));
  const auto names = [](const std::vector<std::string>& list) {
    nb::list out;
    for (const auto& name : list) out.append(FsName(name));
    return out;
  };
  // As `stoker verify --json`: {"path": the name as os.fsdecode gives it, "message": why}.
  const auto findings = [](const std::vector<dataset::Finding>& list) {
    nb::list out;
    for (const auto& f : list) {
      nb::dict d;
      d["path"] = FsName(f.path);
      d["message"] = f.message;
      out.append(d);
    }
    return out;
  };
  nb::dict d;
  d["dataset"] = FsName(uri);
  d["version"] = r.version;
  d["ok"] = r.ok();
  d["files_checked"] = r.files_checked;
  d["chunks_checked"] = r.chunks_checked;
  d["bytes_checked"] = r.bytes_checked;
  d["problems"] = names(r.problems);
  d["corrupt_chunks"] = findings(r.corrupt_chunks);
  d["corrupt_files"] = findings(r.corrupt_files);
  return d;
}

// A default as stoker.pack's signature shows it: a byte size as its text ('64MiB').
std::string PythonDefault(const dataset::PackOption& option) {
  const OptionValue value = option.get(dataset::PackSettings());
  if (option.kind == OptionKind::kByteSize)
    return fmt::format("'{}'", OptionText(option.kind, value));
  return nb::cast<std::string>(nb::repr(OptionToPython(option.kind, value)));
}

std::string_view Annotation(OptionKind kind) {
  switch (kind) {
    case OptionKind::kBool:
      return "bool";
    case OptionKind::kUnsigned:
      return "int";
    case OptionKind::kByteSize:
      return "int | str";
    case OptionKind::kChoice:
      return "str";
    case OptionKind::kTexts:
      return "Sequence[str]";
    default:
      return "object";  // no pack option has another kind
  }
}

// stoker.pack's signature and docstring, from the table.
std::string PackSignature() {
  std::string sig = "def pack(src: object, dst: object, *";
  for (const dataset::PackOption& option : dataset::PackOptionTable()) {
    sig +=
        fmt::format(", {}: {} = {}", option.name, Annotation(option.kind), PythonDefault(option));
  }
  return sig + ", progress: bool = True) -> dict";
}

std::string PackDoc() {
  std::string doc =
      "Packs a directory tree (labels from its first level) or a list of tar shards into the "
      "dataset at `dst`, as a new version, as `stoker pack` does (each keyword argument is the "
      "flag of the same name). A directory holding .cls members is a WebDataset folder and "
      "packs as the same files in a tar would (samples grouped by key, labelled by their "
      ".cls). Returns a summary dict (open_chunks: how many chunks were filled at once).\n\n";
  for (const dataset::PackOption& option : dataset::PackOptionTable()) {
    doc += fmt::format("{}: {}\n", option.name, option.doc);
  }
  return doc + "progress: the CLI's progress bar on stderr when it is a terminal.";
}

}  // namespace

void RegisterPack(nb::module_& m) {
  m.def("pack", &Pack, nb::sig(PackSignature().c_str()), nb::arg("src"), nb::arg("dst"),
        nb::arg("kwargs"), PackDoc().c_str());
  m.def(
      "pack_options", [] { return DescribeOptions(dataset::PackOptionTable()); },
      "stoker.pack's options but progress (`stoker pack`'s shared flags), each a dict: name, "
      "kind, doc, choices, default, text (the default as the CLI writes it). stoker.pack's "
      "signature and docstring are made from it, the table in README.md is generated from it "
      "(scripts/gen_options.py).");
  m.def(
      "parse_pack_options",
      [](const nb::dict& values) {
        return OptionValues(dataset::PackOptionTable(), ParsePackOptions(values));
      },
      nb::arg("values"),
      "Every pack option's value after setting `values` (a dict of some of stoker.pack's "
      "keyword arguments) over the defaults, as stoker.pack would; TypeError / ValueError "
      "naming the option for a bad value.");
  m.def(
      "byte_size",
      [](nb::handle size, const std::string& name) {
        return std::get<uint64_t>(OptionFromPython(name, OptionKind::kByteSize, {}, size));
      },
      nb::sig("def byte_size(size: int | str, name: str = 'size') -> int"), nb::arg("size"),
      nb::arg("name") = "size",
      "A size as bytes: an int, or text like '64MiB', '48G' or '65536' (binary multiples), as "
      "the CLI takes it. ValueError naming `name` otherwise.");
  m.def("commit", &Commit, nb::arg("dst"), nb::arg("job") = "default",
        nb::arg("parts") = nb::int_(0),
        nb::sig("def commit(dst: object, job: str = 'default', parts: int | "
                "collections.abc.Sequence[int] = 0) -> dict"),
        "Publishes every part of `job` (stoker.Writer(..., part=...) or `stoker pack --part`) as "
        "one new version, as `stoker commit` does; `parts`: how many to expect (0: as their "
        "names say), or the list of part indices to publish (an engine's accepted task "
        "attempts: the job's other parts are removed, and the job stays closed, so a part "
        "written later is refused). Returns stoker.pack's summary dict.");
  m.def("discard_parts", &DiscardParts, nb::arg("dst"), nb::arg("job"),
        nb::arg("close_empty") = false,
        "Ends `job` without publishing: removes its parts and refuses any written later (an "
        "engine's failed write); their chunks are garbage for `stoker gc`. Returns "
        "{'parts_removed', 'already_closed'} (closed: committed, being committed or discarded "
        "before; nothing is done). FileNotFoundError when the job has no parts directory, "
        "unless close_empty=True: then it is closed all the same (an engine's attempt that "
        "starts after the discard is refused).");
  m.def("verify", &Verify, nb::arg("uri"),
        "Re-reads the current version and checks every CRC. Returns a report dict with 'ok', "
        "'problems', 'corrupt_chunks' and 'corrupt_files' (each a list of {'path', 'message'}); "
        "raises only if the dataset cannot be read at all.");
}

}  // namespace stoker::python
