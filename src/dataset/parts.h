// Parallel and distributed pack (docs/format.md §5.3): N writers, on any machines, each pack
// part K of one new version (`stoker pack --part K/N`), and `stoker commit` publishes all parts
// as one version.
//
// A part is a segment at parts/<job>/part-<K>-of-<N>.seg, created exclusively (a part written
// twice is refused), over chunks of its own. It is not numbered: Commit reads every part,
// checks they are all there and intact, and publishes their union like one pack of it (the
// same file order, labels and classes), rebasing over writers that published meanwhile. The
// parts are removed once their version is published; until then `stoker gc` keeps their chunks.
// A part of a column dataset (stoker.Writer) keeps its schema beside its segment, in
// part-<K>-of-<N>.columns, written first; Commit requires every part's to be the same.
//
// Engines that retry tasks (Ray, Spark) give each attempt a part of its own and commit exactly
// the parts of the attempts they accepted (CommitOptions::only); the rest are removed with them.
// A commit (or a discard) first writes the job's marker, parts/<job>/closed, and a part written
// once the marker exists is refused and removed: a task's attempt that outlives its job never
// leaves a part that nothing will commit.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dataset/addition.h"
#include "dataset/packer.h"
#include "format/layout.h"
#include "stoker/storage.h"

namespace stoker::dataset {

using format::kPartsDir;

// "parts/<job>/part-000003-of-000008.seg" (N = 0: the writer did not know it).
std::string PartPath(const PartSpec& part);
// "K/N" (parts count from 0), "K" (N given to Commit), or "env" (PartFromEnvironment); `job`
// names the set of parts if not empty.
Result<PartSpec> ParsePartSpec(std::string_view text, std::string_view job);
// InvalidArgument unless 1-64 characters of [A-Za-z0-9._-].
Status ValidateJobName(std::string_view job);

// Part K/N from the environment of a batch engine's array task: Slurm (SLURM_ARRAY_TASK_ID,
// SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT; job SLURM_ARRAY_JOB_ID) or a Kubernetes Indexed
// Job (JOB_COMPLETION_INDEX; N unknown unless STOKER_PARTS is set). NotFound outside both.
Result<PartSpec> PartFromEnvironment();

// Writes `add` (its chunks already durable) as part `part`; returns the part's path.
Result<std::string> WritePart(Storage& dst, Addition& add, const PartSpec& part);

struct CommitOptions {
  std::string job = "default";
  uint32_t parts = 0;  // how many parts to expect; 0: as the parts' names say
  // The parts to publish, by index (an engine's accepted attempts), in any order; the job's
  // other parts are removed with them. Empty: every part, 0 … N−1.
  std::vector<uint32_t> only;
};

// Publishes every part of `job` as one new version (the first, or the next). Fails, publishing
// nothing, if a part is missing, damaged, or holds a path another part or the dataset holds.
Result<PackSummary> Commit(Storage& storage, const CommitOptions& options);

struct DiscardResult {
  uint64_t parts_removed = 0;
  bool already_closed = false;  // committed, being committed, or discarded before: nothing done
};

// Ends `job` without publishing: marks it closed (later parts are refused) and removes its
// parts; their chunks are garbage for `stoker gc`. NotFound when the job has no directory
// (a mistyped name), unless `close_empty`: then the job is closed all the same, so that an
// engine's attempt that starts after its driver gave up is refused too.
Result<DiscardResult> DiscardParts(Storage& storage, std::string_view job,
                                   bool close_empty = false);

// Every file of a closed job (its marker once nothing else is left): the parts of attempts
// that no commit will publish. gc collects them as it collects any unreferenced file, after
// its grace period and once the writers at work when it saw them (a commit) have ended.
Result<std::vector<std::string>> FilesOfClosedJobs(Storage& storage);

// A job whose parts wait for `stoker commit` (or `--discard`): an engine's job whose driver died
// stays so, its chunks kept, until someone ends it; stoker gc says which.
struct OpenJob {
  std::string job;
  uint64_t parts = 0;   // readable parts (a damaged one cannot be committed: not counted)
  uint64_t chunks = 0;  // the chunks those parts hold
  uint32_t count = 0;   // how many parts the job says it has; 0: unknown (an engine's job,
                        // parts written without N): only its writer knows which to commit
};

struct UncommittedParts {
  std::set<std::string> chunks;  // the chunk paths of every part of an open job (gc keeps them)
  std::vector<OpenJob> jobs;     // by name
};

// Every job under parts/ that is not closed, and its parts' chunks.
Result<UncommittedParts> ListUncommittedParts(Storage& storage);

}  // namespace stoker::dataset
