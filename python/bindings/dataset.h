#pragma once

#include <functional>

#include <nanobind/nanobind.h>

namespace stoker {
class Dataset;
}

namespace stoker::python {

// stoker.Dataset: the map-style read API.
void RegisterDataset(nanobind::module_& m);

// The C++ Dataset behind a stoker.Dataset object, opened if it was not yet (a pickled copy opens
// lazily). TypeError if `obj` is not a stoker.Dataset. Call with the GIL held; the reference
// lives as long as `obj`.
const Dataset& UnwrapDataset(nanobind::handle obj);
// Adds "node_reads", "store_reads" and "node_failures" (reads of chunk bytes through the node
// daemon's shared memory, straight from the store, and failed daemon requests, since the
// dataset was opened) when the dataset reads through a node daemon ($STOKER_NODE).
void AddNodeStats(const Dataset& dataset, nanobind::dict& stats);

// What ds[i] returns for the sample of files [first, first + count): (bytes, label, path), or
// ({ext: bytes}, label, key) for a sample of several files (tar input), or for a column
// dataset (stoker.Writer) a dict {column: value} with None for an optional column it lacks.
// `file_bytes` supplies each file's bytes. (The files are given, not looked up: a loader knows
// them from its plan, and looking them up would read the samples section, 8 bytes per sample.)
nanobind::object SampleValue(const Dataset& ds, uint64_t first, uint64_t count, int32_t label,
                             const std::function<nanobind::bytes(uint64_t)>& file_bytes);

}  // namespace stoker::python
