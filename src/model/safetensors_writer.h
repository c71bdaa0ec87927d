// Writes a safetensors file: tensors are added with their bytes, the header
// is laid out on write. Used by mkmodel and verify --dump.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace dsv4 {

class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values);
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
  };
  std::vector<Entry> entries_;
};

}  // namespace dsv4
