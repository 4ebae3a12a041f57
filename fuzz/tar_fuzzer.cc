// `stoker pack` of an arbitrary (possibly compressed) tar shard, WebDataset-style, into an
// in-memory dataset. Hostile archives must come back as errors, never a crash; and when the pack
// succeeds, the published version must open and pass a full verify.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dataset/packer.h"
#include "dataset/verify.h"
#include "fuzz_check.h"
#include "storage/memory_storage.h"

namespace {

// libarchive reads from a path, so the input goes into a memfd reached as /proc/self/fd/N:
// no temporary file to clean up, nothing shared between parallel fuzzing jobs.
int InputFd() {
  static const int fd = memfd_create("stoker-tar-fuzz", MFD_CLOEXEC);
  return fd;
}

bool WriteInput(const uint8_t* data, size_t size) {
  const int fd = InputFd();
  if (fd < 0 || ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Packs the shard once; false if the pack failed (which is fine: hostile input).
bool PackAndVerify(bool group_samples) {
  using namespace stoker;
  auto source = dataset::OpenTarSource({"/proc/self/fd/" + std::to_string(InputFd())});
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
  if (!WriteInput(data, size)) __builtin_trap();  // the harness itself is broken
  // WebDataset mode (samples grouped by key, .cls labels); for archives that pack, also the
  // directory-tree mode (labels from the first directory level), the builder's other path.
  if (PackAndVerify(/*group_samples=*/true)) PackAndVerify(/*group_samples=*/false);
  return 0;
}
