// The one log sink: the line format, and a program taking the lines itself.
#include "common/log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stoker::log {
namespace {

TEST(Log, LinesNameTheComponentAndSayWarnings) {
  std::vector<std::pair<Level, std::string>> lines;
  SetSink([&](Level level, std::string_view line) { lines.emplace_back(level, line); });
  Info("node", "peer 10.0.0.2:7071 is back");
  Warning("", "STOKER_NODE=/run/x.sock: connection refused");
  Error("mount", "NotFound: no such file");
  SetSink({});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].second, "stoker node: peer 10.0.0.2:7071 is back");
  EXPECT_EQ(lines[1].second, "stoker: warning: STOKER_NODE=/run/x.sock: connection refused");
  EXPECT_EQ(lines[1].first, Level::kWarning);
  EXPECT_EQ(lines[2].second, "stoker mount: NotFound: no such file");
}

TEST(Log, WithoutASinkLinesGoToStderrWholeAndStamped) {
  SetTimestamps(true);
  ::testing::internal::CaptureStderr();
  Info("node", "ready");
  const std::string out = ::testing::internal::GetCapturedStderr();
  SetTimestamps(false);
  // "HH:MM:SS stoker node: ready\n"
  ASSERT_EQ(out.size(), 9 + std::string("stoker node: ready\n").size()) << out;
  EXPECT_EQ(out.substr(2, 1), ":");
  EXPECT_EQ(out.substr(9), "stoker node: ready\n");
}

}  // namespace
}  // namespace stoker::log
