// dsv4 bench --front-end (bench_front_end.cc).
#pragma once

#include <string>

namespace dsv4::app {

struct FrontEndBenchOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int compare_port = 0;  // a second server for the throughput comparison (0: none)
  std::string parts = "connections,throughput,stalled";
  int idle = 10000, slowloris = 2000, samples = 500;
  int clients = 64;
  double throughput_seconds = 15;
  int streams = 8, stalled = 1000;
  double window_seconds = 15;
};

int bench_front_end(const FrontEndBenchOptions& options);

}  // namespace dsv4::app
