// stoker._core.trace_start / trace_stop / trace_enabled / trace_complete: the C++ trace writer
// (common/trace.h), driven by stoker.trace (python/stoker/tracing.py); the loaders add their
// steps with trace_complete.
#include "trace.h"

#include <string>

#include <nanobind/stl/string.h>

#include "common/trace.h"
#include "errors.h"

namespace nb = nanobind;

namespace stoker::python {

void RegisterTrace(nb::module_& m) {
  m.def(
      "trace_start",
      [](const std::string& path, const std::string& process) {
        ThrowIfError(trace::Start(path, process));
      },
      nb::arg("path"), nb::arg("process"),
      "Starts writing Chrome trace events to `path` (OSError if it cannot be written).");
  m.def(
      "trace_stop", [] { ThrowIfError(trace::Stop()); },
      "Finishes the trace file (OSError if its last events could not be written).");
  m.def("trace_enabled", &trace::Enabled, "Whether a trace is being written.");
  m.def(
      "trace_name_thread", [](const std::string& name) { trace::NameThread(name); },
      nb::arg("name"), "Names the calling thread's track in the trace.");
  m.def(
      "trace_complete",
      [](const std::string& name, const std::string& category, uint64_t start_ns, uint64_t end_ns,
         const std::string& args) { trace::Complete(name, category, start_ns, end_ns, args); },
      nb::arg("name"), nb::arg("category"), nb::arg("start_ns"), nb::arg("end_ns"),
      nb::arg("args") = "",
      "A complete event on the calling thread; times from time.monotonic_ns(); `args` the "
      "members of a JSON object without its braces.");
}

}  // namespace stoker::python
