// Names as Linux gives them are bytes, not text: a scraped dataset holds file names that are not
// UTF-8 and names with control characters (an ESC sequence would repaint a terminal). These two
// spellings show any name safely and lose nothing:
//   - for people (terminals, logs, error messages): TerminalSafe;
//   - for JSON: JsonQuoted, Python's surrogateescape convention, so that in Python
//     os.fsencode(json.loads(text)) gives back the original bytes (README, "File names are bytes").
#pragma once

#include <string>
#include <string_view>

namespace stoker {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool IsUtf8(std::string_view text);

// `text` with every byte that is not part of a printable UTF-8 character written as \xNN:
// control characters (C0, DEL, C1), and bytes that are not well-formed UTF-8. A backslash is
// written \\ so the escape is unambiguous. Printable UTF-8 passes unchanged.
std::string TerminalSafe(std::string_view text);

// `text` as a quoted JSON string. Well-formed UTF-8 is written as is (with JSON's escapes for
// '"', '\\' and control characters); each byte that is not is written \udcNN, the lone
// surrogate U+DC00+byte that Python's surrogateescape decoding gives it.
std::string JsonQuoted(std::string_view text);

}  // namespace stoker
