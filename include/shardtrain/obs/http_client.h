// A blocking HTTP/HTTPS client over one libcurl handle, with short timeouts: for the experiment
// trackers' background threads, never for the training loop itself.
#pragma once
#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::obs {

struct HttpTimeouts {
  long connect_ms =
      2000;  // a server that is down answers at once; an unreachable host waits this long
  long total_ms = 5000;  // the whole request, so a stalled server costs at most this much
};

struct HttpResponse {
  long status = 0;  // the HTTP status code
  std::string body;
};

// A request that got no HTTP answer: refused, timed out, DNS, TLS.
class HttpError : public runtime::Error {
 public:
  using runtime::Error::Error;
};

class HttpClient {
 public:
  // base_url: scheme://host[:port][/prefix], without a trailing slash. An Authorization header is
  // sent when bearer_token, or basic auth when user, is non-empty.
  HttpClient(std::string base_url, HttpTimeouts timeouts, std::string bearer_token = "",
             std::string user = "", std::string password = "");
  ~HttpClient();
  HttpClient(HttpClient&& other) noexcept;
  HttpClient& operator=(HttpClient&& other) noexcept;
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Any HTTP status is returned; HttpError when there is none. path starts with '/'.
  HttpResponse get(const std::string& path);
  HttpResponse post_json(const std::string& path, const std::string& body);
  const std::string& base_url() const { return base_; }

 private:
  HttpResponse perform(const std::string& path, const std::string* post_body);

  std::string base_;
  HttpTimeouts timeouts_;
  std::string bearer_, user_, password_;
  void* curl_ = nullptr;  // CURL*: the connection is kept alive between requests
};

// Percent-encodes s for a URL's query string.
std::string url_encode(const std::string& s);

}  // namespace shardtrain::obs
