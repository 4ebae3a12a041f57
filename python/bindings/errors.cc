// Status code → Python exception, once for the whole extension:
//   NotFound → FileNotFoundError          InvalidArgument → ValueError
//   Corruption → stoker.CorruptionError   PermissionDenied → PermissionError
//   AlreadyExists → FileExistsError       Timeout → TimeoutError
//   Unsupported → NotImplementedError     Internal, Cancelled → RuntimeError
//   IOError, Unavailable, ResourceExhausted → OSError
// The exception message is the Status message (it names the file, chunk or sample); the code
// name is kept as the `code` attribute for callers that want to branch on it.
#include "errors.h"

#include <Python.h>

#include "common/escape.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

PyObject* corruption_error = nullptr;  // owned by the module (added as an attribute)

PyObject* ExceptionFor(StatusCode code) {
  switch (code) {
    case StatusCode::kNotFound:
      return PyExc_FileNotFoundError;
    case StatusCode::kInvalidArgument:
      return PyExc_ValueError;
    case StatusCode::kCorruption:
      return corruption_error;
    case StatusCode::kPermissionDenied:
      return PyExc_PermissionError;
    case StatusCode::kAlreadyExists:
      return PyExc_FileExistsError;
    case StatusCode::kTimeout:
      return PyExc_TimeoutError;
    case StatusCode::kUnsupported:
      return PyExc_NotImplementedError;
    case StatusCode::kInternal:
    case StatusCode::kCancelled:
      return PyExc_RuntimeError;
    case StatusCode::kOk:
    case StatusCode::kIOError:
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      break;
  }
  return PyExc_OSError;
}

}  // namespace

void RegisterErrors(nb::module_& m) {
  corruption_error = PyErr_NewExceptionWithDoc(
      "stoker.CorruptionError",
      "Stored bytes failed a checksum or a structural check; the message names the file and "
      "chunk. A subclass of OSError.",
      PyExc_OSError, nullptr);
  if (corruption_error == nullptr) throw nb::python_error();
  m.attr("CorruptionError") = nb::steal(corruption_error);
}

void ThrowStatus(const Status& status) {
  PyObject* type = ExceptionFor(status.code());
  // Messages may quote damaged bytes (a corrupt version record), a name that is not UTF-8 or
  // one with control characters: shown as the CLI shows them (\xNN), decoding cannot fail and
  // printing the error cannot drive the terminal.
  const std::string shown = TerminalSafe(status.message());
  nb::object message = nb::steal(
      PyUnicode_DecodeUTF8(shown.data(), static_cast<Py_ssize_t>(shown.size()), "strict"));
  if (!message.is_valid()) throw nb::python_error();
  nb::object exc = nb::steal(PyObject_CallFunctionObjArgs(type, message.ptr(), nullptr));
  if (!exc.is_valid()) throw nb::python_error();
  const std::string_view code = StatusCodeName(status.code());
  if (PyObject_SetAttrString(exc.ptr(), "code", nb::str(code.data(), code.size()).ptr()) != 0) {
    PyErr_Clear();
  }
  PyErr_SetObject(type, exc.ptr());
  throw nb::python_error();
}

}  // namespace stoker::python
