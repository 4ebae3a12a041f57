// AWS's published S3 SigV4 examples ("Examples: Signature Calculations in AWS Signature
// Version 4", Amazon S3 API reference), byte for byte.
#include "s3/sigv4.h"

#include <gtest/gtest.h>

namespace stoker::s3 {
namespace {

const Credentials kExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr std::string_view kDate = "20130524T000000Z";

std::string SignatureOf(const std::string& authorization) {
  return authorization.substr(authorization.rfind('=') + 1);
}

TEST(SigV4, GetObjectExample) {
  SigningRequest r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
               {"x-amz-date", std::string(kDate)}};
  r.payload_sha256 = std::string(kEmptyPayloadSha256);
  EXPECT_EQ(
      CanonicalRequest(r),
      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(StringToSign(r, kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(Authorization(r, kExample, kDate, "us-east-1"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, PutObjectExample) {
  SigningRequest r;
  r.method = "PUT";
  r.path = UriEncodePath("/test$file.text");
  const std::string body = "Welcome to Amazon S3.";
  r.payload_sha256 = Sha256Hex(body);
  EXPECT_EQ(r.payload_sha256, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-date", std::string(kDate)},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
               {"x-amz-content-sha256", r.payload_sha256}};
  EXPECT_EQ(r.path, "/test%24file.text");
  EXPECT_EQ(SignedHeaderNames(r), "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  EXPECT_EQ(SignatureOf(Authorization(r, kExample, kDate, "us-east-1")),
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4, GetBucketLifecycleExample) {
  SigningRequest r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"lifecycle", ""}};
  r.payload_sha256 = std::string(kEmptyPayloadSha256);
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", std::string(kDate)},
               {"x-amz-content-sha256", r.payload_sha256}};
  EXPECT_EQ(SignatureOf(Authorization(r, kExample, kDate, "us-east-1")),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4, ListObjectsExampleSortsTheQuery) {
  SigningRequest r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};  // given unsorted on purpose
  r.payload_sha256 = std::string(kEmptyPayloadSha256);
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", std::string(kDate)},
               {"x-amz-content-sha256", r.payload_sha256}};
  EXPECT_EQ(CanonicalQuery(r.query), "max-keys=2&prefix=J");
  EXPECT_EQ(SignatureOf(Authorization(r, kExample, kDate, "us-east-1")),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, EncodingAndHeaderCanonicalization) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g+h=i&j", false), "a%20b%2Fc~d_e.f-g%2Bh%3Di%26j");
  EXPECT_EQ(UriEncodePath("/bucket/dir/ü x.jpg"), "/bucket/dir/%C3%BC%20x.jpg");
  EXPECT_EQ(CanonicalQuery({{"b", "2"}, {"a", "x/y"}, {"a", "1"}, {"uploads", ""}}),
            "a=1&a=x%2Fy&b=2&uploads=");
  SigningRequest r;
  r.method = "GET";
  r.path = "/";
  r.payload_sha256 = std::string(kUnsignedPayload);
  r.headers = {{"X-Custom", "  two   words  "}, {"host", "h"}, {"x-custom", "again"}};
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/\n\nhost:h\nx-custom:two words,again\n\nhost;x-custom\nUNSIGNED-PAYLOAD");
  EXPECT_EQ(AmzDate(1369353600), "20130524T000000Z");
}

}  // namespace
}  // namespace stoker::s3
