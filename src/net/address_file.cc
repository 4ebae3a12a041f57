// See address_file.h.
#include "net/address_file.h"

#include <fcntl.h>
#include <unistd.h>

namespace stoker::net {

Status AppendAddress(const std::string& path, const ServerAddress& address) {
  const std::string line = address.ToString() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "open address file " + path);
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int write_errno = errno;
  ::close(fd);
  if (!written) return Status::FromErrno(write_errno, "append to address file " + path);
  return Status::OK();
}

}  // namespace stoker::net
