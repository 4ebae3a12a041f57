// `stoker shuffle-report`: how random each shuffle mode's order is on this dataset.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/progress.h"
#include "dataset/version_view.h"
#include "loader/shuffle_report.h"
#include "stoker/dataset.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

struct ReportArgs {
  std::string dataset;
  uint32_t batch_size = 256;
  std::vector<uint32_t> windows = {1, 4, 16, 64};
  uint64_t seed = 0;
  uint32_t window = 16;
  bool json = false;
  std::optional<uint64_t> version;  // the newest if unset
};

int RunReport(const ReportArgs& a) {
  DatasetOpenOptions open_options;
  open_options.version = a.version;
  auto ds = Dataset::Open(a.dataset, open_options);
  if (!ds) {
    PrintError("shuffle-report", ds.error());
    return kExitError;
  }
  const auto& snap = dataset::ViewOf(**ds);
  loader::ShuffleReportOptions options;
  options.batch_size = a.batch_size;
  options.windows = a.windows;
  options.seed = a.seed;
  options.default_window = a.window;
  auto rows = loader::ShuffleReport(**ds, options);
  if (!rows) {
    PrintError("shuffle-report", rows.error());
    return kExitError;
  }
  auto name = [](const loader::OrderMetrics& m) {
    if (m.loader_default) return fmt::format("default W={}", m.window_chunks);
    return m.mode == loader::ShuffleMode::kChunk ? fmt::format("chunk W={}", m.window_chunks)
                                                 : std::string(loader::ShuffleModeName(m.mode));
  };
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& m : *rows) {
      nlohmann::json row = {{"mode", loader::ShuffleModeName(m.mode)},
                            {"window_chunks", m.window_chunks},
                            {"mean_displacement", m.mean_displacement},
                            {"storage_order_correlation", m.storage_order_correlation},
                            {"same_chunk_neighbours", m.same_chunk_neighbours},
                            {"window_bytes", m.window_bytes},
                            {"reads_per_epoch", m.reads_per_epoch},
                            {"mean_read_bytes", m.mean_read_bytes},
                            {"loader_default", m.loader_default}};
      if (m.loader_default) {
        row["block_bytes"] = m.block_bytes;
        row["expected_classes_per_batch"] = m.expected_classes;
        row["expected_full_shuffle_classes_per_batch"] = m.expected_full_classes;
      }
      if (!std::isnan(m.batch_label_entropy_bits)) {
        row["batch_label_entropy_bits"] = m.batch_label_entropy_bits;
        row["batch_distinct_classes"] = m.batch_distinct_classes;
      }
      out.push_back(row);
    }
    PrintJson(out);
    return kExitOk;
  }
  std::cout << fmt::format(
      "{}: {} samples, {} chunks, {} classes, batch size {}\n\n"
      "{:<14} {:>14} {:>8} {:>13} {:>12} {:>14} {:>11} {:>12} {:>10}\n",
      a.dataset, snap.sample_count(), snap.chunk_count(), snap.class_count(), a.batch_size, "order",
      "label entropy", "classes", "displacement", "storage corr", "same-chunk nbr", "window mem",
      "reads/epoch", "read size");
  for (const auto& m : *rows) {
    std::cout << fmt::format(
        "{:<14} {:>12.2f} b {:>8.1f} {:>13.3f} {:>12.3f} {:>14.3f} {:>11} {:>12} {:>10}\n", name(m),
        m.batch_label_entropy_bits, m.batch_distinct_classes, m.mean_displacement,
        m.storage_order_correlation, m.same_chunk_neighbours,
        m.window_bytes ? HumanBytes(m.window_bytes) : "-", m.reads_per_epoch,
        HumanBytes(m.mean_read_bytes));
  }
  const auto& d = rows->back();
  std::cout << fmt::format(
      "\nLoader default (shuffle=\"chunk\", window={}): {}; expected classes per batch {:.1f}, a "
      "full shuffle {:.1f} ({:.0f} %).\n",
      a.window,
      d.block_bytes ? "blocks of " + HumanBytes(d.block_bytes) +
                          " (the chunks hold few "
                          "classes each; `stoker pack` in mixed order reads whole chunks)"
                    : std::string("whole chunks"),
      d.expected_classes, d.expected_full_classes,
      d.expected_full_classes > 0 ? 100 * d.expected_classes / d.expected_full_classes : 100.0);
  std::cout << "\nlabel entropy / classes: per batch, higher is better mixed (full is the goal); "
               "displacement: mean distance moved / dataset size (full ~0.33); storage corr: rank "
               "correlation with storage order (full ~0); same-chunk nbr: consecutive samples from "
               "one chunk (locality).\n";
  return kExitOk;
}

}  // namespace

void RegisterShuffleReport(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shuffle-report", "Compare the randomness of sequential, full and chunk-shuffle orders");
  cmd->add_option("dataset", args->dataset, "dataset path or file:// URI")->required();
  cmd->add_option("--version", args->version,
                  "this version (`stoker versions`); default: the newest")
      ->check(WholeNumber(true));
  cmd->add_option("--batch-size", args->batch_size, "batch size for per-batch label metrics")
      ->check(WholeNumber(true))
      ->capture_default_str();
  cmd->add_option("--windows", args->windows, "chunk-mode windows W to report")
      ->delimiter(',')
      ->check(WholeNumber(true))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "shuffle seed")
      ->check(WholeNumber(false))
      ->capture_default_str();
  cmd->add_option("--window", args->window, "the loader's window, for the default row")
      ->check(WholeNumber(true))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, &exit_code] { exit_code = RunReport(*args); });
}

}  // namespace stoker::cli
