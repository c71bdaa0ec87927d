#include "args.h"

#include <cstdlib>
#include <iterator>

namespace dsv4::app {

Args::Args(int argc, char** argv, int first, std::set<std::string> valued, std::set<std::string> flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      error_ = "unexpected argument '" + a + "'";
      return;
    }
    std::string key = a.substr(2), value;
    auto eq = key.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    if (flags.count(key) && !inline_value) {
      values_.emplace(key, "1");
    } else if (valued.count(key)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          error_ = "option --" + key + " needs a value";
          return;
        }
        value = argv[++i];
      }
      values_.emplace(key, value);
    } else {
      error_ = "unknown option --" + key;
      return;
    }
  }
}

std::string Args::get(const std::string& k, const std::string& def) const {
  auto [b, e] = values_.equal_range(k);
  return b == e ? def : std::prev(e)->second;  // the last one given wins
}

std::vector<std::string> Args::all(const std::string& k) const {
  std::vector<std::string> out;
  auto [b, e] = values_.equal_range(k);
  for (auto it = b; it != e; ++it) out.push_back(it->second);
  return out;
}

long Args::get_int(const std::string& k, long def) {
  if (!has(k)) return def;
  std::string v = get(k);
  char* end = nullptr;
  long r = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end) {
    error_ = "option --" + k + " needs an integer, got '" + v + "'";
    return def;
  }
  return r;
}

}  // namespace dsv4::app
