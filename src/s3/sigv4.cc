#include "s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>

#include <fmt/format.h>

namespace stoker::s3 {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Header values are signed trimmed, with runs of spaces inside collapsed to one.
std::string TrimAll(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Lower-cased names, sorted; values of repeated names joined by ',' in their order.
std::vector<std::pair<std::string, std::string>> CanonicalHeaders(const SigningRequest& r) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(r.headers.size());
  for (const auto& [name, value] : r.headers) headers.emplace_back(Lower(name), TrimAll(value));
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& h : headers) {
    if (!merged.empty() && merged.back().first == h.first) {
      merged.back().second += "," + h.second;
    } else {
      merged.push_back(std::move(h));
    }
  }
  return merged;
}

std::string Scope(std::string_view amz_date, std::string_view region, std::string_view service) {
  return fmt::format("{}/{}/{}/aws4_request", amz_date.substr(0, 8), region, service);
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name + "=" + value;
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(), nullptr);
  return Hex(digest.data(), len);
}

std::string SignedHeaderNames(const SigningRequest& request) {
  std::string out;
  for (const auto& [name, value] : CanonicalHeaders(request)) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string CanonicalRequest(const SigningRequest& request) {
  std::string headers;
  for (const auto& [name, value] : CanonicalHeaders(request)) headers += name + ":" + value + "\n";
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}", request.method,
                     request.path.empty() ? "/" : request.path, CanonicalQuery(request.query),
                     headers, SignedHeaderNames(request), request.payload_sha256);
}

std::string StringToSign(const SigningRequest& request, std::string_view amz_date,
                         std::string_view region, std::string_view service) {
  return fmt::format("AWS4-HMAC-SHA256\n{}\n{}\n{}", amz_date, Scope(amz_date, region, service),
                     Sha256Hex(CanonicalRequest(request)));
}

std::string Authorization(const SigningRequest& request, const Credentials& credentials,
                          std::string_view amz_date, std::string_view region,
                          std::string_view service) {
  // The signing key is derived from the secret for one day, region and service.
  const std::string date_key = Hmac("AWS4" + credentials.secret_key, amz_date.substr(0, 8));
  const std::string region_key = Hmac(date_key, region);
  const std::string service_key = Hmac(region_key, service);
  const std::string signing_key = Hmac(service_key, "aws4_request");
  const std::string signature = Hmac(signing_key, StringToSign(request, amz_date, region, service));
  return fmt::format(
      "AWS4-HMAC-SHA256 Credential={}/{},SignedHeaders={},Signature={}", credentials.access_key,
      Scope(amz_date, region, service), SignedHeaderNames(request),
      Hex(reinterpret_cast<const unsigned char*>(signature.data()), signature.size()));
}

std::string AmzDate(long long unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace stoker::s3
