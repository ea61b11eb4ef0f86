// JSON Schema's `pattern` (an ECMA-262 regular expression, code point semantics as with the u
// flag) as a GBNF expression over a JSON string's text between its quotes: every string it
// derives decodes to a value the pattern matches. A pattern matches anywhere in the value (as
// JSON Schema says), so an end without its anchor (^ first, $ last, per top-level alternative)
// is padded with `char*`, the JSON string character rule of grammar/json_schema.cpp.
//
// Supported: literals; . (any code point but \n \r U+2028 U+2029); classes [...] and [^...]
// with ranges; \d \D \w \W \s \S (ECMA-262's sets); escapes \t \n \r \v \f \0 \xHH \uHHHH
// (surrogate pairs joined) \u{H...} \cX and escaped syntax characters; groups (...) (?:...)
// (?<name>...); alternation; * + ? {m} {m,} {m,n} (and their lazy forms: the same strings; a
// repeated item that can match nothing is repeated as its other strings, from zero times).
// Refused with a message naming the offset: backreferences, lookaround, word boundaries,
// Unicode property escapes, anchors elsewhere, counts past kGbnfMaxRepeat, nesting past 64,
// a class that matches no character, an expression past 256 KiB (nested repeats of items that
// can match nothing double it at every level). Each character is written in one JSON spelling: the
// quote, the backslash and control characters escaped (\b \f \n \r \t, else \u00XX), the rest as
// UTF-8.
#pragma once

#include <string>
#include <string_view>

#include "rewind/base/result.h"

namespace rw {

// The GBNF expression for `pattern` (UTF-8). Errors: "pattern: <what> at offset N".
Result<std::string> regex_to_gbnf(std::string_view pattern);

}  // namespace rw
