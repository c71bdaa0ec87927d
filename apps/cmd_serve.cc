// dsv4 serve: the OpenAI-compatible HTTP server.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "args.h"
#include "base/logging.h"
#include "engine_args.h"
#include "model_source.h"
#include "server/http_server.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_tokenizer.h"

namespace dsv4::app {
namespace {

const char* kHelp =
    "usage: dsv4 serve [--model DIR] [--host H] [--port P] [options]\n"
    "  --model DIR              checkpoint directory with tokenizer.json (default: the embedded default model\n"
    "                           with its byte-level tokenizer)\n"
    "  --host H --port P        where to listen (default 127.0.0.1:8000; port 0 picks a free one)\n"
    "  --served-model-name N    the model id clients use (default: the directory name, or dsv4-default)\n"
    "  --api-key KEY            require Authorization: Bearer KEY on /v1/*\n"
    "  --max-queue N            waiting requests before answering 503 (default 256)\n"
    "  --http-threads N         connections served at once (default 128)\n"
    "  --shutdown-grace-ms N    on SIGTERM, time in-flight requests get to finish (default 10000)\n";

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::set<std::string> valued = {"model", "host", "port", "served-model-name", "api-key", "max-queue", "http-threads",
                                  "shutdown-grace-ms"};
  for (const auto& k : engine_option_names()) valued.insert(k);
  for (const auto& k : parallel_option_names()) valued.insert(k);
  std::set<std::string> flags = {"help"};
  for (const auto& k : parallel_flag_names()) flags.insert(k);
  Args args(argc, argv, 2, valued, flags);
  if (args.has("help")) {
    std::printf("%s%s%s", kHelp, kEngineHelp, kParallelHelp);
    return 0;
  }
  EngineOptions eopt = engine_options(args);
  ParallelOptions popt = parallel_options(args);
  HttpServerOptions hopt;
  hopt.host = args.get("host", hopt.host);
  hopt.port = static_cast<int>(args.get_int("port", hopt.port));
  hopt.api_key = args.get("api-key");
  hopt.threads = static_cast<int>(args.get_int("http-threads", hopt.threads));
  EngineServiceOptions sopt;
  sopt.max_queue = args.get_int("max-queue", sopt.max_queue);
  const int grace_ms = static_cast<int>(args.get_int("shutdown-grace-ms", 10000));
  if (!args.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n%s", args.error().c_str(), kHelp);
    return 2;
  }
  const std::string dir = args.get("model");
  hopt.model_name = args.get("served-model-name",
                             dir.empty() ? "dsv4-default" : std::filesystem::path(dir).filename().string());

  // Signals go to the waiter thread below only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto engine = load_engine(dir, eopt, popt, /*progress_bar=*/true);
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", engine.status().message().c_str());
    return 2;
  }
  const ModelConfig& config = (*engine)->config();
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_name = "byte-level (built in)";
  if (!dir.empty() && std::filesystem::exists(dir + "/tokenizer.json")) {
    auto bpe = BpeTokenizer::load(dir);
    if (!bpe.ok()) {
      std::fprintf(stderr, "dsv4 serve: %s\n", bpe.status().message().c_str());
      return 2;
    }
    tokenizer = std::move(*bpe);
    tokenizer_name = dir + "/tokenizer.json";
  } else {
    tokenizer = std::make_unique<ByteTokenizer>(config.vocab_size);
  }
  if (tokenizer->vocab_size() > config.vocab_size)
    log_warn("the tokenizer has " + std::to_string(tokenizer->vocab_size()) + " tokens, the model " +
             std::to_string(config.vocab_size));
  log_info("model " + model_name(dir) + ": " + config.summary());
  log_info("tokenizer " + tokenizer_name);
  log_info("topology: " + (*engine)->executor().describe() + (popt.flashcomm.enabled ? ", FlashComm1 from " +
           std::to_string(popt.flashcomm.min_tokens) + " tokens" : "") + ", " +
           std::to_string(std::thread::hardware_concurrency()) + " cores");
  log_info((*engine)->capacity_summary());
  EngineService service(std::move(*engine), sopt);
  HttpServer server(&service, tokenizer.get(), hopt);
  if (!server.bind()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", server.error().c_str());
    return 2;
  }
  log_info("serving " + hopt.model_name + " on http://" + hopt.host + ":" + std::to_string(server.port()) +
           (hopt.api_key.empty() ? "" : " (API key required)"));
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log_info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": finishing in-flight requests");
    service.shutdown(grace_ms);
    server.stop();
  });
  server.serve();
  // serve() also returns when the listener fails; wake the waiter then.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  log_info("stopped");
  return 0;
}

}  // namespace dsv4::app
