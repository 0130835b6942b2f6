#include "shardtrain/obs/node_exporter.h"

#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::obs {

NodeExporter::NodeExporter(const std::string& bind, int port, std::string job,
                           const runtime::Topology& topo, const std::vector<std::string>& hosts)
    : job_(std::move(job)), hosts_(hosts) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, topo.node, topo.local_rank, &node));
  node_ = runtime::MpiComm(node);
  members_.resize(static_cast<size_t>(node_.size()));
  MPI_CHECK(MPI_Allgather(&topo.rank, 1, MPI_INT, members_.data(), 1, MPI_INT, node_.get()));
  std::vector<int> node_of(
      static_cast<size_t>(topo.world));  // every rank's node, for the port offset
  MPI_CHECK(MPI_Allgather(&topo.node, 1, MPI_INT, node_of.data(), 1, MPI_INT, MPI_COMM_WORLD));
  if (topo.local_rank != 0) return;
  int offset = 0;  // earlier nodes whose first rank runs on this host
  for (int n = 0; n < topo.node; ++n)
    for (int r = 0; r < topo.world; ++r)
      if (node_of[r] == n) {
        offset += hosts_[r] == hosts_[topo.rank] ? 1 : 0;
        break;
      }
  server_ =
      std::make_unique<HttpServer>(bind, port == 0 ? 0 : port + offset, [this] { return text(); });
  const bool any = server_->address() == "0.0.0.0" || server_->address() == "[::]";
  runtime::log::info_all("serving Prometheus metrics of node " + std::to_string(topo.node) + " (" +
                         runtime::counted(static_cast<long long>(members_.size()), "rank") +
                         ") on http://" + (any ? hosts_[topo.rank] : server_->address()) + ":" +
                         std::to_string(server_->port()) + "/metrics");
}

std::string NodeExporter::text() {
  std::vector<RankSeries> ranks;
  uint64_t published = 0;
  {
    std::lock_guard<std::mutex> lock(
        mu_);  // held for a copy only: publish() never waits on a scrape
    if (published_ == formatted_) return text_;  // nothing before the first step
    ranks = latest_;
    published = published_;
  }
  text_ = exposition(job_, ranks);
  formatted_ = published;
  return text_;
}

void NodeExporter::publish(const RankSeries& mine) {
  const int n = RankSeries::packed_size();
  const auto packed = mine.pack();
  std::vector<double> all(server_ ? members_.size() * static_cast<size_t>(n) : 0);
  MPI_CHECK(MPI_Gather(packed.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, 0, node_.get()));
  if (!server_) return;
  std::vector<RankSeries> ranks;
  for (size_t i = 0; i < members_.size(); ++i)
    ranks.push_back(RankSeries::unpack(all.data() + i * n, members_[i], hosts_[members_[i]]));
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(ranks);
  ++published_;
}

}  // namespace shardtrain::obs
