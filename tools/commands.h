// The `stoker` CLI's subcommands. Each Register* adds one subcommand to the app; the callbacks
// set the process exit code through `exit_code`. Mains stay thin: the work is in the libraries.
#pragma once

#include <CLI/CLI.hpp>

namespace stoker::cli {

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;    // the operation failed (message on stderr)
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitCorrupt = 3;  // verify found corruption

void RegisterPack(CLI::App& app, int& exit_code);
void RegisterUpgrade(CLI::App& app, int& exit_code);  // cmd_maintain.cc
void RegisterGc(CLI::App& app, int& exit_code);
void RegisterCommit(CLI::App& app, int& exit_code);
void RegisterCompact(CLI::App& app, int& exit_code);
void RegisterInspect(CLI::App& app, int& exit_code);  // ls, stat, cat, info, versions
void RegisterVerify(CLI::App& app, int& exit_code);
void RegisterShuffleReport(CLI::App& app, int& exit_code);
void RegisterServe(CLI::App& app, int& exit_code);
void RegisterNode(CLI::App& app, int& exit_code);
void RegisterMount(CLI::App& app, int& exit_code);

}  // namespace stoker::cli
