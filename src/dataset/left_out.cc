#include "dataset/left_out.h"

#include <fnmatch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/escape.h"

namespace stoker::dataset {
namespace {

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool Matches(const std::string& pattern, const std::string& text, int flags) {
  return ::fnmatch(pattern.c_str(), text.c_str(), flags) == 0;
}

std::string Counted(const LeftOutNames& names, std::string_view what) {
  std::vector<std::string> shown;
  shown.reserve(names.examples.size());
  for (const std::string& name : names.examples) shown.push_back(TerminalSafe(name));
  const bool more = names.count > names.examples.size();
  return fmt::format("{} {} {}: {}{}", names.count, names.count == 1 ? "file" : "files", what,
                     fmt::join(shown, ", "), more ? ", ..." : "");
}

}  // namespace

ExcludeFilter::ExcludeFilter(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {}

bool ExcludeFilter::Excludes(std::string_view relative) const {
  const std::string name(BaseName(relative));
  for (const std::string_view litter : kOsLitter) {
    if (Matches(std::string(litter), name, FNM_CASEFOLD)) return true;
  }
  const std::string path(relative);
  for (const std::string& pattern : patterns_) {
    if (Matches(pattern, name, 0) || Matches(pattern, path, 0)) return true;
  }
  return false;
}

std::string LeftOutLine(const LeftOut& left_out) {
  std::vector<std::string> parts;
  if (left_out.outside_classes.count > 0) {
    parts.push_back("left out " + Counted(left_out.outside_classes,
                                          "beside the class directories (labels come from the "
                                          "directories; --labels none packs every file)"));
  }
  if (left_out.excluded.count > 0) {
    parts.push_back("left out " + Counted(left_out.excluded, "as OS litter or --exclude"));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace stoker::dataset
