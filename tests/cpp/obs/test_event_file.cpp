// TensorBoard's record framing, byte for byte against the CRCs TensorBoard's own pure-Python
// masked_crc32c gives (tensorboard 2.20.0); the file itself is read back by TensorBoard in
// tests/python/check_tensorboard.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "shardtrain/obs/event_file.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;

TEST(EventFile, FramesLengthCrcDataCrc) {
  const std::string want(
      "\x05\0\0\0\0\0\0\0"  // uint64 length, little-endian
      "\xEA\xB2\x04\x3E"    // masked CRC-32C of those 8 bytes: 0x3e04b2ea
      "hello"
      "\xBB\x1F\x1C\x19",  // masked CRC-32C of "hello": 0x191c1fbb
      21);
  EXPECT_EQ(obs::frame_record("hello"), want);
  EXPECT_EQ(obs::frame_record("").size(), 16u);
}

TEST(EventFile, ANewFilePerWriterNeverAnAppend) {
  const auto dir = std::filesystem::path(SHARDTRAIN_TEST_TMP) / "event_file" / "run";
  std::filesystem::remove_all(dir);
  std::string first, second;
  {
    obs::EventFile a(dir.string(), "hostA", 1700000000);
    obs::EventFile b(dir.string(), "hostA",
                     1700000000);  // the same second: a suffix, not the same file
    first = a.path();
    second = b.path();
    EXPECT_TRUE(a.append("abc"));
    EXPECT_TRUE(a.flush());
  }
  EXPECT_EQ(std::filesystem::path(first).filename(), "events.out.tfevents.1700000000.hostA");
  EXPECT_EQ(std::filesystem::path(second).filename(), "events.out.tfevents.1700000000.hostA.1");
  std::ifstream in(first, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, obs::frame_record("abc"));
  EXPECT_EQ(std::filesystem::file_size(second), 0u);
}

TEST(EventFile, AnUnwritableDirectoryNamesTheOption) {
  const auto file = std::filesystem::path(SHARDTRAIN_TEST_TMP) / "event_file_not_a_dir";
  std::ofstream(file) << "x";
  try {
    obs::EventFile f((file / "run").string(), "h", 1);
    FAIL() << "made a file under a regular file";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard"), std::string::npos) << e.what();
  }
}
