// Starts `dsv4 serve` on a free port for a test (directly, or under a
// launcher such as mpiexec) and stops it with SIGTERM; and what server
// tests ask of a running server (its metrics, a JavaScript client run).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http/http_client.h"
#include "temp_dir.h"

namespace dsv4::testing {

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args, std::vector<std::string> launcher = {}) {
    log_ = dir_.file("serve.log");
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      dup2(fileno(stderr), fileno(stdout));
      std::vector<std::string> all = launcher;
      for (const char* a : {DSV4_BINARY, "serve", "--port", "0"}) all.push_back(a);
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const std::regex serving(R"(serving \S+ on http://127\.0\.0\.1:(\d+))");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, serving)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() { stop(); }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // The exit code once the process has ended by itself, or -2 while it runs
  // (waits up to timeout_s).
  int wait_exit(int timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pid_ > 0 ? -2 : exit_code_;
  }
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // SIGTERM, then the exit code: 128 + the signal if one ended it, -1 if it
  // had to be killed after timeout_s.
  int stop(int timeout_s = 30) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return exit_code_ = -1;
  }

 private:
  TempDir dir_{"dsv4_serve"};  // holds the log; a fresh one per server, so no stale log is ever read
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::string log_;
};

// Runs tests/js/<script> with node; its exit code.
inline int node(const std::string& script, const std::string& args) {
  const std::string cmd = std::string(DSV4_NODE) + " " + DSV4_JS_DIR + "/" + script + " " + args;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The values of a metric's lines (`name{labels} value` or `name value`).
inline std::vector<double> metric(const std::string& text, const std::string& name) {
  std::vector<double> out;
  std::regex re("^" + name + R"((\{[^}]*\})? (\S+)$)", std::regex::multiline);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stod((*it)[2]));
  return out;
}

// Waits until nothing runs and every cache family is empty.
inline bool settles(HttpClient& cli) {
  for (int i = 0; i < 200; ++i) {
    auto r = cli.get("/metrics");
    if (r && r->status == 200) {
      const auto usage = metric(r->body, "dsv4_kv_cache_usage");
      const auto running = metric(r->body, "dsv4_num_requests_running");
      bool empty = !usage.empty();
      for (double u : usage) empty &= u == 0.0;
      if (empty && running.size() == 1 && running[0] == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace dsv4::testing
