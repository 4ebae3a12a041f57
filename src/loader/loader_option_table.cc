// See loader_option_table.h. One entry per option: the accessors are captureless lambdas, so the
// whole table is data.
#include "loader/loader_option_table.h"

#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace stoker::loader {
namespace {

// A nullable field from its option value: unset (std::monostate) or the number.
std::optional<uint64_t> Nullable(const OptionValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  return std::get<uint64_t>(v);
}

OptionValue FromNullable(const std::optional<uint64_t>& v) {
  return v ? OptionValue(*v) : OptionValue(std::monostate{});
}

// A count that must be at least 1 and fit the field; `what` says what it counts.
Status CheckCount(std::string_view name, uint64_t n, uint64_t max, std::string_view what) {
  if (n < 1) return Status::InvalidArgument(fmt::format("{} must be at least 1{}", name, what));
  if (n > max) return Status::InvalidArgument(fmt::format("{} is too large: {}", name, n));
  return Status::OK();
}

// A nullable count: unset, or CheckCount's.
Status SetCount(std::string_view name, const OptionValue& v, uint64_t max, std::string_view what,
                std::optional<uint64_t>& field) {
  const std::optional<uint64_t> n = Nullable(v);
  if (n) STOKER_RETURN_IF_ERROR(CheckCount(name, *n, max, what));
  field = n;
  return Status::OK();
}

constexpr uint64_t kMaxUint32 = std::numeric_limits<uint32_t>::max();

const std::vector<LoaderOption>& Table() {
  static const std::vector<LoaderOption> table = {
      {"batch_size",
       OptionKind::kUnsigned,
       "None yields samples; an int yields collate(list of batch_size samples).",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         // A batch is at most all the samples an epoch can plan (2^32 - 1).
         return SetCount("batch_size", v, kMaxUint32, " (None: single samples)", o.batch_size);
       },
       [](const LoaderOptions& o) { return FromNullable(o.batch_size); }},
      {"shuffle",
       OptionKind::kChoice,
       "chunk: chunks in random order, samples shuffled within windows of `window` chunks "
       "(large sequential reads, well mixed); full: a uniform permutation; sequential: storage "
       "order. See docs/sampler.md.",
       {"sequential", "full", "chunk"},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         STOKER_ASSIGN_OR_RETURN(o.shuffle, ParseShuffleMode(std::get<std::string>(v)));
         return Status::OK();
       },
       [](const LoaderOptions& o) { return OptionValue(std::string(ShuffleModeName(o.shuffle))); }},
      {"seed",
       OptionKind::kUnsigned,
       "the order of epoch e is a function of (seed, e, dataset version, options, the number of "
       "ranks the epoch was planned for), identical on every machine.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         o.seed = std::get<uint64_t>(v);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return OptionValue(o.seed); }},
      {"window",
       OptionKind::kUnsigned,
       "chunks per shuffle window (chunk mode): the window holds `window` chunks' worth of "
       "bytes.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         const uint64_t n = std::get<uint64_t>(v);
         STOKER_RETURN_IF_ERROR(CheckCount("window", n, kMaxUint32, " (chunks per window)"));
         o.window = uint32_t(n);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return OptionValue(uint64_t{o.window}); }},
      {"drop_last",
       OptionKind::kBool,
       "skip the last N mod world_size samples of the epoch instead of padding the last round "
       "with samples from its start (either way every rank yields the same count, so "
       "distributed training never hangs on a short rank); with batch_size, also drop the last "
       "incomplete batch.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         o.drop_last = std::get<bool>(v);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return OptionValue(o.drop_last); }},
      {"rank",
       OptionKind::kUnsigned,
       "this process's rank; None: torchrun's RANK environment variable, else 0.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         o.rank = Nullable(v);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return FromNullable(o.rank); }},
      {"world_size",
       OptionKind::kUnsigned,
       "the number of ranks; None: torchrun's WORLD_SIZE environment variable, else 1.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         return SetCount("world_size", v, kMaxUint32, "", o.world_size);
       },
       [](const LoaderOptions& o) { return FromNullable(o.world_size); }},
      {"memory_budget",
       OptionKind::kByteSize,
       "the most bytes the read pipeline holds (samples still referenced by the consumer "
       "included): bytes, or text like 2GiB. None: 2 x window x the largest chunk in chunk mode "
       "(whole-chunk reads), at least 256MiB. Less still works, with smaller reads; in chunk "
       "mode a warning says that a window's chunks are then read in pieces, and up to about "
       "twice per epoch.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         return SetCount("memory_budget", v, std::numeric_limits<uint64_t>::max(), " (bytes)",
                         o.memory_budget);
       },
       [](const LoaderOptions& o) { return FromNullable(o.memory_budget); }},
      {"io_depth",
       OptionKind::kUnsigned,
       "concurrent reads of the read pipeline.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         const uint64_t n = std::get<uint64_t>(v);
         STOKER_RETURN_IF_ERROR(CheckCount("io_depth", n, kMaxUint32, " (concurrent reads)"));
         o.io_depth = uint32_t(n);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return OptionValue(uint64_t{o.io_depth}); }},
      {"block_size",
       OptionKind::kUnsigned,
       "the shuffle unit of chunk mode, in bytes. None: chosen from the labels in the metadata "
       "(whole chunks when they mix classes, as `stoker pack` stores them by default, else the "
       "largest block of a chunk, 1/4 ... 1/256 of one, whose windows mix classes within 5 % of "
       "a full shuffle, with a warning that names the cost and the fix). 0: whole chunks "
       "always; an int: blocks of that many bytes. See docs/sampler.md.",
       {},
       [](LoaderOptions& o, const OptionValue& v) -> Status {
         o.block_size = Nullable(v);
         return Status::OK();
       },
       [](const LoaderOptions& o) { return FromNullable(o.block_size); }},
  };
  return table;
}

}  // namespace

Status LoaderOptions::Validate() const {
  if (rank && world_size && *rank >= *world_size) {
    return Status::InvalidArgument(
        fmt::format("rank {} out of range for world_size {}", *rank, *world_size));
  }
  return Status::OK();
}

std::span<const LoaderOption> LoaderOptionTable() { return Table(); }

const LoaderOption* FindLoaderOption(std::string_view name) {
  return FindOption(LoaderOptionTable(), name);
}

}  // namespace stoker::loader
