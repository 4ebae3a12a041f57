// A writer's lease: created before the writer writes anything, its content changes at every
// heartbeat, it goes when the writer is done, and once gc has removed it the writer knows.
#include "dataset/writer_lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "storage/small_file.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using namespace std::chrono_literals;

std::string Content(Storage& storage, const std::string& path) {
  return storage::ReadSmallFile(storage, path, 4096).value_or("<missing>");
}

TEST(WriterLease, NamesRoundTripAndOtherNamesAreNoLeases) {
  EXPECT_EQ(LeasePath(0xab), "gc/writers/00000000000000ab.lease");
  EXPECT_EQ(WriterOfLeaseName("00000000000000ab.lease"), 0xabu);
  EXPECT_FALSE(WriterOfLeaseName("00000000000000ab.lease.tmp"));
  EXPECT_FALSE(WriterOfLeaseName("ab.lease"));
  EXPECT_FALSE(WriterOfLeaseName("0000000000000zab.lease"));
}

TEST(WriterLease, ExistsWhileHeldChangesAtEveryBeatAndGoesWithTheWriter) {
  storage::MemoryStorage store;
  std::string path;
  {
    auto lease = WriterLease::Take(store, 1ms).value();
    path = lease->path();
    const std::string first = Content(store, path);
    EXPECT_NE(first, "<missing>");
    // The heartbeat rewrites it with new content (polled: no timing assumption).
    for (int i = 0; i < 100000 && Content(store, path) == first; ++i)
      std::this_thread::sleep_for(1ms);
    EXPECT_NE(Content(store, path), first);
    EXPECT_TRUE(lease->Check().ok());
  }
  EXPECT_FALSE(store.Exists(path).value());
}

TEST(WriterLease, OnceGcRemovedItTheWriterIsToldAndItIsNotRecreated) {
  // gc removes the lease just before a heartbeat looks at it (deterministic: the removal
  // happens inside the heartbeat's own check).
  class GcStrikes : public storage::ForwardingStorage {
   public:
    using ForwardingStorage::ForwardingStorage;
    Result<bool> Exists(std::string_view path) override {
      if (path.starts_with(kWritersDir) && !struck_.exchange(true)) (void)base()->Remove(path);
      return ForwardingStorage::Exists(path);
    }
    std::atomic<bool> struck_ = false;
  };
  auto base = std::make_shared<storage::MemoryStorage>();
  GcStrikes store(base);
  auto lease = WriterLease::Take(store, 1ms).value();
  while (!store.struck_) std::this_thread::sleep_for(1ms);
  // Heartbeats go on; none of them brings the lease back.
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(base->Exists(lease->path()).value());
  Status held = lease->Check();
  EXPECT_TRUE(held.IsNotFound());
  EXPECT_NE(held.message().find("stoker gc"), std::string::npos) << held.ToString();
  EXPECT_NE(held.message().find("nothing was published"), std::string::npos);
}

}  // namespace
}  // namespace stoker::dataset
