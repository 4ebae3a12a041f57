// `stoker`: pack datasets, inspect and verify them.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/escape.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace {

// Edits (insertions, deletions, substitutions, swaps of neighbours) that turn a into b.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// For a first argument that is no command: says so, with "did you mean 'pack'?" when one is
// close (CLI11 alone would say "A subcommand is required", as if none had been given).
std::optional<std::string> NotACommand(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  const std::string_view given = argv[1];
  std::string best;
  size_t best_distance = 3;  // at most two edits away
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == given) return std::nullopt;  // a command: the error is elsewhere
    const size_t distance = EditDistance(given, sub->get_name());
    if (distance < best_distance) best_distance = distance, best = sub->get_name();
  }
  return best.empty() ? fmt::format("'{}' is not a command (stoker --help lists them)", given)
                      : fmt::format("'{}' is not a command; did you mean '{}'?", given, best);
}

int Run(int argc, char** argv) {
  CLI::App app{"stoker: packed, checksummed datasets that keep GPUs fed", "stoker"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker 0.1.0");
  int exit_code = stoker::cli::kExitOk;
  stoker::cli::RegisterPack(app, exit_code);
  stoker::cli::RegisterUpgrade(app, exit_code);
  stoker::cli::RegisterGc(app, exit_code);
  stoker::cli::RegisterCommit(app, exit_code);
  stoker::cli::RegisterCompact(app, exit_code);
  stoker::cli::RegisterInspect(app, exit_code);
  stoker::cli::RegisterVerify(app, exit_code);
  stoker::cli::RegisterShuffleReport(app, exit_code);
  stoker::cli::RegisterServe(app, exit_code);
  stoker::cli::RegisterNode(app, exit_code);
  stoker::cli::RegisterFeed(app, exit_code);
  stoker::cli::RegisterMount(app, exit_code);
  stoker::cli::RegisterProfile(app, exit_code);
  stoker::cli::RegisterDoctor(app, exit_code);
  // --json anywhere after the command: errors, usage errors included, become JSON documents
  // on stdout too (tools/output.h), before CLI11 has even read the command line.
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--json") stoker::cli::SetJsonOutput(true);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (const auto message = NotACommand(app, argc, argv)) {
      std::fprintf(stderr, "stoker: %s\n", stoker::TerminalSafe(*message).c_str());
      stoker::cli::PrintUsageError(*message);
    } else {
      app.exit(e);
      stoker::cli::PrintUsageError(e.what());
    }
    return stoker::cli::kExitUsage;
  }
  // A report that never reached its reader (a full disk, a closed file) is a failure, or a
  // script's `stoker verify --json ds > report.json` would find an empty report and exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    const int error = errno;
    std::fprintf(stderr, "stoker: writing the output failed: %s\n",
                 error != 0 ? std::strerror(error) : "write error");
    if (exit_code == stoker::cli::kExitOk) exit_code = stoker::cli::kExitError;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    // The library reports errors as Status; an exception here is a bug (or memory exhausted):
    // say so in one line and exit as any other failure, rather than abort with a core.
    std::fprintf(stderr, "stoker: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "stoker: internal error: an unknown exception\n");
  }
  return stoker::cli::kExitError;
}
