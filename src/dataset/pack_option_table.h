// The options that both front ends of packing take (`stoker pack`'s flags, stoker.pack's
// keyword arguments), each described once: name, kind, doc, and how it reads and writes
// PackSettings (common/option_table.h). Everything else is derived from this table:
//   - the CLI registers a flag per entry (tools/cmd_pack.cc: chunk_size is --chunk-size);
//   - the Python binding parses stoker.pack's keyword arguments with it, and builds the
//     function's signature and docstring from it (python/bindings/pack.cc);
//   - the option table in README.md is generated from it (scripts/gen_options.py; a test fails
//     when it is stale).
// Options of one front end only stay there: the CLI's --attributes, --part, --job, --json and
// --quiet (tools/cmd_pack.cc), Python's progress (python/bindings/pack.cc).
//
// Thread-safety: the table is immutable; the functions are pure.
#pragma once

#include <span>
#include <string_view>

#include "common/option_table.h"
#include "dataset/packer.h"
#include "dataset/source.h"

namespace stoker::dataset {

// What a front end hands to OpenPackSource and Pack. Its defaults are the front ends': the
// mixed storage order (StorageOrder::kMixed, seed 0), which PackOptions and
// DirectorySourceOptions alone do not give. The order is not stored twice: it is read back from
// the fields SetStorageOrder sets.
struct PackSettings {
  PackSettings() { SetStorageOrder(StorageOrder::kMixed, 0, &source, &pack); }

  PackOptions pack;
  DirectorySourceOptions source;
};

using PackOption = Option<PackSettings>;

// Every option, in the order stoker.pack's signature and the docs list them.
std::span<const PackOption> PackOptionTable();

// The entry named `name`, or nullptr.
const PackOption* FindPackOption(std::string_view name);

}  // namespace stoker::dataset
