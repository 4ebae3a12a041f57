// GPU decode benchmark (docs/gpu.md, docs/benchmarks.md): JPEGs already in host memory ->
// training or validation batches in device memory through decode::cuda::GpuBatchTransformer,
// against stoker's CPU path (decode::Transformer, one per thread) on the same machine and images.
// Prints one JSON object on stdout.
//
//   gpu_decode_bench --images=DIR [--mode=train|val] [--batch=256] [--batches=40]
//                    [--gpu_threads=1,2,4,8] [--backends=hardware,hybrid] [--cpu_threads=16]
//                    [--cpu_images=8192] [--check=64]
//
// DIR is searched recursively for *.jpg / *.jpeg (any case); every file is read into memory once
// and batches cycle through them (sample i of the run is file i mod N, with seed i), so what is
// timed is decode + resample + flip + normalize, not storage. Output: 224 x 224 float32 NCHW,
// ImageNet mean/std, bilinear, as stoker.ImageLoader's default.
//
// gpu_threads: each host thread owns a GpuBatchTransformer (its own stream and nvJPEG state) and
// runs `batches` batches; images/s counts all of them from the first start to the last end.
// hardware: nvJPEG's hardware decoder (where the GPU has one) and, separately, its hybrid
// (CUDA) backend. check: the first N images through both paths with dct_scaling off, the
// largest and mean difference in uint8 units (gpu_transform_test bounds the same on synthetic
// images; here they are real photographs).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/parse_number.h"
#include "decode/cuda/gpu_transform.h"
#include "decode/decoder.h"
#include "decode/transform.h"

namespace {

using namespace stoker;
using namespace stoker::decode;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string images, mode = "train";
  size_t batch = 256, batches = 40, cpu_threads = 16, cpu_images = 8192, check = 64;
  std::vector<size_t> gpu_threads = {1, 2, 4, 8};
  bool hardware = true, hybrid = true;  // which nvJPEG backends to run
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "gpu_decode_bench: %s\nusage: gpu_decode_bench --images=DIR "
               "[--mode=train|val] [--batch=N] [--batches=N] [--gpu_threads=N,...] "
               "[--backends=hardware,hybrid] "
               "[--cpu_threads=N] [--cpu_images=N] [--check=N]\n",
               why.c_str());
  std::exit(2);
}

size_t Number(const std::string& key, const std::string& text) {
  const std::optional<size_t> n = ParseUnsigned<size_t>(text);
  if (!n.has_value() || *n == 0) Usage(key + " wants a positive number, not '" + text + "'");
  return *n;
}

std::vector<size_t> NumberList(const std::string& key, const std::string& s) {
  std::vector<size_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(Number(key, s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq),
                      value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--images")
      a.images = value;
    else if (key == "--mode")
      a.mode = value;
    else if (key == "--batch")
      a.batch = Number(key, value);
    else if (key == "--batches")
      a.batches = Number(key, value);
    else if (key == "--cpu_threads")
      a.cpu_threads = Number(key, value);
    else if (key == "--cpu_images")
      a.cpu_images = Number(key, value);
    else if (key == "--check")
      a.check = Number(key, value);
    else if (key == "--gpu_threads")
      a.gpu_threads = NumberList(key, value);
    else if (key == "--backends") {
      a.hardware = value.find("hardware") != std::string::npos;
      a.hybrid = value.find("hybrid") != std::string::npos;
      if (!a.hardware && !a.hybrid) Usage("--backends is hardware, hybrid or both");
    } else
      Usage("unknown argument " + arg);
  }
  if (a.images.empty()) Usage("--images is required");
  if (a.mode != "train" && a.mode != "val") Usage("--mode is train or val");
  return a;
}

struct Jpeg {
  std::string bytes;
  uint32_t width = 0, height = 0;
};

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::vector<Jpeg> LoadImages(const std::string& dir) {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Jpeg> images;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    Jpeg im{std::string(std::istreambuf_iterator<char>(in), {}), 0, 0};
    const Result<ImageInfo> info = ReadImageInfo(AsBytes(im.bytes));
    if (!info.has_value()) {
      std::fprintf(stderr, "skipping %s: %s\n", p.c_str(), info.error().ToString().c_str());
      continue;
    }
    im.width = info->width;
    im.height = info->height;
    images.push_back(std::move(im));
  }
  return images;
}

TransformOptions CpuOptions(const Args& a, bool dct_scaling) {
  TransformOptions o;
  o.train = a.mode == "train";
  o.dct_scaling = dct_scaling;
  return o;  // 224 x 224 float32 NCHW, ImageNet mean/std, bilinear, resize 256 for val
}

double Seconds(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

// User + system CPU seconds of the whole process so far (every thread, the CUDA runtime's too).
double ProcessCpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         double(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

struct GpuRun {
  double images_per_s = 0;
  double cpu_cores = 0;  // host CPU seconds per wall second while the batches ran
  bool hardware_used = false;
  size_t failed = 0;
  std::string error;
};

// `threads` host threads, each with its own GpuBatchTransformer, `batches` batches each after
// one warm-up batch: images/s, the host CPU it took, whether nvJPEG's hardware decoder was in
// use, samples that did not come back OK.
GpuRun RunGpu(const Args& a, const std::vector<Jpeg>& images, bool hardware, size_t threads) {
  const TransformOptions cpu = CpuOptions(a, false);
  cuda::GpuTransformOptions g;
  g.output = cpu.output;
  g.hardware_decoder = hardware;
  std::atomic<size_t> bad{0};
  std::vector<std::string> errors(threads);
  std::atomic<size_t> ready{0};
  bool hardware_used = false;
  std::atomic<bool> go{false};
  std::vector<double> ended(threads, 0);
  Clock::time_point start;
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto gpu = cuda::GpuBatchTransformer::Create(g);
      void* device = nullptr;
      if (!gpu.has_value()) {
        errors[t] = gpu.error().ToString();
      } else if (cudaMalloc(&device, a.batch * g.output.sample_bytes()) != cudaSuccess) {
        errors[t] = "cudaMalloc failed";
      }
      if (t == 0 && gpu.has_value()) hardware_used = (*gpu)->hardware_decoder();
      std::vector<cuda::GpuSample> samples(a.batch);
      auto run_batch = [&](size_t b) {
        for (size_t i = 0; i < a.batch; ++i) {
          const size_t n = (t * (a.batches + 1) + b) * a.batch + i;
          const Jpeg& im = images[n % images.size()];
          samples[i] = {AsBytes(im.bytes), ChooseParams(cpu, im.width, im.height, n)};
        }
        Result<std::vector<Status>> s = (*gpu)->Run(samples, device);
        if (!s.has_value()) {
          errors[t] = s.error().ToString();
          return;
        }
        for (const Status& st : *s) bad += st.ok() ? 0 : 1;
      };
      if (errors[t].empty()) run_batch(0);  // warm-up: buffers grow, nvJPEG initializes
      ++ready;
      while (!go) std::this_thread::yield();
      for (size_t b = 1; b <= a.batches && errors[t].empty(); ++b) run_batch(b);
      ended[t] = Seconds(start);
      if (device != nullptr) cudaFree(device);
    });
  }
  while (ready < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double cpu_before = ProcessCpuSeconds();
  start = Clock::now();
  go = true;
  for (auto& w : workers) w.join();
  GpuRun run;
  const double wall = *std::max_element(ended.begin(), ended.end());
  run.images_per_s = double(threads * a.batches * a.batch) / wall;
  run.cpu_cores = (ProcessCpuSeconds() - cpu_before) / Seconds(start);
  run.hardware_used = hardware_used;
  run.failed = bad;
  for (const std::string& e : errors) {
    if (!e.empty()) run.error = e;
  }
  return run;
}

// images/s of stoker's CPU path, `threads` threads each with its own Transformer (dct_scaling on,
// as ImageLoader runs it), `cpu_images` images in all.
double RunCpu(const Args& a, const std::vector<Jpeg>& images, size_t& failed) {
  const TransformOptions o = CpuOptions(a, true);
  std::atomic<size_t> next{0}, bad{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 0; t < a.cpu_threads; ++t) {
    workers.emplace_back([&] {
      Transformer cpu(o);
      std::vector<std::byte> out(o.output.sample_bytes());
      for (size_t n; (n = next++) < a.cpu_images;) {
        if (!cpu.Run(AsBytes(images[n % images.size()].bytes), n, out.data()).ok()) ++bad;
      }
    });
  }
  for (auto& w : workers) w.join();
  failed = bad;
  return double(a.cpu_images) / Seconds(start);
}

// GPU output against the CPU path (dct_scaling off) for the first `check` images, in uint8
// units: the largest difference and the mean.
std::string Check(const Args& a, const std::vector<Jpeg>& images) {
  const TransformOptions cpu_options = CpuOptions(a, false);
  cuda::GpuTransformOptions g;
  g.output = cpu_options.output;
  auto gpu = cuda::GpuBatchTransformer::Create(g);
  if (!gpu.has_value()) return fmt::format("\"{}\"", gpu.error().ToString());
  const size_t n = std::min(a.check, images.size()), slot = g.output.sample_bytes();
  std::vector<cuda::GpuSample> samples;
  for (size_t i = 0; i < n; ++i) {
    samples.push_back({AsBytes(images[i].bytes),
                       ChooseParams(cpu_options, images[i].width, images[i].height, i)});
  }
  void* device = nullptr;
  cudaMalloc(&device, n * slot);
  Result<std::vector<Status>> s = (*gpu)->Run(samples, device);
  std::vector<float> got(n * slot / 4), want(slot / 4);
  cudaMemcpy(got.data(), device, n * slot, cudaMemcpyDeviceToHost);
  cudaFree(device);
  if (!s.has_value()) return fmt::format("\"{}\"", s.error().ToString());
  Transformer cpu(cpu_options);
  double max = 0, sum = 0;
  size_t values = 0, over1 = 0;
  const size_t plane = size_t{g.output.width} * g.output.height;
  for (size_t i = 0; i < n; ++i) {
    if (!(*s)[i].ok() || !cpu.Run(samples[i].bytes, i, want.data()).ok()) continue;
    for (size_t v = 0; v < want.size(); ++v) {
      const double d =
          std::abs(double(got[i * want.size() + v]) - want[v]) * 255.0 * g.output.std[v / plane];
      max = std::max(max, d);
      sum += d;
      over1 += d > 1.0 + 1e-3;
      ++values;
    }
  }
  return fmt::format(R"({{"images": {}, "max": {:.3f}, "mean": {:.4f}, "over_1": {}}})", n, max,
                     values ? sum / values : 0.0, over1);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const std::vector<Jpeg> images = LoadImages(a.images);
  if (images.empty()) {
    std::fprintf(stderr, "gpu_decode_bench: no JPEGs under %s\n", a.images.c_str());
    return 2;
  }
  if (cuda::CudaDeviceCount() == 0) {
    std::fprintf(stderr, "gpu_decode_bench: no CUDA device\n");
    return 2;
  }
  size_t bytes = 0, pixels = 0;
  for (const Jpeg& im : images) {
    bytes += im.bytes.size();
    pixels += size_t{im.width} * im.height;
  }
  std::string gpu_runs;
  for (const bool hardware : {true, false}) {
    if (hardware ? !a.hardware : !a.hybrid) continue;
    for (const size_t threads : a.gpu_threads) {
      const GpuRun r = RunGpu(a, images, hardware, threads);
      gpu_runs += fmt::format(
          R"({}{{"hardware_decoder": {}, "hardware_used": {}, "threads": {}, "images_per_s": {:.1f}, "host_cpu_cores": {:.2f}, "failed": {}, "error": "{}"}})",
          gpu_runs.empty() ? "" : ", ", hardware, r.hardware_used, threads, r.images_per_s,
          r.cpu_cores, r.failed, r.error);
      std::fprintf(stderr,
                   "gpu hardware=%d (used %d) threads=%zu: %.1f images/s, %.2f host cores "
                   "(failed %zu) %s\n",
                   hardware, r.hardware_used, threads, r.images_per_s, r.cpu_cores, r.failed,
                   r.error.c_str());
    }
  }
  size_t cpu_failed = 0;
  const double cpu_rate = RunCpu(a, images, cpu_failed);
  std::fprintf(stderr, "cpu threads=%zu: %.1f images/s\n", a.cpu_threads, cpu_rate);
  fmt::print(
      R"({{"mode": "{}", "images": {}, "mean_bytes": {:.0f}, "bits_per_pixel": {:.2f}, "batch": {}, "gpu": [{}], "cpu": {{"threads": {}, "images_per_s": {:.1f}, "failed": {}}}, "check": {}}})"
      "\n",
      a.mode, images.size(), double(bytes) / images.size(), 8.0 * bytes / pixels, a.batch, gpu_runs,
      a.cpu_threads, cpu_rate, cpu_failed, Check(a, images));
  return 0;
}
