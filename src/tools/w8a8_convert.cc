#include "tools/w8a8_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/released_linear.h"
#include "checkpoint/safetensors_writer.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// int8 codes [out, in] then f32 scales [out]: symmetric per channel,
// scale = amax / 127, codes rounded to nearest even.
void quantize_int8(const ReleasedLinear& q, std::vector<int8_t>* codes, std::vector<float>* scales) {
  codes->resize(q.out * q.in);
  scales->resize(q.out);
  parallel_for(q.out, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(q.in);
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(q, r, row.data());
      float amax = 0.0f;
      for (float v : row) amax = std::fmax(amax, std::fabs(v));
      const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
      (*scales)[r] = scale;
      for (int64_t c = 0; c < q.in; ++c)
        (*codes)[r * q.in + c] =
            static_cast<int8_t>(std::nearbyint(std::fmin(127.0f, std::fmax(-127.0f, row[c] / scale))));
    }
  });
}

nlohmann::ordered_json quantization_config(const std::vector<std::string>& ignored) {
  const nlohmann::ordered_json weights = {{"num_bits", 8}, {"type", "int"},       {"symmetric", true},
                                          {"strategy", "channel"}, {"dynamic", false}};
  const nlohmann::ordered_json inputs = {{"num_bits", 8}, {"type", "int"},     {"symmetric", true},
                                         {"strategy", "token"}, {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
          {"ignore", ignored}};
}

Status write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) return internal_error("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

StatusOr<ConvertReport> convert_to_w8a8(const ConvertOptions& opt) {
  DSV4_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(opt.input_dir));
  const fs::path in_dir(opt.input_dir), out_dir(opt.output_dir);
  std::error_code ec;
  if (fs::equivalent(in_dir, out_dir, ec)) return invalid_argument("--out must differ from --model");
  fs::create_directories(out_dir, ec);
  if (ec) return invalid_argument("cannot create " + out_dir.string() + ": " + ec.message());

  ConvertReport report;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::set<std::string> converted_scales;  // ".scale" tensors replaced by a weight_scale
  std::vector<std::string> ignored;        // quantized linears the reference feeds unrounded input
  // Plan every shard first (names and sizes come from the headers alone).
  struct Plan {
    const SafetensorsFile* shard;
    std::vector<std::pair<std::string, std::optional<ReleasedLinear>>> tensors;
  };
  std::vector<Plan> plans;
  for (const SafetensorsFile* shard : ckpt->shards()) {
    Plan plan{shard, {}};
    for (const auto& [name, info] : shard->tensors()) {
      DSV4_ASSIGN_OR_RETURN(auto q, released_linear(*ckpt, name));
      const std::string prefix = q ? name.substr(0, name.size() - 7) : "";
      if (q && !reference_rounds_input(prefix)) {
        ignored.push_back(prefix);
        q.reset();
      }
      if (q) converted_scales.insert(prefix + ".scale");
      plan.tensors.emplace_back(name, q);
    }
    plans.push_back(std::move(plan));
  }

  for (const Plan& plan : plans) {
    const std::string file = fs::path(plan.shard->path()).filename().string();
    SafetensorsWriter writer;
    for (const auto& [name, q] : plan.tensors) {
      const TensorInfo* t = &plan.shard->tensors().at(name);
      report.bytes_in += t->nbytes;
      if (converted_scales.count(name)) continue;
      if (!q) {
        writer.add_produced(name, t->dtype, t->shape,
                            [t](std::vector<uint8_t>&) { return std::make_pair(t->data, t->nbytes); });
        weight_map[name] = file;
        ++report.tensors_copied;
        continue;
      }
      // The int8 codes and their scales, computed once when the weight is
      // written; the scale tensor follows it.
      auto scales = std::make_shared<std::vector<float>>();
      const ReleasedLinear ql = *q;
      writer.add_produced(name, DType::kI8, {ql.out, ql.in}, [ql, scales](std::vector<uint8_t>& scratch) {
        std::vector<int8_t> codes;
        quantize_int8(ql, &codes, scales.get());
        scratch.assign(reinterpret_cast<const uint8_t*>(codes.data()),
                       reinterpret_cast<const uint8_t*>(codes.data()) + codes.size());
        return std::make_pair(static_cast<const uint8_t*>(scratch.data()), scratch.size());
      });
      const std::string scale_name = name.substr(0, name.size() - 7) + ".weight_scale";
      writer.add_produced(scale_name, DType::kF32, {ql.out, 1}, [scales](std::vector<uint8_t>& scratch) {
        scratch.resize(scales->size() * 4);
        std::memcpy(scratch.data(), scales->data(), scratch.size());
        return std::make_pair(static_cast<const uint8_t*>(scratch.data()), scratch.size());
      });
      weight_map[name] = file;
      weight_map[scale_name] = file;
      ++report.linears_converted;
    }
    report.bytes_out += writer.total_bytes();
    const fs::path out_path = out_dir / file;
    // A shard from an earlier run is complete (it was renamed into place)
    // when it opens and holds exactly the planned tensors.
    bool done = false;
    if (fs::exists(out_path)) {
      auto existing = SafetensorsFile::open(out_path.string());
      if (existing.ok()) {
        std::vector<std::string> have;
        for (const auto& [n, info] : (*existing)->tensors()) have.push_back(n);
        std::vector<std::string> want = writer.names();
        std::sort(want.begin(), want.end());
        done = have == want;
      }
    }
    if (opt.on_shard) opt.on_shard(file, done);
    if (done) {
      ++report.shards_skipped;
      continue;
    }
    DSV4_RETURN_IF_ERROR(writer.write(out_path.string()));
    ++report.shards_written;
  }

  // The index, config.json with its quantization_config, and the other
  // files (tokenizer, generation config) as they are.
  if (plans.size() > 1 || fs::exists(in_dir / "model.safetensors.index.json")) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", report.bytes_out}}}, {"weight_map", weight_map}};
    DSV4_RETURN_IF_ERROR(write_text(out_dir / "model.safetensors.index.json", index.dump(2)));
  }
  nlohmann::ordered_json config;
  {
    std::ifstream in(in_dir / "config.json");
    if (!in) return not_found("checkpoint directory '" + opt.input_dir + "' has no config.json");
    try {
      in >> config;
    } catch (const std::exception& e) {
      return data_loss((in_dir / "config.json").string() + ": not valid JSON: " + e.what());
    }
  }
  config["quantization_config"] = quantization_config(ignored);
  DSV4_RETURN_IF_ERROR(write_text(out_dir / "config.json", config.dump(2)));
  for (const auto& e : fs::directory_iterator(in_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" || name == "config.json" ||
        name == "model.safetensors.index.json")
      continue;
    fs::copy_file(e.path(), out_dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return internal_error("cannot copy " + e.path().string() + ": " + ec.message());
  }
  return report;
}

}  // namespace dsv4
