// What an S3 endpoint, a credential source or a user's ~/.aws files hand stoker, on arbitrary
// bytes: a ListObjectsV2 page (ParseListPage), an INI file (ParseIni), an s3:// URI
// (ParseS3Uri), a credential document (ParseCredentialJson: credential_process, the container
// endpoint, instance metadata), an STS answer (ParseStsCredentials) and an ISO 8601 time. The
// first byte picks the parser. Properties: no crash or leak, a listing never yields more keys and
// prefixes than its text could spell (each needs its own element), and credentials that parse
// have both keys, each taken from the text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "s3/credentials.h"
#include "s3/s3_client.h"
#include "s3/s3_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::s3;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      ObjectListing out;
      auto token = ParseListPage(text, &out);
      // <Key></Key> is 11 bytes: no more entries than that many bytes allow.
      FUZZ_CHECK(out.keys.size() + out.prefixes.size() <= text.size() / 11 + 1);
      if (token) FUZZ_CHECK(token->size() <= text.size());
      break;
    }
    case 1: {
      const auto sections = ParseIni(text);
      FUZZ_CHECK(sections.size() <= text.size() + 1);
      break;
    }
    case 2: {
      auto parsed = ParseCredentialJson(text, "fuzz");
      if (parsed) {
        FUZZ_CHECK(!parsed->credentials.access_key.empty());
        FUZZ_CHECK(!parsed->credentials.secret_key.empty());
        FUZZ_CHECK(parsed->credentials.access_key.size() <= text.size());
      }
      break;
    }
    case 3: {
      auto parsed = ParseStsCredentials(text, "fuzz");
      if (parsed) {
        FUZZ_CHECK(!parsed->credentials.session_token.empty() && parsed->expires.has_value());
        FUZZ_CHECK(parsed->credentials.secret_key.size() <= text.size());
      }
      break;
    }
    case 4:
      (void)ParseIso8601(text);
      break;
    default:
      (void)ParseS3Uri(text);
  }
  return 0;
}
