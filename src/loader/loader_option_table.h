// stoker.Loader's options, each described once: name, kind, default, doc, and how it reads and
// writes LoaderOptions (common/option_table.h). Everything else is derived from this table:
//   - the Python binding checks the loaders' keyword arguments with it
//     (python/bindings/loader_options.cc), naming the option in every error;
//   - stoker.Loader's signature and the docstring lines of its options, and those of the
//     options stoker.ImageLoader shares with it at the same default, are generated from it
//     (scripts/gen_options.py; a test fails when they are stale).
// The Python callables (transform, collate) are not options: they stay in python/stoker.
//
// Thread-safety: the table is immutable; the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/option_table.h"
#include "loader/sampler.h"
#include "stoker/status.h"

namespace stoker::loader {

// What the Python loaders are asked for. An unset optional is chosen by the loader when it
// opens the dataset (batch_size: single samples; block_size: from the labels in the metadata;
// memory_budget: from the largest chunk; rank, world_size: torchrun's RANK and WORLD_SIZE).
struct LoaderOptions {
  std::optional<uint64_t> batch_size;
  ShuffleMode shuffle = ShuffleMode::kChunk;
  uint64_t seed = 0;
  uint32_t window = 16;
  bool drop_last = false;
  std::optional<uint64_t> rank;
  std::optional<uint64_t> world_size;
  std::optional<uint64_t> memory_budget;
  uint32_t io_depth = 8;
  std::optional<uint64_t> block_size;

  // InvalidArgument when rank and world_size are both given and rank is not below it (each
  // option's own range is checked when it is set).
  Status Validate() const;
};

using LoaderOption = Option<LoaderOptions>;

// Every option, in the order stoker.Loader's signature and docstring list them.
std::span<const LoaderOption> LoaderOptionTable();

// The entry named `name`, or nullptr.
const LoaderOption* FindLoaderOption(std::string_view name);

}  // namespace stoker::loader
