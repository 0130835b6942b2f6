// Observability parts without a cluster: the phase summary and straggler, the watchdog's verdict,
// the collective log, the Prometheus text, the banner's host ranges, and the HTTP endpoint on
// loopback against clients that send nothing, garbage or too much.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "shardtrain/cli/banner.h"
#include "shardtrain/comm/collective_log.h"
#include "shardtrain/obs/collective_watchdog.h"
#include "shardtrain/obs/http_server.h"
#include "shardtrain/obs/prometheus.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/phases.h"
#include "shardtrain/train/metrics.h"

using namespace shardtrain;

namespace {
runtime::PhaseTimes phases(double data, double fwd, double bwd, double opt, double comm,
                           double ckpt) {
  runtime::PhaseTimes p;
  p.s = {data, fwd, bwd, opt, comm, ckpt};
  return p;
}
}  // namespace

TEST(Phases, SummaryIsMinMedianMaxAndTheStragglerIsTheBusiestRank) {
  // Rank 2 loads data slowly; the others wait for it in their collectives.
  const std::vector<runtime::PhaseTimes> ranks = {
      phases(0.01, 0.10, 0.20, 0.05, 0.30, 0), phases(0.02, 0.11, 0.19, 0.05, 0.29, 0),
      phases(0.31, 0.10, 0.20, 0.05, 0.01, 0), phases(0.01, 0.12, 0.21, 0.05, 0.28, 0)};
  const runtime::PhaseSummary s = runtime::summarize_phases(ranks);
  EXPECT_DOUBLE_EQ(s.min[0], 0.01);
  EXPECT_DOUBLE_EQ(s.max[0], 0.31);
  EXPECT_DOUBLE_EQ(s.median[0], 0.015);
  EXPECT_DOUBLE_EQ(s.median[1], 0.105);
  EXPECT_DOUBLE_EQ(s.max[static_cast<int>(runtime::Phase::kExposedComm)], 0.30);
  EXPECT_EQ(s.straggler, 2);
  EXPECT_NEAR(s.straggler_busy_s, 0.66, 1e-12);
  EXPECT_NEAR(s.median_busy_s, (0.37 + 0.39) / 2, 1e-12);  // busy: 0.36, 0.37, 0.66, 0.39
  EXPECT_NEAR(ranks[2].total(), 0.67, 1e-12);
  const std::string line = obs::breakdown_line(s, 4, {"a", "b", "slowhost", "d"});
  EXPECT_NE(line.find("data_wait 0.010/0.015/0.310"), std::string::npos) << line;
  EXPECT_NE(line.find("straggler: rank 2 (slowhost)"), std::string::npos) << line;
}

TEST(Phases, DurationsPrintLikeAClock) {
  EXPECT_EQ(train::format_duration(42.4), "42s");
  EXPECT_EQ(train::format_duration(185), "3m05s");
  EXPECT_EQ(train::format_duration(2 * 3600 + 14 * 60 + 59), "2h14m");
}

namespace {
obs::Heartbeat beat(double gid, double started, double oldest, double age) {
  obs::Heartbeat b;
  b.groups[0] = {gid, started, oldest ? oldest - 1 : started, oldest, 2, age};
  return b;
}
}  // namespace

TEST(Watchdog, NamesTheRanksThatHaveNotReachedTheStuckCollective) {
  // Ranks 0, 2, 3 wait in #9 for 12 s; rank 1 last issued #8.
  std::vector<obs::Heartbeat> beats = {beat(0, 9, 9, 12.0), beat(0, 8, 0, 0), beat(0, 9, 9, 11.5),
                                       beat(0, 9, 9, 11.9)};
  const obs::Verdict v = obs::judge(beats, 10.0);
  ASSERT_TRUE(v.stuck);
  EXPECT_EQ(v.seq, 9);
  EXPECT_EQ(v.group, 0);
  EXPECT_EQ(v.missing, std::vector<int>({1}));
  EXPECT_EQ(v.waiting, std::vector<int>({0, 2, 3}));
  const std::string msg = obs::verdict_message(v, beats, {"h0", "h1", "h2", "h3"},
                                               {"world", "shard", "replicate"}, 10, 76);
  EXPECT_NE(msg.find("all_reduce #9 on the world group"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Not reached by rank 1 (h1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("code 76"), std::string::npos) << msg;
}

TEST(Watchdog, NoVerdictBeforeTheTimeoutAndOtherGroupInstancesAreNotBlamed) {
  std::vector<obs::Heartbeat> beats = {beat(0, 9, 9, 9.9), beat(0, 8, 0, 0)};
  EXPECT_FALSE(obs::judge(beats, 10.0).stuck);
  // Two shard groups {0,1} (id 0) and {2,3} (id 2): only group 0's laggard is named.
  beats = {beat(0, 5, 5, 30), beat(0, 4, 0, 0), beat(2, 3, 0, 0), beat(2, 3, 0, 0)};
  const obs::Verdict v = obs::judge(beats, 10.0);
  ASSERT_TRUE(v.stuck);
  EXPECT_EQ(v.missing, std::vector<int>({1}));
  // Everyone issued it: the transport is stuck, and the message says so.
  beats = {beat(0, 5, 5, 30), beat(0, 5, 5, 29)};
  const obs::Verdict t = obs::judge(beats, 10.0);
  ASSERT_TRUE(t.stuck);
  EXPECT_TRUE(t.missing.empty());
  EXPECT_NE(obs::verdict_message(t, beats, {"a", "b"}, {"world", "shard", "replicate"}, 10, 76)
                .find("transport"),
            std::string::npos);
}

TEST(CollectiveLog, NumbersInIssueOrderAndAgesOnlyWhileTheHostWaits) {
  comm::CollectiveLog log(4);
  const int64_t a = log.started(comm::Op::kAllGather, 100);
  const int64_t b = log.started(comm::Op::kReduceScatter, 200);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  auto s = log.state();
  EXPECT_EQ(s.started, 2);
  EXPECT_EQ(s.finished, 0);
  EXPECT_EQ(s.oldest_in_flight, 1);
  EXPECT_EQ(s.oldest_age_s, 0);  // a prefetch nobody waits for is not stuck
  log.waiting(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_GE(log.state().oldest_age_s, 0.025);
  log.finished(a);
  s = log.state();
  EXPECT_EQ(s.finished, 1);
  EXPECT_EQ(s.oldest_in_flight, 2);
  bool done = false;  // a probed (NCCL-style) collective ages from its issue and ends by its probe
  const int64_t c = log.started(comm::Op::kAllReduce, 8, [&] { return done; });
  log.finished(b);
  EXPECT_EQ(log.state().oldest_in_flight, c);
  EXPECT_GT(log.state().oldest_age_s, 0);
  done = true;
  EXPECT_EQ(log.state().oldest_in_flight, 0);
  for (int i = 0; i < 10; ++i) log.finished(log.started(comm::Op::kBarrier, 0));
  const auto h = log.history();
  ASSERT_EQ(h.size(), 4u);  // only the newest `keep` once finished
  EXPECT_EQ(h.back().seq, 13);
  EXPECT_NE(comm::describe(h.back(), comm::CollectiveLog::now()).find("#13 barrier"),
            std::string::npos);
}

TEST(Prometheus, TextFormatHasOneFamilyPerMetricAndEveryRankLabelled) {
  obs::RankSeries a, b;
  a.rank = 0, a.host = "node-a", a.step = 7, a.skipped_steps = 3, a.loss = 1.2345678901234567,
  a.phases[runtime::Phase::kForward] = 0.5;
  a.calls[1][static_cast<int>(comm::Op::kAllGather)] = 14,
  a.bytes[1][static_cast<int>(comm::Op::kAllGather)] = 1 << 20;
  b.rank = 1;
  b.host = "node\"b", b.step = 7, b.gpu_peak_allocated = 123, b.gpu_peak_reserved = 456;
  const std::string t = obs::exposition("job-42", {a, b});
  EXPECT_NE(t.find("# TYPE shardtrain_loss gauge\n"), std::string::npos);
  EXPECT_NE(
      t.find("shardtrain_loss{job=\"job-42\",host=\"node-a\",rank=\"0\"} 1.2345678901234567\n"),
      std::string::npos);
  EXPECT_NE(t.find("host=\"node\\\"b\""), std::string::npos)
      << "quotes in label values are escaped";
  EXPECT_NE(t.find("shardtrain_phase_seconds{job=\"job-42\",host=\"node-a\",rank=\"0\",phase="
                   "\"forward\"} 0.5\n"),
            std::string::npos);
  EXPECT_NE(t.find("shardtrain_collectives_total{job=\"job-42\",host=\"node-a\",rank=\"0\",group="
                   "\"shard\",op=\"all_gather\"} 14\n"),
            std::string::npos);
  EXPECT_NE(t.find("# TYPE shardtrain_collective_bytes_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE shardtrain_skipped_steps_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("shardtrain_skipped_steps_total{job=\"job-42\",host=\"node-a\",rank=\"0\"} 3\n"),
            std::string::npos);
  EXPECT_NE(t.find("kind=\"gpu_peak_reserved\"} 456"), std::string::npos);
  EXPECT_EQ(t.find("rank=\"0\",kind=\"gpu_peak_allocated\""), std::string::npos)
      << "a CPU rank has no GPU series";
  size_t families = 0;
  for (size_t p = t.find("# TYPE "); p != std::string::npos; p = t.find("# TYPE ", p + 1))
    ++families;
  EXPECT_EQ(families, 13u);
  const auto round = obs::RankSeries::unpack(a.pack().data(), 0, "node-a");
  EXPECT_EQ(round.pack(), a.pack());
  EXPECT_EQ(static_cast<int>(a.pack().size()), obs::RankSeries::packed_size());
}

TEST(Prometheus, DpoRunsServeTrlsMetricsAsOneLabelledFamily) {
  obs::RankSeries a;
  a.rank = 0, a.host = "h";
  EXPECT_EQ(obs::exposition("j", {a}).find("shardtrain_preference"), std::string::npos)
      << "not a DPO run: no family";
  a.pairs = 16;
  for (int k = 0; k < obs::kNumPreferenceMetrics; ++k) a.preference[k] = 0.25 * (k + 1);
  const std::string t = obs::exposition("j", {a});
  EXPECT_NE(t.find("# TYPE shardtrain_preference gauge\n"), std::string::npos);
  EXPECT_NE(t.find("shardtrain_preference{job=\"j\",host=\"h\",rank=\"0\",metric=\"rewards/"
                   "accuracies\"} 0.75\n"),
            std::string::npos);
  EXPECT_NE(t.find("metric=\"logps/rejected\"} 1.5\n"), std::string::npos);
  const auto round = obs::RankSeries::unpack(a.pack().data(), 0, "h");
  EXPECT_EQ(round.pack(), a.pack()) << "the DPO figures travel to rank 0 with the rest";
}

TEST(Banner, HostRangesCollapseConsecutiveRanks) {
  EXPECT_EQ(obs::host_ranges({"a", "a", "b", "b", "b", "c"}),
            "a: ranks 0-1; b: ranks 2-4; c: rank 5");
  EXPECT_EQ(obs::host_ranges({"a", "b", "a"}), "a: rank 0; b: rank 1; a: rank 2");
}

TEST(HttpServer, RequestsAreClassifiedFromTheirFirstLineAndSize) {
  using obs::HttpVerdict;
  const auto v = [](const std::string& r) { return obs::classify_request(r, 64); };
  EXPECT_EQ(v("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), HttpVerdict::kMetrics);
  EXPECT_EQ(v("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), HttpVerdict::kMetrics);
  EXPECT_EQ(v("GET /metrics HTTP/1.1\n\n"), HttpVerdict::kMetrics);
  EXPECT_EQ(v("GET /other HTTP/1.1\r\n\r\n"), HttpVerdict::kNotFound);
  EXPECT_EQ(v("POST /metrics HTTP/1.1\r\n\r\n"), HttpVerdict::kNotFound);
  EXPECT_EQ(v("GET /metr"), HttpVerdict::kIncomplete);
  EXPECT_EQ(v("GET /metrics HTTP/1.1\r\nHost: x\r\n"), HttpVerdict::kIncomplete)
      << "headers not ended yet";
  EXPECT_EQ(v("\x16\x03\x01 junk\r\n"), HttpVerdict::kBadRequest)
      << "garbage is refused at its first line";
  EXPECT_EQ(v("GET  /metrics HTTP/1.1\r\n\r\n"), HttpVerdict::kBadRequest);
  EXPECT_EQ(v("GET /metrics HTTP/1.1 extra\r\n\r\n"), HttpVerdict::kBadRequest);
  EXPECT_EQ(v("get /metrics HTTP/1.1\r\n\r\n"), HttpVerdict::kBadRequest);
  EXPECT_EQ(v("GET metrics HTTP/1.1\r\n\r\n"), HttpVerdict::kBadRequest);
  EXPECT_EQ(v(std::string(64, 'G')), HttpVerdict::kTooLarge) << "no line end within the limit";
  EXPECT_EQ(v("GET /metrics HTTP/1.1\r\nX: " + std::string(80, 'a')), HttpVerdict::kTooLarge);
}

namespace {
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}
// Sends `request`, reads to EOF (or reset); the reply and the seconds it took.
std::pair<std::string, double> exchange(int port, const std::string& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = connect_loopback(port);
  if (!request.empty()) (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return {got, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}
}  // namespace

TEST(HttpServer, SilentClientsNeitherBlockScrapesNorStayOpen) {
  // Bounds a loaded 2-core machine cannot miss: what waits for the silent clients waits their 8 s
  // deadline, what does not takes milliseconds; the closing ones wait it, plus 10 s for the
  // scheduler.
  obs::HttpLimits limits;
  limits.deadline_s = 8;
  limits.max_connections = 4;
  obs::HttpServer server(
      "127.0.0.1", 0, [] { return std::string("shardtrain_step 3\n"); }, limits);
  EXPECT_EQ(server.address(), "127.0.0.1");
  std::vector<int> silent;
  for (int i = 0; i < 6; ++i)
    silent.push_back(connect_loopback(server.port()));  // more than max_connections
  const auto [reply, secs] = exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("\r\n\r\nshardtrain_step 3\n"), std::string::npos) << reply;
  EXPECT_LT(secs, limits.deadline_s / 2) << "a scrape does not wait for the silent clients";
  const auto [bad, bad_secs] = exchange(server.port(), "\x01\x02garbage\r\n\r\n");
  EXPECT_EQ(bad.rfind("HTTP/1.0 400 Bad Request", 0), 0u) << bad;
  const auto [big, big_secs] =
      exchange(server.port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'x'));
  EXPECT_TRUE(big.empty() || big.rfind("HTTP/1.0 431", 0) == 0) << big.substr(0, 80);
  EXPECT_LT(big_secs, limits.deadline_s / 2)
      << "an oversized request is answered at once, not at its deadline";
  const auto t0 = std::chrono::steady_clock::now();
  char c;
  for (int fd : silent) {  // each is closed by the server: dropped for room, or at the deadline
    EXPECT_LE(::recv(fd, &c, 1, 0), 0);
    ::close(fd);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            limits.deadline_s + 10);
}

TEST(HttpServer, BindErrorsNameTheOption) {
  try {
    obs::HttpServer server("300.1.2.3", 0, [] { return std::string(); });
    FAIL() << "bound to 300.1.2.3";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-bind 300.1.2.3"), std::string::npos)
        << e.what();
  }
  obs::HttpServer first("127.0.0.1", 0, [] { return std::string(); });
  try {
    obs::HttpServer second("127.0.0.1", first.port(), [] { return std::string(); });
    FAIL() << "two servers on one port";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-port " + std::to_string(first.port()) +
                                         " (--metrics-bind 127.0.0.1): cannot listen"),
              std::string::npos)
        << e.what();
  }
}
