// A TensorBoard event file: TFRecord-framed records (each a serialized Event protobuf) in
// DIR/events.out.tfevents.<unix time>.<host>. Writes are buffered until flush().
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace shardtrain::obs {

// One record as it lies in the file: uint64 length, masked CRC-32C of the length, the data,
// masked CRC-32C of the data (integers little-endian).
std::string frame_record(std::string_view data);

class EventFile {
 public:
  // Makes dir and a new file in it; a name already taken (a run restarted within the second)
  // gets a numbered suffix, so no file is ever appended to twice. Throws UsageError naming
  // --tensorboard when the file cannot be made.
  EventFile(const std::string& dir, const std::string& host, long long unix_time);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;
  // false when the write failed (errno says why): a full disk mid-run is the caller's to report.
  bool append(std::string_view data);  // one record
  bool flush();  // into the OS: readers and a later crash see every record so far
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace shardtrain::obs
