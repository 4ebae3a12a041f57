// `stoker doctor`: checks this machine for what stoker uses — FUSE (stoker mount), io_uring (the
// read pipeline; threads otherwise), sealed memfds (the job cache), the open-file and locked-
// memory limits, the memory this process may use, transparent huge pages, and CUDA (the GPU
// path) — and says what to fix, one line each (--json: one document). Exit 1 if something stoker
// needs is missing.
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "decode/device_batches.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

enum class Verdict { kOk, kNote, kFix };

struct Finding {
  Verdict verdict;
  std::string what, detail, fix;
};

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir =
        dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::string candidate = dir + "/" + program;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

Finding CheckFuse() {
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return {Verdict::kFix, "fuse", fmt::format("/dev/fuse: {}", std::strerror(errno)),
            "load the module (modprobe fuse); in a container, pass the device "
            "(--device /dev/fuse) and CAP_SYS_ADMIN; `stoker mount` needs it, nothing else does"};
  }
  ::close(fd);
  const std::string fusermount = FindOnPath("fusermount3");
  if (fusermount.empty() && ::geteuid() != 0) {
    return {Verdict::kFix, "fuse", "/dev/fuse is usable but fusermount3 is not on PATH",
            "install fuse3 (apt install fuse3): unprivileged mounts need it"};
  }
  return {Verdict::kOk, "fuse",
          fusermount.empty() ? "/dev/fuse usable (root)" : "/dev/fuse usable, " + fusermount, ""};
}

Finding CheckIoUring() {
  io_uring ring{};
  const int rc = io_uring_queue_init(8, &ring, 0);
  if (rc == 0) {
    io_uring_queue_exit(&ring);
    return {Verdict::kOk, "io_uring", "available (the read pipeline's engine)", ""};
  }
  const std::string disabled = ReadFirstLine("/proc/sys/kernel/io_uring_disabled");
  return {Verdict::kNote, "io_uring",
          fmt::format("not available: {}{}", std::strerror(-rc),
                      disabled.empty() || disabled == "0"
                          ? ""
                          : " (kernel.io_uring_disabled = " + disabled + ")"),
          "reads use a thread pool instead (works, a little more CPU); to use io_uring, allow "
          "it (sysctl kernel.io_uring_disabled=0, or a seccomp profile that permits it)"};
}

Finding CheckMemfd() {
  const int fd = ::memfd_create("stoker-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return {Verdict::kFix, "memfd", fmt::format("memfd_create: {}", std::strerror(errno)),
            "Linux 3.17 or later; the job cache (stoker node) hands chunks out as memfds"};
  }
  const bool sealed = ::ftruncate(fd, 4096) == 0 &&
                      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0 &&
                      ::fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0;
  ::close(fd);
  if (!sealed) {
    return {Verdict::kFix, "memfd", "sealing a memfd failed (F_SEAL_FUTURE_WRITE: Linux 5.1)",
            "the job cache (stoker node) needs Linux 5.1 or later"};
  }
  return {Verdict::kOk, "memfd", "sealed memfds work (the job cache)", ""};
}

Finding CheckOpenFiles() {
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  const std::string detail = fmt::format("soft limit {}", r.rlim_cur);
  if (r.rlim_cur >= 4096) return {Verdict::kOk, "open files", detail, ""};
  // A server, a daemon or a wide read pipeline holds many connections and chunk files.
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < 4096) {
    return {Verdict::kFix, "open files", fmt::format("{}, hard limit {}", detail, r.rlim_max),
            "raise the hard limit (LimitNOFILE= for services, /etc/security/limits.conf, "
            "--ulimit nofile=65536 for containers), then ulimit -n 65536"};
  }
  const rlim_t target = r.rlim_max == RLIM_INFINITY ? 65536 : std::min<rlim_t>(65536, r.rlim_max);
  return {Verdict::kFix, "open files", detail, fmt::format("ulimit -n {}", target)};
}

Finding CheckMemory() {
  std::string limit = ReadFirstLine("/sys/fs/cgroup/memory.max");
  uint64_t total = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") total = kib * 1024;
    meminfo.ignore(256, '\n');
  }
  const std::string detail =
      fmt::format("{:.1f} GiB of RAM, cgroup limit {}", total / double(1 << 30),
                  limit.empty() ? std::string("none") : limit);
  if (!limit.empty() && limit != "max" && std::stoull(limit) < (uint64_t{4} << 30)) {
    return {Verdict::kNote, "memory", detail,
            "under 4 GiB: give the read pipelines (memory_budget) and the job cache "
            "(--memory-limit) budgets that fit, or raise the limit"};
  }
  return {Verdict::kOk, "memory", detail, ""};
}

Finding CheckHugePages() {
  const std::string thp = ReadFirstLine("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.empty()) return {Verdict::kNote, "huge pages", "transparent huge pages: unknown", ""};
  if (thp.find("[never]") != std::string::npos) {
    return {Verdict::kNote, "huge pages", "transparent huge pages: never",
            "madvise (or always) lets the large batch buffers use huge pages: fewer TLB misses"};
  }
  return {Verdict::kOk, "huge pages", "transparent huge pages: " + thp, ""};
}

Finding CheckCuda() {
  const bool driver = ::access("/proc/driver/nvidia/version", R_OK) == 0;
  const int devices = decode::CudaDeviceCount();
  if (!decode::BuiltWithCuda()) {
    if (driver) {
      return {Verdict::kNote, "cuda", "an NVIDIA driver is loaded, but this stoker has no GPU path",
              "build with a CUDA toolkit and nvJPEG (pip install . finds them; docs/gpu.md) to "
              "decode on the GPU (ImageLoader(device=\"cuda\"))"};
    }
    return {Verdict::kOk, "cuda", "no GPU path in this build, no NVIDIA driver", ""};
  }
  if (devices == 0) {
    return {Verdict::kNote, "cuda", "built with the GPU path, but no CUDA device is visible",
            driver ? "check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi)"
                   : "no NVIDIA driver: ImageLoader decodes on the CPU"};
  }
  return {Verdict::kOk, "cuda",
          fmt::format("{} CUDA device(s); ImageLoader(device=\"cuda\")", devices), ""};
}

}  // namespace

void RegisterDoctor(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check this machine for what stoker uses (FUSE, io_uring, memfds, limits, huge "
      "pages, CUDA) and say what to fix");
  // stoker_main.cc reads --json itself (SetJsonOutput), before parsing; the flag is here for
  // --help and the parser. It lives as long as the command.
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json,
                "the findings as one JSON document: {\"ok\", \"checks\": [{\"check\", "
                "\"verdict\" (ok, note, fix), \"detail\", \"fix\"}]}");
  cmd->callback([&exit_code, json] {
    const std::vector<Finding> findings = {CheckFuse(),      CheckIoUring(), CheckMemfd(),
                                           CheckOpenFiles(), CheckMemory(),  CheckHugePages(),
                                           CheckCuda()};
    bool fix = false;
    nlohmann::json checks = nlohmann::json::array();
    for (const Finding& f : findings) {
      fix = fix || f.verdict == Verdict::kFix;
      if (JsonOutput()) {
        const char* verdict = f.verdict == Verdict::kOk     ? "ok"
                              : f.verdict == Verdict::kNote ? "note"
                                                            : "fix";
        checks.push_back(
            {{"check", f.what}, {"verdict", verdict}, {"detail", f.detail}, {"fix", f.fix}});
        continue;
      }
      const char* tag = f.verdict == Verdict::kOk     ? "ok  "
                        : f.verdict == Verdict::kNote ? "note"
                                                      : "FIX ";
      std::printf("%s  %-11s %s\n", tag, f.what.c_str(), f.detail.c_str());
      if (!f.fix.empty()) std::printf("      %-11s -> %s\n", "", f.fix.c_str());
    }
    if (JsonOutput()) PrintJson({{"ok", !fix}, {"checks", std::move(checks)}});
    exit_code = fix ? kExitError : kExitOk;
  });
}

}  // namespace stoker::cli
