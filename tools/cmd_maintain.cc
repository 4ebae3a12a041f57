// upgrade, gc, commit, compact: maintaining a dataset in place.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/parse_number.h"
#include "common/progress.h"
#include "dataset/compact.h"
#include "dataset/gc.h"
#include "dataset/parts.h"
#include "dataset/upgrade.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

int RunUpgrade(const std::string& uri, bool json) {
  auto storage = OpenStorage(uri);
  auto summary =
      storage ? dataset::Upgrade(**storage) : Result<dataset::UpgradeSummary>(Err(storage.error()));
  if (!summary) {
    return Fail("upgrade", summary.error());
  }
  const auto& s = *summary;
  if (json) {
    PrintJson(nlohmann::json{{"dataset", uri},
                             {"version", s.version},
                             {"files", s.files},
                             {"chunks", s.chunks},
                             {"classes", s.classes},
                             {"segment_bytes", s.segment_bytes},
                             {"indices_preserved", s.indices_preserved}});
    return kExitOk;
  }
  std::cout << fmt::format(
      "upgraded {} to format 2: version {}, {} in {} (kept), {}, metadata {}\n", uri, s.version,
      Counted(s.files, "file"), Counted(s.chunks, "chunk"), Counted(s.classes, "class"),
      HumanBytes(s.segment_bytes));
  if (!s.indices_preserved) {
    std::cout << "note: files sit at several directory depths, so their indices changed (format 1 "
                 "numbered directories breadth-first, format 2 by path); paths, bytes and labels "
                 "did not\n";
  }
  return kExitOk;
}

struct GcArgs {
  std::string dataset;
  uint64_t keep = 1;
  std::string keep_for;
  std::string grace = "24h";
  std::string writer_timeout = "10m";
  bool dry_run = false;
  bool json = false;
};

std::vector<std::string> WriterNames(const std::vector<uint64_t>& writers) {
  std::vector<std::string> out;
  out.reserve(writers.size());
  for (const uint64_t w : writers) out.push_back(fmt::format("{:016x}", w));
  return out;
}

nlohmann::json WritersGone(const std::vector<std::pair<uint64_t, std::string>>& gone) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [writer, who] : gone) {
    out.push_back({{"writer", fmt::format("{:016x}", writer)}, {"process", who}});
  }
  return out;
}

nlohmann::json OpenJobs(const std::vector<dataset::OpenJob>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const dataset::OpenJob& j : jobs) {
    out.push_back({{"job", j.job}, {"parts", j.parts}, {"chunks", j.chunks}, {"count", j.count}});
  }
  return out;
}

int RunGc(const GcArgs& a) {
  auto fail = [](const Status& s) {
    PrintError("gc", s);
    return s.IsInvalidArgument() ? kExitUsage : kExitError;
  };
  dataset::GcOptions o;
  o.keep = a.keep;
  o.dry_run = a.dry_run;
  auto grace = ParseDuration(a.grace);
  if (!grace) return fail(grace.error());
  o.grace = *grace;
  auto writer_timeout = ParseDuration(a.writer_timeout);
  if (!writer_timeout) return fail(writer_timeout.error());
  o.writer_timeout = *writer_timeout;
  if (!a.keep_for.empty()) {
    auto keep_for = ParseDuration(a.keep_for);
    if (!keep_for) return fail(keep_for.error());
    o.keep_for = *keep_for;
  }
  auto storage = OpenStorage(a.dataset);
  if (!storage) return fail(storage.error());
  auto s = dataset::CollectGarbage(**storage, o);
  if (!s) return fail(s.error());
  if (a.json) {
    PrintJson(nlohmann::json{{"dataset", a.dataset},
                             {"dry_run", a.dry_run},
                             {"versions_removed", s->versions_removed},
                             {"versions_kept", s->versions_kept},
                             {"files_removed", s->files_removed},
                             {"files_pending", s->files_pending},
                             {"files_held_for_writers", s->files_held_for_writers},
                             {"writers_active", s->writers_active},
                             {"writers_expired", WriterNames(s->writers_expired)},
                             {"writers_gone", WritersGone(s->writers_gone)},
                             {"files_never_published", s->files_never_published},
                             {"open_jobs", OpenJobs(s->open_jobs)}});
    return kExitOk;
  }
  std::cout << fmt::format(
      "{}{}: kept {} version(s), {} {} version(s) and {} file(s); {} unreferenced file(s) wait "
      "out the grace period ({}) or for the {} writer(s) at work\n",
      a.dry_run ? "dry run: " : "", a.dataset, s->versions_kept.size(),
      a.dry_run ? "would remove" : "removed", s->versions_removed.size(), s->files_removed.size(),
      s->files_pending, a.grace, s->writers_active);
  for (const std::string& writer : WriterNames(s->writers_expired)) {
    std::cout << fmt::format("{} writer {}: no heartbeat for {}; its lease {}\n",
                             a.dry_run ? "dry run:" : "expired", writer, a.writer_timeout,
                             a.dry_run ? "would be removed" : "was removed");
  }
  for (const auto& [writer, who] : s->writers_gone) {
    std::cout << fmt::format("{} writer {:016x}: its process is gone ({}); its lease {}\n",
                             a.dry_run ? "dry run:" : "dead", writer, who,
                             a.dry_run ? "would be removed" : "was removed");
  }
  if (s->files_never_published > 0) {
    std::cout << fmt::format(
        "{} {} file(s) that no version ever used (left by writers that stopped without "
        "publishing) without waiting out the grace period: no reader can need them\n",
        a.dry_run ? "dry run: would remove" : "removed", s->files_never_published);
  }
  for (const dataset::OpenJob& job : s->open_jobs) {
    // gc cannot tell a job still being written from an abandoned one: the operator can.
    const std::string publish =
        job.count != 0
            ? fmt::format("`stoker commit {} --job {}` publishes them once all {} are in",
                          a.dataset, job.job, job.count)
            : "their number is unknown (an engine's job, or parts written without N): only the "
              "writer that made them can commit them";
    std::cout << fmt::format(
        "job '{}': {} part(s) not published yet keep {} chunk(s); {}. If nothing writes it any "
        "more (an engine's driver that died), `stoker commit {} --job {} --discard` ends it\n",
        job.job, job.parts, job.chunks, publish, a.dataset, job.job);
  }
  return kExitOk;
}

// --only-file: part indices separated by commas or white space, from a file or stdin ("-").
Status ReadPartList(const std::string& file, std::vector<uint32_t>* parts) {
  std::ifstream stream;
  if (file != "-") {
    stream.open(file);
    if (!stream) return Status::NotFound(fmt::format("cannot open {}", file));
  }
  std::istream& in = file == "-" ? std::cin : stream;
  std::string word;
  while (in >> word) {
    std::stringstream items(word);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (item.empty()) continue;
      auto value = ParseUnsigned<uint32_t>(item);
      if (!value) {
        return Status::InvalidArgument(fmt::format("{}: '{}' is not a part index", file, item));
      }
      parts->push_back(*value);
    }
  }
  return Status::OK();
}

int RunDiscard(const std::string& uri, const std::string& job, bool close_empty, bool json) {
  auto storage = OpenStorage(uri);
  auto discarded = storage ? dataset::DiscardParts(**storage, job, close_empty)
                           : Result<dataset::DiscardResult>(Err(storage.error()));
  if (!discarded) return Fail("commit --discard", discarded.error());
  if (json) {
    PrintJson(nlohmann::json{{"dataset", uri},
                             {"job", job},
                             {"parts_removed", discarded->parts_removed},
                             {"already_closed", discarded->already_closed}});
  } else if (discarded->already_closed) {
    std::cout << fmt::format(
        "job '{}' in {} was already committed, is being committed, or was discarded: nothing "
        "done (stoker gc removes what its parts left)\n",
        job, uri);
  } else {
    std::cout << fmt::format(
        "discarded job '{}' in {}: {} removed; parts written for it from now on are refused\n", job,
        uri, Counted(discarded->parts_removed, "part"));
  }
  return kExitOk;
}

int RunCommit(const std::string& uri, const dataset::CommitOptions& o, bool json) {
  auto storage = OpenStorage(uri);
  auto s =
      storage ? dataset::Commit(**storage, o) : Result<dataset::PackSummary>(Err(storage.error()));
  if (!s) {
    return Fail("commit", s.error());
  }
  if (json) {
    PrintJson(nlohmann::json{{"dataset", uri},
                             {"job", o.job},
                             {"version", s->version},
                             {"files_added", s->files_added},
                             {"files", s->files_total},
                             {"chunks", s->chunks_total},
                             {"classes", s->classes},
                             {"classes_added", s->classes_added},
                             {"publish_attempts", s->publish_attempts}});
  } else {
    std::cout << fmt::format(
        "committed the parts of job '{}' to {} as version {}: {} added "
        "({} in all), {}\n",
        o.job, uri, s->version, Counted(s->files_added, "file"), s->files_total,
        Counted(s->classes, "class"));
  }
  return kExitOk;
}

int RunCompact(const std::string& uri, const dataset::CompactOptions& o, bool json) {
  auto storage = OpenStorage(uri);
  auto s = storage ? dataset::Compact(**storage, o)
                   : Result<dataset::CompactSummary>(Err(storage.error()));
  if (!s) {
    return Fail("compact", s.error());
  }
  if (json) {
    PrintJson(nlohmann::json{{"dataset", uri},
                             {"dry_run", o.dry_run},
                             {"base_version", s->base_version},
                             {"version", s->version},
                             {"segments_before", s->segments_before},
                             {"segments_after", s->segments_after},
                             {"segments_merged", s->segments_merged},
                             {"files_merged", s->files_merged},
                             {"bytes_read", s->bytes_read},
                             {"bytes_written", s->bytes_written},
                             {"publish_attempts", s->publish_attempts}});
  } else if (s->segments_merged == 0) {
    std::cout << fmt::format("{}: version {} has {} segment(s); nothing to merge{}\n", uri,
                             s->base_version, s->segments_before,
                             o.all ? "" : " (--all merges every segment)");
  } else {
    std::cout << fmt::format(
        "{}{}: {} {} segments ({} files, {} bytes) of version {} into one; {} segment(s) {}\n",
        o.dry_run ? "dry run: " : "", uri, o.dry_run ? "would merge" : "merged", s->segments_merged,
        s->files_merged, s->bytes_read, s->base_version, s->segments_after,
        o.dry_run ? "would remain" : fmt::format("in version {}", s->version));
  }
  return kExitOk;
}

}  // namespace

void RegisterCompact(CLI::App& app, int& exit_code) {
  struct Args {
    std::string dataset;
    dataset::CompactOptions options;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "compact",
      "Merge a version's segments into fewer (a new version with the same files, indices and "
      "labels)");
  cmd->add_option("dataset", args->dataset, "dataset path or URI")->required();
  cmd->add_flag("--all", args->options.all,
                "merge every segment into one (default: the trailing segments that are small "
                "next to those after them)");
  cmd->add_option("--temp-dir", args->options.sort.temp_dir,
                  "where the merge sorts in bounded memory (unnamed temporary files)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", args->options.dry_run, "report what would be merged; write nothing");
  cmd->add_flag("--json", args->json, "print a JSON summary");
  cmd->callback(
      [args, &exit_code] { exit_code = RunCompact(args->dataset, args->options, args->json); });
}

void RegisterCommit(CLI::App& app, int& exit_code) {
  struct Args {
    std::string dataset;
    dataset::CommitOptions options;
    std::string only_file;
    bool discard = false;
    bool close_empty = false;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "commit", "Publish the parts written by `stoker pack --part` as one new version");
  cmd->add_option("dataset", args->dataset, "dataset path or URI")->required();
  cmd->add_option("--job", args->options.job, "the parts' job name")->capture_default_str();
  cmd->add_option("--parts", args->options.parts,
                  "how many parts to expect (needed when the writers did not know N)");
  cmd->add_option("--only", args->options.only,
                  "publish only these parts, by index (an engine's accepted task attempts; "
                  "comma-separated): the job's others are removed")
      ->delimiter(',');
  cmd->add_option("--only-file", args->only_file,
                  "like --only, the indices read from this file (any number, separated by commas, "
                  "spaces or newlines; - for stdin): more parts than a command line holds");
  cmd->add_flag("--discard", args->discard,
                "publish nothing: remove the job's parts, and refuse any written for it later");
  cmd->add_flag("--close-empty", args->close_empty,
                "with --discard: close the job even if no part of it was written yet (an "
                "engine's failed write: an attempt that starts later is refused)");
  cmd->add_flag("--json", args->json, "print a JSON summary");
  cmd->callback([args, &exit_code] {
    if (!args->only_file.empty()) {
      if (Status st = ReadPartList(args->only_file, &args->options.only); !st.ok()) {
        exit_code = Fail("commit", st);
        return;
      }
    }
    exit_code = args->discard
                    ? RunDiscard(args->dataset, args->options.job, args->close_empty, args->json)
                    : RunCommit(args->dataset, args->options, args->json);
  });
}

void RegisterUpgrade(CLI::App& app, int& exit_code) {
  struct Args {
    std::string dataset;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "upgrade", "Convert a format-1 dataset (MANIFEST) to format 2 in place, keeping its chunks");
  cmd->add_option("dataset", args->dataset, "dataset path or URI")->required();
  cmd->add_flag("--json", args->json, "print a JSON summary");
  cmd->callback([args, &exit_code] { exit_code = RunUpgrade(args->dataset, args->json); });
}

void RegisterGc(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GcArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gc", "Remove old versions and the files no kept version uses (after a grace period)");
  cmd->add_option("dataset", args->dataset, "dataset path or URI")->required();
  cmd->add_option("--keep", args->keep, "keep the newest N versions")
      ->check(WholeNumber(true))
      ->capture_default_str();
  cmd->add_option("--keep-for", args->keep_for,
                  "also keep versions created within this long (e.g. 7d)");
  cmd->add_option("--grace", args->grace,
                  "delete an unreferenced file only once gc has seen it so for this long; must "
                  "exceed the longest pack and the longest read of a removed version")
      ->capture_default_str();
  cmd->add_option("--writer-timeout", args->writer_timeout,
                  "a writer whose lease has not changed for this long is dead: its files are no "
                  "longer held back (writers beat every 30s; 0s: no writer runs, reclaim what "
                  "killed ones left)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", args->dry_run, "report what would go; change nothing");
  cmd->add_flag("--json", args->json, "print a JSON summary");
  cmd->callback([args, &exit_code] { exit_code = RunGc(*args); });
}

}  // namespace stoker::cli
