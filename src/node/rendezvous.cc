#include "node/rendezvous.h"

#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "net/address_file.h"

namespace stoker::node {

Result<std::vector<net::ServerAddress>> Rendezvous(const std::string& path,
                                                   const net::ServerAddress& self, size_t expected,
                                                   std::chrono::milliseconds timeout) {
  if (expected == 0) return Err(Status::InvalidArgument("the job needs at least one daemon"));
  STOKER_RETURN_IF_ERROR(net::AppendAddress(path, self));

  // A line is "host:port" (a host name is at most 253 bytes): anything longer is not one, and
  // is refused without reading on, so a stray huge file cannot fill memory.
  constexpr size_t kMaxLine = 300;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::map<std::string, net::ServerAddress> seen;  // sorted by "host:port"
    std::ifstream in(path);
    std::string entry;
    const auto take_line = [&]() -> Status {
      if (entry.empty()) return Status::OK();
      auto address = net::ParseServerAddress(entry);
      if (!address) {
        return Status::InvalidArgument(
            fmt::format("rendezvous file {}: bad line '{}'", path, entry));
      }
      seen.emplace(address->ToString(), *address);
      entry.clear();
      return Status::OK();
    };
    for (char c; seen.size() <= expected && in.get(c);) {
      if (c == '\n') {
        STOKER_RETURN_IF_ERROR(take_line());
      } else if (entry.size() == kMaxLine) {
        return Err(Status::InvalidArgument(fmt::format(
            "rendezvous file {}: a line over {} bytes: not host:port", path, kMaxLine)));
      } else {
        entry += c;
      }
    }
    if (seen.size() <= expected) STOKER_RETURN_IF_ERROR(take_line());  // one without a newline
    if (seen.size() > expected) {
      return Err(Status::InvalidArgument(fmt::format(
          "rendezvous file {} names {} daemons, more than the {} expected (a file left from "
          "another job?)",
          path, seen.size(), expected)));
    }
    if (seen.size() == expected) {
      std::vector<net::ServerAddress> peers;
      peers.reserve(seen.size());
      for (auto& [key, address] : seen) peers.push_back(std::move(address));
      return peers;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Err(Status::Timeout(fmt::format("rendezvous file {}: {} of {} daemons after {} s",
                                             path, seen.size(), expected, timeout.count() / 1000)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace stoker::node
