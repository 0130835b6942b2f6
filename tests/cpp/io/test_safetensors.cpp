// The safetensors reader and writer: byte-identical round trips, reads of only the bytes asked
// for, sharded indexes, and every kind of damaged file refused with a line naming it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {
std::string tmp(const std::string& name) {
  fs::create_directories(SHARDTRAIN_TEST_TMP);
  return std::string(SHARDTRAIN_TEST_TMP) + "/" + name;
}
std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}
// A file with the given JSON header followed by `data_bytes` zero bytes.
std::string craft(const std::string& name, const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  s += header + std::string(data_bytes, '\0');
  const auto p = tmp(name);
  spit(p, s);
  return p;
}
void expect_error(const std::string& path, const std::string& fragment) {
  try {
    io::SafetensorsFile f(path);
    FAIL() << "no error for " << path;
  } catch (const runtime::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "message names the file";
  }
}
io::NamedTensors sample() {
  auto g = at::make_generator<at::CPUGeneratorImpl>(3);
  return {{"a.weight", at::randn({5, 7}, g)},
          {"b.bf16", at::randn({3, 4}, g).to(at::kBFloat16)},
          {"c.fp16", at::randn({6}, g).to(at::kHalf)},
          {"d.ids", at::arange(10, at::kLong)},
          {"e.scalar", at::tensor(3.5)},
          {"f.empty", at::empty({0, 4})}};
}
}  // namespace

TEST(Safetensors, RoundTripIsByteIdentical) {
  const auto p1 = tmp("rt1.safetensors"), p2 = tmp("rt2.safetensors");
  io::write_safetensors(p1, sample(), {{"format", "pt"}});
  io::SafetensorsFile f(p1);
  io::NamedTensors back;
  for (const auto& t : f.tensors()) back.emplace_back(t.name, f.read(t.name));
  for (const auto& [n, t] : sample()) {
    auto r = f.read(n);
    EXPECT_EQ(r.scalar_type(), t.scalar_type()) << n;
    EXPECT_TRUE(r.equal(t)) << n;
  }
  EXPECT_EQ(f.metadata().at("format"), "pt");
  io::write_safetensors(p2, back, f.metadata());
  EXPECT_EQ(slurp(p1), slurp(p2));
}

TEST(Safetensors, RowAndFlatRangesReadOnlyThoseBytes) {
  const auto p = tmp("ranges.safetensors");
  auto x = at::arange(48, at::kFloat).reshape({8, 6});
  io::write_safetensors(p, {{"x", x}});
  io::SafetensorsFile f(p);
  EXPECT_TRUE(f.read_rows("x", 2, 5).equal(x.narrow(0, 2, 3)));
  EXPECT_EQ(f.bytes_read(), 3u * 6 * 4);
  EXPECT_TRUE(f.read_flat("x", 7, 20).equal(x.flatten().narrow(0, 7, 13)));
  EXPECT_EQ(f.bytes_read(), 3u * 6 * 4 + 13 * 4);
  EXPECT_THROW(f.read_rows("x", 6, 9), runtime::Error);
  EXPECT_THROW(f.read_flat("x", -1, 3), runtime::Error);
  EXPECT_THROW(f.read("nope"), runtime::Error);
}

TEST(Safetensors, ShardedIndexReadsAcrossFiles) {
  const auto dir = tmp("sharded");
  fs::remove_all(dir);
  auto files = io::write_safetensors_sharded(dir, sample(), 100);
  EXPECT_GT(files.size(), 1u);
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  io::SafetensorsModel m(dir);
  EXPECT_EQ(m.num_files(), files.size());
  for (const auto& [n, t] : sample()) EXPECT_TRUE(m.read(n).equal(t)) << n;
  EXPECT_THROW(m.read("missing"), runtime::Error);
}

TEST(Safetensors, TruncatedFiles) {
  const auto good = tmp("good.safetensors");
  io::write_safetensors(good, sample());
  const auto bytes = slurp(good);
  const auto tiny = tmp("trunc5.safetensors");
  spit(tiny, bytes.substr(0, 5));
  expect_error(tiny, "shorter than the 8-byte");
  const auto cut = tmp("trunc_data.safetensors");
  spit(cut, bytes.substr(0, bytes.size() - 9));
  expect_error(cut, "out of range");
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  std::string s(8, '\0');
  s[0] = '\xff';
  s[1] = '\xff';
  s[3] = '\x10';
  s += "{}";
  const auto p = tmp("hlen.safetensors");
  spit(p, s);
  expect_error(p, "runs past the end");
}

TEST(Safetensors, OffsetsOutOfRange) {
  expect_error(
      craft("off.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,1000]}})", 16),
      "out of range");
  expect_error(
      craft("off2.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16),
      "out of range");
}

TEST(Safetensors, UnknownDtype) {
  expect_error(
      craft("dt.safetensors", R"({"w":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", 16),
      "unknown dtype 'Q7'");
}

TEST(Safetensors, ShapeSizeMismatch) {
  expect_error(craft("shape.safetensors",
                     R"({"w":{"dtype":"F32","shape":[3,3],"data_offsets":[0,16]}})", 16),
               "need 36 bytes but data_offsets span 16");
  expect_error(
      craft("huge.safetensors",
            R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16),
      "absurdly large");
}

TEST(Safetensors, OtherDefects) {
  expect_error(craft("json.safetensors", R"({"w":{"dtype":)", 0), "not valid JSON");
  expect_error(
      craft(
          "overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          16),
      "overlap");
  expect_error(
      craft("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16),
      "negative");
}

TEST(Safetensors, IndexWeightMapIsCheckedWithoutTouchingFiles) {
  const auto m = io::parse_safetensors_index(
      R"({"metadata":{},"weight_map":{"b":"s2.safetensors","a":"s1.safetensors"}})", "i.json");
  EXPECT_EQ(m,
            (std::map<std::string, std::string>{{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}));
  auto bad = [](const std::string& text, const std::string& want) {
    try {
      io::parse_safetensors_index(text, "i.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const runtime::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("i.json: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  bad("[1]", "index has no \"weight_map\"");
  bad(R"({"weight_map":{"a":7}})", "weight_map['a'] is not a file name");
  bad(R"({"weight_map":{"a":"../../etc/x.safetensors"}})",
      "is not a file name in the index's directory");
  bad(R"({"weight_map":{"a":""}})", "is not a file name in the index's directory");
  bad(R"({"weight_map":)", "invalid index JSON");
}
