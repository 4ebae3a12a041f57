// Several servers behind one stoker:// URI: replication, chunks split between servers, and a
// server that dies in the middle of an epoch.
#include <gtest/gtest.h>

#include <filesystem>

#include "loader/read_pipeline.h"
#include "net/net_test_util.h"

namespace stoker::net {
namespace {

using server::ServerMetrics;

std::shared_ptr<Storage> OpenBoth(const server::Server& a, const server::Server& b) {
  auto s =
      OpenRemoteStorage(test::UriFor({&a, &b}, "ds"), test::kSecret, test::TestClientOptions());
  EXPECT_TRUE(s.has_value()) << s.error().ToString();
  return *s;
}

TEST(Striping, ReplicatedServersShareTheLoad) {
  auto packed = test::PackRandomDir(21);
  auto a = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto b = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto ds = Dataset::Open(OpenBoth(*a, *b));
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  test::ExpectSameFiles(**ds, packed->tree);
  EXPECT_GT(a->metrics().requests(ServerMetrics::kRead), 0u);
  EXPECT_GT(b->metrics().requests(ServerMetrics::kRead), 0u);
}

TEST(Striping, ChunksSplitBetweenServers) {
  auto packed = test::PackRandomDir(22);
  stoker::test::TempDir copy_a, copy_b;
  namespace fs = std::filesystem;
  for (const auto* dst : {&copy_a, &copy_b}) {
    fs::copy(packed->dir.path(), dst->path(), fs::copy_options::recursive);
  }
  // Each chunk stays on exactly one server.
  const auto chunks = stoker::test::ChunkFiles(packed->dir.path());
  ASSERT_GE(chunks.size(), 4u);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& victim = i % 2 ? copy_a : copy_b;
    ASSERT_TRUE(fs::remove(fs::path(victim.path()) / "chunks" / chunks[i]));
  }
  auto a = test::StartServer(test::TestServerOptions({{"ds", copy_a.path()}}));
  auto b = test::StartServer(test::TestServerOptions({{"ds", copy_b.path()}}));
  auto storage = OpenBoth(*a, *b);
  auto ds = Dataset::Open(storage);
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  test::ExpectSameFiles(**ds, packed->tree);
  // A listing of chunks/ is the union over both servers.
  auto listed = storage->List("chunks");
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(*listed, chunks);
}

TEST(Striping, AServerThatDiesMidEpochFailsOver) {
  auto packed = test::PackRandomDir(23, 200);
  auto a = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto b = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto opened = Dataset::Open(OpenBoth(*a, *b));
  ASSERT_TRUE(opened.has_value());
  std::shared_ptr<const Dataset> ds = std::move(*opened);
  std::vector<uint32_t> plan(ds->sample_count());
  for (uint32_t i = 0; i < plan.size(); ++i) plan[i] = i;
  loader::ReadPipelineOptions o;
  o.memory_budget_bytes = 128 << 10;  // small: most reads happen after the kill
  auto pipeline = loader::ReadPipeline::Start(ds, plan, o);
  ASSERT_TRUE(pipeline.has_value());
  for (uint64_t i = 0; i < plan.size(); ++i) {
    if (i == plan.size() / 4) a->Abort();  // like kill -9: connections cut, port closed
    auto item = (*pipeline)->Next();
    ASSERT_TRUE(item.has_value()) << item.error().ToString();
    ASSERT_TRUE(item->has_value());
    const loader::SampleData& s = **item;
    ASSERT_TRUE(s.status.ok()) << "sample " << i << ": " << s.status.ToString();
    const std::string path = ds->FilePath(s.files[0].index);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(s.files[0].bytes.data()),
                               s.files[0].bytes.size()),
              packed->tree.files.at(path));
  }
  EXPECT_GT(b->metrics().requests(ServerMetrics::kRead), 0u);
}

TEST(Striping, AllServersDownNamesThem) {
  auto packed = test::PackRandomDir(24, 10);
  auto a = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto b = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  auto storage = OpenBoth(*a, *b);
  a->Shutdown();
  b->Shutdown();
  auto ds = Dataset::Open(storage);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code(), StatusCode::kUnavailable) << ds.error().ToString();
  EXPECT_NE(ds.error().message().find("stoker://127.0.0.1:"), std::string::npos);
}

}  // namespace
}  // namespace stoker::net
