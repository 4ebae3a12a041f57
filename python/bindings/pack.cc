// stoker.pack(src, dst, ...) and stoker.verify(uri): the `stoker pack` / `stoker verify`
// commands as functions returning dicts (the same fields as the CLI's --json output).
// Both run with the GIL released.
#include "pack.h"

#include <algorithm>
#include <optional>
#include <variant>

#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "common/progress.h"
#include "dataset/packer.h"
#include "dataset/verify.h"
#include "errors.h"
#include "fs_path.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

Result<dataset::PackSummary> RunPack(const std::vector<std::string>& sources,
                                     const std::string& dst, dataset::PackOptions options,
                                     const dataset::DirectorySourceOptions& dir_options,
                                     bool progress) {
  auto source = dataset::OpenPackSource(sources, dir_options, &options.group_samples);
  if (!source) return Err(source.error());
  STOKER_ASSIGN_OR_RETURN(auto storage, OpenStorage(dst));
  // The CLI's progress bar, drawn on stderr only when it is a terminal (never in a log).
  ProgressBar bar("pack", progress);
  options.progress = dataset::ShowProgressOn(bar);
  auto summary = dataset::Pack(**source, *storage, options);
  bar.Finish();
  return summary;
}

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

// A size given as bytes or as text like "64MiB" (the CLI's syntax); ValueError naming `name`.
uint64_t ByteSize(const std::variant<uint64_t, std::string>& size, const std::string& name) {
  const auto* text = std::get_if<std::string>(&size);
  if (!text) return std::get<uint64_t>(size);
  const Result<uint64_t> bytes = ParseByteSize(*text);
  if (!bytes) ThrowStatus(bytes.error().WithContext(name));
  return *bytes;
}

nb::dict Pack(nb::handle src_arg, nb::handle dst_arg,
              const std::variant<uint64_t, std::string>& chunk_size, bool append,
              const std::string& labels, int threads, const std::string& order, uint64_t order_seed,
              const std::variant<uint64_t, std::string>& mix_memory, const std::string& layout,
              bool progress) {
  dataset::PackOptions options;
  options.chunk_bytes = ByteSize(chunk_size, "chunk_size");
  options.mix_memory_bytes = ByteSize(mix_memory, "mix_memory");
  if (labels != "auto" && labels != "none") {
    ThrowStatus(Status::InvalidArgument("labels must be 'auto' or 'none', not '" + labels + "'"));
  }
  options.labels = labels == "none" ? dataset::LabelPolicy::kNone : dataset::LabelPolicy::kAuto;
  options.append = append;
  dataset::DirectorySourceOptions dir_options;
  dir_options.threads = threads;
  dir_options.layout = ValueOrThrow(dataset::ParseDirectoryLayout(layout));
  dataset::SetStorageOrder(ValueOrThrow(dataset::ParseStorageOrder(order)), order_seed,
                           &dir_options, &options);
  const std::vector<std::string> sources = FsPaths(src_arg);
  const std::string dst = FsPath(dst_arg);
  Result<dataset::PackSummary> result = Err(Status::Internal("unset"));
  {
    nb::gil_scoped_release release;
    result = RunPack(sources, dst, options, dir_options, progress);
  }
  if (!result) ThrowStatus(SpokenInPython(result.error()));
  const dataset::PackSummary& s = *result;
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
  return d;
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
  nb::dict d;
  d["dataset"] = FsName(uri);
  d["version"] = r.version;
  d["ok"] = r.ok();
  d["files_checked"] = r.files_checked;
  d["chunks_checked"] = r.chunks_checked;
  d["bytes_checked"] = r.bytes_checked;
  d["problems"] = names(r.problems);
  d["corrupt_chunks"] = r.corrupt_chunks;
  d["corrupt_files"] = names(r.corrupt_files);
  return d;
}

}  // namespace

void RegisterPack(nb::module_& m) {
  m.def("pack", &Pack, nb::arg("src"), nb::arg("dst"), nb::kw_only(),
        nb::arg("chunk_size") = std::string("64MiB"), nb::arg("append") = false,
        nb::arg("labels") = "auto", nb::arg("threads") = 0, nb::arg("order") = "shuffled",
        nb::arg("order_seed") = 0, nb::arg("mix_memory") = std::string("2GiB"),
        nb::arg("layout") = "auto", nb::arg("progress") = true,
        "Packs a directory tree (labels from its first level) or a list of tar shards into the "
        "dataset at `dst`, as a new version (append=True adds to an existing one). A directory "
        "holding .cls members is a WebDataset folder and packs as the same files in a tar "
        "would (samples grouped by key, labelled by their .cls); layout='tree' or "
        "'webdataset' says which instead of 'auto'. progress: the CLI's progress bar on "
        "stderr when it is a terminal. chunk_size "
        "is bytes or a string like '64MiB'. order='shuffled' (the default) places files in chunks "
        "in a random order (seeded by order_seed) so that every chunk mixes classes; "
        "order='path' keeps path (tree) or archive (tar) order. mix_memory: tar input to S3: "
        "memory for the part buffers of the chunks filled at once (32 MiB each). Returns a "
        "summary dict (open_chunks: how many chunks were filled at once).");
  m.def("byte_size", &ByteSize, nb::arg("size"), nb::arg("name") = "size",
        "A size as bytes: an int, or text like '64MiB', '48G' or '65536' (binary multiples), as "
        "the CLI takes it. ValueError naming `name` otherwise.");
  m.def("verify", &Verify, nb::arg("uri"),
        "Re-reads the current version and checks every CRC. Returns a report dict with 'ok', "
        "'problems', 'corrupt_chunks' and 'corrupt_files'; raises only if the dataset cannot be "
        "read at all.");
}

}  // namespace stoker::python
