// Path and URI arguments as Python gives them: str, bytes or any os.PathLike (pathlib.Path),
// converted as os.fsencode does — str with the file system encoding and surrogateescape, so a
// name that is not UTF-8 survives the round trip — to the bytes the C++ API takes.
#pragma once

#include <string>
#include <vector>

#include <nanobind/nanobind.h>

namespace stoker::python {

inline std::string FsPath(nanobind::handle path) {
  const nanobind::object encoded = nanobind::module_::import_("os").attr("fsencode")(path);
  const nanobind::bytes bytes = nanobind::cast<nanobind::bytes>(encoded);
  return std::string(bytes.c_str(), bytes.size());
}

// One path, or a list or tuple of them.
inline std::vector<std::string> FsPaths(nanobind::handle paths) {
  std::vector<std::string> out;
  if (nanobind::isinstance<nanobind::list>(paths) || nanobind::isinstance<nanobind::tuple>(paths)) {
    for (nanobind::handle p : paths) out.push_back(FsPath(p));
  } else {
    out.push_back(FsPath(paths));
  }
  return out;
}

}  // namespace stoker::python
