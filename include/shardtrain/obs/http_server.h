// A minimal HTTP/1.0 server on its own thread for Prometheus scrapes: GET /metrics answers with
// the text the callback returns; anything else is 404. One request per connection.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace shardtrain::obs {

class HttpServer {
 public:
  // Listens on 0.0.0.0:port (0: an ephemeral port); throws UsageError when it cannot.
  HttpServer(int port, std::function<std::string()> metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const { return port_; }

 private:
  void serve();
  void answer(int fd);
  int listen_fd_ = -1;
  int port_ = 0;
  std::function<std::string()> metrics_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardtrain::obs
