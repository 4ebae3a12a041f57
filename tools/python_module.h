// Subcommands whose work is in the Python package (Parquet input, `stoker profile`): the CLI
// replaces itself with the Python installed beside it (the virtual environment that installed
// this binary), else the first python3 on PATH, running `python3 -m MODULE ARGS...`.
#pragma once

#include <string>
#include <vector>

namespace stoker::cli {

// Returns only if no python3 could be run (after printing why, as `command`); the exit code.
int ExecPythonModule(const std::string& command, const std::string& module,
                     const std::vector<std::string>& args, const std::string& needs);

}  // namespace stoker::cli
