#include "common/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace stoker::trace {
namespace {

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TraceTest, WritesEventsOfEveryThreadAndClosesTheJson) {
  const auto path = std::filesystem::temp_directory_path() / "stoker-trace-test.json";
  EXPECT_FALSE(Enabled());
  Complete("ignored", "test", 1, 2);  // off: nothing happens
  ASSERT_TRUE(Start(path.string(), "stoker test").ok());
  EXPECT_TRUE(Enabled());
  NameThread("main");
  {
    Span span("outer \"quoted\"", "test");
  }
  std::thread t([] {
    const uint64_t id = NextId();
    AsyncBegin("read", "io", id, NowNs());
    AsyncEnd("read", "io", id, NowNs());
    const uint64_t t0 = NowNs();
    Complete("decode", "decode", t0, t0 + 1500, "\"sample\": 7");
  });
  t.join();
  ASSERT_TRUE(Stop().ok());
  EXPECT_FALSE(Enabled());
  EXPECT_TRUE(Stop().ok());  // a second Stop has nothing to do
  const std::string text = ReadAll(path);
  EXPECT_TRUE(text.starts_with("{\"displayTimeUnit\": \"ms\", \"baseTimeNanoseconds\": "));
  EXPECT_TRUE(text.ends_with("\n]}\n"));
  EXPECT_NE(text.find(R"("name": "outer \"quoted\"")"), std::string::npos);
  EXPECT_NE(text.find(R"("ph": "b")"), std::string::npos);
  EXPECT_NE(text.find(R"("ph": "e")"), std::string::npos);
  EXPECT_NE(text.find(R"("dur": 1.500, "args": {"sample": 7})"), std::string::npos);
  EXPECT_NE(text.find(R"("name": "stoker test")"), std::string::npos);
  EXPECT_EQ(text.find("ignored"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(TraceTest, AnUnwritablePathIsAnErrorAndLeavesTracingOff) {
  const Status s = Start("/nonexistent-dir/trace.json", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("/nonexistent-dir/trace.json"), std::string::npos);
  EXPECT_FALSE(Enabled());
}

}  // namespace
}  // namespace stoker::trace
