// Whether an HTTP client is still there while its non-streamed request runs. cpp-httplib (Debian's 0.11) hands a
// handler no socket and writes nothing until the handler returns, so a client that goes away mid-generation
// would leave its request running to the end. A ConnectionWatch finds the handler's connection among the
// process's sockets by its two ends (the request's local and remote address and port: unique while the handler
// holds it) and peeks at it: end of stream or a reset means the client is gone (HTTP/1.1 clients send nothing
// more while they wait, and one that pipelines a request keeps it readable, so not gone).
#pragma once
#include <string>

namespace loom {

class ConnectionWatch {
 public:
  // local/remote: the request's ends (httplib::Request local_addr, local_port, remote_addr, remote_port).
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // The connection was found (else gone() is always false).
  bool found() const { return fd_ >= 0; }
  // The client closed or reset the connection.
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace loom
