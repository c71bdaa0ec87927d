#include "bench_peer.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

namespace dsv4::app {
namespace {

std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// Single-quoted for the shell.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string default_peer_harness() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "build/peer/llamacpp_bench";
  return (self.parent_path() / "peer" / "llamacpp_bench").string();
}

StatusOr<std::vector<PeerRow>> run_llamacpp_peer(const PeerOptions& o) {
  if (access(o.harness.c_str(), X_OK) != 0)
    return not_found("the llama.cpp harness '" + o.harness + "' is not there: run peer/setup_llamacpp.sh");
  if (access(o.gguf.c_str(), R_OK) != 0)
    return not_found("cannot read '" + o.gguf + "' (make it with dsv4 convert --to gguf)");
  const std::string cmd = quoted(o.harness) + " --model " + quoted(o.gguf) + " --ctx " + joined(o.contexts) +
                          " --batch " + joined(o.batches) + " --gen " + std::to_string(o.gen) + " --threads " +
                          std::to_string(o.threads) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return internal_error("cannot start " + o.harness);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  std::vector<PeerRow> rows;
  std::istringstream lines(out);
  std::string line, tail;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string tag;
    PeerRow r;
    if (f >> tag && tag == "row" && f >> r.phase >> r.batch >> r.ctx_from >> r.ctx_to >> r.tokens >> r.seconds)
      rows.push_back(r);
    else if (line.rfind("info ", 0) != 0 && line.find_first_not_of('.') != std::string::npos)
      tail += line + "\n";
  }
  if (status != 0 || rows.empty())
    return internal_error("the llama.cpp harness failed (exit status " + std::to_string(status) + "): " + tail);
  return rows;
}

}  // namespace dsv4::app
