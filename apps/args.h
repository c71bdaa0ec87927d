// Command-line parsing shared by the subcommands: --key value, --flag, and
// repeated keys. Unknown options are errors that name the option.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dsv4::app {

class Args {
 public:
  // `valued` options take a value; `flags` do not.
  Args(int argc, char** argv, int first, std::set<std::string> valued, std::set<std::string> flags);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  std::vector<std::string> all(const std::string& k) const;
  // Parses an integer option; sets error when it is not one.
  long get_int(const std::string& k, long def);
  void set_error(const std::string& e) {
    if (error_.empty()) error_ = e;
  }

 private:
  std::multimap<std::string, std::string> values_;
  std::string error_;
};

}  // namespace dsv4::app
