// Opens a packed dataset (a path or a file://, stoker:// or s3:// URI), lists its root, and
// reads every file once, each checked against its CRC32C: what a C++ reader of stoker does.
//
//   stoker_example DATASET
#include <cstdio>
#include <string>

#include <stoker/dataset.h>
#include <stoker/version.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATASET\n", argv[0]);
    return 2;
  }
  auto opened = stoker::Dataset::Open(argv[1]);
  if (!opened) {
    std::fprintf(stderr, "%s\n", opened.error().ToString().c_str());
    return 1;
  }
  const stoker::Dataset& ds = **opened;
  std::printf("stoker %s\n", std::string(stoker::Version()).c_str());
  std::printf("version %llu: %llu files, %llu samples, %u classes\n",
              static_cast<unsigned long long>(ds.version()),
              static_cast<unsigned long long>(ds.file_count()),
              static_cast<unsigned long long>(ds.sample_count()), ds.class_count());
  auto root = ds.List("");
  if (!root) {
    std::fprintf(stderr, "%s\n", root.error().ToString().c_str());
    return 1;
  }
  for (const stoker::DirEntry& e : *root) {
    std::printf("%s%s\n", e.name.c_str(), e.is_dir ? "/" : "");
  }
  unsigned long long bytes = 0;
  for (uint64_t i = 0; i < ds.file_count(); ++i) {
    auto data = ds.ReadFile(i);  // Corruption naming the file if a byte is wrong
    if (!data) {
      std::fprintf(stderr, "%s\n", data.error().ToString().c_str());
      return 1;
    }
    bytes += data->size();
  }
  std::printf("read %llu bytes, every file checked\n", bytes);
  return 0;
}
