// What `stoker pack` leaves out of a source, and how it says so: files matching an exclude
// pattern or the usual operating-system litter, and files outside the class directories of a
// labelled tree. Never silent: the counts and a few names reach the pack's summary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::dataset {

// Names that operating systems and file browsers leave in directories (macOS, Windows): never
// data, so always left out, whatever the case of their letters. --exclude adds patterns.
inline constexpr std::string_view kOsLitter[] = {
    ".DS_Store",  "._*",       "__MACOSX",    ".Spotlight-V100", ".Trashes",
    ".fseventsd", "Thumbs.db", "ehthumbs.db", "desktop.ini",
};

// Glob patterns (fnmatch) that leave a file or directory out: a pattern matches an entry's name
// or its whole path inside the source ('*' then also matches '/': "class01/*", "*.txt").
class ExcludeFilter {
 public:
  explicit ExcludeFilter(std::vector<std::string> patterns = {});
  // True when `relative` (a path inside the source, '/'-separated) is to be left out.
  bool Excludes(std::string_view relative) const;

 private:
  std::vector<std::string> patterns_;
};

// A count of left-out entries and a few of their names: the first in name order, so that
// what is said does not depend on the order a directory lists them in.
struct LeftOutNames {
  static constexpr size_t kExamples = 3;
  uint64_t count = 0;
  std::vector<std::string> examples;  // sorted
  void Add(std::string_view name) {
    ++count;
    const auto at = std::lower_bound(examples.begin(), examples.end(), name);
    if (at - examples.begin() >= static_cast<std::ptrdiff_t>(kExamples)) return;
    examples.emplace(at, name);
    if (examples.size() > kExamples) examples.pop_back();
  }
};

struct LeftOut {
  LeftOutNames excluded;         // matched an exclude pattern or the OS litter
  LeftOutNames outside_classes;  // at the root of a tree whose labels are its directories
};

// One line for people: "left out 1 file beside the class directories (...): README.txt; left
// out 2 files as OS litter or --exclude: .DS_Store, cat/._0.jpg"; "" when nothing was.
std::string LeftOutLine(const LeftOut& left_out);

}  // namespace stoker::dataset
