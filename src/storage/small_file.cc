#include "storage/small_file.h"

namespace stoker::storage {

Result<std::string> ReadSmallFile(Storage& storage, std::string_view path, uint64_t limit) {
  STOKER_ASSIGN_OR_RETURN(auto file, storage.OpenRead(path));
  const uint64_t size = file->Size();
  if (size > limit) return Err(Status::Corruption(storage.Describe(path) + ": too large"));
  std::string text(size, '\0');
  STOKER_RETURN_IF_ERROR(file->ReadAt(0, {reinterpret_cast<std::byte*>(text.data()), size}));
  return text;
}

Status WriteSmallFile(Storage& storage, std::string_view path, std::string_view bytes) {
  STOKER_ASSIGN_OR_RETURN(auto file, storage.Create(path));
  STOKER_RETURN_IF_ERROR(
      file->Append({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}));
  STOKER_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

}  // namespace stoker::storage
