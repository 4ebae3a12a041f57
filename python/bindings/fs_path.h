// Paths between Python and the C++ API, which keeps them as bytes. Arguments come as str, bytes
// or any os.PathLike (pathlib.Path) and are converted as os.fsencode does; names go back as
// os.fsdecode gives them. Both use the file system encoding with surrogateescape, so a name that
// is not UTF-8 survives the round trip: os.fsencode(name) is the stored bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <Python.h>
#include <nanobind/nanobind.h>

namespace stoker::python {

inline std::string FsPath(nanobind::handle path) {
  const nanobind::object encoded = nanobind::module_::import_("os").attr("fsencode")(path);
  const nanobind::bytes bytes = nanobind::cast<nanobind::bytes>(encoded);
  return std::string(bytes.c_str(), bytes.size());
}

inline nanobind::str FsName(std::string_view name) {
  PyObject* decoded =
      PyUnicode_DecodeFSDefaultAndSize(name.data(), static_cast<Py_ssize_t>(name.size()));
  if (decoded == nullptr) throw nanobind::python_error();
  return nanobind::steal<nanobind::str>(decoded);
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
