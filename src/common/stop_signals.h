// Ctrl-C and `kill` (SIGINT, SIGTERM) as a request to stop long work cleanly, for the CLI's
// commands that write: while a StopOnSignals lives, the first of these signals only sets a flag
// that the work polls (a pack then removes what it wrote and publishes nothing); a second one
// ends the process at once, as it would have without this.
// Thread-safety: StopRequested/StopSignal from any thread; one StopOnSignals at a time.
#pragma once

#include <csignal>

namespace stoker {

class StopOnSignals {
 public:
  StopOnSignals();   // installs the handlers, clears an earlier request
  ~StopOnSignals();  // restores the previous handlers
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction previous_int_{}, previous_term_{};
};

// Whether a stop was asked for, and by which signal (0: none).
bool StopRequested();
int StopSignal();

// SIGINT and SIGTERM as a daemon's (`stoker serve`, `node`, `feed`) one way to stop: made before
// any thread starts, it blocks both in the calling thread, so every thread started later
// inherits the mask, and Wait() takes the first to arrive synchronously — no async handler
// racing the daemon's threads.
class DaemonSignals {
 public:
  DaemonSignals();
  int Wait();  // the signal that arrived

 private:
  sigset_t signals_{};
};

}  // namespace stoker
