#include "common/stop_signals.h"

#include <pthread.h>

#include <atomic>

namespace stoker {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

void OnSignal(int signal) {
  if (g_signal.exchange(signal) != 0) {  // asked twice: the user means it
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

}  // namespace

StopOnSignals::StopOnSignals() {
  g_signal.store(0);
  struct sigaction action{};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: a read blocked on a pipe or socket then fails with EINTR, so the work stops
  // even when no next file ever comes (it cleans up as after any failure).
  action.sa_flags = 0;
  ::sigaction(SIGINT, &action, &previous_int_);
  ::sigaction(SIGTERM, &action, &previous_term_);
}

StopOnSignals::~StopOnSignals() {
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
}

DaemonSignals::DaemonSignals() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

int DaemonSignals::Wait() {
  int signal = 0;
  sigwait(&signals_, &signal);
  return signal;
}

bool StopRequested() { return g_signal.load() != 0; }
int StopSignal() { return g_signal.load(); }

}  // namespace stoker
