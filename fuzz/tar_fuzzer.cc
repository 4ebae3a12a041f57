// `stoker pack` of an arbitrary (possibly compressed) tar shard, WebDataset-style, into an
// in-memory dataset. Hostile archives must come back as errors, never a crash; and when the pack
// succeeds, the published version must open and pass a full verify.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dataset/packer.h"
#include "dataset/verify.h"
#include "fuzz_check.h"
#include "fuzz_input.h"
#include "storage/memory_storage.h"

namespace {

// Packs the shard once; false if the pack failed (which is fine: hostile input).
bool PackAndVerify(bool group_samples) {
  using namespace stoker;
  auto source = dataset::OpenTarSource({"/proc/self/fd/" + std::to_string(fuzz::InputFd())});
  if (!source) return false;
  storage::MemoryStorage storage;
  dataset::PackOptions options;
  options.chunk_bytes = 4096;  // several chunks even from a small input
  options.group_samples = group_samples;
  auto summary = dataset::Pack(**source, storage, options);
  if (!summary) return false;
  auto report = dataset::Verify(storage);
  FUZZ_CHECK(report.has_value());
  FUZZ_CHECK(report->ok());
  FUZZ_CHECK(report->files_checked == summary->files_total);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!stoker::fuzz::WriteInput(data, size)) __builtin_trap();  // the harness itself is broken
  // WebDataset mode (samples grouped by key, .cls labels); for archives that pack, also the
  // directory-tree mode (labels from the first directory level), the builder's other path.
  if (PackAndVerify(/*group_samples=*/true)) PackAndVerify(/*group_samples=*/false);
  return 0;
}
