// Merging segments (`stoker compact`, docs/format.md §3.5): consecutive segments of one version
// become one segment that says exactly what they said — every file keeps its index, path,
// location, label, sample and attributes, every class its label, every chunk its place in the
// version's chunk numbering — so a version that lists the merged segment in their place is the
// same dataset with fewer, larger segments (fewer reads per lookup and per open).
//
// Files are merged in key order, one block of each input at a time; since their positions no
// longer follow key order, the result is *positioned*: its file values carry positions and a
// key-ranks section maps positions back to key ranks (sorted in bounded memory, spilling to
// unnamed temporary files). Memory: one block per input, the block indexes, the directories.
#pragma once

#include <span>

#include "common/external_sorter.h"
#include "format/segment.h"
#include "format/segment_builder.h"
#include "stoker/status.h"

namespace stoker::format {

// `inputs`: consecutive segments of one version, in its record's order (each one's first file,
// sample and label where the previous one's end). InvalidArgument if they are not; Corruption
// if two of them hold one path.
Status MergeSegments(std::span<const Segment* const> inputs, const SortOptions& sort,
                     SegmentSink& sink);

}  // namespace stoker::format
