// Loopback TCP ports for tests that start or imitate local servers (never the network).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rw::test {

// A TCP socket bound to 127.0.0.1:port (0: a port the kernel picks) and the port it holds; fd is
// -1 when the port is taken. The caller closes fd.
struct LoopbackSocket {
  int fd = -1;
  int port = 0;
};

inline LoopbackSocket bind_loopback(int port = 0) {
  LoopbackSocket s;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return s;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return s;
  }
  s.fd = fd;
  s.port = ntohs(a.sin_port);
  return s;
}

// A port where nothing listens now (bound, then closed); 0 if no socket could be bound.
inline int unused_port(int port = 0) {
  const LoopbackSocket s = bind_loopback(port);
  if (s.fd >= 0) close(s.fd);
  return s.port;
}

}  // namespace rw::test
