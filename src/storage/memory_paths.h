// Path arithmetic for the in-memory storages (memory_storage, power_loss_storage), whose
// directories are implied by the '/'-separated names they hold.
#pragma once

#include <string>
#include <string_view>

namespace stoker::storage {

// "a/b/c" -> "a/b"; "c" -> "" (the root).
inline std::string ParentOf(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

// The name of the entry of directory `dir` that `full` is or lies under ("a/b/c" in "a": "b");
// empty if `full` is not under `dir`.
inline std::string_view ChildName(std::string_view dir, std::string_view full) {
  if (!dir.empty()) {
    if (!full.starts_with(dir) || full.size() <= dir.size() || full[dir.size()] != '/') return {};
    full.remove_prefix(dir.size() + 1);
  }
  return full.substr(0, full.find('/'));
}

}  // namespace stoker::storage
