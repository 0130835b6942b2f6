// CRC-32C against RFC 3720's test vectors (B.4), and the TFRecord mask against TensorBoard's own
// pure-Python masked_crc32c (tensorboard.compat.tensorflow_stub.pywrap_tensorflow, 2.20.0); and
// zlib CRC-32 rows combined against zlib over the whole buffer.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/crc32c.h"

using shardtrain::runtime::crc32c;
using shardtrain::runtime::mask_crc32c;

TEST(Crc32c, Rfc3720Vectors) {
  const std::string zeros(32, '\0'), ones(32, '\xFF');
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, MaskMatchesTensorBoards) {
  const std::string zeros(32, '\0');
  EXPECT_EQ(mask_crc32c(crc32c("123456789", 9)), 0xC78AB0E5u);
  EXPECT_EQ(mask_crc32c(crc32c(zeros.data(), zeros.size())), 0x0FD7FFFAu);
  const unsigned char five[8] = {5, 0, 0, 0,
                                 0, 0, 0, 0};  // a record length, as the framing masks it
  EXPECT_EQ(mask_crc32c(crc32c(five, 8)), 0x3E04B2EAu);
}

// CRC-32 (zlib's) of a buffer from its slices' rows, in any order and with ranks that hold
// nothing, against zlib's crc32 over the whole buffer in one call.
TEST(CrcRows, CombineEqualsWholeBufferCrc) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 7.0f;
  const uint32_t whole = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(values.data()),
            static_cast<uInt>(values.size() * sizeof(float))));
  const auto row = [&](int64_t offset, int64_t numel) {
    return shardtrain::runtime::CrcRow{offset, numel,
                                       static_cast<int64_t>(shardtrain::runtime::crc32_bytes(
                                           &values[offset], numel * sizeof(float)))};
  };
  const std::vector<shardtrain::runtime::CrcRow> rows = {
      row(600, 400), shardtrain::runtime::CrcRow{}, row(0, 250), row(250, 350)};
  EXPECT_EQ(shardtrain::runtime::combine_crc_rows(rows, sizeof(float)), whole);
  EXPECT_NE(shardtrain::runtime::combine_crc_rows({row(0, 250), row(250, 350)}, sizeof(float)),
            whole)
      << "a missing slice";
}
