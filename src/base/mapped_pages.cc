#include "base/mapped_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>

namespace dsv4 {
namespace {

size_t page_size() {
  static const size_t n = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return n;
}

}  // namespace

MappedPages::MappedPages(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const size_t page = page_size();
  const size_t body = (bytes + page - 1) / page * page;
  mapped_ = body + 2 * page;
  // No MAP_NORESERVE: the kernel's overcommit check refuses what the machine
  // cannot hold, as the heap would, so the cache manager can retry smaller.
  void* p = mmap(nullptr, mapped_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  uint8_t* base = static_cast<uint8_t*>(p);
  if (mprotect(base + page, body, PROT_READ | PROT_WRITE) != 0) {
    munmap(p, mapped_);
    throw std::bad_alloc();
  }
  data_ = base + page;
}

MappedPages::~MappedPages() { release(); }

MappedPages::MappedPages(MappedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

MappedPages& MappedPages::operator=(MappedPages&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void MappedPages::release() noexcept {
  if (data_) munmap(data_ - page_size(), mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

}  // namespace dsv4
