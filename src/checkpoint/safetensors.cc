#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return data_loss(path + ": cannot stat: " + std::strerror(errno));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_size_ = static_cast<size_t>(st.st_size);
  if (file->map_size_ > 0) {
    void* p = mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return data_loss(path + ": mmap failed: " + std::strerror(errno));
    }
    file->map_ = p;
  }
  file->fd_ = fd;
  // Loading reads each tensor once, front to back: a larger readahead
  // window helps a cold cache.
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  DSV4_RETURN_IF_ERROR(file->parse(static_cast<const uint8_t*>(file->map_), file->map_size_));
  return file;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_buffer(const std::string& name,
                                                                        const uint8_t* bytes, size_t size) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = name;
  DSV4_RETURN_IF_ERROR(file->parse(bytes, size));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::prefetch(uint64_t offset, uint64_t size) const {
  if (fd_ >= 0) posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_WILLNEED);
}

Status SafetensorsFile::read(const TensorInfo& t, uint64_t begin, uint64_t size, void* dst) const {
  if (begin > t.nbytes || size > t.nbytes - begin)
    return internal_error(path_ + ": tensor '" + t.name + "': read of bytes [" + std::to_string(begin) + ", " +
                          std::to_string(begin + size) + ") past its " + std::to_string(t.nbytes));
  if (fd_ < 0) {
    std::memcpy(dst, t.data + begin, size);
    return Status::Ok();
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd_, out + done, std::min<uint64_t>(size - done, uint64_t{1} << 30),
                            static_cast<off_t>(t.offset + begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return data_loss(path_ + ": tensor '" + t.name + "': cannot read " + std::to_string(size) + " bytes at offset " +
                       std::to_string(t.offset + begin) + ": " + (n < 0 ? std::strerror(errno) : "end of file"));
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status SafetensorsFile::parse(const uint8_t* bytes, size_t size) {
  const std::string& p = path_;
  if (size < 8) return data_loss(p + ": truncated: " + std::to_string(size) + " bytes, no safetensors header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return data_loss(p + ": header length " + std::to_string(header_len) + " exceeds the file (" +
                     std::to_string(size) + " bytes): truncated or not a safetensors file");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const std::exception& e) {
    return data_loss(p + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return data_loss(p + ": header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (v.is_object()) {
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    std::string where = p + ": tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      return data_loss(where + ": entry needs dtype, shape and data_offsets");
    }
    TensorInfo info;
    info.name = name;
    info.file = &path_;
    info.source = this;
    if (!v["dtype"].is_string() || !dtype_from_name(v["dtype"].get<std::string>(), &info.dtype)) {
      return data_loss(where + ": unsupported dtype " + v["dtype"].dump());
    }
    if (!v["shape"].is_array()) return data_loss(where + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40)) {
        return data_loss(where + ": bad shape " + v["shape"].dump());
      }
      info.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return data_loss(where + ": bad data_offsets " + off.dump());
    }
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return data_loss(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       ") outside the " + std::to_string(data_size) + " data bytes (file truncated?)");
    }
    // Overflow-safe numel * element size.
    unsigned __int128 expect = dtype_size(info.dtype);
    for (int64_t d : info.shape) expect *= static_cast<uint64_t>(d);
    if (expect != end - begin) {
      return data_loss(where + ": " + std::to_string(end - begin) + " bytes do not match dtype " +
                       dtype_name(info.dtype) + " and shape " + info.shape_string());
    }
    info.data = data + begin;
    info.offset = 8 + header_len + begin;
    info.nbytes = end - begin;
    tensors_.emplace(name, std::move(info));
  }
  return Status::Ok();
}

}  // namespace dsv4
