// Writes a GGUF v3 file, llama.cpp's model format: typed key/value metadata,
// the tensor infos (name, dims innermost first, ggml type, offset), then the
// tensor data, each tensor aligned to 32 bytes. Tensors are produced one at
// a time while the file is written, so a converted model is never in memory
// whole; the file appears under its name only when complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

// The ggml tensor types a converted checkpoint uses (ggml.h numbering).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kI32 = 26, kBF16 = 30, kMXFP4 = 39 };

// Bytes of `n` values of `type` along the innermost dim (a whole number of
// blocks for the block types).
uint64_t ggml_bytes(GgmlType type, int64_t n);
int64_t ggml_block_size(GgmlType type);  // values per block (1 for plain types)

class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // `emit` appends the tensor's next bytes; the producer must emit exactly
  // the tensor's size (checked).
  using Emit = std::function<void(const void* bytes, size_t n)>;
  using Producer = std::function<Status(const Emit& emit)>;
  // dims innermost first (ggml's ne0, ne1, ...): a torch [out, in] weight
  // is {in, out}.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims, Producer produce);

  Status write(const std::string& path) const;  // via a temporary file, then rename
  size_t num_tensors() const { return tensors_.size(); }
  uint64_t data_bytes() const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    Producer produce;
    uint64_t size() const;
  };
  void key(const std::string& k, uint32_t value_type);
  std::vector<uint8_t> metadata_;  // serialized key/value pairs
  uint64_t num_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace dsv4
