#include "format/segment_merge.h"

#include <queue>
#include <tuple>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/varint.h"
#include "format/segment_layout.h"
#include "format/segment_writer.h"

namespace stoker::format {
namespace {

// Where one input's numbers start in the merged segment.
struct Shift {
  uint64_t files = 0;   // positions and location ordinals alike: a segment has one per file
  uint64_t chunks = 0;  // its chunks' place in the merged chunk table
  uint64_t samples = 0;
};

// Reads one input's file table in key order, a block at a time.
class FileCursor {
 public:
  explicit FileCursor(const Segment& segment) : segment_(segment) {}
  // Loads the next entry; false at the end.
  Result<bool> Next() {
    if (++i_ < block_.size()) return true;
    if (b_ >= segment_.file_block_count()) return false;
    STOKER_ASSIGN_OR_RETURN(block_, segment_.FileBlock(b_++));
    i_ = 0;
    return !block_.empty();
  }
  const SegmentKeyedFile& file() const { return block_[i_]; }

 private:
  const Segment& segment_;
  std::vector<SegmentKeyedFile> block_;
  uint64_t b_ = 0;
  size_t i_ = 0;
};

Status CheckConsecutive(std::span<const Segment* const> inputs) {
  if (inputs.empty()) return Status::InvalidArgument("no segments to merge");
  for (const Segment* segment : inputs) STOKER_RETURN_IF_ERROR(segment->LoadSamples());
  const uint32_t flags = inputs[0]->info().flags & kSegmentDatasetFlags;
  for (size_t j = 1; j < inputs.size(); ++j) {
    const SegmentInfo &a = inputs[j - 1]->info(), &b = inputs[j]->info();
    if (b.first_file != a.first_file + a.file_count ||
        b.first_sample != a.first_sample + a.sample_count ||
        b.first_label != a.first_label + a.class_count ||
        (b.flags & kSegmentDatasetFlags) != flags) {
      return Status::InvalidArgument(
          fmt::format("segments {} and {} do not follow each other in one version",
                      inputs[j - 1]->name(), inputs[j]->name()));
    }
  }
  return Status::OK();
}

}  // namespace

Status MergeSegments(std::span<const Segment* const> inputs, const SortOptions& sort,
                     SegmentSink& sink) {
  STOKER_RETURN_IF_ERROR(CheckConsecutive(inputs));
  const SegmentInfo& head = inputs.front()->info();
  SegmentFileWriter::Footer footer;
  footer.flags = (head.flags & kSegmentDatasetFlags) | kSegmentPositioned;
  footer.first_file = head.first_file;
  footer.first_sample = head.first_sample;
  footer.first_label = head.first_label;
  std::vector<Shift> shift(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    const SegmentInfo& info = inputs[j]->info();
    shift[j] = {footer.files, footer.chunks, footer.samples};
    footer.files += info.file_count;
    footer.samples += info.sample_count;
    footer.classes += info.class_count;
    footer.total_bytes += info.total_bytes;
    footer.chunks += info.chunk_count;
    footer.attrs += info.attr_count;
  }
  const bool grouped = head.flags & kSegmentGrouped;

  SegmentFileWriter out(sink);
  STOKER_RETURN_IF_ERROR(out.Header());
  {
    // Storage order is the inputs' one after another. The chunk table follows the locations
    // (sections may come in any order), so that it can count the samples starting in each
    // chunk also where a grouped format-2 input does not say them.
    std::vector<uint32_t> chunk_samples(footer.chunks, 0);
    LocationsWriter locations(out, footer.files, grouped);
    for (size_t j = 0; j < inputs.size(); ++j) {
      const Segment& in = *inputs[j];
      Status added;
      STOKER_RETURN_IF_ERROR(in.ForEachLocation([&](uint64_t, const SegmentLocation& l) {
        if (!added.ok()) return;
        SegmentLocation m = l;
        if (!in.says_samples()) std::tie(m.sample, m.sample_files) = in.SampleOf(l.position);
        m.position += shift[j].files;
        m.chunk += shift[j].chunks;
        m.sample += shift[j].samples;
        if (m.sample_files > 0) ++chunk_samples[m.chunk];
        added = locations.Add(m);
      }));
      STOKER_RETURN_IF_ERROR(added);
    }
    STOKER_RETURN_IF_ERROR(locations.Finish());
    ChunkTableWriter chunks(out);
    for (size_t j = 0; j < inputs.size(); ++j) {
      for (uint64_t c = 0; c < inputs[j]->info().chunk_count; ++c) {
        STOKER_ASSIGN_OR_RETURN(const SegmentChunk ch, inputs[j]->chunk(c));
        STOKER_RETURN_IF_ERROR(
            chunks.Add(ch, ch.first_location + shift[j].files, chunk_samples[shift[j].chunks + c]));
      }
    }
    STOKER_RETURN_IF_ERROR(chunks.Finish());
  }

  // Files: a k-way merge by key. Each file's key rank is noted by position for the key-ranks
  // section, which must come out in position order.
  ExternalSorter ranks(sort, [](std::string_view a, std::string_view b) {
    return a.substr(0, 8) < b.substr(0, 8);  // big-endian positions: byte order is numeric
  });
  DirTable dirs;
  {
    std::vector<FileCursor> cursors;
    for (const Segment* segment : inputs) cursors.emplace_back(*segment);
    const auto later = [&](size_t a, size_t b) {
      return cursors[a].file().key > cursors[b].file().key;
    };
    std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
    for (size_t j = 0; j < cursors.size(); ++j) {
      STOKER_ASSIGN_OR_RETURN(const bool any, cursors[j].Next());
      if (any) heap.push(j);
    }
    KeyedTableWriter files = KeyedTableWriter::Into(out, kSegFiles);
    std::string value, record;
    for (uint64_t rank = 0; !heap.empty(); ++rank) {
      const size_t j = heap.top();
      heap.pop();
      const SegmentKeyedFile& f = cursors[j].file();
      if (rank > 0 && f.key <= footer.last_key) {
        return Status::Corruption(fmt::format("{} is in two of the merged segments",
                                              PathOfFileKey(f.key).value_or(f.key)));
      }
      const uint64_t position = f.position + shift[j].files;
      value.clear();
      varint::Put(&value, f.location + shift[j].files);
      varint::Put(&value, position);
      STOKER_RETURN_IF_ERROR(files.Add(f.key, value));
      const std::optional<std::string> path = PathOfFileKey(f.key);
      if (!path) return Status::Corruption(fmt::format("a file key that is no path: {}", f.key));
      AddToDirTable(dirs, *path, rank);
      record.clear();
      PutBigEndian64(&record, position);
      varint::Put(&record, rank);
      STOKER_RETURN_IF_ERROR(ranks.Add(record));
      if (rank == 0) footer.first_key = f.key;
      footer.last_key = f.key;
      STOKER_ASSIGN_OR_RETURN(const bool more, cursors[j].Next());
      if (more) heap.push(j);
    }
    if (files.count() != footer.files) {
      return Status::Corruption("the merged segments' file tables do not hold their files");
    }
    STOKER_RETURN_IF_ERROR(files.FinishInto(out, kSegFileIndex, kSegFileKeys));
  }
  {
    KeyRanksWriter writer(out, footer.files);
    uint64_t expected = 0;
    STOKER_RETURN_IF_ERROR(ranks.Merge([&](std::string_view r) -> Status {
      if (GetBigEndian64(r) != expected++) {
        return Status::Corruption("two of the merged files have the same position");
      }
      r.remove_prefix(8);
      return writer.Add(varint::GetOwn(&r));
    }));
    STOKER_RETURN_IF_ERROR(writer.Finish());
  }
  if (dirs.empty()) dirs[""];  // the root, also of an empty segment
  footer.dirs = dirs.size();
  STOKER_RETURN_IF_ERROR(WriteDirTable(out, dirs));
  {
    std::string classes;
    for (const Segment* segment : inputs) {
      for (uint32_t k = 0; k < segment->info().class_count; ++k) {
        const std::string_view name = segment->class_name(k);
        varint::Put(&classes, name.size());
        classes.append(name);
      }
    }
    STOKER_RETURN_IF_ERROR(out.Section(kSegClasses, classes));
  }
  if (grouped) {
    out.Begin(kSegSamples);
    std::string first;
    for (size_t j = 0; j < inputs.size(); ++j) {
      for (uint64_t s = 0; s < inputs[j]->info().sample_count; ++s) {
        first.clear();
        coding::PutFixed<uint64_t>(&first, inputs[j]->SampleFiles(s).first + shift[j].files);
        STOKER_RETURN_IF_ERROR(out.Append(first));
      }
    }
    first.clear();
    coding::PutFixed<uint64_t>(&first, footer.files);
    STOKER_RETURN_IF_ERROR(out.Append(first));
    out.End();
  }
  {
    KeyedTableWriter attrs = KeyedTableWriter::Into(out, kSegAttrs);
    std::string key;
    for (size_t j = 0; j < inputs.size(); ++j) {
      Status added;
      STOKER_RETURN_IF_ERROR(inputs[j]->ForEachAttribute(
          [&](uint64_t position, std::string_view name, std::string_view value) {
            if (!added.ok()) return;
            key.clear();
            PutBigEndian64(&key, position + shift[j].files);
            key.append(name);
            added = attrs.Add(key, value);
          }));
      STOKER_RETURN_IF_ERROR(added);
    }
    STOKER_RETURN_IF_ERROR(attrs.FinishInto(out, kSegAttrIndex, kSegAttrKeys));
  }
  return out.Finish(footer);
}

}  // namespace stoker::format
