// Read-only safetensors files. Headers are validated on open (offsets,
// sizes, dtypes), so a truncated or malformed file is an error that names
// the file, never a crash later. Tensors are read by byte range (read(),
// what the loader uses: nothing of the file stays mapped in the process) or
// through a read-only mapping of the whole file (TensorInfo::data, for the
// converters and tests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace dsv4 {

class SafetensorsFile;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // in the file's mapping
  uint64_t offset = 0;            // of the first byte in the file
  uint64_t nbytes = 0;
  const std::string* file = nullptr;  // the file it lives in, for error messages
  const SafetensorsFile* source = nullptr;  // ... to read it from

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
  // Copies bytes [begin, begin + size) of tensor t (one of this file's) to
  // dst with pread, safe from any thread; errors name file and tensor.
  Status read(const TensorInfo& t, uint64_t begin, uint64_t size, void* dst) const;
  // Asks the kernel to start reading bytes [offset, offset + size) of the
  // file into the page cache (a cold load's reads then overlap packing).
  void prefetch(uint64_t offset, uint64_t size) const;

 private:
  SafetensorsFile() = default;
  Status parse(const uint8_t* bytes, size_t size);

  std::string path_;
  int fd_ = -1;  // -1 for a header held in memory (read() copies from it)
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4
