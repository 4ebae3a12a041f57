// The little XML the S3 and STS APIs answer with: flat elements found by their tag, never a
// general parser (their answers never nest a tag in itself and carry no attributes we read).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace stoker::s3 {

// The text of each <tag>…</tag> in `xml`, in order, still escaped.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
// The first <tag>'s text, unescaped; "" if there is none.
std::string XmlFirst(std::string_view xml, std::string_view tag);
// &amp; &lt; &gt; &quot; &apos; as characters; any other '&' is kept as it is.
std::string XmlUnescape(std::string_view s);

}  // namespace stoker::s3
