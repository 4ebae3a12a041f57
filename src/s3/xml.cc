#include "s3/xml.h"

namespace stoker::s3 {

std::string XmlUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    const std::string_view entity =
        s.substr(i + 1, semi == std::string_view::npos ? 0 : semi - i - 1);
    if (entity == "amp")
      out.push_back('&');
    else if (entity == "lt")
      out.push_back('<');
    else if (entity == "gt")
      out.push_back('>');
    else if (entity == "quot")
      out.push_back('"');
    else if (entity == "apos")
      out.push_back('\'');
    else {
      out.push_back('&');
      continue;
    }
    i = semi;
  }
  return out;
}

// The text of each <tag>…</tag> in `xml`, in order (S3's answers never nest a tag in itself).
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t start = pos + open.size();
    const size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string XmlFirst(std::string_view xml, std::string_view tag) {
  auto e = XmlElements(xml, tag);
  return e.empty() ? "" : XmlUnescape(e.front());
}

}  // namespace stoker::s3
