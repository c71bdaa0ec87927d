// Whether an HTTP client is still there while its handler waits for the
// engine. cpp-httplib (0.11) gives a handler no hook for a closed
// connection, and a non-streaming handler writes nothing until the end; so
// this finds the connection's socket among the process's descriptors by its
// address pair (which the request carries) and peeks at it: end of stream
// or an error means the client went away.
#pragma once

#include <string>

namespace dsv4 {

class ConnectionWatch {
 public:
  // local/remote: the connection's two ends as the request reports them.
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // True once the peer has closed (or reset) the connection. A client that
  // only half-closes after sending its request counts as gone too; HTTP
  // clients do not do that.
  bool client_gone() const;
  bool watching() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace dsv4
