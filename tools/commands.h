// The `stoker` CLI's subcommands. Each Register* adds one subcommand to the app; the callbacks
// set the process exit code through `exit_code`. Mains stay thin: the work is in the libraries.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "common/progress.h"

namespace stoker::cli {

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;    // the operation failed (message on stderr)
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitCorrupt = 3;  // verify found corruption
// A command stopped cleanly by SIGINT or SIGTERM (pack) exits 128 + the signal, as a shell
// reports a process the signal killed: 130 for Ctrl-C.

// The one syntax of sizes on the command line, as everywhere (common/progress.h ParseByteSize):
// plain bytes or a binary multiple, "65536", "64K", "64MiB", "48G", "2T". Turns the option's
// text into plain bytes for the uint64_t it fills.
inline CLI::Validator ByteSize() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const Result<uint64_t> bytes = ParseByteSize(text);
        if (!bytes) return bytes.error().message();
        text = std::to_string(*bytes);
        return {};
      },
      "SIZE");
}

void RegisterPack(CLI::App& app, int& exit_code);
void RegisterUpgrade(CLI::App& app, int& exit_code);  // cmd_maintain.cc
void RegisterGc(CLI::App& app, int& exit_code);
void RegisterCommit(CLI::App& app, int& exit_code);
void RegisterCompact(CLI::App& app, int& exit_code);
void RegisterInspect(CLI::App& app, int& exit_code);  // ls, stat, cat, info, versions
void RegisterVerify(CLI::App& app, int& exit_code);
// `stoker doctor`: what this machine lacks for stoker, and how to fix it (cmd_doctor.cc).
void RegisterDoctor(CLI::App& app, int& exit_code);
void RegisterProfile(CLI::App& app, int& exit_code);  // cmd_profile.cc
void RegisterShuffleReport(CLI::App& app, int& exit_code);
void RegisterServe(CLI::App& app, int& exit_code);
void RegisterNode(CLI::App& app, int& exit_code);
void RegisterFeed(CLI::App& app, int& exit_code);
void RegisterMount(CLI::App& app, int& exit_code);

}  // namespace stoker::cli
