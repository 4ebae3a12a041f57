#include "net/uri.h"

#include "common/parse_number.h"

namespace stoker::net {

std::string ServerAddress::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<ServerAddress> ParseServerAddress(std::string_view text) {
  const std::string_view whole = text;  // `text` is cut down to the host below
  auto bad = [whole](std::string_view why) {
    return Err(Status::InvalidArgument("bad server address '" + std::string(whole) +
                                       "': " + std::string(why)));
  };
  ServerAddress a;
  std::string_view port_text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    a.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':')) return bad("expected ':' after ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      if (text.find(':') != colon) return bad("IPv6 addresses need brackets: [addr]:port");
      port_text = text.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
      text = text.substr(0, colon);
    }
    a.host = std::string(text);
  }
  if (a.host.empty()) return bad("empty host");
  // Names and IP literals only: anything else (brackets, NUL, spaces, bytes) would not print
  // back as the same address, and no resolver accepts it anyway.
  for (char c : a.host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
    if (!ok) return bad("the host may hold only letters, digits and . - _ (IPv6: [addr])");
  }
  if (!port_text.empty()) {
    const auto port = ParseUnsigned<uint16_t>(port_text);
    if (!port) return bad("port must be a number from 0 to 65535");
    a.port = *port;
  }
  return a;
}

std::string StokerUri::ToString() const {
  std::string out(kStokerScheme);
  for (size_t i = 0; i < servers.size(); ++i) {
    if (i > 0) out += ',';
    out += servers[i].ToString();
  }
  return out + "/" + dataset;
}

Result<StokerUri> ParseStokerUri(std::string_view uri) {
  auto bad = [&](std::string_view why) {
    return Err(Status::InvalidArgument("bad stoker:// URI '" + std::string(uri) +
                                       "': " + std::string(why) +
                                       " (expected stoker://host:port[,host:port...]/name)"));
  };
  if (!uri.starts_with(kStokerScheme)) return bad("wrong scheme");
  std::string_view rest = uri.substr(kStokerScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("no dataset name");
  std::string_view authority = rest.substr(0, slash);
  std::string_view name = rest.substr(slash + 1);
  while (name.ends_with('/')) name.remove_suffix(1);
  if (name.empty()) return bad("no dataset name");
  if (name.find('/') != std::string_view::npos) return bad("the dataset name contains '/'");
  if (name.size() > 65535 || name.find('\0') != std::string_view::npos) return bad("bad name");
  StokerUri out;
  out.dataset = std::string(name);
  while (true) {
    const size_t comma = authority.find(',');
    auto server = ParseServerAddress(authority.substr(0, comma));
    if (!server) return Err(server.error().WithContext("in " + std::string(uri)));
    out.servers.push_back(std::move(*server));
    if (comma == std::string_view::npos) break;
    authority.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace stoker::net
