// stoker:// URIs: `stoker://host:port[,host:port...]/name`. Values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker::net {

inline constexpr std::string_view kStokerScheme = "stoker://";
inline constexpr uint16_t kDefaultPort = 7070;

struct ServerAddress {
  std::string host;  // a name or an IP literal (IPv6 without brackets)
  uint16_t port = kDefaultPort;
  // "host:port", IPv6 hosts in brackets.
  std::string ToString() const;
};

// Parses "host:port", "[v6]:port" or "host" (port kDefaultPort).
Result<ServerAddress> ParseServerAddress(std::string_view text);

struct StokerUri {
  std::vector<ServerAddress> servers;  // at least one; the order matters for striping
  std::string dataset;                 // the exported name: no '/', not empty
  // "stoker://h1:p1,h2:p2/name"
  std::string ToString() const;
};

// InvalidArgument naming the URI if it is not a well-formed stoker:// URI.
Result<StokerUri> ParseStokerUri(std::string_view uri);

}  // namespace stoker::net
