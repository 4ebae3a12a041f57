// See slice.h; the byte layout is docs/protocol.md's "Feeders".
#include "feed_client/slice.h"

#include <algorithm>

#include <fmt/format.h>

#include "net/payload.h"

namespace stoker::feed {

std::string EncodeSliceRequest(const SliceRequest& request) {
  net::PayloadWriter w;
  w.String(request.uri).U64(request.version).U64(request.seed).U64(request.epoch);
  w.Bytes(request.transform).String(request.image_member).String(request.label_member);
  w.U32(static_cast<uint32_t>(request.samples.size()));
  for (const uint32_t sample : request.samples) w.U32(sample);
  return std::move(w.data());
}

Result<SliceRequest> DecodeSliceRequest(std::string_view payload) {
  net::PayloadReader r(payload);
  SliceRequest q;
  STOKER_ASSIGN_OR_RETURN(const std::string_view uri, r.String());
  q.uri = uri;
  STOKER_ASSIGN_OR_RETURN(q.version, r.U64());
  STOKER_ASSIGN_OR_RETURN(q.seed, r.U64());
  STOKER_ASSIGN_OR_RETURN(q.epoch, r.U64());
  STOKER_ASSIGN_OR_RETURN(const std::string_view transform, r.Bytes());
  q.transform = transform;
  STOKER_ASSIGN_OR_RETURN(const std::string_view image, r.String());
  q.image_member = image;
  STOKER_ASSIGN_OR_RETURN(const std::string_view label, r.String());
  q.label_member = label;
  STOKER_ASSIGN_OR_RETURN(const uint32_t count, r.U32());
  if (count > kMaxSliceSamples || uint64_t{count} * 4 != r.remaining()) {
    return Err(
        Status::InvalidArgument(fmt::format("a MAKE names {} samples in {} bytes (at most {})",
                                            count, r.remaining(), kMaxSliceSamples)));
  }
  q.samples.resize(count);
  for (uint32_t& sample : q.samples) {
    STOKER_ASSIGN_OR_RETURN(sample, r.U32());
  }
  STOKER_RETURN_IF_ERROR(r.ExpectEnd());
  return q;
}

std::string EncodeSliceAnswer(const SliceAnswer& answer, std::string_view pixels) {
  net::PayloadWriter w;
  w.U32(static_cast<uint32_t>(answer.samples.size())).U32(answer.sample_bytes);
  for (const MadeSample& s : answer.samples) {
    w.U8(static_cast<uint8_t>(s.outcome)).U64(static_cast<uint64_t>(s.label)).String(s.message);
  }
  w.Raw(pixels);
  return std::move(w.data());
}

namespace {

Status Malformed(std::string_view peer, std::string_view why) {
  return Status::Corruption(fmt::format("{}: malformed MADE answer: {}", peer, why));
}

}  // namespace

uint64_t MadeCount(const SliceAnswer& answer) {
  return static_cast<uint64_t>(
      std::ranges::count(answer.samples, SampleOutcome::kMade, &MadeSample::outcome));
}

Result<SliceAnswer> DecodeSliceAnswerHead(std::string_view head, std::string_view peer) {
  net::PayloadReader r(head);
  SliceAnswer a;
  auto count = r.U32();
  auto sample_bytes = r.U32();
  if (!count || !sample_bytes) return Err(Malformed(peer, "truncated"));
  if (*count > kMaxSliceSamples) return Err(Malformed(peer, "too many samples"));
  a.sample_bytes = *sample_bytes;
  a.samples.resize(*count);
  for (MadeSample& s : a.samples) {
    auto outcome = r.U8();
    auto label = r.U64();
    auto message = r.String();
    if (!outcome || !label || !message) return Err(Malformed(peer, "truncated"));
    if (*outcome > static_cast<uint8_t>(SampleOutcome::kNotImage)) {
      return Err(Malformed(peer, "unknown outcome"));
    }
    s.outcome = static_cast<SampleOutcome>(*outcome);
    s.label = static_cast<int64_t>(*label);
    s.message = *message;
  }
  a.pixels_offset = head.size() - r.remaining();
  return a;
}

Result<SliceAnswer> DecodeSliceAnswer(std::string payload, std::string_view peer) {
  STOKER_ASSIGN_OR_RETURN(SliceAnswer a, DecodeSliceAnswerHead(payload, peer));
  const uint64_t made = MadeCount(a);
  const size_t pixel_bytes = payload.size() - a.pixels_offset;
  if (made * a.sample_bytes != pixel_bytes) {
    return Err(Malformed(peer, fmt::format("{} pixel bytes for {} images of {} bytes", pixel_bytes,
                                           made, a.sample_bytes)));
  }
  a.payload = std::move(payload);
  return a;
}

}  // namespace stoker::feed
