// The parts of HTTP/1.1 request framing the transport decides around Boost.Beast's parser, as
// pure functions over bytes (unit tested and fuzzed): empty lines before a request line (RFC
// 9112 2.2), the request line's version (RFC 9110 2.5), the Transfer-Encoding list (RFC 9112
// 6.1, 6.3), the absolute-form target (RFC 9112 3.2.2), the Host field's syntax (RFC 9112 3.2)
// and an over-long method (RFC 9112 3).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rw::http_framing {

// Bytes of the complete empty lines (CRLF or LF, never a bare CR) at the start of s.
size_t leading_empty_lines(std::string_view s);

// The version of the request line at the start of s, 10 * major + minor, when the line ends
// with "HTTP/" digit "." digit (its CR LF, LF, or the end of s when the line is not yet
// complete); else -1. *minor_at: the offset of the minor digit in s.
int request_line_version(std::string_view s, size_t* minor_at);

// What a request's Transfer-Encoding (every field's value, joined by ", ") asks for, empty
// elements ignored: status 0 when the list is chunked alone; 400 when chunked is not last or
// appears twice (the body's length is unknown, or the sender broke RFC 9112 6.1); 501 when
// another coding precedes chunked.
struct TransferEncoding {
  int status = 0;
  std::string message;
};
TransferEncoding check_transfer_encoding(std::string_view value);

// The origin form of a request target: "http://host/p?q" (scheme case-insensitive, http or
// https) is "/p?q", "http://host" is "/"; any other target is returned as it is.
std::string origin_form(std::string_view target);

// Whether a Host field's value is uri-host [":" port] (RFC 3986 3.2.2: a reg-name of unreserved,
// percent-encoded and sub-delims characters, an IPv4 address, or an IP literal in brackets),
// optional whitespace around it allowed; empty is valid (RFC 9112 3.2: a target without an
// authority).
bool valid_host(std::string_view value);

// The longest method rewind implements is 7 bytes (OPTIONS, CONNECT); a request line whose
// first kMaxMethodBytes bytes hold no space has a method longer than any (501, RFC 9112 3).
inline constexpr size_t kMaxMethodBytes = 32;
bool method_too_long(std::string_view request_start);

}  // namespace rw::http_framing
