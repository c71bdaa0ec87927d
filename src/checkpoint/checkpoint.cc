#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace dsv4 {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  if (!fs::is_directory(dir)) return not_found("checkpoint directory '" + dir + "' does not exist");
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->dir_ = dir;
  std::vector<std::string> shard_names;
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      in >> index;
    } catch (const std::exception& e) {
      return data_loss(index_path.string() + ": not valid JSON: " + e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      return data_loss(index_path.string() + ": no weight_map object");
    }
    std::set<std::string> unique;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return data_loss(index_path.string() + ": weight_map value for '" + it.key() + "' is not a file name");
      unique.insert(it.value().get<std::string>());
    }
    shard_names.assign(unique.begin(), unique.end());
  } else {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename().string());
    }
    std::sort(shard_names.begin(), shard_names.end());
  }
  if (shard_names.empty()) return not_found("checkpoint directory '" + dir + "' has no .safetensors files");
  for (const auto& name : shard_names) {
    DSV4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open((fs::path(dir) / name).string()));
    for (const auto& [tname, info] : file->tensors()) {
      if (ckpt->index_.count(tname)) {
        return data_loss("tensor '" + tname + "' appears in two shards: " + *ckpt->index_[tname]->file + " and " +
                         file->path());
      }
      ckpt->index_[tname] = &info;
    }
    ckpt->files_.push_back(std::move(file));
  }
  return ckpt;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

StatusOr<const TensorInfo*> Checkpoint::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) return not_found("tensor '" + name + "' is missing from checkpoint " + dir_);
  return t;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, info] : index_) n += info->nbytes;
  return n;
}

}  // namespace dsv4
