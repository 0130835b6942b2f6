#include "shardtrain/obs/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "shardtrain/runtime/error.h"

namespace shardtrain::obs {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "GET /metrics HTTP/1.1": an upper-case method, an origin-form target, HTTP/d.d.
bool valid_request_line(const std::string& line, std::string* method, std::string* target) {
  const size_t a = line.find(' '), b = a == std::string::npos ? a : line.find(' ', a + 1);
  if (a == 0 || b == std::string::npos || line.find(' ', b + 1) != std::string::npos) return false;
  *method = line.substr(0, a);
  *target = line.substr(a + 1, b - a - 1);
  const std::string version = line.substr(b + 1);
  if (!std::all_of(method->begin(), method->end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
    return false;
  if (target->empty() || (*target)[0] != '/' ||
      !std::all_of(target->begin(), target->end(), [](char c) { return c > 32 && c < 127; }))
    return false;
  return version.size() == 8 && version.compare(0, 5, "HTTP/") == 0 &&
         std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
         std::isdigit(static_cast<unsigned char>(version[7]));
}

std::string reply(const char* status, const std::string& body) {
  return std::string("HTTP/1.0 ") + status +
         "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

struct Connection {
  int fd = -1;
  double deadline = 0;
  std::string in, out;  // the request so far; the reply, once decided
  size_t sent = 0;
  bool replying = false;
};

// Whether a client still reading its request has sent nothing yet, neither read nor waiting in the
// socket.
bool silent(const Connection& c) {
  int pending = 0;
  return !c.replying && c.in.empty() && ::ioctl(c.fd, FIONREAD, &pending) == 0 && pending == 0;
}

void close_connection(Connection& c) {
  if (c.fd < 0) return;
  ::shutdown(c.fd, SHUT_WR);  // a FIN after the reply, so the client reads it to the end
  ::close(c.fd);
  c.fd = -1;
}

// Sends what the socket takes now; true when the whole reply is out (or the peer is gone).
bool send_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return true;
    c.sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

HttpVerdict classify_request(const std::string& received, size_t max_request_bytes) {
  const size_t eol = received.find('\n');
  if (eol == std::string::npos)
    return received.size() >= max_request_bytes ? HttpVerdict::kTooLarge : HttpVerdict::kIncomplete;
  std::string line = received.substr(0, eol), method, target;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (!valid_request_line(line, &method, &target))
    return HttpVerdict::kBadRequest;  // garbage: no need to wait for more
  size_t end = received.find("\r\n\r\n");
  if (end == std::string::npos) end = received.find("\n\n");
  if (end == std::string::npos || end >= max_request_bytes)
    return received.size() >= max_request_bytes ? HttpVerdict::kTooLarge : HttpVerdict::kIncomplete;
  if (method == "GET" && (target == "/metrics" || target.rfind("/metrics?", 0) == 0))
    return HttpVerdict::kMetrics;
  return HttpVerdict::kNotFound;
}

HttpServer::HttpServer(const std::string& bind_address, int port,
                       std::function<std::string()> metrics, HttpLimits limits)
    : metrics_(std::move(metrics)), limits_(limits) {
  const std::string where =
      "--metrics-port " + std::to_string(port) + " (--metrics-bind " + bind_address + ")";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags =
      AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;  // no name lookup: no network at run time
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(bind_address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0)
    throw runtime::UsageError("--metrics-bind " + bind_address + ": " + ::gai_strerror(rc) +
                              "; give an IP address of this host, e.g. 127.0.0.1 (this host only) "
                              "or 0.0.0.0 (every interface)");
  std::string why = "no address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    listen_fd_ =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (listen_fd_ < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one,
                 sizeof one);  // restart without TIME_WAIT trouble
    if (::bind(listen_fd_, a->ai_addr, a->ai_addrlen) == 0 && ::listen(listen_fd_, 128) == 0) break;
    why = std::strerror(errno);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0)
    throw runtime::UsageError(
        where + ": cannot listen (" + why +
        "); pick a free port and an address of this host, or leave --metrics-port off");
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
  ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
  address_ = bound.ss_family == AF_INET6 ? "[" + std::string(host) + "]" : host;
  port_ = std::atoi(serv);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw runtime::Error(std::string("metrics endpoint: pipe: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

HttpServer::~HttpServer() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void HttpServer::serve() {
  // Scrapes yield the CPU to training's threads: this thread alone runs 10 nice levels lower.
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice_now = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(nice_now + 10, 19));
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  char buf[4096];
  while (!stop_) {
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    double next = now_s() + 1;  // no connection: wake once a second anyway
    for (const auto& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.replying ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const int wait_ms = static_cast<int>(std::max(0.0, next - now_s()) * 1000) + 1;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;  // the destructor's wake-up
    const double now = now_s();
    for (size_t i = 0; i < conns.size(); ++i) {
      auto& c = conns[i];
      const short ev = fds[i + 2].revents;
      if (!c.replying && (ev & (POLLIN | POLLHUP | POLLERR))) {
        // Never more than the limit (+1 to see it crossed) is read from one client.
        const size_t room =
            limits_.max_request_bytes + 1 - std::min(c.in.size(), limits_.max_request_bytes);
        const ssize_t n = ::recv(c.fd, buf, std::min(sizeof buf, room), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          close_connection(c);  // the client gave up
          continue;
        }
        if (n > 0) c.in.append(buf, static_cast<size_t>(n));
        const HttpVerdict v = classify_request(c.in, limits_.max_request_bytes);
        if (v == HttpVerdict::kIncomplete) continue;
        c.replying = true;
        if (v == HttpVerdict::kMetrics) {
          try {
            c.out = reply("200 OK", metrics_());
          } catch (const std::exception& e) {
            c.out =
                reply("500 Internal Server Error", std::string("shardtrain: ") + e.what() + "\n");
          }
        } else if (v == HttpVerdict::kNotFound) {
          c.out = reply("404 Not Found", "shardtrain: scrape /metrics\n");
        } else if (v == HttpVerdict::kBadRequest) {
          c.out =
              reply("400 Bad Request", "shardtrain: not an HTTP request; scrape GET /metrics\n");
        } else {
          c.out = reply("431 Request Header Fields Too Large",
                        "shardtrain: requests are limited to " +
                            std::to_string(limits_.max_request_bytes) + " bytes\n");
        }
      }
      if (c.replying && send_some(c)) close_connection(c);
    }
    for (auto& c : conns)
      if (c.fd >= 0 && now >= c.deadline)
        close_connection(c);  // too slow to ask, or to read the reply
    conns.erase(
        std::remove_if(conns.begin(), conns.end(), [](const Connection& c) { return c.fd < 0; }),
        conns.end());
    if (!(fds[1].revents & POLLIN)) continue;
    for (int accepted = 0; accepted < limits_.max_connections; ++accepted) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      if (static_cast<int>(conns.size()) >= limits_.max_connections) {
        // Full: the oldest connection that has sent nothing makes room, else the oldest still
        // sending its request (it had the longest chance): a scrape whose request waits unread
        // is not dropped for a client that never spoke.
        auto victim = std::find_if(conns.begin(), conns.end(), silent);
        if (victim == conns.end())
          victim = std::find_if(conns.begin(), conns.end(),
                                [](const Connection& c) { return !c.replying; });
        if (victim == conns.end()) victim = conns.begin();
        close_connection(*victim);
        conns.erase(victim);
      }
      conns.push_back({fd, now_s() + limits_.deadline_s, {}, {}, 0, false});
    }
  }
  for (auto& c : conns) close_connection(c);
}

}  // namespace shardtrain::obs
