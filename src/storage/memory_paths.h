// Path arithmetic for the in-memory storages (memory_storage, power_loss_storage), whose
// directories are implied by the '/'-separated names they hold.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

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

// The entries of directory `dir`, sorted: the children among `files` (a map from path) and
// `dirs` (a set of paths).
template <typename FileMap, typename DirSet>
std::vector<std::string> ChildrenOf(std::string_view dir, const FileMap& files,
                                    const DirSet& dirs) {
  std::set<std::string, std::less<>> names;
  for (const auto& [path, file] : files) {
    if (auto child = ChildName(dir, path); !child.empty()) names.emplace(child);
  }
  for (const auto& path : dirs) {
    if (auto child = ChildName(dir, path); !child.empty()) names.emplace(child);
  }
  return {names.begin(), names.end()};
}

}  // namespace stoker::storage
