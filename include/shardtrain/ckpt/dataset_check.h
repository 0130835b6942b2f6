// Every dataset of a checkpoint file read back and held against its stored CRC-32
// (`shardtrain inspect`).
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

namespace shardtrain::ckpt {

struct DatasetCheck {
  std::string name, shape;
  std::string status;  // ok, no checksum, CORRUPT, or NOT float32 but TYPE
};
std::vector<DatasetCheck> check_datasets(hid_t file);

}  // namespace shardtrain::ckpt
