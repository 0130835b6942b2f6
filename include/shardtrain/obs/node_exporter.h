// --metrics-port: node-local rank 0 serves /metrics for every rank of its node. Each step, the
// node's ranks gather their values to it over a node communicator (a few hundred bytes).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardtrain/obs/http_server.h"
#include "shardtrain/obs/prometheus.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::obs {

class NodeExporter {
 public:
  // Collective over MPI_COMM_WORLD. Simulated nodes that share a host (--ranks-per-node) listen
  // on port + 1, port + 2, ... so that each still has its own endpoint. bind: --metrics-bind.
  NodeExporter(const std::string& bind, int port, std::string job, const runtime::Topology& topo,
               const std::vector<std::string>& hosts);
  void publish(const RankSeries& mine);  // collective over the node: every rank, every step
  int port() const { return server_ ? server_->port() : 0; }  // 0 on ranks that do not serve
  std::string text();  // the endpoint's thread only: formats once per published step

 private:
  std::string job_;
  runtime::MpiComm node_;
  std::vector<int> members_;  // world ranks of this node, by node-local rank
  std::vector<std::string> hosts_;
  std::mutex mu_;
  std::vector<RankSeries> latest_;  // formatted only when scraped, not every step
  uint64_t published_ = 0;          // steps published; guarded by mu_
  uint64_t formatted_ = 0;          // the step text_ holds; the endpoint's thread only
  std::string text_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace shardtrain::obs
