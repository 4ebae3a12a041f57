#include "node/slurm_peers.h"

#include <gtest/gtest.h>

namespace stoker::node {
namespace {

using Names = std::vector<std::string>;

TEST(SlurmPeers, HostlistsExpandAsScontrolShowHostnames) {
  EXPECT_EQ(ExpandHostlist("n1").value(), Names{"n1"});
  EXPECT_EQ(ExpandHostlist("n[1-3]").value(), (Names{"n1", "n2", "n3"}));
  EXPECT_EQ(ExpandHostlist("gpu[08-10,12],login2").value(),
            (Names{"gpu08", "gpu09", "gpu10", "gpu12", "login2"}));
  EXPECT_EQ(ExpandHostlist("r[1-2]n[01-02]-ib").value(),
            (Names{"r1n01-ib", "r1n02-ib", "r2n01-ib", "r2n02-ib"}));
  EXPECT_EQ(ExpandHostlist("a,b,a,c[9-10]").value(), (Names{"a", "b", "c9", "c10"}));
  EXPECT_EQ(ExpandHostlist("n[0-65535]").value().size(), 65536u);
}

TEST(SlurmPeers, MalformedListsAreRefusedQuotingThem) {
  for (const char* bad : {"", "n[1-", "n]", "n[3-1]", "n[a-b]", "n[]", ",", "n[1-2],,m",
                          "n[0-65536]", "a[0-999]b[0-999]"}) {
    const auto r = ExpandHostlist(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.error().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.error().ToString();
  }
}

TEST(SlurmPeers, EveryNodeAtOnePortAndThisOneByItsName) {
  const auto p = PeersFromSlurm("n[1-3]", "n2", 7171).value();
  ASSERT_EQ(p.peers.size(), 3u);
  EXPECT_EQ(p.peers[0].ToString(), "n1:7171");
  EXPECT_EQ(p.peers[2].ToString(), "n3:7171");
  EXPECT_EQ(p.self.ToString(), "n2:7171");
  const auto outside = PeersFromSlurm("", "n2", 7171);
  ASSERT_FALSE(outside.has_value());
  EXPECT_NE(outside.error().message().find("SLURM_JOB_NODELIST is not set"), std::string::npos);
  EXPECT_NE(PeersFromSlurm("n[1-3]", "", 7171).error().message().find("SLURMD_NODENAME"),
            std::string::npos);
  EXPECT_NE(PeersFromSlurm("n[1-3]", "n9", 7171).error().message().find("not in"),
            std::string::npos);
  EXPECT_NE(PeersFromSlurm("n[1-3]", "n1", 0).error().message().find("fixed --listen port"),
            std::string::npos);
}

}  // namespace
}  // namespace stoker::node
