// http_framing: the request framing the transport decides around Beast's parser, byte by byte
// (the server tests send the same shapes over sockets).
#include "rewind/server/http_framing.h"

#include <gtest/gtest.h>

namespace rw::http_framing {
namespace {

TEST(HttpFraming, LeadingEmptyLines) {
  EXPECT_EQ(leading_empty_lines(""), 0u);
  EXPECT_EQ(leading_empty_lines("GET / HTTP/1.1\r\n"), 0u);
  EXPECT_EQ(leading_empty_lines("\r\nGET"), 2u);
  EXPECT_EQ(leading_empty_lines("\n\r\n\nGET"), 4u);
  EXPECT_EQ(leading_empty_lines("\r\n\r\n"), 4u);
  // A bare CR is not an empty line, nor is a CR whose LF has not arrived.
  EXPECT_EQ(leading_empty_lines("\rGET"), 0u);
  EXPECT_EQ(leading_empty_lines("\r\n\r"), 2u);
  EXPECT_EQ(leading_empty_lines("\r\r\n"), 0u);
  EXPECT_EQ(leading_empty_lines(" \r\n"), 0u);
}

TEST(HttpFraming, RequestLineVersion) {
  size_t at = 0;
  EXPECT_EQ(request_line_version("GET / HTTP/1.1\r\nHost: x\r\n\r\n", &at), 11);
  EXPECT_EQ(at, 13u);
  EXPECT_EQ(request_line_version("GET /a?b HTTP/1.2\r\n", &at), 12);
  EXPECT_EQ(at, 16u);
  EXPECT_EQ(request_line_version("GET / HTTP/2.0\n", &at), 20);
  EXPECT_EQ(request_line_version("GET / HTTP/1.1", &at), 11);  // not yet ended
  EXPECT_EQ(request_line_version("GET / HTTP/1.2\r", &at), 12);
  EXPECT_EQ(at, 13u);
  EXPECT_EQ(request_line_version("OPTIONS * HTTP/0.9\r\n", &at), 9);
  for (const char* bad :
       {"", "GET / HTTP/1.10\r\n", "GET / HTTP/x.1\r\n", "GET / HTTQ/1.1\r\n", "GET / HTTP/1.\r\n",
        "HTTP/1.1\r\n", "GET /HTTP/1.1\r\n", "GET / HTTP/1.1 \r\n", "\r\nGET / HTTP/1.1\r\n"})
    EXPECT_EQ(request_line_version(bad, &at), -1) << bad;
  // Only the first line counts.
  EXPECT_EQ(request_line_version("GET / HTTP/1.x\r\nX: HTTP/1.1\r\n", &at), -1);
}

TEST(HttpFraming, TransferEncoding) {
  EXPECT_EQ(check_transfer_encoding("chunked").status, 0);
  EXPECT_EQ(check_transfer_encoding(" Chunked\t").status, 0);
  // Empty elements are ignored (RFC 9110 5.6.1).
  EXPECT_EQ(check_transfer_encoding("chunked,").status, 0);
  EXPECT_EQ(check_transfer_encoding(" , chunked").status, 0);
  for (const char* bad : {"", ",", "gzip", "chunked, gzip", "identity"})
    EXPECT_EQ(check_transfer_encoding(bad).status, 400) << bad;
  const TransferEncoding twice = check_transfer_encoding("chunked, CHUNKED");
  EXPECT_EQ(twice.status, 400);
  EXPECT_NE(twice.message.find("more than once"), std::string::npos);
  EXPECT_EQ(check_transfer_encoding("gzip, x, chunked, chunked").status, 400);
  const TransferEncoding gz = check_transfer_encoding("gzip, chunked");
  EXPECT_EQ(gz.status, 501);
  EXPECT_NE(gz.message.find("'gzip, chunked'"), std::string::npos);
}

TEST(HttpFraming, OriginForm) {
  EXPECT_EQ(origin_form("/health?x=1"), "/health?x=1");
  EXPECT_EQ(origin_form("*"), "*");
  EXPECT_EQ(origin_form(""), "");
  EXPECT_EQ(origin_form("http://127.0.0.1/health"), "/health");
  EXPECT_EQ(origin_form("HTTPS://example.com:8080/v1/models?a=b"), "/v1/models?a=b");
  EXPECT_EQ(origin_form("http://example.com"), "/");
  EXPECT_EQ(origin_form("http://example.com?q"), "/?q");
  EXPECT_EQ(origin_form("ftp://example.com/x"), "ftp://example.com/x");
  EXPECT_EQ(origin_form("/p?u=http://x/y"), "/p?u=http://x/y");
}

TEST(HttpFraming, ValidHost) {
  for (const char* ok :
       {"", "example.com", "example.com:8080", "127.0.0.1", "127.0.0.1:80", "[::1]", "[::1]:8080",
        "[fe80::1%25eth0]", " x.y ", "a-b_c~d.e", "%41bc", "h:", "sub!$&'()*+,;=delims"})
    EXPECT_TRUE(valid_host(ok)) << ok;
  for (const char* bad : {"a b", "a/b", "a@b", "a?b", "a#b", "[::1", "[]", "[::1]x", "h:8o",
                          "h:80:81", "%4", "%zz", "\"q\"", "a\\b", "\x01", "[a b]"})
    EXPECT_FALSE(valid_host(bad)) << bad;
}

TEST(HttpFraming, MethodTooLong) {
  EXPECT_FALSE(method_too_long("GET / HTTP/1.1\r\n"));
  EXPECT_FALSE(method_too_long("AAAA"));  // not yet known
  EXPECT_FALSE(method_too_long(std::string(kMaxMethodBytes, 'A') + " /"));
  EXPECT_TRUE(method_too_long(std::string(kMaxMethodBytes + 1, 'A')));
  EXPECT_TRUE(method_too_long(std::string(20000, 'A') + " /health HTTP/1.1"));
}

}  // namespace
}  // namespace rw::http_framing
