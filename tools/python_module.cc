#include "tools/python_module.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "tools/commands.h"
#include "tools/output.h"

namespace stoker::cli {

int ExecPythonModule(const std::string& command, const std::string& module,
                     const std::vector<std::string>& args, const std::string& needs) {
  std::vector<std::string> argv = {"python3", "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string beside = (self.parent_path() / "python3").string();
  if (!ec && ::access(beside.c_str(), X_OK) == 0) {
    // argv[0] is how Python finds its virtual environment: the path, not "python3" (which it
    // would look up on PATH, maybe finding another Python).
    c_argv[0] = beside.data();
    ::execv(beside.c_str(), c_argv.data());
    c_argv[0] = argv[0].data();
  }
  ::execvp("python3", c_argv.data());
  PrintError(command, Status::NotFound(fmt::format("{}, but no python3 could be run: {}", needs,
                                                   std::strerror(errno))));
  return kExitError;
}

}  // namespace stoker::cli
