#include <algorithm>
// dsv4 run: offline generation through the serving engine.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>

#include "args.h"
#include "engine_args.h"
#include "model_source.h"
#include "runtime/engine.h"
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4::app {
namespace {

const char* kHelp =
    "usage: dsv4 run [--model DIR] --prompt TEXT [--prompt TEXT ...] [--prompt-file F] [options]\n"
    "  --model DIR        checkpoint directory, or embedded:NAME (default: the embedded default model)\n"
    "  --prompt TEXT      a prompt (repeatable; all prompts run batched)\n"
    "  --prompt-file F    one prompt per line\n"
    "  --thinking         the model reasons before it answers (thinking mode)\n"
    "  --raw              the prompt is the model's input as written, not a user's chat turn\n"
    "A prompt is sent as a user's chat turn, rendered by the model's chat encoding,\n"
    "when the tokenizer has the chat markers (else, and with --raw, as raw text).\n"
    "Generated text streams to stdout (\"[k] \" marks prompt k when several run);\n"
    "loading progress and the summary go to stderr.\n";

struct Stream {
  size_t index = 0;
  std::unique_ptr<IncrementalDetokenizer> detok;
};

}  // namespace

int cmd_run(int argc, char** argv) {
  std::set<std::string> valued = {"model", "prompt", "prompt-file"};
  for (const auto& k : engine_option_names()) valued.insert(k);
  for (const auto& k : sampling_option_names()) valued.insert(k);
  for (const auto& k : parallel_option_names()) valued.insert(k);
  std::set<std::string> flags = {"help", "ignore-eos", "thinking", "raw"};
  for (const auto& k : parallel_flag_names()) flags.insert(k);
  for (const auto& k : engine_flag_names()) flags.insert(k);
  Args args(argc, argv, 2, valued, flags);
  if (args.has("help")) {
    std::printf("%s%s%s%s%s", kHelp, kEngineHelp, kNumericsHelp, kParallelHelp, kSamplingHelp);
    return 0;
  }
  SamplingParams defaults;
  defaults.max_tokens = 64;
  EngineOptions eopt = engine_options(args);
  ParallelOptions popt = parallel_options(args);
  SamplingParams params = sampling_params(args, defaults);
  const kernels::Numerics numerics = numerics_option(args, kernels::Numerics::kFast);
  std::vector<std::string> prompts = args.all("prompt");
  if (args.has("prompt-file")) {
    std::ifstream in(args.get("prompt-file"));
    if (!in) {
      std::fprintf(stderr, "dsv4 run: cannot read --prompt-file %s\n", args.get("prompt-file").c_str());
      return 2;
    }
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  if (!args.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n%s", args.error().c_str(), kHelp);
    return 2;
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "dsv4 run: give at least one --prompt or --prompt-file\n%s", kHelp);
    return 2;
  }

  const std::string dir = args.get("model");
  if (Status placed = place_on_this_machine(args, &popt); !placed.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", placed.message().c_str());
    return 2;
  }
  const auto t_load = std::chrono::steady_clock::now();
  auto engine = load_engine(dir, eopt, popt, numerics, /*progress_bar=*/true);
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", engine.status().message().c_str());
    return 2;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::fprintf(stderr, "model: %s (%s), loaded in %.2fs on %s, numerics %s\n", model_name(dir).c_str(),
               (*engine)->config().summary().c_str(), load_s, (*engine)->executor().describe().c_str(),
               kernels::numerics_name(numerics));
  std::fprintf(stderr, "%s\n", (*engine)->capacity_summary().c_str());

  std::string tokenizer_name;
  auto loaded = load_tokenizer(dir, (*engine)->config().vocab_size, &tokenizer_name);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dsv4 run: %s\n", loaded.status().message().c_str());
    return 2;
  }
  const Tokenizer& tokenizer = **loaded;
  // A tokenizer with the sentence markers is a chat model's: the prompt is
  // a user's turn, as the chat API would send it.
  const bool chat = !args.has("raw") && tokenizer.eos_id() >= 0;
  std::map<int64_t, Stream> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids;
    if (chat) {
      auto turn = chat_turn_tokens(tokenizer, (*engine)->config(), prompts[i], args.has("thinking"));
      if (!turn.ok()) {
        std::fprintf(stderr, "dsv4 run: prompt %zu: %s\n", i, turn.status().message().c_str());
        return 2;
      }
      ids = std::move(*turn);
    } else {
      if (tokenizer.add_bos() && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
      const std::vector<int32_t> text = tokenizer.encode(prompts[i]);
      ids.insert(ids.end(), text.begin(), text.end());
    }
    auto id = (*engine)->add_request(ids, params);
    if (!id.ok()) {
      std::fprintf(stderr, "dsv4 run: prompt %zu: %s\n", i, id.status().message().c_str());
      return 2;
    }
    streams[*id] = {i, std::make_unique<IncrementalDetokenizer>(&tokenizer, params.stop)};
  }

  // The lowest-numbered unfinished prompt streams live; the others buffer
  // until it is their turn, so every prompt's text reads in one piece.
  const bool tagged = prompts.size() > 1;
  std::vector<std::string> text(prompts.size());
  std::vector<bool> ended(prompts.size(), false);
  size_t live = 0;
  size_t printed = 0;  // bytes of text[live] already on the terminal
  bool tag_shown = false;  // "[live] " is on the terminal (its text may still be empty)
  auto show = [&] {
    while (live < prompts.size()) {
      if (!tag_shown && tagged) std::printf("[%zu] ", live);
      tag_shown = true;
      std::fputs(text[live].c_str() + printed, stdout);
      printed = text[live].size();
      if (!ended[live]) break;
      std::printf("\n");
      ++live;
      printed = 0;
      tag_shown = false;
    }
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  int64_t prompt_tokens = 0, generated = 0;
  while ((*engine)->has_unfinished()) {
    for (const RequestOutput& o : (*engine)->step()) {
      Stream& s = streams[o.id];
      std::vector<int32_t> shown;  // the sentence markers end the text, they are not in it
      for (int32_t t : o.new_tokens)
        if (t != tokenizer.eos_id() && t != tokenizer.bos_id()) shown.push_back(t);
      std::string piece = s.detok->add(shown);
      bool done = o.finished;
      if (!done && s.detok->stopped()) done = (*engine)->finish(o.id, FinishReason::kStop);
      if (done) piece += s.detok->flush();
      text[s.index] += piece;
      ended[s.index] = done;
      show();
      if (!o.error.empty()) std::fprintf(stderr, "dsv4 run: prompt %zu: %s\n", s.index, o.error.c_str());
      if (done) {
        prompt_tokens += o.prompt_tokens;
        generated += o.completion_tokens;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats& st = (*engine)->stats();
  std::fprintf(stderr,
               "%zu requests: %lld prompt + %lld generated tokens in %.2fs, %.1f generated tok/s, %.1f total tok/s "
               "(%lld steps, %lld preemptions)\n",
               prompts.size(), static_cast<long long>(prompt_tokens), static_cast<long long>(generated), secs,
               generated / secs, (prompt_tokens + generated) / secs, static_cast<long long>(st.steps),
               static_cast<long long>(st.preemptions));
  if (st.verify_chunks > 0)
    std::fprintf(stderr, "speculative: %lld of %lld draft tokens accepted (%.1f%%), mean accepted length %.2f\n",
                 static_cast<long long>(st.drafts_accepted), static_cast<long long>(st.drafts_proposed),
                 100.0 * st.drafts_accepted / std::max<int64_t>(1, st.drafts_proposed),
                 1.0 + static_cast<double>(st.drafts_accepted) / st.verify_chunks);
  if (st.verify_chunks > 0) {
    std::fprintf(stderr, "  runs past each draft position:");
    for (int k = 0; k < kMaxDraftTokens && st.proposed_at[k] > 0; ++k)
      std::fprintf(stderr, " %d: %.1f%%", k + 1, 100.0 * st.accepted_at[k] / st.proposed_at[k]);
    std::fprintf(stderr, "\n");
  }
  return 0;
}

}  // namespace dsv4::app
