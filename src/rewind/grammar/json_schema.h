// JSON Schema to GBNF (grammar/gbnf.h) for structured output: the subset that OpenAI's
// structured outputs accept, compiled so that every string the grammar derives parses as JSON
// and validates against the schema.
//
// Supported: type (a name or a list of them: string, number, integer, boolean, null, object,
// array); properties, required, additionalProperties (false, true or absent); items, minItems,
// maxItems; enum, const; anyOf; $ref (a JSON pointer into the same document: #, #/$defs/x,
// #/definitions/x, any #/... path; recursion allowed); $defs, definitions; minLength,
// maxLength; pattern (an ECMA-262 regular expression, grammar/regex_gbnf.h; not with a format
// or a length); format date, time, date-time, duration, email, hostname, ipv4, ipv6, uuid
// (OpenAI's list); minimum, maximum, exclusiveMinimum, exclusiveMaximum on integers, and on
// numbers when they are whole numbers within 1e15 (others are refused; without a type they
// give integers in range); multipleOf a whole number up to 1000 (on numbers too: then
// integers), or 0.1, 0.01, ... on numbers. Annotations are ignored: title,
// description, $schema, $id, $comment, default, examples, deprecated, readOnly, writeOnly.
// Any other keyword is refused with an error naming it and where it is ("json_schema:
// unsupported keyword 'not' at #/properties/n"), which the server returns as a 400
// for a strict schema; others are relaxed first (relax_json_schema, below).
//
// What the grammar generates (each a subset of what the schema accepts, so outputs validate):
// * Whitespace: none before or after the top-level value; at most one whitespace run after
//   '{', '[', ',' and ':' and after each key and value, each either one space or a newline
//   followed by up to 20 spaces or tabs (llama.cpp's rule). Bounded runs keep the output
//   finite: a model cannot spend its tokens on whitespace.
// * Objects with `properties`: the declared properties in declaration order, required ones
//   always, optional ones possibly left out; never other keys (additionalProperties true or
//   absent is allowed by the schema but not generated). Without `properties`: any object
//   (an empty one when additionalProperties is false).
// * Numbers: an integer part of at most 16 digits, at most 16 fraction digits, an exponent of
//   at most 2 digits; within bounds, no exponent and the bounds exactly; integers at most 16 digits
//   (so they stay exact in int64), within their bounds exactly (a digit-by-digit range, without
//   leading zeros or "-0"). multipleOf k: without bounds (or with one bound at most k from zero)
//   by a rule per remainder and digit count (k up to 100); with bounds, the multiples listed (at
//   most 1000, else refused); multipleOf 10^-n: at most n fraction digits, no exponent.
// * Strings: any UTF-8 text with JSON escapes (\uXXXX only as a non-surrogate or a proper
//   surrogate pair); minLength / maxLength count code points (at most 10000).
// * Patterns: the strings the pattern matches, each character in one JSON spelling; an end
//   without its anchor (^, $) allows any text there, as a pattern matches anywhere.
// * Formats: date / time / date-time as RFC 3339 with upper-case T and Z, no leap second,
//   February 29 only in leap years; uuid as 8-4-4-4-12 hex digits; ipv4 dotted decimal; ipv6
//   in RFC 4291's forms (:: and a trailing IPv4 included); hostname as RFC 1123 labels (at most
//   6 of at most 41 characters, so within 253); email as a dot-atom local part (at most 3 atoms
//   of at most 20) @ a hostname of 2-4 labels; duration as RFC 3339's ISO 8601 durations
//   (P1Y2M3DT4H5M6S, P2W; at most 9 digits a number).
// * enum / const: each value written compactly as nlohmann::json dumps it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/grammar/gbnf.h"

namespace rw {

// The GBNF text for `schema` (root rule `root`). Property order is the order of `schema`.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// The same from JSON text (errors for malformed JSON too).
Result<std::string> json_schema_text_to_gbnf(std::string_view schema_json);
// Several schemas in one grammar, for grammars built around JSON values (tool calls): schema
// i becomes the rule named schemas[i].first ($ref "#" and "#/..." inside it resolve against
// schema i), followed by the shared primitives (value, string, ws, ...). The caller adds its
// own `root` rule. Names must not start with "schema" or "ref-" (generated rules do) nor repeat.
Result<std::string> json_schema_rules(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& schemas);
// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();
// Compiled to a Grammar (json_schema_to_gbnf, then parse_gbnf).
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema);

// A schema a client did not mark strict (OpenAI holds those to no grammar), made compilable:
// what the compiler refuses is taken out, so the grammar allows more than the schema there
// (its output may not validate at those places) and nothing else changes. Dropped: unknown
// keywords (not, ...) and formats, a multipleOf the subset lacks, keywords beside $ref or beside
// enum / const, an anyOf beside other keywords (they win), an allOf of several schemas, a format
// with a length, a pattern the subset lacks (a backreference, ...) or beside a format or a length,
// bounds on numbers that are not whole, required names that properties lacks; an allOf of one
// schema is that schema, a schema as additionalProperties becomes true, oneOf is read as
// anyOf (its $refs follow). Each change is appended to *relaxed ("'multipleOf' 0.25 at
// #/properties/n"). Malformed schemas stay malformed.
nlohmann::ordered_json relax_json_schema(const nlohmann::ordered_json& schema,
                                         std::vector<std::string>* relaxed);

// OpenAI's response_format object: {"type": "text"} gives no grammar; {"type":
// "json_object"} any JSON object (with llama.cpp's "schema": {...} beside the type, that
// schema's grammar, not strict); {"type": "json_schema", "json_schema": {"name": ...,
// "schema": {...}, "strict": ..., "description": ...}} the schema's grammar (no schema: any
// JSON value). A schema without "strict": true is relaxed first (relax_json_schema; the
// changes go to *relaxed when given); a strict one is compiled as it is, and what the compiler
// does not support is an error. Errors name the field.
Result<std::optional<std::string>> response_format_to_gbnf(
    const nlohmann::ordered_json& format, std::vector<std::string>* relaxed = nullptr);

}  // namespace rw
