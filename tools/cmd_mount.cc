// `stoker mount DATASET MOUNTPOINT`: a read-only FUSE view of a packed dataset's original tree,
// served until unmounted or interrupted, in the foreground or — with --background — by a
// process that outlives the command, which returns once the mount is there (docs/mount.md).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/progress.h"
#include "fuse/fuse_fs.h"
#include "stoker/dataset.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

struct MountArgs {
  std::string dataset;
  std::string mountpoint;
  bool foreground = true;
  bool background = false;
  std::string log_file;  // where a background mount's messages go (none: /dev/null)
  unsigned threads = 16;
  bool allow_other = false;
  bool allow_non_empty = false;
  uint64_t buffer_limit = uint64_t{64} << 20;
  std::vector<std::string> fuse_options;
  std::optional<uint64_t> version;  // the newest if unset
};

// `detach` runs once the mount is there, before the "mounted" line is printed.
int RunMount(const MountArgs& a, const std::function<void()>& detach = {}) {
  DatasetOpenOptions open_options;
  open_options.version = a.version;
  auto ds = Dataset::Open(a.dataset, open_options);
  if (!ds) return Fail("mount", ds.error());
  fuse::MountOptions o;
  o.source = a.dataset;
  o.threads = a.threads;
  o.allow_other = a.allow_other;
  o.allow_non_empty = a.allow_non_empty;
  o.buffer_limit = a.buffer_limit;
  o.fuse_options = a.fuse_options;
  const uint64_t files = (*ds)->file_count();
  o.on_mounted = [&] {
    if (detach) detach();
    std::fprintf(
        stderr, "%s",
        fmt::format("mounted {} at {} ({})\n", a.dataset, a.mountpoint, Counted(files, "file"))
            .c_str());
  };
  if (Status s = fuse::Serve(**ds, a.mountpoint, o); !s.ok()) return Fail("mount", s);
  return kExitOk;
}

// --background: a child process mounts and serves; this one waits until the child has mounted
// (exit 0) or has failed (exit 1, the child having said why on the same stderr). The fork comes
// before anything starts a thread (opening the dataset may). Once mounted, the child leaves the
// terminal's session and lets go of this command's stdin/stdout/stderr — a caller capturing
// them sees them close — and writes its messages (corrupt files, unmount) to --log-file.
int RunInBackground(const MountArgs& a) {
  const char* log_path = a.log_file.empty() ? "/dev/null" : a.log_file.c_str();
  const int log_fd = ::open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0)
    return Fail("mount", Status::FromErrno(errno, std::string("open log file ") + log_path));
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Fail("mount", Status::FromErrno(errno, "pipe"));
  const pid_t pid = ::fork();
  if (pid < 0) return Fail("mount", Status::FromErrno(errno, "fork"));
  if (pid > 0) {
    ::close(ready[1]);
    ::close(log_fd);
    char byte = 0;
    ssize_t n;
    do {
      n = ::read(ready[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    ::close(ready[0]);
    if (n != 1) {  // it exited before mounting, having printed why
      ::waitpid(pid, nullptr, 0);
      return kExitError;
    }
    std::fprintf(stderr, "mounted %s at %s, served by process %d (%s)\n", a.dataset.c_str(),
                 a.mountpoint.c_str(), static_cast<int>(pid),
                 a.log_file.empty() ? "no log: see --log-file" : ("log: " + a.log_file).c_str());
    return kExitOk;
  }
  ::close(ready[0]);
  ::setsid();  // no SIGHUP/SIGINT from the terminal it was started from
  return RunMount(a, [&] {
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::close(null_fd);
    ::close(log_fd);
    const char ok = 1;
    (void)!::write(ready[1], &ok, 1);
    ::close(ready[1]);
  });
}

}  // namespace

void RegisterMount(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd =
      app.add_subcommand("mount",
                         "Mount a dataset read-only with FUSE, showing its original tree (until "
                         "unmounted with fusermount3 -u, or Ctrl-C / SIGTERM)");
  cmd->add_option("dataset", args->dataset, "dataset path or URI (stoker://, s3://)")->required();
  cmd->add_option("--version", args->version,
                  "this version (`stoker versions`); default: the newest")
      ->check(WholeNumber(true));
  cmd->add_option("mountpoint", args->mountpoint, "an empty directory")->required();
  auto* fg = cmd->add_flag("-f,--foreground", args->foreground,
                           "serve from this process until unmounted (the default)");
  auto* bg = cmd->add_flag("--background", args->background,
                           "return once mounted, serving from a background process until unmounted "
                           "(fusermount3 -u) or sent SIGTERM")
                 ->excludes(fg);
  cmd->add_option("--log-file", args->log_file,
                  "with --background: append the mount's messages (e.g. corrupt files) here")
      ->needs(bg);
  cmd->add_option("--threads", args->threads, "requests served at once")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_flag("--allow-other", args->allow_other,
                "let other users read the mount (a normal user needs user_allow_other in "
                "/etc/fuse.conf)");
  cmd->add_flag("--allow-non-empty", args->allow_non_empty,
                "mount over a directory that has entries, hiding them while mounted");
  cmd->add_option("--buffer-limit", args->buffer_limit,
                  "files up to this size are read whole into memory on their first read; "
                  "larger ones are checked by streaming, then read in place (e.g. 64MiB)")
      ->transform(ByteSize())
      ->capture_default_str();
  cmd->add_option("-o", args->fuse_options,
                  "more FUSE mount options, as for mount -o (e.g. -o debug); repeatable");
  cmd->callback([args, &exit_code] {
    exit_code = args->background ? RunInBackground(*args) : RunMount(*args);
  });
}

}  // namespace stoker::cli
