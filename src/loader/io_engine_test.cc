#include "loader/io_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace stoker::loader {
namespace {

// A file without a descriptor (as S3, stoker:// and node files are) whose reads wait until
// `expect` of them are running at once (or one has waited 5 s); it records the most at once.
class GatheringFile final : public RandomAccessFile {
 public:
  explicit GatheringFile(int expect) : expect_(expect) {}
  uint64_t Size() const override { return 1 << 20; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    std::unique_lock lock(mu_);
    ++running_;
    most_ = std::max(most_, running_);
    cv_.notify_all();
    // After one wait has timed out (too few at once), the rest do not wait.
    if (!cv_.wait_for(lock, std::chrono::seconds(5),
                      [&] { return most_ >= expect_ || gave_up_; })) {
      gave_up_ = true;
      cv_.notify_all();
    }
    --running_;
    std::fill(dst.begin(), dst.end(), static_cast<std::byte>(offset));
    return Status::OK();
  }
  int most() const {
    std::lock_guard lock(mu_);
    return most_;
  }

 private:
  const int expect_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int running_ = 0, most_ = 0;
  mutable bool gave_up_ = false;
};

// Network reads are latency-bound: every engine must run `depth` of them at once, not fewer
// (the io_uring engine once sent them to a pool of 2 threads whatever the depth).
TEST(IoEngine, ReadsWithoutADescriptorRunDepthAtOnce) {
  constexpr uint32_t kDepth = 8;
  for (IoEngineKind kind : {IoEngineKind::kAuto, IoEngineKind::kThreads}) {
    auto file = std::make_shared<GatheringFile>(kDepth);
    std::vector<std::byte> buffers(2 * kDepth * 16);
    std::mutex mu;
    int ok = 0;
    {
      auto engine = CreateIoEngine(kind, kDepth);
      ASSERT_TRUE(engine.has_value()) << engine.error().ToString();
      for (uint32_t i = 0; i < 2 * kDepth; ++i) {
        (*engine)->Submit({file, i, std::span(buffers).subspan(i * 16, 16), [&](const Status& s) {
                             std::lock_guard lock(mu);
                             ok += s.ok();
                           }});
      }
    }  // the destructor waits for every read
    EXPECT_EQ(ok, int{2 * kDepth});
    EXPECT_EQ(file->most(), int{kDepth}) << "engine kind " << int(kind);
    EXPECT_EQ(buffers[3 * 16], std::byte{3});
  }
}

}  // namespace
}  // namespace stoker::loader
