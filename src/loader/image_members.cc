#include "loader/image_members.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "decode/decoder.h"
#include "format/columns.h"

namespace stoker::loader {
namespace {

bool HasImageExtension(std::string_view path) {
  const std::string ext = LowerExtension(path);
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

}  // namespace

std::string LowerExtension(std::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || path.find('/', dot) != std::string_view::npos) return "";
  std::string ext(path.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool NotAnImage(std::string_view path, std::span<const std::byte> bytes) {
  if (decode::SniffImageFormat(bytes) != decode::ImageFormat::kUnknown) return false;
  const std::string ext = LowerExtension(path);
  static constexpr std::string_view kImageFolderExtensions[] = {"jpg", "jpeg", "png",  "ppm", "bmp",
                                                                "pgm", "tif",  "tiff", "webp"};
  return std::ranges::find(kImageFolderExtensions, ext) == std::end(kImageFolderExtensions);
}

Result<const SampleData::File*> MemberFile(const Dataset& dataset, const SampleData& data,
                                           std::string_view member) {
  const std::string suffix = "." + std::string(member);
  for (const SampleData::File& f : data.files) {
    STOKER_ASSIGN_OR_RETURN(const std::string path, dataset.Path(f.index));
    if (path.ends_with(suffix)) return &f;
  }
  return nullptr;
}

Result<const SampleData::File*> ImageFile(const Dataset& dataset, const SampleData& data,
                                          std::string_view image_member) {
  if (data.files.empty()) return Err(Status::InvalidArgument("the sample has no files"));
  if (!image_member.empty()) {
    STOKER_ASSIGN_OR_RETURN(const SampleData::File* f, MemberFile(dataset, data, image_member));
    if (f != nullptr) return f;
    STOKER_ASSIGN_OR_RETURN(const std::string path, dataset.Path(data.files.back().index));
    return Err(
        Status::InvalidArgument(fmt::format("sample {} has no '{}' member (its files end "
                                            "like {})",
                                            data.sample, image_member, path)));
  }
  if (data.files.size() == 1) return &data.files[0];
  for (const SampleData::File& f : data.files) {
    STOKER_ASSIGN_OR_RETURN(const std::string path, dataset.Path(f.index));
    if (HasImageExtension(path)) return &f;
  }
  return &data.files[0];
}

Result<int64_t> MemberLabel(const Dataset& dataset, const SampleData& data,
                            std::string_view label_member) {
  STOKER_ASSIGN_OR_RETURN(const SampleData::File* f, MemberFile(dataset, data, label_member));
  if (f == nullptr) return int64_t{-1};
  const std::string_view text(reinterpret_cast<const char*>(f->bytes.data()), f->bytes.size());
  auto value = format::ParseIntText(text);
  if (!value) return Err(value.error().WithContext(dataset.FilePath(f->index)));
  return *value;
}

}  // namespace stoker::loader
