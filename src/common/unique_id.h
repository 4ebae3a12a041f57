// Names that cannot collide between writers: 64 bits from the kernel's CSPRNG (getrandom(2)).
// Not reproducible on purpose: two processes, machines or retries never draw the same name, which
// is what lets concurrent writers share a dataset without coordinating before they publish.
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace stoker {

inline uint64_t UniqueId() {
  uint64_t id = 0;
  while (true) {
    const ssize_t n = ::getrandom(&id, sizeof(id), 0);
    if (n == static_cast<ssize_t>(sizeof(id))) break;
    if (n < 0 && errno != EINTR) std::abort();  // no entropy source: nothing safe to fall back to
  }
  return id;
}

}  // namespace stoker
