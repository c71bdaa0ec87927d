// Writes a safetensors file: tensors are added with their bytes, the header
// is laid out on write. Used by mkmodel and verify --dump.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace dsv4 {

class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
  // A tensor whose bytes are produced while the file is written, one tensor
  // at a time (so a converted shard is never in memory whole): the producer
  // fills `scratch` or returns bytes the caller keeps alive (a mapped input).
  using Producer = std::function<std::pair<const uint8_t*, size_t>(std::vector<uint8_t>& scratch)>;
  void add_produced(const std::string& name, DType dtype, std::vector<int64_t> shape, Producer produce);
  Status write(const std::string& path) const;  // via a temporary file, then rename
  size_t num_tensors() const { return entries_.size(); }
  uint64_t total_bytes() const;
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    Producer produce;  // when set, bytes is empty and size is dtype x shape
    uint64_t size() const;
  };
  std::vector<Entry> entries_;
};

}  // namespace dsv4
