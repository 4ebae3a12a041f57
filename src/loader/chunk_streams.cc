#include "loader/chunk_streams.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include <fmt/format.h>

#include "common/random.h"
#include "loader/sampler.h"

namespace stoker::loader {

ChunkStreams::ChunkStreams(std::span<const uint32_t> counts, uint32_t window, uint64_t unit_seed,
                           uint32_t ranks)
    : counts_(counts), window_(std::max(1u, window)), ranks_(std::max(1u, ranks)) {
  std::vector<uint32_t> units;
  for (uint32_t u = 0; u < counts.size(); ++u) {
    if (counts[u] > 0) units.push_back(u);
    total_ += counts[u];
  }
  Pcg32 rng(unit_seed);
  Shuffle(std::span<uint32_t>(units), rng);

  // Deal: each next unit to the stream with the fewest samples, the lowest rank among equals.
  streams_.resize(ranks_);
  using Load = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<>> lightest;
  for (uint32_t r = 0; r < ranks_; ++r) lightest.push({0, r});
  for (uint32_t u : units) {
    auto [load, r] = lightest.top();
    lightest.pop();
    streams_[r].units.push_back(u);
    lightest.push({load + counts[u], r});
  }
  for (Stream& s : streams_) {
    uint64_t at = 0;
    for (size_t k = 0; k < s.units.size(); ++k) {
      if (k % window_ == 0) s.window_begin.push_back(at);
      at += counts[s.units[k]];
    }
    s.window_begin.push_back(at);
    const size_t windows = s.window_begin.size() - 1;
    s.wanted.assign(windows, false);
    s.shuffled.resize(windows);
  }

  // Final lengths n/R (+1 for the first n mod R ranks); the surplus stack and who takes what.
  want_.resize(ranks_);
  surplus_begin_.assign(ranks_ + 1, 0);
  deficit_before_.assign(ranks_ + 1, 0);
  for (uint32_t r = 0; r < ranks_; ++r) {
    want_[r] = total_ / ranks_ + (r < total_ % ranks_ ? 1 : 0);
    const uint64_t length = streams_[r].length();
    surplus_begin_[r + 1] = surplus_begin_[r] + (length > want_[r] ? length - want_[r] : 0);
    deficit_before_[r + 1] = deficit_before_[r] + (want_[r] > length ? want_[r] - length : 0);
  }
}

std::pair<uint32_t, uint64_t> ChunkStreams::Locate(uint32_t rank, uint64_t i) const {
  const uint64_t length = streams_[rank].length();
  if (i < length) return {rank, i};
  // Taken from the top of the surplus stack: the t-th element this rank takes.
  const uint64_t t = i - length;
  const uint64_t k = surplus_begin_[ranks_] - 1 - deficit_before_[rank] - t;
  const auto giver =
      static_cast<uint32_t>(std::upper_bound(surplus_begin_.begin(), surplus_begin_.end(), k) -
                            surplus_begin_.begin() - 1);
  return {giver, streams_[giver].length() - 1 - (k - surplus_begin_[giver])};
}

size_t ChunkStreams::WindowOf(const Stream& s, uint64_t i) const {
  return static_cast<size_t>(std::upper_bound(s.window_begin.begin(), s.window_begin.end(), i) -
                             s.window_begin.begin() - 1);
}

void ChunkStreams::Want(uint32_t rank, uint64_t i) {
  const auto [stream, j] = Locate(rank, i);
  Stream& s = streams_[stream];
  s.wanted[WindowOf(s, j)] = true;
}

std::vector<uint32_t> ChunkStreams::NeededUnits() const {
  std::vector<uint32_t> units;
  for (const Stream& s : streams_) {
    for (size_t w = 0; w < s.wanted.size(); ++w) {
      if (!s.wanted[w]) continue;
      const size_t end = std::min(s.units.size(), (w + 1) * size_t{window_});
      units.insert(units.end(), s.units.begin() + w * window_, s.units.begin() + end);
    }
  }
  std::sort(units.begin(), units.end());
  return units;
}

Status ChunkStreams::Materialize(uint64_t sample_seed, const Members& members) {
  // Streams in rank order, windows in order: the generator's draws are those of the whole order.
  // Nothing after the last wanted window matters.
  size_t last_stream = 0, last_window = 0;
  bool any = false;
  for (size_t r = 0; r < streams_.size(); ++r) {
    for (size_t w = 0; w < streams_[r].wanted.size(); ++w) {
      if (streams_[r].wanted[w]) last_stream = r, last_window = w, any = true;
    }
  }
  if (!any) return Status::OK();
  Pcg32 rng(sample_seed);
  for (size_t r = 0; r <= last_stream; ++r) {
    Stream& s = streams_[r];
    const size_t windows = r == last_stream ? last_window + 1 : s.wanted.size();
    for (size_t w = 0; w < windows; ++w) {
      const uint64_t m = s.window_begin[w + 1] - s.window_begin[w];
      if (!s.wanted[w]) {
        for (uint64_t i = m; i > 1; --i) rng.Below(i);  // the draws of a shuffle of m samples
        continue;
      }
      std::vector<uint32_t>& out = s.shuffled[w];
      out.reserve(m);
      const size_t end = std::min(s.units.size(), (w + 1) * size_t{window_});
      for (size_t k = w * window_; k < end; ++k) {
        STOKER_ASSIGN_OR_RETURN(const std::vector<uint32_t> samples, members(s.units[k]));
        if (samples.size() != counts_[s.units[k]]) {
          return Status::Corruption(fmt::format("unit {} holds {} samples, its count says {}",
                                                s.units[k], samples.size(), counts_[s.units[k]]));
        }
        out.insert(out.end(), samples.begin(), samples.end());
      }
      Shuffle(std::span<uint32_t>(out), rng);
    }
  }
  return Status::OK();
}

uint32_t ChunkStreams::Element(uint32_t rank, uint64_t i) const {
  const auto [stream, j] = Locate(rank, i);
  const Stream& s = streams_[stream];
  const size_t w = WindowOf(s, j);
  return s.shuffled[w][j - s.window_begin[w]];
}

}  // namespace stoker::loader
