#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/parse_number.h"
#include "common/progress.h"
#include "common/stop_signals.h"
#include "dataset/pack_option_table.h"
#include "dataset/packer.h"
#include "dataset/parts.h"
#include "dataset/row_stream.h"
#include "dataset/stream_pack.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"
#include "tools/python_module.h"

namespace stoker::cli {
namespace {

struct PackArgs {
  std::vector<std::string> paths;  // SRC... DST
  // The options stoker.pack takes too, one flag per entry of dataset/pack_option_table.h.
  dataset::PackSettings settings;
  // The CLI's own: Python has no --attributes, --part, --job, --json or --quiet.
  bool json = false;
  bool quiet = false;
  std::string attributes_file;
  std::string part;  // "K/N", "K", or "env" (Slurm array / Kubernetes Indexed Job)
  std::string job;
  std::vector<std::string> columns;  // Parquet input: NAME=TYPE, overriding the inferred type
  std::string label;                 // Parquet input: the column that labels the samples
  bool allow_pickle = false;         // MDS / LitData input: unpickle pickled values
  std::string name;                  // row stream input: the directory its samples go in
};

// --attributes: JSON Lines, one object per file: {"path": "a/b.jpg", "key": "value", ...}.
// Values that are not strings are stored as their JSON text.
Status LoadAttributes(const std::string& file, dataset::PackOptions* options) {
  std::ifstream in(file);
  if (!in) return Status::NotFound("cannot open attributes file " + file);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = fmt::format("{}:{}", file, number);
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("path") || !j["path"].is_string()) {
      return Status::InvalidArgument(where + ": expected a JSON object with a \"path\" string");
    }
    auto& attrs = options->attributes[j["path"].get<std::string>()];
    if (!attrs.empty()) return Status::InvalidArgument(where + ": path given twice");
    for (const auto& [key, value] : j.items()) {
      if (key == "path") continue;
      attrs.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  return Status::OK();
}

// Adds the CLI's own options (--attributes, --part) to the table's. On an error, prints it and
// returns the exit code; else kExitOk.
int SetPackOptions(const PackArgs& args, dataset::PackOptions* options) {
  if (!args.attributes_file.empty()) {
    if (Status st = LoadAttributes(args.attributes_file, options); !st.ok()) {
      PrintError("pack", st);
      return kExitError;
    }
  }
  if (!args.part.empty()) {
    auto part = dataset::ParsePartSpec(args.part, args.job);
    if (!part) {
      PrintError("pack", part.error());
      return kExitUsage;
    }
    options->part = *part;
  }
  return kExitOk;
}

// What the source left out, as JSON: counts and the first few names of each kind.
nlohmann::json LeftOutJson(const dataset::LeftOut& left_out) {
  const auto names = [](const dataset::LeftOutNames& n) {
    return nlohmann::json{{"count", n.count}, {"examples", n.examples}};
  };
  return {{"excluded", names(left_out.excluded)},
          {"outside_class_dirs", names(left_out.outside_classes)}};
}

// A part packed (--part): what it added, and where.
void PrintPartSummary(const PackArgs& args, const std::string& dst, const dataset::PackSummary& s,
                      const std::vector<std::string>& notes) {
  if (args.json) {
    PrintJson(nlohmann::json{{"dataset", dst},
                             {"part", s.part_path},
                             {"files_added", s.files_added},
                             {"bytes_added", s.bytes_added},
                             {"chunks_added", s.chunks_added},
                             {"seconds", s.seconds},
                             {"left_out", LeftOutJson(s.left_out)},
                             {"notes", notes}});
    return;
  }
  for (const std::string& note : notes) PrintNote("pack", note);
  if (!args.quiet) {
    std::cout << fmt::format("packed {} ({}) as {} of {}; `stoker commit` publishes the parts\n",
                             Counted(s.files_added, "file"), HumanBytes(s.bytes_added), s.part_path,
                             dst);
  }
}

// A version published: what it added, the dataset's totals and the speed; what was left out
// and labels not found (on stderr, so that stdout stays the summary).
void PrintVersionSummary(const PackArgs& args, const std::string& dst,
                         const dataset::PackSummary& s, const std::vector<std::string>& notes) {
  const double per_file = s.files_total ? static_cast<double>(s.metadata_bytes) / s.files_total : 0;
  if (args.json) {
    nlohmann::json j = {
        {"dataset", dst},
        {"version", s.version},
        {"files_added", s.files_added},
        {"bytes_added", s.bytes_added},
        {"files", s.files_total},
        {"bytes", s.bytes_total},
        {"samples", s.samples},
        {"classes", s.classes},
        {"chunks_added", s.chunks_added},
        {"chunks", s.chunks_total},
        {"open_chunks", s.open_chunks},
        {"classes_added", s.classes_added},
        {"segment_bytes", s.segment_bytes},
        {"metadata_bytes", s.metadata_bytes},
        {"metadata_bytes_per_file", per_file},
        {"segments", s.segments},
        {"publish_attempts", s.publish_attempts},
        {"seconds", s.seconds},
        {"files_per_second", s.seconds > 0 ? s.files_added / s.seconds : 0},
        {"mb_per_second", s.seconds > 0 ? s.bytes_added / s.seconds / 1e6 : 0},
        {"left_out", LeftOutJson(s.left_out)},
        {"labels_found", !s.no_labels_found},
        {"notes", notes},
    };
    PrintJson(j);
    return;
  }
  for (const std::string& note : notes) PrintNote("pack", note);
  if (!args.quiet) {
    std::cout << fmt::format(
        "packed {} ({}) into {} as version {}: {} added ({} total), {}, {}, metadata {} "
        "({:.0f} B/file), {:.1f} s ({:.0f} files/s, {}/s)\n",
        Counted(s.files_added, "file"), HumanBytes(s.bytes_added), dst, s.version,
        Counted(s.chunks_added, "chunk"), s.chunks_total, Counted(s.samples, "sample"),
        Counted(s.classes, "class"), HumanBytes(s.metadata_bytes), per_file, s.seconds,
        s.seconds > 0 ? s.files_added / s.seconds : 0,
        HumanBytes(static_cast<uint64_t>(s.seconds > 0 ? s.bytes_added / s.seconds : 0)));
  }
}

// Input that becomes a column dataset is read by the Python package: Parquet (PyArrow;
// python/stoker/sources.py) and MosaicML Streaming / LitData directories
// (python/stoker/migrate.py), which take --columns, --label and --json as this command does.
struct PythonInput {
  const char* kind;    // "Parquet input"
  const char* module;  // what python -m runs
  const char* why;     // said when the package cannot run it
};
constexpr PythonInput kParquetInput{"Parquet input", "stoker._pack_parquet",
                                    "Parquet input is read by stoker's Python package (with "
                                    "pyarrow)"};
constexpr PythonInput kMigrateInput{"MDS and LitData input", "stoker._pack_migrate",
                                    "MosaicML Streaming (MDS) and LitData directories are read by "
                                    "stoker's Python package"};

int RunPythonPack(const PackArgs& args, const PythonInput& input) {
  if (!args.attributes_file.empty()) {
    PrintError("pack", Status::InvalidArgument(
                           fmt::format("--attributes is not supported for {}", input.kind)));
    return kExitUsage;
  }
  const dataset::PackSettings& s = args.settings;
  std::vector<std::string> argv = args.paths;
  argv.insert(argv.end(), {"--chunk-size", std::to_string(s.pack.chunk_bytes), "--order",
                           s.source.shuffle_seed ? "shuffled" : "path", "--order-seed",
                           std::to_string(s.pack.mix_seed)});
  if (s.pack.append) argv.emplace_back("--append");
  if (!args.part.empty()) argv.insert(argv.end(), {"--part", args.part});
  if (!args.job.empty()) argv.insert(argv.end(), {"--job", args.job});
  if (args.quiet) argv.emplace_back("-q");
  if (args.json) argv.emplace_back("--json");
  for (const std::string& column : args.columns) argv.insert(argv.end(), {"--columns", column});
  if (!args.label.empty()) argv.insert(argv.end(), {"--label", args.label});
  if (args.allow_pickle) argv.emplace_back("--allow-pickle");
  return ExecPythonModule("pack", input.module, argv, input.why);
}

// An MDS or LitData dataset: a directory whose index.json lists its shards ("shards") or
// chunks ("chunks"), or names them in a text that is no JSON (a copy cut short): that one goes
// to the migration too, which says what is wrong with it, rather than being packed as files. A
// tree of files that happens to hold another index.json packs as files. (Several sources, one
// of them such, are refused by the Python side, naming the rule.)
bool IsMigratedFormat(const std::vector<std::string>& sources) {
  return std::ranges::any_of(sources, [](const std::string& source) {
    if (source.contains("://")) return false;
    std::ifstream in(std::filesystem::path(source) / "index.json");
    if (!in) return false;
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded()) {
      return text.contains("\"shards\"") || text.contains("\"chunks\"");
    }
    return index.is_object() && (index.contains("shards") || index.contains("chunks"));
  });
}

// Ends a pack that failed: a stop asked for by a signal (whether the pack noticed it between
// files or a read it broke off failed) is said as such; either way nothing was published and
// what it wrote is gone.
int PackFailed(const Status& error) {
  if (const int signal = StopSignal(); signal != 0) {
    PrintError("pack",
               Status::Cancelled(fmt::format("interrupted by {}: nothing published (the chunks "
                                             "this pack wrote were removed)",
                                             signal == SIGINT    ? "SIGINT (Ctrl-C)"
                                             : signal == SIGTERM ? "SIGTERM"
                                                                 : "a signal")));
    return 128 + signal;
  }
  PrintError("pack", error);
  return kExitError;
}

void PrintSummary(const PackArgs& args, const std::string& dst, const dataset::PackSummary& s) {
  const std::vector<std::string> notes = dataset::PackNotes(s);
  if (s.part_path.empty()) {
    PrintVersionSummary(args, dst, s, notes);
  } else {
    PrintPartSummary(args, dst, s, notes);
  }
}

// `stoker pack - DST --columns NAME=TYPE ...`: rows from stdin (dataset/row_stream.h), written
// as stoker.Writer writes them.
int RunRowStreamPack(const PackArgs& args) {
  const std::string& dst = args.paths.back();
  if (args.paths.size() != 2 || !args.attributes_file.empty() || args.allow_pickle) {
    PrintError("pack", Status::InvalidArgument(
                           "row stream input (-) is the only source, without --attributes or "
                           "--allow-pickle"));
    return kExitUsage;
  }
  auto order = dataset::ParseRowColumns(args.columns);
  std::string label = args.label;
  if (order && label.empty()) {
    for (const auto& c : *order) {
      if (c.name == "label" && c.type == format::ColumnType::kInt && !c.optional) label = c.name;
    }
  }
  auto schema =
      order ? format::MakeSchema(*order, label) : Result<format::Schema>(Err(order.error()));
  auto prefix =
      dataset::SampleKeyPrefix(args.name.empty() ? std::nullopt : std::optional(args.name));
  dataset::PackOptions options = args.settings.pack;
  options.group_samples = true;
  if (!schema || !prefix) {
    PrintError("pack", !schema ? schema.error() : prefix.error());
    return kExitUsage;
  }
  if (const int code = SetPackOptions(args, &options); code != kExitOk) return code;
  if (Status st = options.Validate(); !st.ok()) {
    PrintError("pack", st);
    return kExitUsage;
  }
  options.columns = format::FormatSchema(*schema);
  ProgressBar bar("pack", !args.quiet && !args.json);
  options.progress = dataset::ShowProgressOn(bar);
  const StopOnSignals stop;
  options.stop_requested = StopRequested;
  auto storage = OpenStorage(dst);
  if (!storage) return PackFailed(storage.error());
  constexpr uint64_t kQueueBytes = uint64_t{64} << 20;  // as stoker.Writer's
  auto pack = dataset::StreamPack::Start(*std::move(storage), std::move(options), kQueueBytes);
  if (!pack) return PackFailed(pack.error());
  const dataset::RowStreamOptions rows{STDIN_FILENO, *order, schema->label, *prefix, StopRequested};
  if (auto read = dataset::PackRowStream(rows, **pack); !read) {
    (*pack)->Abort();
    bar.Finish();
    return PackFailed(read.error());
  }
  auto summary = (*pack)->Finish();
  bar.Finish();
  if (!summary) return PackFailed(summary.error());
  PrintSummary(args, dst, *summary);
  return kExitOk;
}

int RunPack(const PackArgs& args) {
  const std::string dst = args.paths.back();
  const std::vector<std::string> sources(args.paths.begin(), args.paths.end() - 1);
  if (sources.front() == "-") return RunRowStreamPack(args);
  if (!args.name.empty()) {
    PrintError("pack", Status::InvalidArgument("--name is for row stream input (-)"));
    return kExitUsage;
  }
  if (std::ranges::any_of(sources, [](const std::string& p) { return p.ends_with(".parquet"); })) {
    return RunPythonPack(args, kParquetInput);
  }
  if (IsMigratedFormat(sources)) return RunPythonPack(args, kMigrateInput);
  if (args.allow_pickle) {
    PrintError("pack", Status::InvalidArgument(
                           "--allow-pickle is for MDS and LitData input (a directory holding an "
                           "index.json)"));
    return kExitUsage;
  }
  if (!args.columns.empty() || !args.label.empty()) {
    PrintError("pack", Status::InvalidArgument(
                           "--columns and --label are for Parquet, MDS and LitData input (a "
                           "directory's labels are its class directories, a tar shard's its .cls "
                           "members)"));
    return kExitUsage;
  }
  dataset::PackOptions options = args.settings.pack;
  if (const int code = SetPackOptions(args, &options); code != kExitOk) return code;
  // What the command line alone gets wrong is a usage error (exit 2), like a flag's bad value.
  for (const Status& st :
       {options.Validate(), dataset::CheckPackSources(sources, args.settings.source.layout)}) {
    if (!st.ok()) {
      PrintError("pack", st);
      return kExitUsage;
    }
  }
  // One directory tree, or any number of tar shards.
  auto source = dataset::OpenPackSource(sources, args.settings.source, &options.group_samples);
  if (!source) {
    PrintError("pack", source.error());
    return kExitError;
  }
  auto storage = OpenStorage(dst);
  if (!storage) {
    PrintError("pack", storage.error());
    return kExitError;
  }
  ProgressBar bar("pack", !args.quiet && !args.json);
  options.progress = dataset::ShowProgressOn(bar);
  // Ctrl-C or a TERM from a scheduler: stop between files, remove what was written, say so.
  const StopOnSignals stop;
  options.stop_requested = StopRequested;
  auto summary = dataset::Pack(**source, **storage, options);
  bar.Finish();
  if (!summary) return PackFailed(summary.error());
  PrintSummary(args, dst, *summary);
  return kExitOk;
}

}  // namespace

void RegisterPack(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PackArgs>();
  CLI::App* cmd = app.add_subcommand(
      "pack",
      "Pack a directory tree (labels from its first level, like ImageFolder), tar "
      "shards (WebDataset) or Parquet files (typed columns; needs the Python package with "
      "pyarrow) into a dataset");
  cmd->add_option("paths", args->paths,
                  "SRC... DST: one directory, or tar files, or - (a row stream on stdin, "
                  "docs/engines.md); then the dataset")
      ->required()
      ->expected(2, -1);
  AddOptionFlags(*cmd, dataset::PackOptionTable(), args->settings);
  cmd->add_option("--attributes", args->attributes_file,
                  "JSON Lines file of per-file attributes: {\"path\": ..., \"key\": \"value\"}");
  cmd->add_option("--part", args->part,
                  "write part K/N of the next version (K from 0), not a version: N writers on any "
                  "machines pack parts, `stoker commit` publishes them; env: K and N from a Slurm "
                  "array task or a Kubernetes Indexed Job");
  cmd->add_option("--job", args->job,
                  "names the set of parts (default: slurm-<array job id> under Slurm, else "
                  "'default')");
  cmd->add_option("--columns", args->columns,
                  "Parquet, MDS and LitData input: a column's type instead of the inferred one, "
                  "NAME=TYPE (image=jpeg, emb=ndarray:float32); repeatable. Row stream input: "
                  "every column, in the stream's order")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--label", args->label,
                  "Parquet, MDS, LitData and row stream input: the int column that labels the "
                  "samples (default: an int column called label)");
  cmd->add_flag("--allow-pickle", args->allow_pickle,
                "MDS and LitData input: unpickle pickled values (pkl, pickle) and store them as "
                "json; only for data you trust (unpickling runs code)");
  cmd->add_option("--name", args->name,
                  "row stream input: the directory its samples go in (default: a random id)");
  cmd->add_flag("--json", args->json, "print a JSON summary");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar or summary");
  cmd->callback([args, &exit_code] { exit_code = RunPack(*args); });
}

}  // namespace stoker::cli
