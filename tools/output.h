// What every subcommand prints the same way: errors on stderr, JSON on stdout. Names inside
// either may be any bytes (see common/escape.h): errors show them terminal-safe, JSON keeps
// them losslessly.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "stoker/status.h"

namespace stoker::cli {

// Whether the command line asked for --json: then errors are JSON documents on stdout too.
void SetJsonOutput(bool json);
bool JsonOutput();

// "stoker <command>: <status>" on stderr, control characters and non-UTF-8 bytes as \xNN; under
// --json (SetJsonOutput) also {"error": {"code": "NotFound", "message": ...}} on stdout: one JSON
// document whatever happens, with the exit code unchanged.
void PrintError(std::string_view command, const Status& status);
// The same for a bad command line ("code": "Usage").
void PrintUsageError(std::string_view message);

// "stoker <command>: <note>" on stderr: something the user must know that is no error (what a
// pack left out), terminal-safe as errors are.
void PrintNote(std::string_view command, std::string_view note);

// PrintError, then the exit code: kExitCorrupt for corruption, kExitError otherwise.
int Fail(std::string_view command, const Status& status);
// A mistake on the command line found after parsing (a flag's value that does not parse): says
// it as PrintError does and returns kExitUsage.
int FailUsage(std::string_view command, const Status& status);

// `value` indented by 2 and a newline on stdout. Strings that are not UTF-8 (nlohmann::json
// would throw on them) are written with common/escape.h's JsonQuoted.
void PrintJson(const nlohmann::json& value);

}  // namespace stoker::cli
