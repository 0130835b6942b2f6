// SHA-256 (FIPS 180-4), for the tokenizer and source-file fingerprints that prepare stores in
// token files (tokenizer_sha256, source_sha256); checkpoints use CRC-32 instead. Small and
// dependency-free; verified against hashlib.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shardtrain::runtime {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> digest();  // finalizes; the object must not be updated afterwards
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
std::string sha256_file(const std::string& path);  // throws Error when unreadable

}  // namespace shardtrain::runtime
