// `stoker mount DATASET MOUNTPOINT`: a read-only FUSE view of a packed dataset's original tree,
// served in the foreground until unmounted or interrupted (docs/mount.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fuse/fuse_fs.h"
#include "stoker/dataset.h"
#include "tools/commands.h"

namespace stoker::cli {
namespace {

struct MountArgs {
  std::string dataset;
  std::string mountpoint;
  bool foreground = true;
  unsigned threads = 16;
  bool allow_other = false;
  bool allow_non_empty = false;
  uint64_t buffer_limit = uint64_t{64} << 20;
  std::vector<std::string> fuse_options;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "stoker mount: %s\n", status.ToString().c_str());
  return kExitError;
}

int RunMount(const MountArgs& a) {
  auto ds = Dataset::Open(a.dataset);
  if (!ds) return Fail(ds.error());
  fuse::MountOptions o;
  o.source = a.dataset;
  o.threads = a.threads;
  o.allow_other = a.allow_other;
  o.allow_non_empty = a.allow_non_empty;
  o.buffer_limit = a.buffer_limit;
  o.fuse_options = a.fuse_options;
  const uint32_t files = (*ds)->file_count();
  o.on_mounted = [&] {
    std::fprintf(stderr, "mounted %s at %s (%u files)\n", a.dataset.c_str(), a.mountpoint.c_str(),
                 files);
  };
  if (Status s = fuse::Serve(**ds, a.mountpoint, o); !s.ok()) return Fail(s);
  return kExitOk;
}

}  // namespace

void RegisterMount(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MountArgs>();
  CLI::App* cmd = app.add_subcommand(
      "mount", "Mount a dataset read-only with FUSE, showing its original tree (until "
               "unmounted with fusermount3 -u, or Ctrl-C / SIGTERM)");
  cmd->add_option("dataset", args->dataset, "dataset path or URI (stoker://, s3://)")->required();
  cmd->add_option("mountpoint", args->mountpoint, "an empty directory")->required();
  cmd->add_flag("-f,--foreground", args->foreground,
                "run in the foreground (the default and only mode: start it with & or from a "
                "service manager to keep it in the background)");
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
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("-o", args->fuse_options,
                  "more FUSE mount options, as for mount -o (e.g. -o debug); repeatable");
  cmd->callback([args, &exit_code] { exit_code = RunMount(*args); });
}

}  // namespace stoker::cli
