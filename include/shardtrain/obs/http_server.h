// A small HTTP/1.0 server on its own thread for Prometheus scrapes: GET /metrics answers with
// the text the callback returns, other paths 404, anything unparsable 400. One request per
// connection. It serves every open connection from one poll() loop, so a client that sends
// nothing, dribbles bytes, sends garbage or a huge request holds at most one slot for at most
// HttpLimits::deadline_s, and never blocks the other scrapes or the training thread.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>

namespace shardtrain::obs {

struct HttpLimits {
  size_t max_request_bytes = 8192;  // the request line and headers; a scrape sends ~200
  double deadline_s = 5;            // from accept to the last byte of the reply
  int max_connections = 64;         // open at once; past it the oldest still-reading one is dropped
};

// What a complete (or oversized) request head asks for, and the reply it gets.
enum class HttpVerdict { kIncomplete, kMetrics, kNotFound, kBadRequest, kTooLarge };
// Pure: classifies the bytes received so far on one connection.
HttpVerdict classify_request(const std::string& received, size_t max_request_bytes);

class HttpServer {
 public:
  // Listens on bind_address:port (port 0: an ephemeral one); throws UsageError naming
  // --metrics-bind or --metrics-port when it cannot.
  HttpServer(const std::string& bind_address, int port, std::function<std::string()> metrics,
             HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const { return port_; }
  const std::string& address() const { return address_; }  // numeric, as bound (IPv6 in brackets)

 private:
  void serve();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to it to end poll() at once
  int port_ = 0;
  std::string address_;
  std::function<std::string()> metrics_;
  HttpLimits limits_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardtrain::obs
