// The runtime module's pure helpers: SHA-256, order statistics, the topology override and the
// elapsed-time helper.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/runtime/sha256.h"
#include "shardtrain/runtime/stats.h"

using namespace shardtrain;

namespace {
const double kNaN = std::nan("");
}  // namespace

TEST(Sha256, KnownDigests) {  // FIPS 180-4 examples, as hashlib prints them
  EXPECT_EQ(runtime::sha256_hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(runtime::sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(runtime::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  runtime::Sha256 h;  // a million 'a' in odd-sized pieces crosses every buffer boundary
  const std::string piece(977, 'a');
  size_t left = 1000000;
  while (left) {
    const size_t n = std::min(left, piece.size());
    h.update(piece.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Stats, MedianAndQuantileOfFiniteValues) {
  EXPECT_EQ(runtime::median({3, 1, 2}), 2);
  EXPECT_EQ(runtime::median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(runtime::median({kNaN, 7, INFINITY}), 7);
  EXPECT_TRUE(std::isnan(runtime::median({})));
  EXPECT_EQ(runtime::quantile({4, 1, 3, 2}, 0.5),
            2);  // nearest rank: a value of the sample, not the mean of two
  EXPECT_EQ(runtime::quantile({4, kNaN, 1, 3, 2}, 0), 1);
}

TEST(Topology, RanksPerNodeOverride) {
  auto t = runtime::topology_from_ranks_per_node(5, 8, 2);
  EXPECT_EQ(t.node, 2);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.num_nodes, 4);
  EXPECT_THROW(runtime::topology_from_ranks_per_node(0, 6, 4), runtime::UsageError);
}

TEST(Stopwatch, MeasuresSleepsAndRestarts) {
  runtime::Stopwatch w;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double first = w.seconds();
  EXPECT_GE(first, 0.029);
  EXPECT_LT(first, 5.0);
  w.restart();
  EXPECT_LT(w.seconds(), first);
}
