// Starting a thread without an exception: std::thread throws std::system_error when the process
// is at its thread limit or out of memory, which would end a server that accepts one more
// connection. StartThread says so as a Status instead, and the caller refuses that one request.
#pragma once

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "stoker/status.h"

namespace stoker {

template <typename F>
Result<std::thread> StartThread(F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    return Err(Status::ResourceExhausted(std::string("cannot start a thread: ") + e.what()));
  }
}

}  // namespace stoker
