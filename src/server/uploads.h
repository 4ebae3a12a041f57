// Writes into an exported dataset directory, for servers started with --writable
// (docs/protocol.md, "Writes"): WRITE puts bytes into an upload — a temporary file
// "<path>.tmp-<upload:016x>" beside its target, written at any offset so a retried request
// is harmless — and FINISH turns it into the target: renamed over it, or linked to it only if
// the target does not exist (the compare-and-swap that versions are published with), after
// fsync, with the directory fsynced too. A writer that dies leaves an upload behind, which
// `stoker gc` removes like any writer's temporary file.
//
// Only the directories a dataset consists of may be written, and no path may pass through a
// symbolic link. Thread-safe (plain file-system calls).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/protocol.h"
#include "stoker/status.h"

namespace stoker::server {

// PermissionDenied unless `path` lies in chunks/, segments/, versions/, parts/ or gc/.
Status CheckWritablePath(std::string_view path);

Status WriteUpload(const std::string& dir, std::string_view path, uint64_t upload, uint64_t offset,
                   std::string_view bytes);
// InvalidArgument if the upload does not hold exactly `size` bytes; AlreadyExists if
// `kExclusive` finds the target. A FINISH retried after it succeeded finds the target holding
// `size` bytes and succeeds again (kReplace) or reports AlreadyExists (kExclusive: the caller
// reads the target back to tell, as for every exclusive create).
Status FinishUpload(const std::string& dir, std::string_view path, uint64_t upload, uint64_t size,
                    net::FinishMode mode);
// NotFound if there is no such file.
Status RemoveFile(const std::string& dir, std::string_view path);
// rename(2) inside the dataset directory (`stoker gc` replaces gc/pending so).
Status RenameFile(const std::string& dir, std::string_view from, std::string_view to);

}  // namespace stoker::server
