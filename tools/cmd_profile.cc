// `stoker profile TRACE [--plot OUT.png] [--merge OTHER.json -o MERGED.json] [--json]`: the
// summary of a trace (stoker.trace / STOKER_TRACE), made by the Python package
// (python/stoker/profile.py, which draws with matplotlib).
#include <string>
#include <vector>

#include "tools/commands.h"
#include "tools/python_module.h"

namespace stoker::cli {

void RegisterProfile(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "profile",
      "Summarize a trace written by stoker.trace / STOKER_TRACE: how long training waited for "
      "data and why, reads, decodes, waits per thread; --plot draws step time vs waiting");
  cmd->allow_extras();
  cmd->prefix_command();
  cmd->callback([cmd, &exit_code] {
    exit_code = ExecPythonModule("profile", "stoker.profile", cmd->remaining(),
                                 "traces are read by stoker's Python package");
  });
}

}  // namespace stoker::cli
