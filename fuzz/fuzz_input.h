// The fuzz input in a memfd, for targets whose code under test reads a file or a descriptor
// (libarchive a path, /proc/self/fd/N; the row stream a descriptor): no temporary file to clean
// up, nothing shared between parallel fuzzing jobs.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace stoker::fuzz {

inline int InputFd() {
  static const int fd = memfd_create("stoker-fuzz-input", MFD_CLOEXEC);
  return fd;
}

// Replaces the memfd's contents with the input and rewinds it; false if the harness is broken.
inline bool WriteInput(const uint8_t* data, size_t size) {
  const int fd = InputFd();
  if (fd < 0 || ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return lseek(fd, 0, SEEK_SET) == 0;
}

}  // namespace stoker::fuzz
