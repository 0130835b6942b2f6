#include "shardtrain/report/png.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::report {
namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// A chunk is length, type, data, then a CRC-32 over type and data (PNG spec 5.3).
void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32(out, runtime::crc32_bytes(out.data() + start, out.size() - start));
}

}  // namespace

std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb) {
  if (width <= 0 || height <= 0 || width > (1 << 24) || height > (1 << 24))
    throw runtime::Error("PNG size must be positive, got " + std::to_string(width) + "x" +
                         std::to_string(height));
  const size_t stride = static_cast<size_t>(width) * 3;
  if (rgb.size() != stride * static_cast<size_t>(height))
    throw runtime::Error("PNG pixel buffer holds " + std::to_string(rgb.size()) +
                         " bytes, expected " + std::to_string(stride * height));
  // Every scanline starts with its filter type; "Sub" (1) makes flat chart areas all zeros.
  std::vector<uint8_t> raw;
  raw.reserve((stride + 1) * height);
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = rgb.data() + stride * y;
    raw.push_back(1);
    for (size_t i = 0; i < stride; ++i)
      raw.push_back(static_cast<uint8_t>(row[i] - (i >= 3 ? row[i - 3] : 0)));
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> packed(packed_size);
  if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw runtime::Error("zlib could not compress the PNG image data");
  packed.resize(packed_size);

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(),
              {8, 2, 0, 0, 0});  // 8 bits, truecolour RGB, deflate, adaptive filters, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", packed);
  put_chunk(out, "IEND", {});
  return out;
}

void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  const std::vector<uint8_t> bytes = encode_png(width, height, rgb);
  // Whole or absent; a full disk, quota or read-only directory is one line (exit 2).
  runtime::write_file_atomically(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace shardtrain::report
