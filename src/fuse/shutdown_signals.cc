#define FUSE_USE_VERSION 312
#include "fuse/shutdown_signals.h"

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include <fmt/format.h>

namespace stoker::fuse {

ShutdownSignals::ShutdownSignals(fuse_session* session, std::string mountpoint)
    : session_(session), mountpoint_(std::move(mountpoint)) {
  sigemptyset(&signals_);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    // An ignored signal stays ignored, as libfuse leaves it (a shell's `&` job ignores SIGINT):
    // blocked, it would be queued for sigtimedwait instead of discarded.
    struct sigaction current{};
    if (sigaction(s, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&signals_, s);
  }
  pthread_sigmask(SIG_BLOCK, &signals_, &previous_mask_);
  thread_ = std::thread([this] { Wait(); });
}

ShutdownSignals::~ShutdownSignals() {
  done_ = true;
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

void ShutdownSignals::Wait() {
  const timespec tick{0, 100'000'000};
  bool exiting = false;
  for (uint64_t wake = 0; !done_; ++wake) {
    if (!exiting) {
      const int sig = sigtimedwait(&signals_, nullptr, &tick);
      if (sig < 0) continue;  // timed out, or interrupted
      fuse_session_exit(session_);
      exiting = true;
    } else {
      nanosleep(&tick, nullptr);
    }
    if (done_) break;
    // A name no lookup has asked for yet, so that no cached negative entry answers it.
    struct stat st;
    (void)::stat(fmt::format("{}/.stoker-exit-{}-{}", mountpoint_, ::getpid(), wake).c_str(), &st);
  }
}

}  // namespace stoker::fuse
