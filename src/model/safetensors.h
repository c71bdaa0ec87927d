// Read-only, memory-mapped safetensors files. Headers are validated on open
// (offsets, sizes, dtypes), so a truncated or malformed file is an error that
// names the file, never a crash later.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace dsv4 {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  const std::string* file = nullptr;  // the file it lives in, for error messages

  int64_t numel() const;
  std::string shape_string() const;
};

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses a header held in memory (also used by the fuzz and unit tests).
  static StatusOr<std::unique_ptr<SafetensorsFile>> from_buffer(const std::string& name, const uint8_t* bytes,
                                                                 size_t size);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status parse(const uint8_t* bytes, size_t size);

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4
