// A small thread-safe cache of parsed blocks, by number: a reader that asks for the same index
// block or chunk group per sample must not re-read and re-parse it each time. Bounded: when it
// holds `capacity` entries it starts over (a reader's working set is usually far smaller).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "stoker/status.h"

namespace stoker::format {

template <typename T>
class ParsedCache {
 public:
  explicit ParsedCache(size_t capacity) : capacity_(capacity) {}

  // The entry for `key`, parsed by `load` on a miss (outside the lock: loads may read).
  Result<std::shared_ptr<const T>> Get(uint64_t key, const std::function<Result<T>()>& load) const {
    {
      std::lock_guard lock(mu_);
      if (auto it = entries_.find(key); it != entries_.end()) return it->second;
    }
    STOKER_ASSIGN_OR_RETURN(T parsed, load());
    auto shared = std::make_shared<const T>(std::move(parsed));
    std::lock_guard lock(mu_);
    if (entries_.size() >= capacity_) entries_.clear();
    entries_.emplace(key, shared);
    return shared;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<const T>> entries_;
};

}  // namespace stoker::format
