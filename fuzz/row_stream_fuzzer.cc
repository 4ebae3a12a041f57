// `stoker pack -` of an arbitrary row stream (dataset/row_stream.h), into an in-memory dataset:
// the stream comes from another program (the Spark executors' JVMs, any producer), so a hostile
// one must come back as an error, never a crash or a huge allocation; and when the pack succeeds,
// the published version must open, pass a full verify and hold every row.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dataset/row_stream.h"
#include "dataset/stream_pack.h"
#include "dataset/verify.h"
#include "fuzz_check.h"
#include "fuzz_input.h"
#include "storage/memory_storage.h"

namespace {

// One column of every kind the stream carries (fuzz/corpus/row_stream/ is in this order).
const std::vector<std::string>& Flags() {
  static const std::vector<std::string> flags = {"label=int",
                                                 "f=float:nan?",
                                                 "s=str?",
                                                 "b=bytes?",
                                                 "j=jpeg?",
                                                 "p=png?",
                                                 "t=tokens:int16?",
                                                 "n=ndarray:float32?",
                                                 "m=ndarray:uint8:2x2?",
                                                 "o=json?"};
  return flags;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker;
  if (!stoker::fuzz::WriteInput(data, size)) __builtin_trap();  // the harness itself is broken
  auto order = dataset::ParseRowColumns(Flags());
  FUZZ_CHECK(order.has_value());
  auto schema = format::MakeSchema(*order, "label");
  FUZZ_CHECK(schema.has_value());
  auto storage = std::make_shared<storage::MemoryStorage>();
  dataset::PackOptions options;
  options.chunk_bytes = 4096;  // several chunks even from a small input
  options.group_samples = true;
  options.columns = format::FormatSchema(*schema);
  auto pack = dataset::StreamPack::Start(storage, options, 1 << 20);
  FUZZ_CHECK(pack.has_value());
  auto rows =
      dataset::PackRowStream({stoker::fuzz::InputFd(), *order, "label", "p/", nullptr}, **pack);
  if (!rows) {
    (*pack)->Abort();
    return 0;
  }
  auto summary = (*pack)->Finish();
  if (!summary) return 0;  // e.g. no rows: nothing to publish is fine too
  FUZZ_CHECK(summary->samples == *rows);
  auto report = dataset::Verify(*storage);
  FUZZ_CHECK(report.has_value());
  FUZZ_CHECK(report->ok());
  return 0;
}
