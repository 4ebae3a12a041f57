// ls, stat, cat, info, verify, versions: reading a dataset from the command line.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "common/escape.h"
#include "common/progress.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/columns.h"
#include "format/versions.h"
#include "stoker/dataset.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

nlohmann::json FileJson(const FileInfo& f, const Dataset& ds) {
  nlohmann::json j = {{"path", f.path},
                      {"index", f.index},
                      {"size", f.size},
                      {"crc32c", fmt::format("{:08x}", f.crc32c)},
                      {"chunk", fmt::format("{:016x}", f.chunk_id)},
                      {"offset", f.offset}};
  if (f.label >= 0) {
    j["label"] = f.label;
    j["class"] = std::string(ds.ClassName(static_cast<uint32_t>(f.label)));
  }
  nlohmann::json attrs = nlohmann::json::object();
  if (auto list = ds.FileAttributes(f.index)) {
    for (const auto& [k, v] : *list) attrs[k] = v;
  }
  if (!attrs.empty()) j["attributes"] = attrs;
  return j;
}

struct Common {
  std::string dataset;
  std::string path;
  std::optional<uint64_t> version;  // --version N: an older version; the newest if unset
  bool json = false;
  bool long_format = false;
};

// ls, stat and cat look at a few files: they read the metadata blocks they need, not every
// file's location, so they stay quick on a dataset of any size and over the network.
Result<std::unique_ptr<Dataset>> OpenForLookups(const Common& a) {
  DatasetOpenOptions options;
  options.read_locations = false;
  options.version = a.version;
  return Dataset::Open(a.dataset, options);
}

int RunLs(const Common& a) {
  auto ds = OpenForLookups(a);
  if (!ds) return Fail("ls", ds.error());
  auto entries = (*ds)->List(a.path);
  if (!entries) {
    // `ls FILE` lists the file itself, like ls(1).
    auto index = (*ds)->Find(a.path);
    if (!index) return Fail("ls", entries.error());
    auto info = (*ds)->Stat(*index);
    entries = std::vector<DirEntry>{{info->path, false, *index, info->size}};
  }
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *entries) {
      out.push_back({{"name", e.name}, {"type", e.is_dir ? "dir" : "file"}, {"size", e.size}});
    }
    PrintJson(out);
    return kExitOk;
  }
  std::string text;
  for (const auto& e : *entries) {
    if (a.long_format) {
      text += e.is_dir ? fmt::format("d {:>12}  {}/\n", "-", TerminalSafe(e.name))
                       : fmt::format("- {:>12}  {}\n", e.size, TerminalSafe(e.name));
    } else {
      text += TerminalSafe(e.name) + (e.is_dir ? "/\n" : "\n");
    }
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

int RunStat(const Common& a) {
  auto ds = OpenForLookups(a);
  if (!ds) return Fail("stat", ds.error());
  auto index = (*ds)->Find(a.path);
  if (!index) {
    auto is_dir = (*ds)->IsDir(a.path);
    if (!is_dir) return Fail("stat", is_dir.error());
    if (*is_dir) {
      if (a.json) {
        PrintJson({{"path", a.path}, {"type", "dir"}});
      } else {
        std::cout << TerminalSafe(a.path) << ": directory\n";
      }
      return kExitOk;
    }
    return Fail("stat", index.error());
  }
  auto info = (*ds)->Stat(*index);
  if (!info) return Fail("stat", info.error());
  const nlohmann::json j = FileJson(*info, **ds);
  if (a.json) {
    PrintJson(j);
  } else {
    for (const auto& [k, v] : j.items()) {
      std::cout << fmt::format("{:<10} {}\n", k + ":",
                               TerminalSafe(v.is_string() ? v.get<std::string>() : v.dump()));
    }
  }
  return kExitOk;
}

// --json: one document with the bytes as base64 (JSON holds no raw bytes).
std::string Base64(std::span<const std::byte> bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

int RunCat(const Common& a) {
  auto ds = OpenForLookups(a);
  if (!ds) return Fail("cat", ds.error());
  auto index = (*ds)->Find(a.path);
  if (!index) {
    // A directory is no "such file": say what it is, and what lists it.
    if (auto is_dir = (*ds)->IsDir(a.path); is_dir && *is_dir) {
      return Fail("cat", Status::InvalidArgument(fmt::format(
                             "{} is a directory of the dataset, not a file: `stoker ls {} {}` "
                             "lists it",
                             a.path, a.dataset, a.path)));
    }
    return Fail("cat", index.error());
  }
  auto bytes = (*ds)->ReadFile(*index);  // CRC-checked: corrupt bytes never reach stdout
  if (!bytes) return Fail("cat", bytes.error());
  if (a.json) {
    if (bytes->size() > (1ull << 30)) {
      return Fail("cat", Status::InvalidArgument(fmt::format(
                             "{} holds {} bytes: too large for --json (base64); leave it out to "
                             "write the bytes",
                             a.path, bytes->size())));
    }
    auto info = (*ds)->Stat(*index);
    if (!info) return Fail("cat", info.error());
    nlohmann::json j = FileJson(*info, **ds);
    j["base64"] = Base64(*bytes);
    PrintJson(j);
    return kExitOk;
  }
  if (std::fwrite(bytes->data(), 1, bytes->size(), stdout) != bytes->size() ||
      std::fflush(stdout)) {
    return Fail("cat", Status::IOError("write to stdout failed"));
  }
  return kExitOk;
}

// A column dataset's columns as {name: type text}; {} for a dataset of files.
nlohmann::json ColumnsJson(const format::Schema& schema) {
  nlohmann::json out = nlohmann::json::object();
  for (const format::Column& c : schema.columns) out[c.name] = format::ColumnTypeText(c);
  return out;
}

int RunInfo(const Common& a) {
  auto ds = OpenForLookups(a);
  if (!ds) return Fail("info", ds.error());
  const dataset::VersionView& v = dataset::ViewOf(**ds);
  const format::VersionRecord& r = v.record();
  uint64_t metadata_bytes = 0;
  for (const auto& ref : r.segments) metadata_bytes += ref.bytes;
  const double per_file = r.files ? static_cast<double>(metadata_bytes) / r.files : 0;
  uint64_t chunk_bytes = 0;
  for (uint32_t c = 0; c < v.chunk_count(); ++c) {
    auto chunk = v.chunk(c);
    if (!chunk) return Fail("info", chunk.error());
    chunk_bytes += chunk->file_size;
  }
  nlohmann::json j = {
      {"dataset", a.dataset},
      {"version", r.version},
      {"parent", r.parent},
      {"created_unix", r.created_unix_seconds},
      {"files", r.files},
      {"samples", r.samples},
      {"chunks", r.chunks},
      {"bytes", r.bytes},
      {"chunk_bytes", chunk_bytes},
      {"classes", r.classes},
      {"labels", !v.labelled()                ? std::string("none")
                 : !v.columns().label.empty() ? "from column " + v.columns().label
                 : v.grouped()                ? std::string("from .cls members")
                                              : std::string("from first-level directories")},
      {"columns", ColumnsJson(v.columns())},
      {"segments", r.segments.size()},
      {"metadata_bytes", metadata_bytes},
      {"metadata_bytes_per_file", per_file},
  };
  if (a.json) {
    PrintJson(j);
    return kExitOk;
  }
  const std::time_t created = static_cast<std::time_t>(r.created_unix_seconds);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&created));
  std::cout << fmt::format(
      "dataset    {}\nversion    {} (created {})\nfiles      {} in {}\n"
      "bytes      {} in {} ({})\nlabels     {}, {}\nmetadata   {} in {} ({:.1f} B per file)\n",
      a.dataset, r.version, when, r.files, Counted(r.samples, "sample"), HumanBytes(r.bytes),
      Counted(r.chunks, "chunk"), HumanBytes(chunk_bytes), j["labels"].get<std::string>(),
      Counted(r.classes, "class"), HumanBytes(metadata_bytes),
      Counted(r.segments.size(), "segment"), per_file);
  if (!r.columns.empty()) std::cout << "columns    " << r.columns << "\n";
  return kExitOk;
}

// verify --json: [{"path": ..., "message": ...}], the path losslessly (os.fsencode gives its
// bytes back).
nlohmann::json FindingsJson(const std::vector<dataset::Finding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : findings) out.push_back({{"path", f.path}, {"message", f.message}});
  return out;
}

int RunVerify(const Common& a) {
  auto storage = OpenStorage(a.dataset);
  if (!storage) return Fail("verify", storage.error());
  ProgressBar bar("verify", !a.json);
  auto report = dataset::Verify(
      **storage,
      [&](uint64_t done, uint64_t total, uint64_t bytes) {
        bar.Update(done, total, bytes, "chunks");
      },
      a.version);
  bar.Finish();
  if (!report) return Fail("verify", report.error());
  const auto& r = *report;
  if (a.json) {
    PrintJson(nlohmann::json{{"dataset", a.dataset},
                             {"version", r.version},
                             {"ok", r.ok()},
                             {"files_checked", r.files_checked},
                             {"chunks_checked", r.chunks_checked},
                             {"bytes_checked", r.bytes_checked},
                             {"problems", r.problems},
                             {"corrupt_chunks", FindingsJson(r.corrupt_chunks)},
                             {"corrupt_files", FindingsJson(r.corrupt_files)}});
  } else {
    for (const auto& p : r.problems) std::cout << "CORRUPT  " << TerminalSafe(p) << "\n";
    for (const auto& c : r.corrupt_chunks) {
      std::cout << "CORRUPT chunk  " << TerminalSafe(c.ToString()) << "\n";
    }
    for (const auto& f : r.corrupt_files) {
      std::cout << "CORRUPT file   " << TerminalSafe(f.ToString()) << "\n";
    }
    std::cout << fmt::format(
        "{}: version {}, {} in {} ({}) checked: {}\n", a.dataset, r.version,
        Counted(r.files_checked, "file"), Counted(r.chunks_checked, "chunk"),
        HumanBytes(r.bytes_checked),
        r.ok() ? "OK"
               : fmt::format("{}, {}{}", Counted(r.corrupt_files.size(), "corrupt file"),
                             Counted(r.corrupt_chunks.size(), "corrupt chunk"),
                             r.problems.empty() ? "" : ", dataset unreadable"));
  }
  return r.ok() ? kExitOk : kExitCorrupt;
}

int RunVersions(const Common& a) {
  auto storage = OpenStorage(a.dataset);
  if (!storage) return Fail("versions", storage.error());
  auto versions = format::ListVersions(**storage);
  if (!versions) return Fail("versions", versions.error());
  if (versions->empty()) {
    return Fail("versions",
                Status::NotFound(a.dataset + " is not a stoker dataset (no versions/)"));
  }
  nlohmann::json out = nlohmann::json::array();
  std::string text =
      fmt::format("{:>8} {:>8}  {:<20} {:>12} {:>10} {:>8} {:>8} {:>10}\n", "version", "parent",
                  "created (UTC)", "files", "added", "classes", "chunks", "segments");
  std::map<uint64_t, uint64_t> files_of;  // version -> files
  for (const uint64_t v : *versions) {
    auto r = format::ReadVersion(**storage, v);
    if (!r) return Fail("versions", r.error());
    files_of[v] = r->files;
    // Against the parent where it is still listed (a compaction adds none). Where gc removed
    // it, nothing tells an append from a compaction: unknown ("-", null), never a guess.
    const auto parent = files_of.find(r->parent);
    const int64_t added = r->parent == 0 ? static_cast<int64_t>(r->files)
                          : parent != files_of.end()
                              ? static_cast<int64_t>(r->files - parent->second)
                              : -1;
    const std::time_t created = static_cast<std::time_t>(r->created_unix_seconds);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::gmtime(&created));
    out.push_back({{"version", v},
                   {"parent", r->parent},
                   {"created_unix", r->created_unix_seconds},
                   {"writer", fmt::format("{:016x}", r->writer)},
                   {"files", r->files},
                   {"files_added", added >= 0 ? nlohmann::json(added) : nlohmann::json()},
                   {"samples", r->samples},
                   {"classes", r->classes},
                   {"chunks", r->chunks},
                   {"bytes", r->bytes},
                   {"segments", r->segments.size()}});
    text += fmt::format("{:>8} {:>8}  {:<20} {:>12} {:>10} {:>8} {:>8} {:>10}\n", v, r->parent,
                        when, r->files, added >= 0 ? std::to_string(added) : "-", r->classes,
                        r->chunks, r->segments.size());
  }
  if (a.json) {
    PrintJson(out);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return kExitOk;
}

CLI::App* AddCommand(CLI::App& app, const char* name, const char* help,
                     const std::shared_ptr<Common>& args, bool takes_path, bool path_required) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("dataset", args->dataset,
                  "the dataset: a path or URI (file://, s3://, http(s)://, stoker://)")
      ->required();
  if (takes_path) {
    auto* opt = cmd->add_option("path", args->path, "path inside the dataset");
    if (path_required) opt->required();
  }
  cmd->add_option("--version", args->version,
                  "read this version (`stoker versions` lists them); default: the newest")
      ->check(WholeNumber(true));
  cmd->add_flag("--json", args->json, "machine-readable output");
  return cmd;
}

}  // namespace

void RegisterInspect(CLI::App& app, int& exit_code) {
  auto ls = std::make_shared<Common>();
  AddCommand(app, "ls", "List a directory of the dataset", ls, true, false)
      ->callback([ls, &exit_code] { exit_code = RunLs(*ls); })
      ->add_flag("-l", ls->long_format, "show sizes");
  auto st = std::make_shared<Common>();
  AddCommand(app, "stat", "Show a file's size, CRC, label, chunk and offset", st, true, true)
      ->callback([st, &exit_code] { exit_code = RunStat(*st); });
  auto cat = std::make_shared<Common>();
  AddCommand(app, "cat", "Write a file's bytes (CRC-checked) to stdout", cat, true, true)
      ->callback([cat, &exit_code] { exit_code = RunCat(*cat); });
  auto info = std::make_shared<Common>();
  AddCommand(app, "info", "Summarize a version of the dataset", info, false, false)
      ->callback([info, &exit_code] { exit_code = RunInfo(*info); });
  auto versions = std::make_shared<Common>();
  CLI::App* list = app.add_subcommand("versions", "List the dataset's versions, oldest first");
  list->add_option("dataset", versions->dataset, "dataset path or URI")->required();
  list->add_flag("--json", versions->json, "machine-readable output");
  list->callback([versions, &exit_code] { exit_code = RunVersions(*versions); });
}

void RegisterVerify(CLI::App& app, int& exit_code) {
  auto v = std::make_shared<Common>();
  AddCommand(app, "verify", "Re-check every CRC; name every corrupt file and chunk (exit 3)", v,
             false, false)
      ->callback([v, &exit_code] { exit_code = RunVerify(*v); });
}

}  // namespace stoker::cli
