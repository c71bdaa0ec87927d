// A directory of the test's own under the system temp dir, removed with
// everything in it when the object goes. mkdtemp makes the name unique, so
// a concurrent `ctest -j` job, another test process that got the same pid,
// or what an earlier run left behind never shares or pre-fills it.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace dsv4::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "dsv4_test") {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(name.data()) == nullptr) {
      std::perror(("mkdtemp " + name).c_str());
      std::abort();
    }
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dsv4::testing
