// CRC-32C against RFC 3720's test vectors (B.4), and the TFRecord mask against TensorBoard's own
// pure-Python masked_crc32c (tensorboard.compat.tensorflow_stub.pywrap_tensorflow, 2.20.0).
#include <gtest/gtest.h>

#include <string>

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
  const unsigned char five[8] = {5, 0, 0, 0, 0, 0, 0, 0};  // a record length, as the framing masks it
  EXPECT_EQ(mask_crc32c(crc32c(five, 8)), 0x3E04B2EAu);
}
