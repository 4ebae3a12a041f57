// A slice: a run of consecutive positions of a trainer's plan, made into images by a feeder
// (`stoker feed`) exactly as the trainer's own image pipeline would make them. The MAKE request
// and MADE answer of the wire protocol (docs/protocol.md, "Feeders"; decision 0013).
//
// An image is a pure function of (dataset version, sample, augmentation seed, epoch, transform
// options), so a slice made by any machine running this code is byte for byte the rows the
// trainer would have made, and a slice made twice is the same bytes.
//
// Values; the codecs are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker::feed {

struct SliceRequest {
  std::string uri;       // the dataset, as the feeder opens it (a path, s3://, stoker://)
  uint64_t version = 0;  // exactly this version: a feeder never makes another's images
  uint64_t seed = 0;     // the augmentation seed of the slice's source (loader::SourceSeed)
  uint64_t epoch = 0;
  // The transform options as decode/transform_option_table's OptionsText writes them.
  std::string transform;
  std::string image_member, label_member;  // as loader::ImagePipelineOptions
  std::vector<uint32_t> samples;           // the slice's sample indices, in plan order
};

// What became of one sample of a slice.
enum class SampleOutcome : uint8_t {
  kMade = 0,      // its image is in the answer's pixels
  kFailed = 1,    // corrupt, truncated, over the pixel limit, or unreadable: `message` says which
  kNotImage = 2,  // no image at all (a README.txt in a file dataset): left out, as locally
};

struct MadeSample {
  SampleOutcome outcome = SampleOutcome::kMade;
  int64_t label = -1;   // -1: unlabelled
  std::string message;  // kFailed, kNotImage: why, naming the sample's path; else empty
};

struct SliceAnswer {
  uint32_t sample_bytes = 0;        // bytes of one image (the transform's output size)
  std::vector<MadeSample> samples;  // one per requested sample, in the request's order
  // A decoded answer keeps its payload whole, so that megabytes of pixels are not copied out
  // of it: the made samples' images, in order, sample_bytes each, are its bytes from
  // pixels_offset on.
  std::string payload;
  size_t pixels_offset = 0;
  // The pixels went straight into the receiver's own buffer (FeederConnection::Receive's
  // `pixels_into`), never through `payload`, which then ends where they would start.
  bool pixels_placed = false;
  std::string_view pixels() const { return std::string_view(payload).substr(pixels_offset); }
};

// How many of the answer's samples were made (have pixels).
uint64_t MadeCount(const SliceAnswer& answer);

// Bytes of a made sample's outcome, label and (empty) message in a MADE answer: a slice whose
// every sample was made has 8 + count × this many bytes before its pixels.
inline constexpr size_t kMadeSampleHeadBytes = 1 + 8 + 2;

// Room in a MADE answer for one sample's outcome, label and a short message, besides its pixels:
// what a feeder and a trainer count when they check that a slice fits one answer frame.
inline constexpr uint64_t kMadeBytesPerSample = 64;

// The most samples one slice may hold: its request stays far below the server's 128 KiB
// request frame.
inline constexpr uint32_t kMaxSliceSamples = 4096;

std::string EncodeSliceRequest(const SliceRequest& request);
// InvalidArgument for a malformed payload (truncated, trailing bytes, too many samples).
Result<SliceRequest> DecodeSliceRequest(std::string_view payload);

// `answer`'s counts and samples, then `pixels`: the made samples' images, in order.
std::string EncodeSliceAnswer(const SliceAnswer& answer, std::string_view pixels);
// Corruption naming `peer` for a malformed answer: counts that disagree, an unknown outcome,
// pixels that are not exactly the made samples' bytes.
Result<SliceAnswer> DecodeSliceAnswer(std::string payload, std::string_view peer);
// The counts and samples that start a MADE payload, without its pixels: pixels_offset is the
// bytes they took (what a receiver reads before it knows where the pixels go). The same checks,
// but for the pixels' length.
Result<SliceAnswer> DecodeSliceAnswerHead(std::string_view head, std::string_view peer);

}  // namespace stoker::feed
