/* llamacpp_bench: the peer side of `dsv4 bench --peer llamacpp`. Times
 * llama.cpp (the shipped library node-llama-cpp installs, called directly:
 * the node binding adds 25-35% per decoded token) on a GGUF made by
 * `dsv4 convert --to gguf`, with the same protocol as dsv4 bench's rows:
 *
 *   prefill: one sequence grows through the contexts in chunks of 2048
 *            tokens (logits for the chunk's last token only), timed, after
 *            one untimed warm-up chunk;
 *   decode:  at each context, for each batch size B, B sequences copied
 *            from the prefilled one step `gen` tokens together (one warm-up
 *            step first, not timed), every token's logits computed.
 *
 * Tokens are random ids (the GGUF carries no tokenizer). Output: one line
 * per row, "row <phase> <batch> <ctx_from> <ctx_to> <tokens> <seconds>",
 * which dsv4 bench reads, and first "row load 0 0 0 0 <seconds>": the time
 * to load the model and create its context.
 *
 * With --prompt-file IDS --logits-out FILE it instead prefills the token ids
 * in IDS (whitespace-separated) and writes the last position's logits as raw
 * float32: how the tests hold llama.cpp's reading of a converted file
 * against the reference's logits. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "ggml-backend.h"
#include "llama.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_list(const char* s, long* out, int max) {
  int n = 0;
  while (*s && n < max) {
    char* end;
    out[n++] = strtol(s, &end, 10);
    if (end == s) return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

static void quiet_log(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static unsigned long long rng_state = 7;
static llama_token random_token(int n_vocab) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (llama_token)((rng_state >> 33) % (unsigned long long)n_vocab);
}

/* Random tokens at positions [pos0, pos0 + n) of sequence `seq`, logits for
 * the last only: a prefill chunk. */
static void prefill_chunk(struct llama_batch* b, long n, long pos0, llama_seq_id seq, int n_vocab) {
  b->n_tokens = (int32_t)n;
  for (long i = 0; i < n; ++i) {
    b->token[i] = random_token(n_vocab);
    b->pos[i] = (llama_pos)(pos0 + i);
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = seq;
    b->logits[i] = i == n - 1;
  }
}

/* Decodes the batch; 0 on success. */
static int decode(struct llama_context* ctx, struct llama_batch* b) {
  const int rc = llama_decode(ctx, *b);
  if (rc != 0) fprintf(stderr, "llamacpp_bench: llama_decode returned %d\n", rc);
  llama_synchronize(ctx);
  return rc;
}

/* Every logit the batch asked for is finite (outside the timed intervals:
 * a converted file that loads but computes garbage fails here). */
static int logits_finite(struct llama_context* ctx, const struct llama_batch* b, int n_vocab) {
  for (int32_t i = 0; i < b->n_tokens; ++i) {
    if (!b->logits[i]) continue;
    const float* l = llama_get_logits_ith(ctx, i);
    for (int v = 0; l && v < n_vocab; ++v)
      if (!isfinite(l[v])) {
        fprintf(stderr, "llamacpp_bench: logit %d of output %d is %f\n", v, i, l[v]);
        return 0;
      }
    if (!l) return 0;
  }
  return 1;
}

/* Prefills the ids in `prompt_file` as sequence 0 and writes the last
 * position's logits to `logits_out`; the process's exit status. */
static int prefill_logits(struct llama_context* ctx, struct llama_batch* b, const char* prompt_file,
                          const char* logits_out, int n_vocab) {
  FILE* in = fopen(prompt_file, "r");
  if (!in) {
    fprintf(stderr, "llamacpp_bench: cannot read %s\n", prompt_file);
    return 1;
  }
  long id;
  b->n_tokens = 0;
  while (b->n_tokens < 2048 && fscanf(in, "%ld", &id) == 1) {
    const int32_t i = b->n_tokens++;
    b->token[i] = (llama_token)id;
    b->pos[i] = i;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = 0;
    b->logits[i] = 0;
  }
  fclose(in);
  if (b->n_tokens == 0) {
    fprintf(stderr, "llamacpp_bench: no token ids in %s\n", prompt_file);
    return 1;
  }
  b->logits[b->n_tokens - 1] = 1;
  if (decode(ctx, b) || !logits_finite(ctx, b, n_vocab)) return 1;
  FILE* out = fopen(logits_out, "wb");
  const float* l = llama_get_logits_ith(ctx, b->n_tokens - 1);
  if (!out || fwrite(l, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab || fclose(out) != 0) {
    fprintf(stderr, "llamacpp_bench: cannot write %s\n", logits_out);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* model_path = NULL;
#ifdef LLAMACPP_BACKENDS
  const char* backend_dir = LLAMACPP_BACKENDS; /* where setup_llamacpp.sh found the CPU variants */
#else
  const char* backend_dir = NULL;
#endif
  long contexts[16], batches[16];
  int n_ctxs = 0, n_batches = 0;
  long gen = 16, threads = 2;
  const char* prompt_file = NULL;
  const char* logits_out = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) model_path = argv[i + 1];
    else if (!strcmp(argv[i], "--backends")) backend_dir = argv[i + 1];
    else if (!strcmp(argv[i], "--ctx")) n_ctxs = parse_list(argv[i + 1], contexts, 16);
    else if (!strcmp(argv[i], "--batch")) n_batches = parse_list(argv[i + 1], batches, 16);
    else if (!strcmp(argv[i], "--gen")) gen = strtol(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--threads")) threads = strtol(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--prompt-file")) prompt_file = argv[i + 1];
    else if (!strcmp(argv[i], "--logits-out")) logits_out = argv[i + 1];
    else {
      fprintf(stderr, "llamacpp_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const int check = prompt_file && logits_out;
  if (!model_path || (!check && (n_ctxs <= 0 || n_batches <= 0)) || gen < 1 || threads < 1) {
    fprintf(stderr,
            "usage: llamacpp_bench --model FILE.gguf --ctx L1,L2 --batch B1,B2 [--gen N] [--threads T] "
            "[--backends DIR]\n"
            "       llamacpp_bench --model FILE.gguf --prompt-file IDS --logits-out FILE [--threads T]\n");
    return 2;
  }
  if (check) { /* one sequence of up to 2048 prompt tokens */
    contexts[0] = 2048, batches[0] = 1;
    n_ctxs = n_batches = 1;
  }
  long max_ctx = 0, max_batch = 0;
  for (int i = 0; i < n_ctxs; ++i) max_ctx = contexts[i] > max_ctx ? contexts[i] : max_ctx;
  for (int i = 0; i < n_batches; ++i) max_batch = batches[i] > max_batch ? batches[i] : max_batch;

  llama_log_set(quiet_log, NULL);
  if (backend_dir) ggml_backend_load_all_from_path(backend_dir);
  else ggml_backend_load_all();
  llama_backend_init();

  const double load_start = now_s();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) {
    fprintf(stderr, "llamacpp_bench: cannot load %s\n", model_path);
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  /* Sequence `master` holds the prefilled context; decode rows copy it into
   * sequences 0..B-1. One unified cache holds them all. */
  const llama_seq_id master = (llama_seq_id)max_batch;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(max_ctx + (gen + 2) * (max_batch + 1) + 256);
  cp.n_batch = 2048;
  cp.n_seq_max = (uint32_t)(max_batch + 1);
  cp.n_threads = cp.n_threads_batch = (int32_t)threads;
  cp.kv_unified = true;
  cp.no_perf = true;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fprintf(stderr, "llamacpp_bench: cannot create a context of %u tokens for %ld sequences\n", cp.n_ctx,
            max_batch + 1);
    return 1;
  }
  llama_memory_t mem = llama_get_memory(ctx);
  /* The model and its context, as "row load": llama.cpp maps the file, so
   * this is the time until it can start, not until it has read every weight. */
  printf("row load 0 0 0 0 %.6f\n", now_s() - load_start);
  printf("info llama.cpp %s, %d threads, n_ubatch %u, vocab %d\n", llama_print_system_info(), (int)threads,
         cp.n_ubatch, n_vocab);

  struct llama_batch b = llama_batch_init(2048 > max_batch ? 2048 : (int32_t)max_batch, 0, 1);
  if (check) return prefill_logits(ctx, &b, prompt_file, logits_out, n_vocab);
  /* Warm-up, not timed, as dsv4 bench does: one chunk of the first
   * context's prefill in `master`, then dropped, so that the timed prefill
   * does not also time the first reads of the mapped weights and the first
   * touch of the compute buffers. */
  {
    const long n = contexts[0] < 2048 ? contexts[0] : 2048;
    prefill_chunk(&b, n, 0, master, n_vocab);
    if (n > 0 && decode(ctx, &b)) return 1;
    llama_memory_seq_rm(mem, master, -1, -1);
  }
  long at = 0;
  for (int ci = 0; ci < n_ctxs; ++ci) {
    const long L = contexts[ci];
    if (L < at) continue;
    double secs = 0;
    for (long s0 = at; s0 < L; s0 += 2048) {
      const long n = L - s0 < 2048 ? L - s0 : 2048;
      prefill_chunk(&b, n, s0, master, n_vocab);
      const double t0 = now_s();
      if (decode(ctx, &b)) return 1;
      secs += now_s() - t0;
      if (!logits_finite(ctx, &b, n_vocab)) return 1;
    }
    if (L > at) printf("row prefill 1 %ld %ld %ld %.6f\n", at, L, L - at, secs);
    at = L;
    fflush(stdout);
    for (int bi = 0; bi < n_batches; ++bi) {
      const long B = batches[bi];
      for (llama_seq_id s = 0; s < B; ++s) {
        llama_memory_seq_rm(mem, s, -1, -1);
        llama_memory_seq_cp(mem, master, s, -1, -1);
      }
      double dsecs = 0;
      for (long step = -1; step < gen; ++step) { /* step -1: warm-up, not timed */
        b.n_tokens = (int32_t)B;
        for (long i = 0; i < B; ++i) {
          b.token[i] = random_token(n_vocab);
          b.pos[i] = (llama_pos)(L + step + 1);
          b.n_seq_id[i] = 1;
          b.seq_id[i][0] = (llama_seq_id)i;
          b.logits[i] = 1;
        }
        const double t0 = now_s();
        if (decode(ctx, &b)) return 1;
        if (step >= 0) dsecs += now_s() - t0;
        if (!logits_finite(ctx, &b, n_vocab)) return 1;
      }
      printf("row decode %ld %ld %ld %ld %.6f\n", B, L, L + gen + 1, B * gen, dsecs);
      fflush(stdout);
      for (llama_seq_id s = 0; s < B; ++s) llama_memory_seq_rm(mem, s, -1, -1);
    }
  }
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
