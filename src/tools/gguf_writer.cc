#include "tools/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace dsv4 {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT
// gguf_type numbering.
constexpr uint32_t kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9;

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

int64_t ggml_block_size(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kMXFP4 ? 32 : 1;
}

uint64_t ggml_bytes(GgmlType type, int64_t n) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kI32: return 4 * n;
    case GgmlType::kF16: case GgmlType::kBF16: return 2 * n;
    case GgmlType::kQ8_0: return n / 32 * 34;   // f16 scale + 32 int8
    case GgmlType::kMXFP4: return n / 32 * 17;  // e8m0 scale + 32 nibbles
  }
  return 0;
}

void GgufWriter::key(const std::string& k, uint32_t value_type) {
  put_string(metadata_, k);
  put<uint32_t>(metadata_, value_type);
  ++num_kv_;
}

void GgufWriter::set_u32(const std::string& k, uint32_t v) { key(k, kU32), put(metadata_, v); }
void GgufWriter::set_f32(const std::string& k, float v) { key(k, kF32), put(metadata_, v); }
void GgufWriter::set_bool(const std::string& k, bool v) { key(k, kBool), put<uint8_t>(metadata_, v ? 1 : 0); }
void GgufWriter::set_string(const std::string& k, const std::string& v) { key(k, kString), put_string(metadata_, v); }
void GgufWriter::set_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray);
  put<uint32_t>(metadata_, kI32);
  put<uint64_t>(metadata_, v.size());
  for (int32_t x : v) put(metadata_, x);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims, Producer produce) {
  tensors_.push_back({name, type, std::move(dims), std::move(produce)});
}

uint64_t GgufWriter::Tensor::size() const {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  return ggml_bytes(type, dims[0]) * rows;
}

uint64_t GgufWriter::data_bytes() const {
  uint64_t total = 0;
  for (const Tensor& t : tensors_) total = align_up(total) + t.size();
  return total;
}

Status GgufWriter::write(const std::string& path) const {
  for (const Tensor& t : tensors_)
    if (t.dims.empty() || t.dims[0] % ggml_block_size(t.type) != 0)
      return invalid_argument("GGUF tensor '" + t.name + "': its innermost dim is not a whole number of blocks");
  std::vector<uint8_t> header;
  header.insert(header.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, num_kv_);
  header.insert(header.end(), metadata_.begin(), metadata_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    offset = align_up(offset);
    put_string(header, t.name);
    put<uint32_t>(header, t.dims.size());
    for (int64_t d : t.dims) put<uint64_t>(header, d);
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, offset);
    offset += t.size();
  }
  header.resize(align_up(header.size()), 0);

  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
  if (!f) return internal_error("cannot create " + tmp + ": " + std::strerror(errno));
  bool io_ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  uint64_t at = 0;
  static const uint8_t kZeros[kAlignment] = {};
  for (const Tensor& t : tensors_) {
    const uint64_t pad = align_up(at) - at;
    io_ok = io_ok && std::fwrite(kZeros, 1, pad, f.get()) == pad;
    at += pad;
    uint64_t emitted = 0;
    Status st = t.produce([&](const void* bytes, size_t n) {
      io_ok = io_ok && std::fwrite(bytes, 1, n, f.get()) == n;
      emitted += n;
    });
    if (!st.ok()) return st;
    if (emitted != t.size())
      return internal_error("GGUF tensor '" + t.name + "': produced " + std::to_string(emitted) + " bytes, expected " +
                            std::to_string(t.size()));
    at += emitted;
    if (!io_ok) break;
  }
  if (!io_ok || std::fflush(f.get()) != 0) return internal_error("cannot write " + tmp + ": " + std::strerror(errno));
  f.reset();
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace dsv4
