// stoker._core.TokenStream (loader/token_stream.h), what stoker.TokenLoader reads with: the
// tokens per chunk, and a chunk's tokens as a NumPy array over a C++ buffer (no copy), read
// with the GIL released so a prefetching thread overlaps the consumer.
#include "tokens.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "dataset.h"
#include "errors.h"
#include "loader/token_stream.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// A read-only NumPy array of `element`s over `data`, which `owner` keeps alive; built with its
// dtype and shape at once (a view() and reshape() per batch cost more than copying its tokens).
template <size_t N>
nb::object TokenArray(void* data, const size_t (&shape)[N], const nb::capsule& owner,
                      const format::ElementType& element) {
  const nb::dlpack::dtype dtype{
      static_cast<uint8_t>(element.kind == 'u' ? nb::dlpack::dtype_code::UInt
                                               : nb::dlpack::dtype_code::Int),
      static_cast<uint8_t>(element.size * 8), 1};
  return nb::cast(
      nb::ndarray<nb::numpy, nb::ndim<N>, nb::ro>(data, N, shape, owner, nullptr, dtype));
}

class PyTokenStream {
 public:
  using Samples = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

  PyTokenStream(nb::object dataset, const std::string& column, std::optional<Samples> samples)
      : dataset_obj_(std::move(dataset)) {
    const Dataset& ds = UnwrapDataset(dataset_obj_);
    std::vector<bool> selected;
    if (samples) {
      selected.resize(ds.sample_count());
      for (size_t i = 0; i < samples->shape(0); ++i) {
        const uint32_t s = samples->data()[i];
        if (s >= selected.size()) throw nb::index_error("sample out of range");
        selected[s] = true;
      }
    }
    // The Python Dataset object owns the C++ one; holding dataset_obj_ keeps it alive.
    std::shared_ptr<const Dataset> shared(&ds, [](const Dataset*) {});
    Result<std::unique_ptr<loader::TokenStream>> opened = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      opened = loader::TokenStream::Open(std::move(shared), column, std::move(selected));
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
    using Tokens = loader::TokenStream::Tokens;
    Result<Tokens> read = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      read = stream_->ReadChunk(chunk);
    }
    auto* owned = new Tokens(ValueOrThrow(std::move(read)));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tokens*>(p); });
    const size_t shape[1] = {owned->size / stream_->element().size};
    return TokenArray(owned->data.get(), shape, owner, stream_->element());
  }

  std::string dtype() const { return stream_->element().Name(); }
  std::shared_ptr<const loader::TokenStream> stream() const { return stream_; }

 private:
  nb::object dataset_obj_;
  std::shared_ptr<const loader::TokenStream> stream_;
};

class PyTokenBatches {
 public:
  using Plan = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  using Rows = Plan;

  PyTokenBatches(nb::object stream, const Plan& plan, uint64_t block, uint32_t batch,
                 uint32_t ahead)
      : stream_obj_(std::move(stream)) {
    const auto& s = nb::cast<const PyTokenStream&>(stream_obj_);
    element_ = s.stream()->element();
    width_ = block + 1;
    batch_ = batch;
    std::vector<uint32_t> blocks(plan.data(), plan.data() + plan.shape(0));
    Result<std::unique_ptr<loader::TokenBatches>> started = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      started = loader::TokenBatches::Start(s.stream(), std::move(blocks), {block, batch, ahead});
    }
    batches_ = ValueOrThrow(std::move(started));
  }

  // The next batch as a (count, block + 1) array over a C++ buffer; None at the end.
  nb::object Next() {
    // Not zero-filled: every byte of the rows handed out is written.
    const size_t bytes = size_t{batch_} * width_ * element_.size;
    auto* owned = std::make_unique_for_overwrite<std::byte[]>(bytes).release();
    nb::capsule owner(owned, [](void* p) noexcept { delete[] static_cast<std::byte*>(p); });
    Result<uint32_t> count = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      count = batches_->Next({owned, bytes});
    }
    const uint32_t n = ValueOrThrow(std::move(count));
    if (n == 0) return nb::none();
    const size_t shape[2] = {n, width_};
    return TokenArray(owned, shape, owner, element_);
  }

  // The next len(rows) blocks written into rows `rows` of `out` (a mix's batch, filled from
  // several streams); returns how many were left to write (fewer at the plan's end).
  uint32_t Fill(const nb::ndarray<nb::numpy, nb::ndim<2>, nb::c_contig, nb::device::cpu>& out,
                const Rows& rows) {
    if (out.shape(1) != width_ || out.itemsize() != element_.size) {
      throw nb::value_error("out must be (rows, block_size + 1) of the column's element size");
    }
    std::span<std::byte> dst(static_cast<std::byte*>(out.data()), out.nbytes());
    std::span<const uint32_t> wanted(rows.data(), rows.shape(0));
    Result<uint32_t> count = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      count = batches_->NextRows(dst, wanted);
    }
    return ValueOrThrow(std::move(count));
  }

  uint64_t chunks_read() const { return batches_->chunks_read(); }
  double wait_seconds() const { return batches_->wait_seconds(); }

 private:
  nb::object stream_obj_;  // keeps the stream (and its dataset) alive
  format::ElementType element_;
  uint64_t width_ = 0;
  uint32_t batch_ = 0;
  std::unique_ptr<loader::TokenBatches> batches_;
};

}  // namespace

void RegisterTokens(nb::module_& m) {
  nb::class_<PyTokenStream>(m, "TokenStream",
                            "A tokens column as one stream, chunk after chunk (the samples "
                            "that start in a chunk, in order): what stoker.TokenLoader reads.")
      .def(nb::init<nb::object, const std::string&, std::optional<PyTokenStream::Samples>>(),
           nb::arg("dataset"), nb::arg("column"), nb::arg("samples") = nb::none(),
           "`samples`: the dataset's samples whose documents the stream holds (a view's "
           "indices, uint32); None: all.")
      .def_prop_ro("chunk_tokens", &PyTokenStream::ChunkTokens, "Tokens per chunk (uint64).")
      .def_prop_ro("dtype", &PyTokenStream::dtype, "The column's element type ('uint16', ...).")
      .def("read_chunk", &PyTokenStream::ReadChunk, nb::arg("chunk"),
           "Chunk `chunk`'s tokens, CRC-checked: a read-only NumPy array over a C++ buffer.");
  nb::class_<PyTokenBatches>(m, "TokenBatches",
                             "Batches of token blocks in a plan's order, made in C++ (chunks "
                             "read ahead by two threads): what stoker.TokenLoader iterates.")
      .def(nb::init<nb::object, const PyTokenBatches::Plan&, uint64_t, uint32_t, uint32_t>(),
           nb::arg("stream"), nb::arg("plan"), nb::arg("block_size"), nb::arg("batch_size"),
           nb::arg("ahead"))
      .def("next", &PyTokenBatches::Next,
           "The next batch, a read-only (count, block_size + 1) array; None at the end.")
      .def("fill", &PyTokenBatches::Fill, nb::arg("out"), nb::arg("rows"),
           "Writes the next len(rows) blocks into those rows of `out` (a writable (n, "
           "block_size + 1) array of the column's element size); returns how many it wrote.")
      .def_prop_ro("chunks_read", &PyTokenBatches::chunks_read)
      .def_prop_ro("wait_seconds", &PyTokenBatches::wait_seconds,
                   "Seconds next()/fill() waited for chunks still being read.");
}

}  // namespace stoker::python
