// dsv4 serve: the OpenAI-compatible HTTP server, over ranks that are threads
// of this process or (--dist mpi) MPI processes with rank 0 serving HTTP.
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "args.h"
#include "base/logging.h"
#include "dist/mpi_communicator.h"
#include "engine_args.h"
#include "model_source.h"
#include "runtime/distributed_executor.h"
#include "server/http_server.h"
#include "checkpoint/config_json.h"

namespace dsv4::app {
namespace {

const char* kHelp =
    "usage: dsv4 serve [--model DIR] [--host H] [--port P] [options]\n"
    "  --model DIR              checkpoint directory with tokenizer.json, or embedded:NAME for a model built\n"
    "                           into dsv4 (default: embedded:default, a small trained DeepSeek-V4;\n"
    "                           embedded:default-dspark is it with a DSpark drafter)\n"
    "  --host H --port P        where to listen (default 127.0.0.1:8000; port 0 picks a free one)\n"
    "  --served-model-name N    the model id clients use (default: the directory name, or dsv4-default)\n"
    "  --api-key KEY            require Authorization: Bearer KEY (or x-api-key: KEY) on /v1/*\n"
    "  --allowed-origins LIST   CORS: comma-separated origins browsers may call from (default *: any)\n"
    "  --max-queue N            waiting choices before answering 503 + Retry-After (default 256;\n"
    "                           a request is taken whole, and always by an empty queue)\n"
    "  --http-threads N         I/O threads owning the client connections (default 2; each serves\n"
    "                           thousands of connections without blocking)\n"
    "  --max-connections N      open connections served at once (default 16384, within the open-file\n"
    "                           limit, which is raised to its maximum at start); past it a connection\n"
    "                           may only ask /health, others are answered 503 and closed\n"
    "  --max-body-bytes N       largest request body (default 33554432; larger: 413)\n"
    "  --http-idle-timeout-ms N a connection with no request for this long is closed (default 60000)\n"
    "  --http-head-timeout-ms N a request head must arrive within this of its first byte (default 10000)\n"
    "  --http-body-timeout-ms N a body must start within this, then keep up --http-min-body-rate\n"
    "                           bytes/s (defaults 10000 and 1024); too slow: 408 and closed\n"
    "  --http-write-timeout-ms N a client that takes no byte of its response for this long is\n"
    "                           disconnected and its request aborted (default 30000)\n"
    "  --http-stream-backlog N  bytes a stream may have waiting for its reader beyond what the\n"
    "                           kernel holds; a reader further behind is cut off (default 1048576).\n"
    "                           A stream's generation is held (no steps, pages kept) as soon as\n"
    "                           16 KiB wait, and goes on when its reader catches up\n"
    "  --no-access-log          no log line per request\n"
    "  --stored-responses N     /v1/responses kept for GET and previous_response_id (default 1024;\n"
    "                           the oldest goes first)\n"
    "  --shutdown-grace-ms N    on SIGTERM, time in-flight requests get to finish (default 10000)\n"
    "  --dist mpi               one rank per MPI process: mpirun -np TPxDP dsv4 serve --dist mpi ...\n"
    "                           (rank 0 serves HTTP; a rank that stops answering makes /health 503\n"
    "                           and ends the job with an error)\n"
    "  --dist-timeout-ms N      a step longer than this means a rank is gone (default 60000)\n";

struct ServeSettings {
  std::string dir;
  kernels::Numerics numerics = kernels::Numerics::kFast;
  HttpServerOptions http;
  EngineServiceOptions service;
  int grace_ms = 10000;
  sigset_t signals;
};

// Serves `engine` until SIGTERM/SIGINT (or the listener fails). watchdog,
// when set, is polled while serving and ends the process when it says so.
int serve(std::unique_ptr<Engine> engine, ServeSettings& s, const std::function<bool()>& lost_rank) {
  const ModelConfig config = engine->config();
  std::string tokenizer_name;
  auto loaded = load_tokenizer(s.dir, config.vocab_size, &tokenizer_name);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", loaded.status().message().c_str());
    return 2;
  }
  std::unique_ptr<Tokenizer> tokenizer = std::move(*loaded);
  if (tokenizer->vocab_size() > config.vocab_size)
    log_warn("the tokenizer has " + std::to_string(tokenizer->vocab_size()) + " tokens, the model " +
             std::to_string(config.vocab_size));
  log_info("model " + model_name(s.dir) + ": " + config.summary());
  log_info("tokenizer " + tokenizer_name);
  log_info("topology: " + engine->executor().describe() + ", " + std::to_string(std::thread::hardware_concurrency()) +
           " cores");
  const bool v41 = config.family == ModelFamily::kV41;  // exact only so far (model_source.cc)
  log_info(std::string("numerics ") + kernels::numerics_name(v41 ? kernels::Numerics::kExact : s.numerics) + ", kernels " +
           kernels::isa_name(kernels::active_isa()));
  log_info(engine->capacity_summary());
  // Every connection is a descriptor: the limit goes as high as allowed,
  // and the connection cap stays under it (room kept for the rest).
  HttpListenerOptions& h = s.http.http;
  const int64_t files = raise_open_file_limit();
  const int64_t room = files - h.overflow_connections - 256;
  if (h.max_connections > room) {
    log_warn("--max-connections " + std::to_string(h.max_connections) + " is above what the open-file limit (" +
             std::to_string(files) + ") allows: " + std::to_string(std::max<int64_t>(room, 1)));
    h.max_connections = static_cast<int>(std::max<int64_t>(room, 1));
  }
  EngineService service(std::move(engine), s.service);
  HttpServer server(&service, tokenizer.get(), s.http);
  const Status bound = server.bind();
  if (!bound.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", bound.message().c_str());
    return 2;
  }
  log_info("http: " + std::to_string(h.io_threads) + " I/O threads, up to " + std::to_string(h.max_connections) +
           " connections (open-file limit " + std::to_string(files) + "), idle timeout " +
           std::to_string(h.idle_timeout_ms / 1000) + " s, request head " + std::to_string(h.head_timeout_ms / 1000) +
           " s, write timeout " + std::to_string(h.write_timeout_ms / 1000) + " s");
  log_info("serving " + s.http.model_name + " on http://" + h.host + ":" + std::to_string(server.port()) +
           (s.http.api_key.empty() ? "" : " (API key required)") + "; chat page at /");
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&s.signals, &sig);
    const EngineSnapshot in_flight = service.snapshot();
    log_info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": finishing " +
             std::to_string(in_flight.running + in_flight.waiting) + " in-flight requests");
    service.shutdown(s.grace_ms);
    server.stop();
  });
  std::atomic<bool> serving{true};
  std::thread watchdog;
  if (lost_rank)
    watchdog = std::thread([&] {
      while (serving) {
        if (!service.healthy() && lost_rank()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  server.serve();
  serving = false;
  // serve() also returns when the listener fails; wake the waiter then.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  if (watchdog.joinable()) watchdog.join();
  log_info("stopped");
  return 0;
}

// --dist mpi: every process loads its share; rank 0 drives and serves.
int serve_over_mpi(int argc, char** argv, const EngineOptions& eopt, const ParallelOptions& popt, int timeout_ms,
                   ServeSettings& s) {
  auto world = MpiCommunicator::world(&argc, &argv);
  const int rank = world->rank();
  DistributedOptions d;
  auto opened = ModelDir::open(s.dir);
  if (!opened.ok()) {
    std::fprintf(stderr, "dsv4 serve (rank %d): %s\n", rank, opened.status().message().c_str());
    world->abort(2);
  }
  // Dropped once the weights are in memory: a rank the job kills later
  // leaves no embedded model behind in /tmp.
  std::optional<ModelDir> dir(std::move(*opened));
  d.model_dir = dir->path();
  d.on_loaded = [&dir] { dir.reset(); };
  d.parallel = popt;
  d.model.numerics = s.numerics;
  d.step_timeout_ms = timeout_ms;
  auto config = load_any_model_config(d.model_dir + "/config.json");
  auto cache = config.ok() ? Engine::cache_options(*config, eopt) : StatusOr<KvCacheOptions>(config.status());
  if (!cache.ok()) {
    std::fprintf(stderr, "dsv4 serve (rank %d): %s\n", rank, cache.status().message().c_str());
    world->abort(2);
  }
  d.cache = *cache;
  if (rank != 0) {
    // Ranks other than 0 stop when rank 0 tells them (after its drain).
    const Status st = follow_steps(world.get(), d);
    if (!st.ok()) {
      std::fprintf(stderr, "dsv4 serve (rank %d): %s\n", rank, st.message().c_str());
      world->abort(2);
    }
    world.reset();
    MPI_Finalize();
    return 0;
  }
  auto exec = DistributedExecutor::create(world.get(), d);
  if (!exec.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", exec.status().message().c_str());
    world->abort(2);
  }
  dir.reset();
  auto engine = Engine::create(std::move(*exec), eopt.scheduler);
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", engine.status().message().c_str());
    world->abort(2);
  }
  s.service.heartbeat_ms = 1000;
  log_info("rank 0 of " + std::to_string(world->size()) + " drives the steps and serves HTTP, pid " +
           std::to_string(getpid()) + " (SIGTERM to it drains and stops every rank)");
  Communicator* w = world.get();
  const int code = serve(std::move(*engine), s, [&] {
    log_error("a rank stopped answering for " + std::to_string(timeout_ms) + " ms: ending the job");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // /health says so meanwhile
    w->abort(1);
    return true;
  });
  world.reset();
  MPI_Finalize();
  return code;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::set<std::string> valued = {"model", "host", "port", "served-model-name", "api-key", "allowed-origins", "max-queue", "http-threads",
                                  "shutdown-grace-ms", "dist", "dist-timeout-ms", "max-connections", "max-body-bytes",
                                  "http-idle-timeout-ms", "http-head-timeout-ms", "http-body-timeout-ms",
                                  "http-min-body-rate", "http-write-timeout-ms", "http-stream-backlog",
                                  "stored-responses"};
  for (const auto& k : engine_option_names()) valued.insert(k);
  for (const auto& k : parallel_option_names()) valued.insert(k);
  std::set<std::string> flags = {"help", "no-access-log"};
  for (const auto& k : parallel_flag_names()) flags.insert(k);
  for (const auto& k : engine_flag_names()) flags.insert(k);
  Args args(argc, argv, 2, valued, flags);
  if (args.has("help")) {
    std::printf("%s%s%s%s", kHelp, kEngineHelp, kNumericsHelp, kParallelHelp);
    return 0;
  }
  EngineOptions eopt = engine_options(args);
  ParallelOptions popt = parallel_options(args);
  ServeSettings s;
  HttpListenerOptions& h = s.http.http;
  h.host = args.get("host", h.host);
  h.port = static_cast<int>(args.get_int("port", h.port));
  s.http.api_key = args.get("api-key");
  s.http.allowed_origins = args.get("allowed-origins", "*");
  if (args.ok() && s.http.allowed_origins.empty()) args.set_error("--allowed-origins needs at least one origin (or *)");
  h.io_threads = static_cast<int>(args.get_int("http-threads", h.io_threads));
  h.max_connections = static_cast<int>(args.get_int("max-connections", h.max_connections));
  h.limits.max_body_bytes = static_cast<size_t>(args.get_int("max-body-bytes", static_cast<int64_t>(h.limits.max_body_bytes)));
  h.idle_timeout_ms = static_cast<int>(args.get_int("http-idle-timeout-ms", h.idle_timeout_ms));
  h.head_timeout_ms = static_cast<int>(args.get_int("http-head-timeout-ms", h.head_timeout_ms));
  h.body_timeout_ms = static_cast<int>(args.get_int("http-body-timeout-ms", h.body_timeout_ms));
  h.min_body_bytes_per_second = args.get_int("http-min-body-rate", h.min_body_bytes_per_second);
  h.write_timeout_ms = static_cast<int>(args.get_int("http-write-timeout-ms", h.write_timeout_ms));
  h.max_stream_backlog_bytes = static_cast<size_t>(args.get_int("http-stream-backlog", static_cast<int64_t>(h.max_stream_backlog_bytes)));
  h.access_log = !args.has("no-access-log");
  s.http.stored_responses = static_cast<int>(args.get_int("stored-responses", s.http.stored_responses));
  for (const auto& [flag, v] : {std::pair<const char*, int64_t>{"http-threads", h.io_threads},
                                {"max-connections", h.max_connections},
                                {"max-body-bytes", static_cast<int64_t>(h.limits.max_body_bytes)},
                                {"http-idle-timeout-ms", h.idle_timeout_ms},
                                {"http-head-timeout-ms", h.head_timeout_ms},
                                {"http-body-timeout-ms", h.body_timeout_ms},
                                {"http-min-body-rate", h.min_body_bytes_per_second},
                                {"http-write-timeout-ms", h.write_timeout_ms},
                                {"http-stream-backlog", static_cast<int64_t>(h.max_stream_backlog_bytes)},
                                {"stored-responses", s.http.stored_responses}})
    if (args.ok() && v < 1) args.set_error(std::string("--") + flag + " must be at least 1");
  s.service.max_queue = args.get_int("max-queue", s.service.max_queue);
  s.grace_ms = static_cast<int>(args.get_int("shutdown-grace-ms", 10000));
  s.numerics = numerics_option(args, kernels::Numerics::kFast);
  const std::string dist = args.get("dist", "local");
  const int timeout_ms = static_cast<int>(args.get_int("dist-timeout-ms", 60000));
  if (args.ok() && dist != "local" && dist != "mpi") args.set_error("--dist must be local or mpi, got '" + dist + "'");
  if (args.ok() && timeout_ms < 1) args.set_error("--dist-timeout-ms must be positive");
  if (!args.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n%s", args.error().c_str(), kHelp);
    return 2;
  }
  s.dir = args.get("model");
  s.http.model_name = args.get("served-model-name", served_model_name(s.dir));

  // Signals go to the waiter thread in serve() only.
  sigemptyset(&s.signals);
  sigaddset(&s.signals, SIGTERM);
  sigaddset(&s.signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &s.signals, nullptr);

  if (dist == "mpi") return serve_over_mpi(argc, argv, eopt, popt, timeout_ms, s);
  if (Status placed = place_on_this_machine(args, &popt); !placed.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", placed.message().c_str());
    return 2;
  }
  auto engine = load_engine(s.dir, eopt, popt, s.numerics, /*progress_bar=*/true);
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", engine.status().message().c_str());
    return 2;
  }
  return serve(std::move(*engine), s, nullptr);
}

}  // namespace dsv4::app
