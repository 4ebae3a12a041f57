// SIGINT, SIGTERM and SIGHUP end a FUSE session promptly.
//
// libfuse before 3.18 (Debian 12 ships 3.14) ends its multi-threaded loop on these signals only
// when a worker next receives a request (libfuse issue #997): its handler sets the session's
// exit flag and wakes nobody, so `stoker mount` could go on for as long as nobody touched the
// mount. Here the signals are blocked in the serving thread — and so in
// every worker it starts — and taken by a thread of ours, which sets the exit flag and then
// looks up a name in the mount's root, every 100 ms until the loop has ended: the request wakes
// a worker, which sees the flag and ends the loop.
//
// Use: construct before the loop starts its workers; after the loop returns, unmount first (an
// unmount aborts a lookup the ended loop will never answer), then destroy this.
#pragma once

#include <signal.h>

#include <atomic>
#include <string>
#include <thread>

struct fuse_session;

namespace stoker::fuse {

class ShutdownSignals {
 public:
  ShutdownSignals(fuse_session* session, std::string mountpoint);
  ~ShutdownSignals();  // stops and joins the thread, restores the signal mask
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

 private:
  void Wait();
  fuse_session* const session_;
  const std::string mountpoint_;
  sigset_t signals_{}, previous_mask_{};
  std::atomic<bool> done_ = false;
  std::thread thread_;
};

}  // namespace stoker::fuse
