// stoker._core: the C++ extension behind the `stoker` Python package. Thin: each component
// registers its own bindings (errors.cc, dataset.cc, pack.cc, sampler.cc).
#include <nanobind/nanobind.h>

#include "dataset.h"
#include "errors.h"
#include "image_ops.h"
#include "image_pipeline.h"
#include "loader_options.h"
#include "log.h"
#include "pack.h"
#include "pipeline.h"
#include "sampler.h"
#include "tokens.h"
#include "trace.h"
#include "writer.h"

NB_MODULE(_core, m) {
  m.doc() = "stoker C++ core: datasets, pack, verify and the sampler";
  stoker::python::RegisterErrors(m);
  stoker::python::RegisterDataset(m);
  stoker::python::RegisterImageOps(m);
  stoker::python::RegisterImagePipeline(m);
  stoker::python::RegisterLoaderOptions(m);
  stoker::python::RegisterLog(m);
  stoker::python::RegisterPack(m);
  stoker::python::RegisterPipeline(m);
  stoker::python::RegisterSampler(m);
  stoker::python::RegisterTokens(m);
  stoker::python::RegisterTrace(m);
  stoker::python::RegisterWriter(m);
}
