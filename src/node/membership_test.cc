#include "node/membership.h"
#include "node/rendezvous.h"
#include "testing/test_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <thread>

namespace stoker::node {
namespace {

std::vector<net::ServerAddress> Peers(int n) {
  std::vector<net::ServerAddress> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back({"10.0.0." + std::to_string(i + 1), 7171});
  return out;
}

std::unique_ptr<Membership> Make(int n, int self) {
  auto m = Membership::Create("job-a", Peers(n), Peers(n)[self], {});
  EXPECT_TRUE(m.has_value()) << m.error().ToString();
  return std::move(*m);
}

TEST(MembershipTest, EveryDaemonComputesTheSameBalancedPlacement) {
  auto a = Make(4, 0), b = Make(4, 3);
  std::map<size_t, int> owned;
  for (uint64_t chunk = 0; chunk < 2000; ++chunk) {
    const auto ra = a->LiveRanking(chunk), rb = b->LiveRanking(chunk);
    ASSERT_EQ(ra, rb);
    ASSERT_EQ(ra.size(), 4u);
    ++owned[ra.front()];
    EXPECT_EQ(a->IsOwner(chunk), ra.front() == 0);
  }
  for (const auto& [peer, n] : owned) EXPECT_GT(n, 350) << "peer " << peer;  // 500 expected
}

TEST(MembershipTest, ADeadPeerMovesOnlyItsOwnChunks) {
  auto m = Make(4, 0);
  std::vector<std::vector<size_t>> before;
  before.reserve(1000);
  for (uint64_t chunk = 0; chunk < 1000; ++chunk) before.push_back(m->LiveRanking(chunk));
  m->MarkDown(2, Status::IOError("test"));
  EXPECT_FALSE(m->IsLive(2));
  int moved = 0;
  for (uint64_t chunk = 0; chunk < 1000; ++chunk) {
    const auto after = m->LiveRanking(chunk);
    ASSERT_EQ(after.size(), 3u);
    if (before[chunk].front() == 2) {
      EXPECT_EQ(after.front(), before[chunk][1]);  // to the next in its own ranking
      ++moved;
    } else {
      EXPECT_EQ(after.front(), before[chunk].front());
    }
  }
  EXPECT_GT(moved, 150);
  // The job id is part of the key: another job places chunks differently.
  auto other = Membership::Create("job-b", Peers(4), Peers(4)[0], {});
  int same = 0;
  for (uint64_t chunk = 0; chunk < 1000; ++chunk) {
    same += (*other)->LiveRanking(chunk).front() == before[chunk].front();
  }
  EXPECT_LT(same, 400);
}

TEST(MembershipTest, HeartbeatsMarkPeersDownAndBackUp) {
  MembershipOptions o;
  o.heartbeat_interval = std::chrono::milliseconds(10);
  o.misses_to_down = 2;
  auto m = Membership::Create("job", Peers(3), Peers(3)[0], o);
  ASSERT_TRUE(m.has_value());
  std::atomic<bool> peer1_up{true};
  std::atomic<int> changes{0};
  (*m)->Start(
      [&](size_t peer) {
        return peer == 1 && !peer1_up.load() ? Status::Unavailable("down") : Status::OK();
      },
      [&](size_t peer, bool, const Status&) { changes.fetch_add(peer == 1 ? 1 : 100); });
  auto wait_for = [&](bool live) {
    for (int i = 0; i < 500 && (*m)->IsLive(1) != live; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return (*m)->IsLive(1) == live;
  };
  peer1_up = false;
  EXPECT_TRUE(wait_for(false));
  EXPECT_TRUE((*m)->IsLive(2));
  peer1_up = true;
  EXPECT_TRUE(wait_for(true));
  const auto snap = (*m)->Snapshot();
  EXPECT_EQ(snap[1].downs, 1u);
  EXPECT_EQ(snap[1].ups, 1u);
  (*m)->Stop();
  EXPECT_EQ(changes.load(), 2);  // one down, one up, nothing about the healthy peer
}

TEST(MembershipTest, RejectsBadPeerLists) {
  EXPECT_FALSE(Membership::Create("job", Peers(3), {"10.9.9.9", 7171}, {}).has_value());
  auto dup = Peers(2);
  dup.push_back(dup[0]);
  EXPECT_FALSE(Membership::Create("job", dup, dup[0], {}).has_value());
  EXPECT_FALSE(Membership::Create("", Peers(2), Peers(2)[0], {}).has_value());
}

TEST(RendezvousTest, DaemonsStartedApartAgreeOnOnePeerList) {
  stoker::test::TempDir dir;
  const std::string file = dir.Join("job.peers");
  std::vector<std::vector<net::ServerAddress>> got(3);
  std::vector<std::thread> daemons;
  daemons.reserve(3);
  for (int i = 0; i < 3; ++i) {
    daemons.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150 * i));
      auto peers = Rendezvous(file, Peers(3)[2 - i], 3, std::chrono::seconds(10));
      if (peers) got[i] = *peers;
    });
  }
  for (auto& t : daemons) t.join();
  ASSERT_EQ(got[0].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(got[i].size(), 3u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(got[i][k].ToString(), got[0][k].ToString());
  }
  // A restarted daemon registers again and gets the same list; a fourth is one too many.
  auto again = Rendezvous(file, Peers(3)[1], 3, std::chrono::seconds(1));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->size(), 3u);
  auto extra = Rendezvous(file, {"10.0.0.99", 7171}, 3, std::chrono::seconds(1));
  ASSERT_FALSE(extra.has_value());
  EXPECT_EQ(extra.error().code(), StatusCode::kInvalidArgument);
  // Too few daemons: a timeout that says how many came.
  auto lonely = Rendezvous(dir.Join("other.peers"), Peers(1)[0], 2, std::chrono::milliseconds(300));
  ASSERT_FALSE(lonely.has_value());
  EXPECT_EQ(lonely.error().code(), StatusCode::kTimeout);
  EXPECT_NE(lonely.error().message().find("1 of 2"), std::string::npos);
}

TEST(RendezvousTest, AStrayHugeFileIsRefusedWithoutReadingItAll) {
  stoker::test::TempDir dir;
  // One 2 GiB line (sparse: zeros) was read whole into memory before it was judged.
  const std::string file = dir.Join("huge.peers");
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{2} << 30), 0);
  ::close(fd);
  auto huge = Rendezvous(file, Peers(1)[0], 1, std::chrono::seconds(1));
  ASSERT_FALSE(huge.has_value());
  EXPECT_NE(huge.error().message().find("a line over 300 bytes"), std::string::npos)
      << huge.error().ToString();
  // Many lines: reading stops at the first daemon too many.
  const std::string many = dir.Join("many.peers");
  {
    std::ofstream out(many);
    for (int i = 0; i < 100000; ++i) out << "10.1." << i / 250 << "." << i % 250 << ":7171\n";
  }
  auto crowded = Rendezvous(many, Peers(1)[0], 2, std::chrono::seconds(1));
  ASSERT_FALSE(crowded.has_value());
  EXPECT_NE(crowded.error().message().find("names 3 daemons, more than the 2"), std::string::npos)
      << crowded.error().ToString();
}

}  // namespace
}  // namespace stoker::node
