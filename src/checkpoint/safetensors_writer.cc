#include "checkpoint/safetensors_writer.h"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace dsv4 {

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  DSV4_CHECK_MSG(static_cast<size_t>(n) * dtype_size(dtype) == bytes.size(), "tensor %s", name.c_str());
  entries_.push_back({name, dtype, std::move(shape), std::move(bytes), nullptr});
}

void SafetensorsWriter::add_produced(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                     Producer produce) {
  entries_.push_back({name, dtype, std::move(shape), {}, std::move(produce)});
}

uint64_t SafetensorsWriter::Entry::size() const {
  if (!produce) return bytes.size();
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void SafetensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  add(name, DType::kF32, std::move(shape), std::move(bytes));
}

uint64_t SafetensorsWriter::total_bytes() const {
  uint64_t n = 0;
  for (const auto& e : entries_) n += e.size();
  return n;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.size()}}};
    offset += e.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8) text.push_back(' ');  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return internal_error("cannot create " + tmp);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  std::vector<uint8_t> scratch;
  for (const auto& e : entries_) {
    if (!ok) break;
    if (!e.produce) {
      ok = std::fwrite(e.bytes.data(), 1, e.bytes.size(), f) == e.bytes.size();
      continue;
    }
    const auto [data, size] = e.produce(scratch);
    DSV4_CHECK_MSG(size == e.size(), "tensor %s produced %zu bytes, expected %llu", e.name.c_str(), size,
                   static_cast<unsigned long long>(e.size()));
    ok = std::fwrite(data, 1, size, f) == size;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return internal_error("writing " + path + " failed (disk full?)");
  }
  return Status::Ok();
}

}  // namespace dsv4
