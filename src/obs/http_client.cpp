#include "shardtrain/obs/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <mutex>
#include <utility>

namespace shardtrain::obs {
namespace {

void global_init() {  // curl_global_init is not thread-safe on every platform: once, before any
                      // handle
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw HttpError("libcurl failed to initialize");
  });
}

size_t append_body(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

HttpClient::HttpClient(std::string base_url, HttpTimeouts timeouts, std::string bearer_token,
                       std::string user, std::string password)
    : base_(std::move(base_url)),
      timeouts_(timeouts),
      bearer_(std::move(bearer_token)),
      user_(std::move(user)),
      password_(std::move(password)) {
  global_init();
  curl_ = curl_easy_init();
  if (!curl_) throw HttpError("libcurl could not create a handle");
}

HttpClient::~HttpClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpClient::HttpClient(HttpClient&& other) noexcept
    : base_(std::move(other.base_)),
      timeouts_(other.timeouts_),
      bearer_(std::move(other.bearer_)),
      user_(std::move(other.user_)),
      password_(std::move(other.password_)),
      curl_(std::exchange(other.curl_, nullptr)) {}

HttpClient& HttpClient::operator=(HttpClient&& other) noexcept {
  if (this != &other) {
    if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
    base_ = std::move(other.base_);
    timeouts_ = other.timeouts_;
    bearer_ = std::move(other.bearer_);
    user_ = std::move(other.user_);
    password_ = std::move(other.password_);
    curl_ = std::exchange(other.curl_, nullptr);
  }
  return *this;
}

HttpResponse HttpClient::get(const std::string& path) { return perform(path, nullptr); }

HttpResponse HttpClient::post_json(const std::string& path, const std::string& body) {
  return perform(path, &body);
}

HttpResponse HttpClient::perform(const std::string& path, const std::string* post_body) {
  if (!curl_) throw HttpError("the HTTP client was moved from");
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the connection cache: the next request to the server reuses it
  const std::string url = base_ + path;
  HttpResponse r;
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!bearer_.empty())
    headers = curl_slist_append(headers, ("Authorization: Bearer " + bearer_).c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // a helper thread: no SIGALRM for DNS timeouts
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeouts_.connect_ms);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeouts_.total_ms);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  if (!user_.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, user_.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, password_.c_str());
  }
  if (post_body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, post_body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(post_body->size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK)
    throw HttpError(std::string(error[0] ? error : curl_easy_strerror(rc)) + " (" + url + ")");
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  return r;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

}  // namespace shardtrain::obs
