// Which of a sample's files is its image, and where its label is, for the image pipeline: a
// sample packed from tar shards (WebDataset) has several members ("k.jpg", "k.cls", "k.json"),
// a file dataset's sample one file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loader/read_pipeline.h"
#include "stoker/dataset.h"

namespace stoker::loader {

// A file name's extension in lower case ("JPEG" of "a/b.JPEG" is "jpeg"); "" without one.
std::string LowerExtension(std::string_view path);

// Whether a file is no image at all: neither a JPEG or PNG signature nor a name that says
// image (torchvision ImageFolder's extensions, any case). A file dataset's README.txt or
// labels.csv is then left out of its batch, as ImageFolder leaves it out, while a damaged
// photo.jpg, or a .bmp stoker cannot decode, stays an error under on_error.
bool NotAnImage(std::string_view path, std::span<const std::byte> bytes);

// The file of `data` whose name ends in "." + member; nullptr if it has none.
Result<const SampleData::File*> MemberFile(const Dataset& dataset, const SampleData& data,
                                           std::string_view member);

// The file of `data` that holds its image: the `image_member`'s (when set), the only one, or
// (for samples packed from tar shards) the first with an image extension, else the first. An
// error if a path is unreadable or the image member is missing.
Result<const SampleData::File*> ImageFile(const Dataset& dataset, const SampleData& data,
                                          std::string_view image_member);

// The sample's label from its `label_member` (its text an integer): -1 when it has none.
Result<int64_t> MemberLabel(const Dataset& dataset, const SampleData& data,
                            std::string_view label_member);

}  // namespace stoker::loader
