// A minimal PNG writer: 8-bit RGB, one zlib-deflated IDAT, no dependencies beyond zlib.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain::report {

// The PNG file's bytes for a width x height image of row-major RGB triples (rgb.size() must be
// width * height * 3). Throws runtime::Error on bad dimensions.
std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb);

// encode_png written to `path`; throws runtime::Error naming the path when it cannot be written.
void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace shardtrain::report
