// A checkpoint directory: config.json plus one or more safetensors shards,
// found through model.safetensors.index.json when present. Tensors are read
// lazily from the mapped files.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/safetensors.h"

namespace dsv4 {

class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Null when absent; callers turn that into an error naming the tensor.
  const TensorInfo* find(const std::string& name) const;
  // An error naming tensor and checkpoint when the tensor is missing.
  StatusOr<const TensorInfo*> get(const std::string& name) const;
  size_t num_tensors() const { return index_.size(); }
  // The shard files in the order they were opened (index order, or sorted).
  std::vector<const SafetensorsFile*> shards() const {
    std::vector<const SafetensorsFile*> out;
    for (const auto& f : files_) out.push_back(f.get());
    return out;
  }
  uint64_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace dsv4
