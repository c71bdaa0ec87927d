// Large zero-initialized memory straight from the kernel: an anonymous
// mapping with an inaccessible guard page on each side.
//
// The KV cache's page pools are gigabytes of which a run may touch a few
// pages. From the heap, a sanitizer's allocator writes shadow bytes for the
// whole block when it is handed out and again when it is freed (an eighth
// of its size, faulted in page by page: seconds per engine at the default
// budget); a mapping costs nothing until a page is written, and is zero
// when it is. The guard pages stop a read or write that runs off either
// end, in every build, as a fault at the faulting instruction.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv4 {

class MappedPages {
 public:
  MappedPages() = default;
  // Throws std::bad_alloc when the kernel refuses the mapping.
  explicit MappedPages(size_t bytes);
  ~MappedPages();
  MappedPages(MappedPages&& other) noexcept;
  MappedPages& operator=(MappedPages&& other) noexcept;
  MappedPages(const MappedPages&) = delete;
  MappedPages& operator=(const MappedPages&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() noexcept;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;     // what was asked for
  size_t mapped_ = 0;   // the whole mapping, guards included
};

}  // namespace dsv4
