#include "node/prefetcher.h"

#include <algorithm>
#include <chrono>

namespace stoker::node {
namespace {

// How often an idle stream looks again without being woken, and how long one waits after a
// fetch that could not happen (no room, a failed fill) before trying anything else.
constexpr auto kIdle = std::chrono::milliseconds(200);

}  // namespace

Prefetcher::Prefetcher(size_t streams, Candidates candidates, Fetch fetch)
    : candidates_(std::move(candidates)), fetch_(std::move(fetch)) {
  for (size_t i = 0; i < std::max<size_t>(1, streams); ++i) {
    streams_.emplace_back([this] { Run(); });
  }
}

Prefetcher::~Prefetcher() { Stop(); }

void Prefetcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : streams_) {
    if (t.joinable()) t.join();
  }
}

void Prefetcher::Wake() { cv_.notify_one(); }

void Prefetcher::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const uint64_t finished_before = finished_;
    lock.unlock();
    const std::vector<uint32_t> wanted = candidates_();
    lock.lock();
    if (stopping_) break;
    // A fetch that ended while the candidates were listed may have fetched one of them, which
    // is then neither wanted nor taken any more: list again rather than fetch it twice.
    if (finished_ != finished_before) continue;
    auto untaken = [&](uint32_t chunk) { return !taken_.contains(chunk); };
    auto next = std::find_if(wanted.begin(), wanted.end(), untaken);
    if (next == wanted.end()) {
      cv_.wait_for(lock, kIdle);
      continue;
    }
    const uint32_t chunk = *next;
    taken_.insert(chunk);
    if (std::find_if(next + 1, wanted.end(), untaken) != wanted.end()) cv_.notify_one();
    lock.unlock();
    const bool fetched = fetch_(chunk);
    lock.lock();
    taken_.erase(chunk);
    ++finished_;
    if (!fetched && !stopping_) cv_.wait_for(lock, kIdle);
  }
}

}  // namespace stoker::node
