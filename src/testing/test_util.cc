#include "testing/test_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/random.h"
#include "dataset/format1.h"
#include "format/chunk.h"
#include "format/snapshot_builder.h"
#include "storage/posix_storage.h"
#include "storage/string_bytes.h"

namespace stoker::test {
namespace {

namespace fs = std::filesystem;

std::string_view ParentOf(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

// Pieces of random names: plain ASCII, spaces, dots, dashes and multi-byte UTF-8.
constexpr std::string_view kNamePieces[] = {
    "a", "b", "c",    "x", "Z",  "0", "7",   "42", "img", "data", " ",         ".", ".", "-",
    "_", "é", "日本", "ß", "🙂", "Ω", "(1)", "+",  "~",   "JPEG", "n01440764", "#", "'", "@"};

std::string RandomName(Pcg32& rng) {
  while (true) {
    std::string name;
    const uint64_t pieces = 1 + rng.Below(8);
    for (uint64_t i = 0; i < pieces; ++i) name += kNamePieces[rng.Below(std::size(kNamePieces))];
    // Not "." or "..", nor "._*": a macOS resource fork's name, OS litter that every pack
    // leaves out (dataset/left_out.h), so it could not round-trip.
    if (name != "." && name != ".." && !name.starts_with("._")) return name;
  }
}

uint64_t RandomSize(Pcg32& rng, uint64_t max_bytes) {
  const uint64_t bucket = rng.Below(100);
  if (bucket < 10) return 0;
  if (bucket < 60) return 1 + rng.Below(std::min<uint64_t>(1024, max_bytes));
  if (bucket < 90) return rng.Below(std::min<uint64_t>(20 << 10, max_bytes) + 1);
  return rng.Below(max_bytes + 1);
}

class TreeSourceImpl final : public dataset::PackSource {
 public:
  explicit TreeSourceImpl(const Tree& tree) : it_(tree.files.begin()), end_(tree.files.end()) {
    for (const auto& [path, data] : tree.files) total_ += data.size();
    count_ = tree.files.size();
  }
  Result<std::optional<dataset::SourceItem>> Next() override {
    if (it_ == end_) return std::optional<dataset::SourceItem>();
    const auto bytes = AsBytes(it_->second);
    dataset::SourceItem item{it_->first, std::vector<std::byte>(bytes.begin(), bytes.end()),
                             nullptr, 0};
    consumed_ += it_->second.size();
    ++it_;
    return std::optional<dataset::SourceItem>(std::move(item));
  }
  uint64_t total_items() const override { return count_; }
  uint64_t total_bytes() const override { return total_; }
  uint64_t consumed_bytes() const override { return consumed_; }

 private:
  std::map<std::string, std::string>::const_iterator it_, end_;
  uint64_t total_ = 0, consumed_ = 0, count_ = 0;
};

}  // namespace

TempDir::TempDir() {
  std::string templ = "/tmp/stoker-test-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    std::abort();
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  // FIFOs and read-only leftovers are removed too; symlinks are removed, not followed.
  fs::remove_all(path_, ec);
}

std::string TempDir::Join(std::string_view relative) const {
  return path_ + "/" + std::string(relative);
}

std::vector<std::string> Tree::Dirs() const {
  std::set<std::string> dirs{""};
  for (const auto& [path, data] : files) {
    for (std::string_view d = ParentOf(path); !d.empty(); d = ParentOf(d)) dirs.emplace(d);
  }
  return {dirs.begin(), dirs.end()};
}

std::vector<std::pair<std::string, bool>> Tree::Listing(std::string_view dir) const {
  std::set<std::string> subdirs, names;
  const std::string prefix = dir.empty() ? "" : std::string(dir) + "/";
  for (const auto& [path, data] : files) {
    if (!path.starts_with(prefix)) continue;
    const std::string rest = path.substr(prefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos) {
      names.insert(rest);
    } else {
      subdirs.insert(rest.substr(0, slash));
    }
  }
  std::vector<std::pair<std::string, bool>> out;
  out.reserve(subdirs.size());
  for (const auto& d : subdirs) out.emplace_back(d, true);
  for (const auto& f : names) out.emplace_back(f, false);
  return out;
}

std::vector<std::string> Tree::Classes() const {
  std::set<std::string> classes;
  for (const auto& [path, data] : files) {
    const auto slash = path.find('/');
    if (slash == std::string::npos) return {};
    classes.insert(path.substr(0, slash));
  }
  return {classes.begin(), classes.end()};
}

int32_t Tree::ExpectedLabel(std::string_view path) const {
  const auto classes = Classes();
  if (classes.empty()) return -1;
  const std::string first(path.substr(0, path.find('/')));
  const auto it = std::find(classes.begin(), classes.end(), first);
  return it == classes.end() ? -1 : static_cast<int32_t>(it - classes.begin());
}

uint64_t Tree::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& [path, data] : files) total += data.size();
  return total;
}

std::string RandomBytes(uint64_t seed, size_t n) {
  Pcg32 rng(seed, 7);
  std::string out(n, '\0');
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32_t v = rng.Next();
    std::memcpy(out.data() + i, &v, 4);
  }
  for (; i < n; ++i) out[i] = static_cast<char>(rng.Next());
  return out;
}

Tree RandomTree(uint64_t seed, const RandomTreeOptions& options) {
  Pcg32 rng(seed);
  // Names taken in each directory (by files and subdirectories alike), so no path is both.
  std::map<std::string, std::set<std::string>> taken;
  auto unique_name = [&](const std::string& dir) {
    while (true) {
      std::string name = RandomName(rng);
      if (taken[dir].insert(name).second) return name;
    }
  };
  auto join = [](const std::string& dir, const std::string& name) {
    return dir.empty() ? name : dir + "/" + name;
  };
  std::vector<std::string> dirs;  // candidate parents for files
  if (options.image_folder) {
    for (int c = 0; c < options.classes; ++c) dirs.push_back(unique_name(""));
  } else {
    dirs.push_back("");
  }
  const size_t top = dirs.size();
  for (int i = 0; i < options.dirs; ++i) {
    const std::string parent = dirs[rng.Below(dirs.size())];
    if (std::count(parent.begin(), parent.end(), '/') >= 4) continue;  // bounded depth
    dirs.push_back(join(parent, unique_name(parent)));
  }
  Tree tree;
  for (int i = 0; i < options.files; ++i) {
    // ImageFolder: make sure every class directory gets a file before spreading the rest.
    const std::string dir = options.image_folder && static_cast<size_t>(i) < top
                                ? dirs[i]
                                : dirs[rng.Below(dirs.size())];
    const std::string path = join(dir, unique_name(dir));
    tree.files[path] = RandomBytes(rng.Next64(), RandomSize(rng, options.max_file_bytes));
  }
  return tree;
}

void WriteTree(const Tree& tree, const std::string& root) {
  for (const auto& [path, data] : tree.files) {
    const std::string full = root + "/" + path;
    fs::create_directories(fs::path(full).parent_path());
    WriteStringToFile(full, data);
  }
}

std::string ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteStringToFile(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::shared_ptr<const FileBytes> BytesOf(std::string contents) {
  return std::make_shared<storage::StringBytes>(std::move(contents));
}

std::unique_ptr<dataset::PackSource> TreeSource(const Tree& tree) {
  return std::make_unique<TreeSourceImpl>(tree);
}

Result<dataset::PackSummary> PackDirectory(const std::string& src, Storage& dst,
                                           const dataset::PackOptions& options) {
  dataset::DirectorySourceOptions source_options;
  source_options.threads = 2;
  source_options.labels_from_dirs = options.labels == dataset::LabelPolicy::kAuto;
  STOKER_ASSIGN_OR_RETURN(auto source, dataset::OpenDirectorySource(src, source_options));
  return dataset::Pack(*source, dst, options);
}

Result<dataset::PackSummary> PackTars(std::vector<std::string> tars, Storage& dst,
                                      dataset::PackOptions options) {
  options.group_samples = true;
  STOKER_ASSIGN_OR_RETURN(auto source, dataset::OpenTarSource(std::move(tars)));
  return dataset::Pack(*source, dst, options);
}

void WriteTar(const std::string& path, const std::vector<TarMember>& members) {
  archive* a = archive_write_new();
  ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const auto& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, 1700000000, 0);
    switch (m.type) {
      case TarMember::Type::kFile:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(m.data.size()));
        break;
      case TarMember::Type::kDir:
        archive_entry_set_filetype(e, AE_IFDIR);
        archive_entry_set_perm(e, 0755);
        break;
      case TarMember::Type::kSymlink:
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, m.link_target.c_str());
        break;
      case TarMember::Type::kHardlink:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, m.link_target.c_str());
        break;
      case TarMember::Type::kCharDevice:
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdevmajor(e, 1);
        archive_entry_set_rdevminor(e, 3);
        break;
      case TarMember::Type::kFifo:
        archive_entry_set_filetype(e, AE_IFIFO);
        break;
    }
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK) << archive_error_string(a);
    if (m.type == TarMember::Type::kFile && !m.data.empty()) {
      ASSERT_EQ(archive_write_data(a, m.data.data(), m.data.size()),
                static_cast<la_ssize_t>(m.data.size()));
    }
    archive_entry_free(e);
  }
  ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

std::vector<WdsSample> RandomWdsSamples(uint64_t seed, int count, int classes,
                                        std::string_view key_prefix) {
  Pcg32 rng(seed);
  std::vector<WdsSample> samples;
  for (int i = 0; i < count; ++i) {
    WdsSample s;
    s.key = fmt::format("{}{:06d}", key_prefix, i);
    s.jpg = RandomBytes(rng.Next64(), rng.Below(8 << 10));
    s.label = static_cast<int>(rng.Below(classes));
    s.json = fmt::format("{{\"index\": {}, \"label\": {}}}", i, s.label);
    if (rng.Below(3) == 0) s.seg = RandomBytes(rng.Next64(), 1 + rng.Below(512));
    samples.push_back(std::move(s));
  }
  return samples;
}

TarMember File(std::string name, std::string data) {
  TarMember m;
  m.name = std::move(name);
  m.data = std::move(data);
  return m;
}

TarMember Special(TarMember::Type type, std::string name, std::string target) {
  TarMember m;
  m.type = type;
  m.name = std::move(name);
  m.link_target = std::move(target);
  return m;
}

std::vector<TarMember> WdsMembers(const std::vector<WdsSample>& samples) {
  std::vector<TarMember> members;
  for (const auto& s : samples) {
    // WebDataset writers emit a sample's members together, in no particular order.
    members.push_back(File(s.key + ".jpg", s.jpg));
    members.push_back(File(s.key + ".cls", std::to_string(s.label) + "\n"));
    members.push_back(File(s.key + ".json", s.json));
    if (!s.seg.empty()) members.push_back(File(s.key + ".seg.png", s.seg));
  }
  return members;
}

std::vector<std::string> ChunkFiles(const std::string& dataset_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dataset_dir + "/chunks", ec), end; !ec && it != end;
       it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void WriteFormat1(Storage& storage, const Tree& tree, format::LabelMode labels) {
  ASSERT_TRUE(storage.CreateDirs(dataset::kChunksDir).ok());
  format::SnapshotSpec spec;
  spec.dataset_version = 3;
  spec.labels = labels;
  std::unique_ptr<format::ChunkWriter> writer;
  for (const auto& [path, bytes] : tree.files) {
    if (!writer) {
      writer =
          format::ChunkWriter::Create(storage, (uint64_t{3} << 32) | spec.chunks.size()).value();
    }
    auto ref = writer->Add(AsBytes(bytes)).value();
    format::SnapshotEntry e;
    e.path = path;
    e.chunk = static_cast<uint32_t>(spec.chunks.size());
    e.offset = ref.offset;
    e.length = ref.length;
    e.crc32c = ref.crc32c;
    if (path.ends_with(".x")) e.attributes = {{"kind", "x"}};
    spec.entries.push_back(std::move(e));
    if (writer->entry_count() == 4) {
      spec.chunks.push_back(writer->Finish().value());
      writer.reset();
    }
  }
  if (writer) spec.chunks.push_back(writer->Finish().value());
  const std::string snapshot = format::BuildSnapshot(std::move(spec)).value();
  ASSERT_TRUE(dataset::PublishFormat1Version(storage, 3, snapshot).ok());
}

std::string ReadStored(Storage& storage, std::string_view path) {
  auto file = storage.OpenRead(path);
  EXPECT_TRUE(file.has_value()) << file.error().ToString();
  if (!file) return "";
  std::string out((*file)->Size(), '\0');
  EXPECT_TRUE((*file)->ReadAt(0, {reinterpret_cast<std::byte*>(out.data()), out.size()}).ok());
  return out;
}

void WriteStored(Storage& storage, std::string_view path, std::string_view contents) {
  auto file = storage.Create(path);
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  ASSERT_TRUE((*file)->Append(AsBytes(contents)).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());
}

}  // namespace stoker::test
