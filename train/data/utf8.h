#pragma once
// Strict UTF-8 checking, decoding and encoding, and whitespace splitting that matches Python's
// str.split() (the PyTorch reference tokenises with it).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gf::train::utf8 {

// Byte offset of the first ill-formed sequence (overlong, surrogate, > U+10FFFF, truncated or a
// stray continuation byte), or std::string_view::npos when the whole text is well-formed.
size_t find_invalid(std::string_view text);
inline bool is_valid(std::string_view text) { return find_invalid(text) == std::string_view::npos; }

// Code points of well-formed UTF-8; throws std::invalid_argument naming the bad byte offset.
std::u32string decode(std::string_view text);
void append(std::string& out, char32_t cp);
std::string encode(std::u32string_view text);

// Python's str.isspace() for one code point: ASCII \t\n\v\f\r and space, U+001C..U+001F, U+0085,
// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_space(char32_t cp);

// Tokens between runs of whitespace, exactly as Python's `line.split()`; the text must be valid
// UTF-8 (check first with find_invalid).
std::vector<std::string> split_whitespace(std::string_view text);

}  // namespace gf::train::utf8
