// stoker._core.TokenStream (loader/token_stream.h), what stoker.TokenLoader reads with: the
// tokens per chunk, and a chunk's tokens as a NumPy array over a C++ buffer (no copy), read
// with the GIL released so a prefetching thread overlaps the consumer.
#include "tokens.h"

#include <memory>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "dataset.h"
#include "errors.h"
#include "loader/token_stream.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

class PyTokenStream {
 public:
  PyTokenStream(nb::object dataset, const std::string& column) : dataset_obj_(std::move(dataset)) {
    const Dataset& ds = UnwrapDataset(dataset_obj_);
    // The Python Dataset object owns the C++ one; holding dataset_obj_ keeps it alive.
    std::shared_ptr<const Dataset> shared(&ds, [](const Dataset*) {});
    Result<std::unique_ptr<loader::TokenStream>> opened = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      opened = loader::TokenStream::Open(std::move(shared), column);
    }
    stream_ = ValueOrThrow(std::move(opened));
  }

  nb::ndarray<nb::numpy, const uint64_t, nb::ndim<1>> ChunkTokens() const {
    const auto& counts = stream_->chunk_tokens();
    const size_t shape[1] = {counts.size()};
    // A view of the stream's own vector, alive as long as this object (the owner).
    return {counts.data(), 1, shape, nb::find(this)};
  }

  // The chunk's tokens as bytes in a C++ buffer, handed to NumPy without a copy.
  nb::object ReadChunk(uint32_t chunk) const {
    if (chunk >= stream_->chunk_tokens().size()) throw nb::index_error("chunk out of range");
    Result<std::vector<std::byte>> read = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      read = stream_->ReadChunk(chunk);
    }
    auto* owned = new std::vector<std::byte>(ValueOrThrow(std::move(read)));
    nb::capsule owner(owned,
                      [](void* p) noexcept { delete static_cast<std::vector<std::byte>*>(p); });
    const size_t shape[1] = {owned->size()};
    nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>> bytes(
        reinterpret_cast<const uint8_t*>(owned->data()), 1, shape, owner);
    return nb::cast(bytes).attr("view")(stream_->element().Descr());
  }

  std::string dtype() const { return stream_->element().Name(); }

 private:
  nb::object dataset_obj_;
  std::unique_ptr<loader::TokenStream> stream_;
};

}  // namespace

void RegisterTokens(nb::module_& m) {
  nb::class_<PyTokenStream>(m, "TokenStream",
                            "A tokens column as one stream, chunk after chunk (the samples "
                            "that start in a chunk, in order): what stoker.TokenLoader reads.")
      .def(nb::init<nb::object, const std::string&>(), nb::arg("dataset"), nb::arg("column"))
      .def_prop_ro("chunk_tokens", &PyTokenStream::ChunkTokens, "Tokens per chunk (uint64).")
      .def_prop_ro("dtype", &PyTokenStream::dtype, "The column's element type ('uint16', ...).")
      .def("read_chunk", &PyTokenStream::ReadChunk, nb::arg("chunk"),
           "Chunk `chunk`'s tokens, CRC-checked: a read-only NumPy array over a C++ buffer.");
}

}  // namespace stoker::python
