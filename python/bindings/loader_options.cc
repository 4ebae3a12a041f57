// See loader_options.h.
#include "loader_options.h"

#include "errors.h"
#include "loader/loader_option_table.h"
#include "options.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// A Python loader's keyword arguments are the table's: another key is the caller's bug.
const UnknownKey kUnknownLoaderOption = {PyExc_TypeError, "unexpected keyword argument "};

}  // namespace

void RegisterLoaderOptions(nb::module_& m) {
  m.def(
      "loader_options", [] { return DescribeOptions(loader::LoaderOptionTable()); },
      "stoker.Loader's options but its callables (transform, collate), each a dict: name, kind, "
      "doc, choices, default (None: chosen by the loader), text. stoker.Loader's signature and "
      "docstring, and those of the options stoker.ImageLoader shares with it, are generated "
      "from it (scripts/gen_options.py).");
  m.def(
      "parse_loader_options",
      [](const nb::dict& values) {
        loader::LoaderOptions options;
        SetOptions(values, {}, loader::LoaderOptionTable(), kUnknownLoaderOption, options);
        ThrowIfError(options.Validate());
        return OptionValues(loader::LoaderOptionTable(), options);
      },
      nb::arg("values"),
      "Every loader option's value after setting `values` (a dict of some of them) over the "
      "defaults (None where the loader chooses); TypeError / ValueError naming the option for "
      "a bad value, ValueError for a rank not below world_size.");
}

}  // namespace stoker::python
