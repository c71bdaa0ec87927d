// dsv4: one binary, several jobs.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace dsv4::app {
int cmd_verify(int argc, char** argv);
int cmd_mkmodel(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_plan(int argc, char** argv);
}  // namespace dsv4::app

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: dsv4 <command> [options]\n"
               "commands:\n"
               "  verify   compare the forward pass with a golden reference case\n"
               "           (no --model: self-check of the embedded default model)\n"
               "  serve    the OpenAI-compatible HTTP server (default: embedded model on 127.0.0.1:8000)\n"
               "  run      generate text for prompts through the serving engine\n"
               "  bench    measure a layout (--topology: per-rank weights, communication per step)\n"
               "  mkmodel  write a synthetic DeepSeek-V4 checkpoint\n"
               "  convert  rewrite a checkpoint as W8A8 (int8 weights and activations) or GGUF\n"
               "  plan     what a model needs on a layout, from its config.json alone\n"
               "run 'dsv4 <command> --help' for its options\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Every forward step allocates and frees the same activation buffers; by
  // default glibc maps the large ones fresh each time and unmaps them after
  // (a page fault and a zeroed page per 4 KiB, every step). Serve them from
  // the heap, and keep freed heap memory for the next step.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "verify") return dsv4::app::cmd_verify(argc, argv);
  if (cmd == "mkmodel") return dsv4::app::cmd_mkmodel(argc, argv);
  if (cmd == "run") return dsv4::app::cmd_run(argc, argv);
  if (cmd == "serve") return dsv4::app::cmd_serve(argc, argv);
  if (cmd == "bench") return dsv4::app::cmd_bench(argc, argv);
  if (cmd == "convert") return dsv4::app::cmd_convert(argc, argv);
  if (cmd == "plan") return dsv4::app::cmd_plan(argc, argv);
  std::fprintf(stderr, "dsv4: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}
