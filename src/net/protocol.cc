#include "net/protocol.h"

#include <string>

namespace stoker::net {

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello:
      return "HELLO";
    case MessageType::kChallenge:
      return "CHALLENGE";
    case MessageType::kAuth:
      return "AUTH";
    case MessageType::kWelcome:
      return "WELCOME";
    case MessageType::kStat:
      return "STAT";
    case MessageType::kStatOk:
      return "STAT_OK";
    case MessageType::kRead:
      return "READ";
    case MessageType::kData:
      return "DATA";
    case MessageType::kList:
      return "LIST";
    case MessageType::kListOk:
      return "LIST_OK";
    case MessageType::kWrite:
      return "WRITE";
    case MessageType::kDone:
      return "DONE";
    case MessageType::kFinish:
      return "FINISH";
    case MessageType::kRename:
      return "RENAME";
    case MessageType::kRemove:
      return "REMOVE";
    case MessageType::kError:
      return "ERROR";
    case MessageType::kMake:
      return "MAKE";
    case MessageType::kMade:
      return "MADE";
    case MessageType::kJoin:
      return "JOIN";
    case MessageType::kJoined:
      return "JOINED";
  }
  return "UNKNOWN";
}

Status ValidatePath(std::string_view path, bool allow_root) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid dataset path '" + std::string(path) +
                                   "': " + std::string(why));
  };
  if (path.empty()) return allow_root ? Status::OK() : bad("empty");
  if (path.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (path.front() == '/') return bad("absolute paths are not allowed");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty()) return bad("empty path component");
    if (part == "." || part == "..") return bad("'.' and '..' components are not allowed");
    start = end + 1;
  }
  return Status::OK();
}

}  // namespace stoker::net
