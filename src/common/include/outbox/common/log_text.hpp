// Text from outside (relation names, column values, broker and server errors) made safe for a
// log line: one line, valid UTF-8, and unable to end its field or start another.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace outbox::common {

enum class Escape {
  kAll,           // a JSON string's body: '"' and '\' too (what quoted() needs)
  kControlsOnly,  // control characters and bad UTF-8 only (a whole text-format line)
};

// What stands for a byte that is not part of well-formed UTF-8.
enum class BadByte {
  kReplacement,         // U+FFFD itself (a log line)
  kEscapedReplacement,  // "\ufffd": the output stays ASCII where the input is (a request body)
};

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF; 1 for ASCII) and its code point; 0 when there is none.
inline std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& cp) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len;
  std::uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

namespace detail {

inline void append_u_escape(std::string& out, std::uint32_t cp) {
  constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 0xF];
}

}  // namespace detail

// Appends `text` escaped as the body of a JSON string (RFC 8259), so that it is also one
// key=value field of a text log line: \n \r \t \b \f by name; every other control character
// (C0, DEL, C1) and the Unicode line and paragraph separators as \uXXXX; each byte that is not
// part of well-formed UTF-8 as U+FFFD (BadByte). With Escape::kAll, '"' and '\' get a backslash
// too.
inline void append_escaped(std::string& out, std::string_view text, Escape mode = Escape::kAll,
                           BadByte bad = BadByte::kReplacement) {
  std::size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
        case '\\':
          if (mode == Escape::kAll) out += '\\';
          out += static_cast<char>(c);
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || c == 0x7F) {
            detail::append_u_escape(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t len = utf8_sequence(text, i, cp);
    if (len == 0) {
      out += bad == BadByte::kReplacement ? "\xEF\xBF\xBD" : "\\ufffd";  // U+FFFD
      ++i;
    } else if (cp <= 0x9F || cp == 0x2028 || cp == 0x2029) {
      detail::append_u_escape(out, cp);  // C1 controls; separators some readers take as a newline
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
}

// A log field value inside double quotes, escaped by append_escaped(): the result is a valid
// JSON string literal on one line, so a hostile name or value can neither start a new log line
// nor close its quotes to add a key=value field.
// A function object, not a function: argument-dependent lookup would otherwise prefer
// std::quoted (<iomanip>) for a std::string argument.
struct Quoted {
  std::string operator()(std::string_view text) const {
    std::string out;
    out.reserve(text.size() + 2);
    out += '"';
    append_escaped(out, text);
    out += '"';
    return out;
  }
};
inline constexpr Quoted quoted{};

}  // namespace outbox::common
