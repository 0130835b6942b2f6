// The MLflow client's pure parts against MLflow's documented limits and key rules, and the
// tracker against servers that never answer (a listening socket nobody accepts on) or refuse
// (a closed port): the training side's calls return at once and the end is bounded. The real
// server's side is tests/python/mlflow_tests.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>

#include "shardtrain/obs/mlflow_client.h"
#include "shardtrain/obs/mlflow_tracker.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

namespace {

// MLflow's REST documentation, "Request Limits" of runs/log-batch.
constexpr size_t kDocMetrics = 1000, kDocParams = 100, kDocTags = 100, kDocTotal = 1000,
                 kDocBytes = 1000 * 1000;

// A TCP port on loopback that listens but never accepts: connections complete, answers never come.
struct SilentServer {
  int fd = -1;
  int port = 0;
  SilentServer() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on loopback");
    port = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd); }
};

int closed_port() {  // bound, then closed: nothing listens there
  SilentServer s;
  return s.port;
}

std::vector<obs::MlflowMetric> batch(int step) {
  std::vector<obs::MlflowMetric> b;
  for (int k = 0; k < 20; ++k) b.push_back({"m" + std::to_string(k), 0.5 * k, 1700000000000, step});
  return b;
}

// The tracker's failure lines in captured stderr, and the metric batches they count as dropped.
std::vector<std::string> failure_lines(const std::string& err, int64_t* dropped) {
  std::vector<std::string> lines;
  *dropped = 0;
  const std::regex re(
      R"(MLflow at \S+: (\d+) requests? failed and (\d+) metric batch(es were| was) dropped)");
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    lines.push_back(line);
    *dropped += std::stoll(m[2]);
  }
  return lines;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(MlflowClient, LogBatchBodiesKeepEveryItemInOrderWithinMlflowsLimits) {
  std::vector<obs::MlflowMetric> metrics;
  for (int i = 0; i < 2500; ++i) metrics.push_back({"loss", static_cast<double>(i), 1, i});
  obs::KeyValues params, tags;
  for (int i = 0; i < 250; ++i)
    params.emplace_back("p" + std::to_string(i), std::string(5000, 'x'));  // 1.25 MB of params
  for (int i = 0; i < 120; ++i) tags.emplace_back("t" + std::to_string(i), "v");
  const auto bodies = obs::log_batch_bodies("run1", metrics, params, tags);
  size_t n_metrics = 0, n_params = 0, n_tags = 0;
  for (const auto& b : bodies) {
    const size_t m = b.value("metrics", nlohmann::json::array()).size(),
                 p = b.value("params", nlohmann::json::array()).size(),
                 t = b.value("tags", nlohmann::json::array()).size();
    EXPECT_EQ(b["run_id"], "run1");
    EXPECT_LE(m, kDocMetrics);
    EXPECT_LE(p, kDocParams);
    EXPECT_LE(t, kDocTags);
    EXPECT_LE(m + p + t, kDocTotal);
    EXPECT_LT(b.dump().size(), kDocBytes);
    for (size_t i = 0; i < m; ++i)
      EXPECT_EQ(b["metrics"][i]["step"], static_cast<int64_t>(n_metrics + i));
    for (size_t i = 0; i < p; ++i)
      EXPECT_EQ(b["params"][i]["key"], "p" + std::to_string(n_params + i));
    for (size_t i = 0; i < t; ++i) EXPECT_EQ(b["tags"][i]["key"], "t" + std::to_string(n_tags + i));
    n_metrics += m;
    n_params += p;
    n_tags += t;
  }
  EXPECT_EQ(n_metrics, 2500u);
  EXPECT_EQ(n_params, 250u);
  EXPECT_EQ(n_tags, 120u);
  EXPECT_TRUE(obs::log_batch_bodies("run1", {}).empty());
}

TEST(MlflowClient, ValuesAreCutToMlflowsLengthsAndNonFiniteMetricsAreProtobufJsonStrings) {
  const auto bodies = obs::log_batch_bodies(
      "r", {{"a", std::nan(""), 1, 1}, {"b", -INFINITY, 1, 1}, {"c", 2.5, 1, 1}},
      {{"long", std::string(7000, 'y')}}, {{"tag", std::string(9000, 'z')}});
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(bodies[0]["params"][0]["value"].get<std::string>().size(),
            6000u);  // MLflow's param value limit
  EXPECT_EQ(bodies[0]["tags"][0]["value"].get<std::string>().size(), 8000u);  // and tag value limit
  EXPECT_EQ(bodies[0]["metrics"][0]["value"], "NaN");
  EXPECT_EQ(bodies[0]["metrics"][1]["value"], "-Infinity");
  EXPECT_EQ(bodies[0]["metrics"][2]["value"], 2.5);
}

TEST(MlflowClient, KeysFollowMlflowsNameRules) {
  // Allowed: letters, digits, _ - . / : and space; a path normalization must not change the key.
  EXPECT_EQ(obs::mlflow_key("comm/world/all_gather/bytes"), "comm/world/all_gather/bytes");
  EXPECT_EQ(obs::mlflow_key("phases/data wait:1.5"), "phases/data wait:1.5");
  EXPECT_EQ(obs::mlflow_key("a//b/"), "a/b");
  EXPECT_EQ(obs::mlflow_key("/abs/./x"), "abs/x");
  EXPECT_EQ(obs::mlflow_key("../up"), "__/up");
  EXPECT_EQ(obs::mlflow_key("μ=1"), "___1");  // two UTF-8 bytes and '='
  EXPECT_EQ(obs::mlflow_key(""), "_");
  EXPECT_EQ(obs::mlflow_key(std::string(300, 'k')).size(), 250u);
}

TEST(MlflowClient, OnlyHttpUrisAreTrackingServers) {
  EXPECT_NO_THROW(obs::check_mlflow_uri("http://127.0.0.1:5000"));
  EXPECT_NO_THROW(obs::check_mlflow_uri("https://mlflow.example.com/prefix"));
  EXPECT_NO_THROW(obs::check_mlflow_uri(""));  // off
  for (const char* bad :
       {"file:///tmp/mlruns", "/tmp/mlruns", "mlruns", "databricks", "http://", "sqlite:///m.db"}) {
    try {
      obs::check_mlflow_uri(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const runtime::UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--mlflow-uri"), std::string::npos) << what;
      EXPECT_NE(what.find("mlflow server"), std::string::npos) << what;
    }
  }
}

TEST(MlflowTracker, AServerThatNeverAnswersNeitherBlocksLoggingNorHoldsTheEndPastItsBound) {
  SilentServer silent;
  obs::MlflowTrackerLimits limits;
  limits.queue_batches = 8;
  limits.drain_s = 1;
  limits.timeouts = {500, 700};
  testing::internal::CaptureStderr();
  // Bounds a loaded 2-core machine (ctest -j2, MPI tests beside) cannot miss, far from what the
  // faults would cost: a log() that waited on the server, even only once the queue is full, costs
  // over 90 x 0.5 s; an end() that waited for the silent server would never return.
  double logging_s = 0;
  {
    obs::MlflowTracker tracker(
        {"http://127.0.0.1:" + std::to_string(silent.port), "e", "r", {{"p", "1"}}, {}}, 0, "host",
        limits);
    const auto t = std::chrono::steady_clock::now();
    for (int step = 1; step <= 100; ++step) tracker.log(batch(step));
    logging_s = seconds_since(t);
    const auto end = std::chrono::steady_clock::now();
    tracker.end(obs::RunStatus::kFinished);
    // The drain, one request in flight past it, and the run's creation tried once more; 10 s for
    // the scheduler.
    EXPECT_LT(seconds_since(end), limits.drain_s + 3 * 0.7 + 10.0);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_LT(logging_s, 10.0) << "log() waited on the server (a request waits 0.5-0.7 s)";
  int64_t dropped = 0;
  const auto lines = failure_lines(err, &dropped);
  EXPECT_GE(lines.size(), 1u) << err;
  EXPECT_LE(lines.size(), 2u) << "one line at the first failure, one at the end, within a minute: "
                              << err;
  EXPECT_EQ(dropped, 100)
      << "every batch is counted once: queue full, no run to log to, or left at the end\n"
      << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
}

TEST(MlflowTracker, AServerThatIsDownCostsNoTime) {
  const int port = closed_port();
  // Waiting for any of these would cost 30 s; a refused connection costs none, so 10 s is slack for
  // a loaded machine.
  obs::MlflowTrackerLimits limits;
  limits.drain_s = 30;
  limits.timeouts = {30000, 60000};
  testing::internal::CaptureStderr();
  const auto t = std::chrono::steady_clock::now();
  {
    obs::MlflowTracker tracker({"http://127.0.0.1:" + std::to_string(port), "e", "", {}, {}}, 0,
                               "host", limits);
    for (int step = 1; step <= 10; ++step) tracker.log(batch(step));
    tracker.end(obs::RunStatus::kKilled);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds_since(t), 10.0);  // refused at once: no timeout is waited for
  int64_t dropped = 0;
  const auto lines = failure_lines(err, &dropped);
  EXPECT_EQ(dropped, 10) << err;
  ASSERT_FALSE(lines.empty()) << err;
  EXPECT_NE(lines.back().find("KILLED was not sent"), std::string::npos) << lines.back();
}
