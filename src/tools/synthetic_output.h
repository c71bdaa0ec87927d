// The writer behind dsv4 mkmodel's synthetic checkpoints (tools/synthetic.cc
// for DeepSeek-V4, tools/synthetic_v41.cc for V4.1): seeded random tensors,
// quantized to the released formats, spread over safetensors shards with
// an index.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "checkpoint/safetensors_writer.h"
#include "model/config.h"
#include "tools/synthetic.h"

namespace dsv4 {

// Random values before quantization: left uninitialized (the parallel
// fills write every value, and take the first-touch page faults on every
// thread), and reused from tensor to tensor (the layers repeat their shapes;
// a fresh mapping's pages cost ~10 us each on some VMs, most of mkmodel's
// time at the released shapes when every tensor was mapped afresh).
using Floats = ScratchVector<float>;

// splitmix64, and normals as the sum of four uniforms (Irwin-Hall, scaled
// to unit variance): the same numbers on every platform, and cheap.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  // Approximately standard normal (within +-3.46), from one draw.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = (r & 0xFFFF) + (r >> 16 & 0xFFFF) + (r >> 32 & 0xFFFF) + (r >> 48);
    return (static_cast<float>(sum) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t state_;
};

// Random tensors are drawn in chunks of this many values, each chunk from
// its own stream (seed, tensor number, chunk): the same numbers however
// many threads draw them.
inline constexpr int64_t kRandomChunk = 1 << 14;
inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Distributes tensors over shard writers and records the weight map.
class ShardedOutput {
 public:
  // Shards go to files in `dir`.
  ShardedOutput(const SyntheticOptions& o, const ModelConfig& c, std::string dir)
      : opt_(o), rng_(o.seed), writers_(std::max(1, o.shards)), shard_written_(writers_.size()), cfg_(c), dir_(std::move(dir)) {}

  // The block a tensor belongs to (mtp.* after the last layer), or -1.
  int layer_of(const std::string& name) const {
    if (name.rfind("layers.", 0) == 0) return std::atoi(name.c_str() + 7);
    if (name.rfind("mtp.", 0) == 0) return cfg_.n_layers;
    return -1;
  }
  // The shard a tensor goes to follows its layer, so a layer stays in one file.
  int shard_of(int layer) const {
    if (writers_.size() == 1 || layer < 0) return 0;
    return static_cast<int>((static_cast<int64_t>(layer) * writers_.size()) / (cfg_.n_layers + 1));
  }

  Floats random(const std::vector<int64_t>& shape, float std, float mean = 0.0f) {
    Floats v(numel(shape));
    const uint64_t tensor = ++tensors_;
    const int64_t n = static_cast<int64_t>(v.size()), chunks = (n + kRandomChunk - 1) / kRandomChunk;
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        Rng rng(opt_.seed ^ (tensor << 32) ^ static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull);
        for (int64_t i = c * kRandomChunk; i < std::min(n, (c + 1) * kRandomChunk); ++i) v[i] = mean + std * rng.normal();
      }
    });
    return v;
  }

  void f32(const std::string& name, const std::vector<int64_t>& shape, const Floats& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    put(name, DType::kF32, shape, std::move(bytes));
  }

  void bf16(const std::string& name, const std::vector<int64_t>& shape, const Floats& v) {
    std::vector<uint8_t> bytes(v.size() * 2);
    parallel_for(static_cast<int64_t>(v.size()), 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        uint16_t b = f32_to_bf16(v[i]);
        std::memcpy(&bytes[2 * i], &b, 2);
      }
    });
    put(name, DType::kBF16, shape, std::move(bytes));
  }

  void i64(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int64_t>& v) {
    std::vector<uint8_t> bytes(v.size() * 8);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    put(name, DType::kI64, shape, std::move(bytes));
  }

  // prefix.weight [out, in] (+ prefix.scale), random with std 1/sqrt(in).
  // kind: 0 dense BF16, 1 FP8 in square tiles of the config's weight block
  // (V4 128, V4.1 32), 2 FP4 per row and 32 inputs (routed experts), 3 FP8
  // per row and 32 inputs (V4.1's Engram tables).
  void linear(const std::string& prefix, int64_t out, int64_t in, int kind) {
    Floats w = random({out, in}, 1.0f / std::sqrt(static_cast<float>(in)));
    if (silenced(prefix)) std::fill(w.begin(), w.end(), 0.0f);
    linear_of(prefix, out, in, kind, std::move(w));
  }

  // With mtp_copies_last_block the blocks before the last add nothing to
  // the streams (their output projections are zero), so the last block and
  // the MTP block both see token embeddings.
  // With dspark_drafts_agree, every block of the model and the drafter.
  bool silenced(const std::string& prefix) const {
    auto ends = [&](const std::string& tail) {
      return prefix.size() >= tail.size() && prefix.compare(prefix.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool output = ends(".wo_b") || ends(".w2");
    if (opt_.dspark_drafts_agree) return output && (prefix.rfind("layers.", 0) == 0 || prefix.rfind("mtp.", 0) == 0);
    if (!opt_.mtp_copies_last_block || prefix.rfind("layers.", 0) != 0) return false;
    if (std::atoi(prefix.c_str() + 7) >= cfg_.n_layers - 1) return false;
    return output;
  }

  // prefix.weight = diagonal * I [n, n], FP8 blocks with fp8 weights.
  void identity_linear(const std::string& prefix, int64_t n, float diagonal) {
    Floats w(n * n, 0.0f);
    for (int64_t i = 0; i < n; ++i) w[i * n + i] = diagonal;
    linear_of(prefix, n, n, 1, std::move(w));
  }

  void linear_of(const std::string& prefix, int64_t out, int64_t in, int kind, Floats w) {
    if (opt_.weights == SyntheticWeights::kBf16 || kind == 0) {
      bf16(prefix + ".weight", {out, in}, w);
      return;
    }
    if (kind == 1 || kind == 3) {
      // A tile of th rows x B inputs shares a scale.
      const int64_t B = kind == 1 ? cfg_.weight_block : 32, th = kind == 1 ? B : 1;
      const int64_t so = (out + th - 1) / th, si = (in + B - 1) / B;
      std::vector<uint8_t> q(out * in), scale(so * si);
      // (std::max, not std::fmax: the drawn values hold no NaN, and fmax is
      // a library call per value.)
      parallel_for(so, kind == 1 ? 1 : 1024, [&](int64_t b0, int64_t b1) {
      for (int64_t bo = b0; bo < b1; ++bo)
        for (int64_t bi = 0; bi < si; ++bi) {
          float amax = 1e-12f;
          for (int64_t r = bo * th; r < std::min(out, bo * th + th); ++r)
            for (int64_t c = bi * B; c < std::min(in, bi * B + B); ++c) amax = std::max(amax, std::fabs(w[r * in + c]));
          float sc = pow2_ceil(amax / kE4M3Max);
          scale[bo * si + bi] = static_cast<uint8_t>(std::ilogb(sc) + 127);
          for (int64_t r = bo * th; r < std::min(out, bo * th + th); ++r)
            for (int64_t c = bi * B; c < std::min(in, bi * B + B); ++c) q[r * in + c] = f32_to_e4m3(w[r * in + c] / sc);
        }
      });
      put(prefix + ".weight", DType::kF8E4M3, {out, in}, std::move(q));
      put(prefix + ".scale", DType::kF8E8M0, {so, si}, std::move(scale));
    } else {
      std::vector<uint8_t> q(out * in / 2, 0), scale(out * in / 32);
      parallel_for(out, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t b = 0; b < in / 32; ++b) {
          float amax = 1e-12f;
          for (int64_t c = b * 32; c < b * 32 + 32; ++c) amax = std::max(amax, std::fabs(w[r * in + c]));
          float sc = pow2_ceil(amax / kE2M1Max);
          scale[r * (in / 32) + b] = static_cast<uint8_t>(std::ilogb(sc) + 127);
          for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
            uint8_t nib = f32_to_e2m1(w[r * in + c] / sc);
            q[r * (in / 2) + c / 2] |= (c & 1) ? static_cast<uint8_t>(nib << 4) : nib;
          }
        }
      });
      put(prefix + ".weight", DType::kI8, {out, in / 2}, std::move(q));
      put(prefix + ".scale", DType::kF8E8M0, {out, in / 32}, std::move(scale));
    }
  }

  Rng& rng() { return rng_; }

  // Every tensor goes out here. With mtp_copies_last_block, an MTP tensor
  // whose counterpart (the last block's, or the main head's for the MTP
  // head) has the same shape takes the counterpart's bytes.
  void put(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    if (opt_.mtp_copies_last_block) {
      const std::string last = "layers." + std::to_string(cfg_.n_layers - 1) + ".";
      if (name.rfind(last, 0) == 0 || name.rfind("hc_head_", 0) == 0 || name == "norm.weight") {
        saved_[name] = {dtype, shape, bytes};
      } else if (name.rfind("mtp.", 0) == 0) {
        const std::string rest = name.substr(name.find('.', 4) + 1);  // after "mtp.N."
        const bool head = rest.rfind("hc_head_", 0) == 0 || rest == "norm.weight";
        auto it = saved_.find(head ? rest : last + rest);
        if (it != saved_.end() && it->second.shape == shape && it->second.dtype == dtype) bytes = it->second.bytes;
      }
    }
    const int layer = layer_of(name), shard = shard_of(layer);
    // Blocks come in order, so a shard after the first (which also takes
    // the tensors of no block) is whole once a later shard's block begins:
    // it is written then, and mkmodel holds about a shard, not the model (a
    // real-shape model with all its experts is tens of GB).
    if (!status_.ok()) return;
    for (int j = 1; j < shard; ++j)
      if (!shard_written_[j]) {
        status_ = write_shard(j);
        if (!status_.ok()) return;
      }
    DSV4_CHECK_MSG(!shard_written_[shard], "tensor %s is for shard %d, written already (blocks out of order)",
                   name.c_str(), shard);
    writers_[shard].add(name, dtype, std::move(shape), std::move(bytes));
  }

  // Writes the shards not written yet and the index.
  Status write() {
    DSV4_RETURN_IF_ERROR(status_);
    if (writers_.size() == 1) return writers_[0].write(dir_ + "/model.safetensors");
    for (size_t i = 0; i < writers_.size(); ++i)
      if (!shard_written_[i]) DSV4_RETURN_IF_ERROR(write_shard(i));
    nlohmann::json index;
    index["metadata"] = {{"total_size", total_bytes_}};
    index["weight_map"] = weight_map_;
    std::ofstream(dir_ + "/model.safetensors.index.json") << index.dump(2);
    return Status::Ok();
  }

 private:
  struct Saved {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  // Shard i's file and its tensors in the index; its bytes let go.
  Status write_shard(size_t i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, writers_.size());
    DSV4_RETURN_IF_ERROR(writers_[i].write(dir_ + "/" + name));
    for (const auto& t : writers_[i].names()) weight_map_[t] = name;
    total_bytes_ += writers_[i].total_bytes();
    writers_[i] = SafetensorsWriter();
    shard_written_[i] = true;
    return Status::Ok();
  }

  const SyntheticOptions& opt_;
  Rng rng_;               // the sequential draws (hash routing tables)
  uint64_t tensors_ = 0;  // random tensors drawn so far
  std::map<std::string, Saved> saved_;
  std::vector<SafetensorsWriter> writers_;
  std::vector<char> shard_written_;  // to its file, its bytes let go
  const ModelConfig& cfg_;
  const std::string dir_;
  Status status_;  // of the shards written early
  std::map<std::string, std::string> weight_map_;  // of the shards written
  uint64_t total_bytes_ = 0;
};

}  // namespace dsv4
