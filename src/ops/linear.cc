#include "ops/linear.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <unordered_map>

#include "base/check.h"
#include "base/scratch.h"
#include "base/thread_pool.h"
#include "base/work_meter.h"
#include "kernels/dispatch.h"

namespace dsv4 {

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  // Columns in multiples of 4 per task keep the kernel's 4-row blocking intact.
  int64_t groups = (n + 3) / 4;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, m * k / 4));
  parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    const int64_t c1 = std::min(n, g1 * 4);
    meter_read(w + g0 * 4 * k, (c1 - g0 * 4) * k * static_cast<int64_t>(sizeof(float)));
    kernels::matmul_nt(x, m, k, w, g0 * 4, std::min(n, g1 * 4), y, n);
  });
}

namespace {

kernels::PanelFormat panel_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16: return kernels::PanelFormat::kBf16;
    case WeightFormat::kFp8Block: return kernels::PanelFormat::kFp8;
    case WeightFormat::kFp4Block: return kernels::PanelFormat::kFp4;
    case WeightFormat::kFp8Block32: return kernels::PanelFormat::kFp8Block32;
    case WeightFormat::kDense:
    case WeightFormat::kInt8Channel: break;
  }
  return kernels::PanelFormat::kF32;
}

}  // namespace

void Linear::pack() {
  if (format == WeightFormat::kInt8Channel && !codes.empty()) {
    code_panels.resize(kernels::int8_code_bytes(out, in));
    scale_panels.resize(kernels::int8_panel_extra_bytes(out));
    kernels::pack_int8_panels(reinterpret_cast<const int8_t*>(codes.data()), channel_scales.data(), out, in,
                              code_panels.data(), scale_panels.data());
    std::vector<uint8_t>().swap(codes);
    std::vector<float>().swap(channel_scales);
    return;
  }
  if (!codes.empty()) {
    const kernels::PanelFormat f = panel_format(format);
    code_panels.resize(kernels::packed_code_bytes(f, out, in));
    scale_panels.resize(kernels::packed_scale_bytes(f, out, in));
    kernels::pack_quantized_panels(f, codes.data(), scales.data(), out, in, code_panels.data(), scale_panels.data());
    std::vector<uint8_t>().swap(codes);
    std::vector<uint8_t>().swap(scales);
    return;
  }
  if (w.empty()) return;  // already packed (or empty)
  panels.resize(kernels::packed_floats(out, in));
  kernels::pack_panels(w.data(), out, in, panels.data());
  std::vector<float>().swap(w);
}

namespace {

// Panels p0..p1 of a buffer holding `panels` panels of equal size.
void meter_panels(const void* data, int64_t bytes, int64_t panels, int64_t p0, int64_t p1) {
  if (bytes == 0 || !WorkMeter::current()) return;
  const int64_t each = bytes / panels;
  meter_read(static_cast<const uint8_t*>(data) + p0 * each, (p1 - p0) * each);
}

// The weight bytes panels p0..p1 of `l` stream, for the machine simulator.
void meter_linear(const Linear& l, int64_t p0, int64_t p1) {
  const int64_t panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  meter_panels(l.panels.data(), static_cast<int64_t>(sizeof(float) * l.panels.size()), panels, p0, p1);
  meter_panels(l.code_panels.data(), static_cast<int64_t>(l.code_panels.size()), panels, p0, p1);
  meter_panels(l.scale_panels.data(), static_cast<int64_t>(l.scale_panels.size()), panels, p0, p1);
}

}  // namespace

void linear_panels(const kernels::Kernels& k, const Linear& l, const float* x, int64_t m, int64_t p_begin,
                   int64_t p_end, float* y, int64_t ldy) {
  meter_linear(l, p_begin, p_end);
  if (l.code_panels.empty()) return k.matmul_f32(x, m, l.in, l.panels.data(), l.out, p_begin, p_end, y, ldy);
  const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
  k.matmul_quantized(x, m, l.in, q, l.out, p_begin, p_end, y, ldy);
}

namespace {

// Tiles a product aims for: as many as the pool takes (kChunksPerThread a
// worker), and at least 256, what 64 workers take, so that a smaller pool
// keeps the row blocks that hold a prefill chunk's inputs in cache. With
// 256 on a 192-worker node, each of a prefill chunk's products was 256
// tiles of a few milliseconds: a third of the workers took two.
int64_t target_tiles() {
  return std::max<int64_t>(256, ThreadPool::current().num_threads() * ThreadPool::kChunksPerThread);
}

// Panels a tile takes at least: enough multiply-adds (8K, 32 KB of f32
// weights) that handing it to a worker costs little next to streaming it,
// and no more, so that a decode step's linears (one row, hundreds to
// thousands of inputs) split into single panels.
int64_t panels_per_tile(int64_t m, int64_t in) {
  return std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(1, m * in * kernels::kPanel));
}

// How a product y[m, out] = x W^T splits into tiles of rows x panels for
// many threads. Each output's sum stays whole (split along the inputs, the
// sums would change in fast numerics enough to move the DSpark goldens
// past their bounds), so a layer has at most one tile a panel a row block.
// Rows split only into blocks of 32 or more (a prefill chunk): a row's
// result does not depend on its block. A tile takes panels_per_tile panels.
struct Tiling {
  int64_t panels = 1, row_blocks = 1, rows_per = 1, panels_per = 1;
  int64_t runs() const { return (panels + panels_per - 1) / panels_per; }
  int64_t tiles() const { return row_blocks * runs(); }
};

Tiling tiling_of(const Linear& l, int64_t m) {
  Tiling t;
  t.panels = (l.out + kernels::kPanel - 1) / kernels::kPanel;
  t.row_blocks = std::clamp<int64_t>((target_tiles() + t.panels - 1) / t.panels, 1, std::max<int64_t>(1, m / 32));
  t.rows_per = (m + t.row_blocks - 1) / t.row_blocks;
  t.panels_per = panels_per_tile(t.rows_per, l.in);
  return t;
}

// One product ready for its tiles: the input as the panels take it.
struct Prepared {
  const Linear* l = nullptr;
  const float* source = nullptr;  // the input as given
  int64_t m = 0;
  float* y = nullptr;
  const WrittenFn* written = nullptr;
  Tiling t;
  const float* x = nullptr;        // f32 rows (rounded when the layer rounds its input)
  const uint32_t* pairs = nullptr;  // or BF16 pairs (exact BF16 inputs to FP8/FP4 panels)
  const uint8_t* biased = nullptr;  // or W8A8's int8 rows and their scales
  const float* row_scales = nullptr;
  ScratchVector<float> xq;
  ScratchVector<uint32_t> pair_buffer;
  ScratchVector<uint8_t> biased_buffer;
  ScratchVector<float> scale_buffer;
  // The input is rounded by each task of the product job that needs it (a
  // decode step's row or two), not by a job of its own; `same_as` is the
  // earlier product whose rounded input it takes, or -1.
  bool in_task = false;
  int64_t same_as = -1;
};

// `to` takes the input `from` prepared (its rounded rows, pairs or int8 rows).
void take_input(const Prepared& from, Prepared& to) {
  to.x = from.x;
  to.pairs = from.pairs;
  to.biased = from.biased;
  to.row_scales = from.row_scales;
}

// Whether a linear takes its input other than as given.
bool rounds_input(const Linear& l) { return l.format == WeightFormat::kInt8Channel || l.quantizes_input(); }

// Inputs of at most this many values (rows x inputs) are rounded inside the
// product job by every task that needs them. Rounding one row of 4096 is a
// microsecond or two, less than a pool job's wake-up and join, and the
// rounded values are the same wherever they are computed. A decode step of
// one or two rows saves a job a linear this way (issue 32: pool jobs per
// token); bigger inputs are rounded once, in a job of their own.
constexpr int64_t kRoundInTaskValues = 8192;

// Whether b takes its input as a, prepared: the same rows, rounded alike
// (an expert's w1 and w3).
bool same_input(const Prepared& a, const Prepared& b) {
  const Linear &la = *a.l, &lb = *b.l;
  auto as_pairs = [](const Linear& l) {
    return l.format == WeightFormat::kFp8Block || l.format == WeightFormat::kFp4Block ||
           l.format == WeightFormat::kFp8Block32;
  };
  return a.source == b.source && a.m == b.m && la.in == lb.in && la.round_input == lb.round_input &&
         la.input_block == lb.input_block && (la.format == WeightFormat::kInt8Channel) == (lb.format == WeightFormat::kInt8Channel) &&
         as_pairs(la) == as_pairs(lb) && la.code_panels.empty() == lb.code_panels.empty();
}

// Makes room for p's input as the panels take it (rounded, as BF16 pairs,
// or W8A8's int8 rows) and points p at it; false when the panels take x as
// it is.
bool allocate_input(const float* x, Prepared& p) {
  const Linear& l = *p.l;
  const int64_t m = p.m;
  p.source = x;
  p.x = x;
  if (l.format == WeightFormat::kInt8Channel) {
    DSV4_CHECK_MSG(!l.code_panels.empty() && l.round_input,
                   "a W8A8 linear is used before it is packed, or without input quantization");
    p.biased_buffer.resize(m * kernels::int8_padded_k(l.in));
    p.scale_buffer.resize(m);
    p.biased = p.biased_buffer.data();
    p.row_scales = p.scale_buffer.data();
    return true;
  }
  if (!l.quantizes_input()) return false;
  DSV4_CHECK(l.in % l.input_block == 0);
  // Rounded inputs are e4m3 values times powers of two: exact in BF16, so
  // FP8/FP4 panels take them as BF16 pairs.
  const bool as_pairs = (l.format == WeightFormat::kFp8Block || l.format == WeightFormat::kFp4Block ||
                         l.format == WeightFormat::kFp8Block32) &&
                        !l.code_panels.empty();
  p.xq.resize(m * l.in);
  p.x = p.xq.data();
  if (as_pairs) {
    p.pair_buffer.resize(m * l.in / 2);
    p.pairs = p.pair_buffer.data();
  }
  return true;
}

// A row's input rounds in pieces of whole rounding blocks, each piece on
// its own (FP8 and FP4 scales are per block), so that a decode step's few
// rows spread over the pool. W8A8 rows take one scale a row: one piece.
constexpr int64_t kRoundPiece = 512;
int64_t round_piece(const Prepared& p) {
  const Linear& l = *p.l;
  if (p.biased) return l.in;
  return l.input_block * std::max<int64_t>(1, kRoundPiece / l.input_block);
}
int64_t round_pieces(const Prepared& p) { return (p.l->in + round_piece(p) - 1) / round_piece(p); }

// Piece `piece` of row r of p's input, rounded (or quantized) as the
// layer's reference does, into what allocate_input made room for.
void round_piece_of_row(const kernels::Kernels& k, Prepared& p, int64_t r, int64_t piece) {
  const Linear& l = *p.l;
  if (p.biased) {
    const int64_t kp = kernels::int8_padded_k(l.in);
    k.quantize_rows_int8(p.source + r * l.in, 1, l.in, p.biased_buffer.data() + r * kp, p.scale_buffer.data() + r);
    return;
  }
  const int64_t k0 = piece * round_piece(p), n = std::min(l.in, k0 + round_piece(p)) - k0;
  float* at = p.xq.data() + r * l.in + k0;
  std::copy_n(p.source + r * l.in + k0, n, at);
  k.fp8_round_trip(at, n, l.input_block);
  if (p.pairs) kernels::pack_bf16_pairs(at, 1, n, p.pair_buffer.data() + (r * l.in + k0) / 2);
}

// Rows [r0, r1) of p's input, rounded.
void round_rows(const kernels::Kernels& k, Prepared& p, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t piece = 0; piece < round_pieces(p); ++piece) round_piece_of_row(k, p, r, piece);
}

// The prepared products as one task of the product job sees them: those
// whose input is rounded in the task get a copy holding this task's own
// rounding, made when the task first needs it.
class TaskInputs {
 public:
  TaskInputs(const kernels::Kernels& k, const std::vector<Prepared>& prepared) : k_(k), prepared_(prepared) {}
  ~TaskInputs() {
    for (std::unique_ptr<Prepared>& p : own_)
      if (p) spares().push_back(std::move(p));
  }
  TaskInputs(const TaskInputs&) = delete;
  TaskInputs& operator=(const TaskInputs&) = delete;

  const Prepared& of(size_t i) {
    const Prepared& p = prepared_[i];
    if (!p.in_task) return p;
    if (own_.empty()) own_.resize(prepared_.size());
    if (!own_[i]) {
      std::unique_ptr<Prepared> mine = spare();
      mine->l = p.l;
      mine->m = p.m;
      mine->y = p.y;
      mine->written = p.written;
      mine->t = p.t;
      mine->x = nullptr;
      mine->pairs = nullptr;
      mine->biased = nullptr;
      mine->row_scales = nullptr;
      if (p.same_as >= 0) {
        take_input(of(static_cast<size_t>(p.same_as)), *mine);
      } else {
        allocate_input(p.source, *mine);
        round_rows(k_, *mine, 0, mine->m);
      }
      own_[i] = std::move(mine);
    }
    return *own_[i];
  }

 private:
  // Products this thread's earlier tasks rounded inputs for, their buffers
  // kept: a decode step's product job has a task for every few panels, and
  // each allocating its rounded row (tens of KiB) went to the heap hundreds
  // of times a job, the heap tidying its small free blocks each time.
  static std::vector<std::unique_ptr<Prepared>>& spares() {
    thread_local std::vector<std::unique_ptr<Prepared>> kept;
    return kept;
  }
  static std::unique_ptr<Prepared> spare() {
    std::vector<std::unique_ptr<Prepared>>& kept = spares();
    if (kept.empty()) return std::make_unique<Prepared>();
    std::unique_ptr<Prepared> p = std::move(kept.back());
    kept.pop_back();
    return p;
  }

  const kernels::Kernels& k_;
  const std::vector<Prepared>& prepared_;
  std::vector<std::unique_ptr<Prepared>> own_;
};

// How the product job's tiles go to its tasks. The products with the
// costliest tiles come first; the tiles go in order, a whole number of
// them a task, as many as cost about one task's share of the job
// (at most kChunksPerThread tasks a thread), a task running into the next
// product's tiles when its own are too few. A tile costs its weight bytes
// and a sixteenth of a byte a multiply-add: at a decode step's few rows its
// bytes (an FP8 panel twice an FP4 one, a BF16 panel twice an FP8 one), at
// a prefill chunk's rows its arithmetic, much the same in every format. So
// a job that mixes formats (the routed experts' FP4 and the shared
// expert's FP8, the attention's FP8 and a compressor's BF16) keeps its
// workers equally busy, and its cheapest tasks come last, where they fill
// in as the workers run out.
struct TileOrder {
  std::vector<size_t> product;      // prepared product, by place in the order
  std::vector<int64_t> first_tile;  // of each place's product, in one numbering; then the count
  std::vector<int64_t> task_first;  // first tile of each task; then the count
};

TileOrder order_tiles(const std::vector<Prepared>& prepared) {
  auto tile_cost = [](const Prepared& p) {
    const Linear& l = *p.l;
    const Tiling& t = p.t;
    const int64_t bytes = static_cast<int64_t>(sizeof(float) * l.panels.size() + l.code_panels.size() + l.scale_panels.size());
    return std::max<int64_t>(1, t.panels_per * (bytes / t.panels + t.rows_per * l.in * kernels::kPanel / 16));
  };
  std::vector<double> cost_of(prepared.size());  // a tile of each prepared product
  for (size_t i = 0; i < prepared.size(); ++i) cost_of[i] = static_cast<double>(tile_cost(prepared[i]));
  TileOrder o;
  o.product.resize(prepared.size());
  std::iota(o.product.begin(), o.product.end(), size_t{0});
  std::stable_sort(o.product.begin(), o.product.end(), [&](size_t a, size_t b) { return cost_of[a] > cost_of[b]; });
  o.first_tile.push_back(0);
  double total = 0;
  for (size_t i : o.product) {
    o.first_tile.push_back(o.first_tile.back() + prepared[i].t.tiles());
    total += cost_of[i] * static_cast<double>(prepared[i].t.tiles());
  }
  // Each task closes where one more tile would take it further past its
  // share than stopping leaves it short, so no task runs long by more
  // than half a tile; more tasks than a pool takes widen the share. A
  // product's tiles cost alike: a task in it takes round(share / cost) of
  // them, or, when that is 4 or more (the head's thousands of panels), the
  // product's rest goes evenly into as many tasks as it has shares, so that
  // the job still has as many tasks as the pool takes. A task the last
  // product left open takes as many as fit.
  const int64_t most = ThreadPool::current().num_threads() * ThreadPool::kChunksPerThread;
  for (double share = total / static_cast<double>(most);; share *= 1.0625) {
    o.task_first.assign(1, 0);
    double in_task = 0;  // of the open task
    for (size_t place = 0; place < o.product.size(); ++place) {
      const double c = cost_of[o.product[place]];
      int64_t t = o.first_tile[place];
      const int64_t end = o.first_tile[place + 1];
      if (in_task > 0) {  // the open task takes tiles while they fit
        const auto fit = static_cast<int64_t>(std::max(0.0, std::floor((share - in_task) / c + 0.5)));
        const int64_t n = std::min(fit, end - t);
        t += n;
        in_task += static_cast<double>(n) * c;
        if (t == end) continue;
        o.task_first.push_back(t);
        in_task = 0;
      }
      const double per_task = share / c;
      if (per_task >= 4) {  // the rest in round(rest / per_task) tasks, their counts within one
        const int64_t rest = end - t, n = std::max<int64_t>(1, std::llround(static_cast<double>(rest) / per_task));
        for (int64_t i = 1; i < n; ++i) o.task_first.push_back(t + rest * i / n);
        t += rest * (n - 1) / n;
      } else {  // a few tiles a task: the same whole count in each
        const int64_t whole = std::max<int64_t>(1, std::llround(per_task));
        for (; t + whole < end; t += whole) o.task_first.push_back(t + whole);
      }
      in_task = static_cast<double>(end - t) * c;
    }
    if (static_cast<int64_t>(o.task_first.size()) <= most) break;
  }
  o.task_first.push_back(o.first_tile.back());
  return o;
}

// The tile order of a product job, kept for the next job of the same
// products: a decode step makes the same products every step (and many
// layers the same shapes), and the order's search over task sizes took a
// few microseconds of the rank's thread a job while its workers waited.
// The order depends only on what the key holds (each product's weight
// sizes and rows, and the pool's size), so a kept one is the one
// order_tiles would make. Shared, as a job nested in this one's tasks may
// start the kept orders over.
std::shared_ptr<const TileOrder> kept_tile_order(const std::vector<Prepared>& prepared) {
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& key) const {
      size_t h = key.size();
      for (int64_t v : key) h = h * 1000003u ^ std::hash<int64_t>{}(v);
      return h;
    }
  };
  thread_local std::unordered_map<std::vector<int64_t>, std::shared_ptr<const TileOrder>, KeyHash> kept;
  thread_local std::vector<int64_t> key;
  key.assign(1, ThreadPool::current().num_threads());
  for (const Prepared& p : prepared) {
    const Linear& l = *p.l;
    key.insert(key.end(), {l.out, l.in, p.m, static_cast<int64_t>(l.panels.size()),
                           static_cast<int64_t>(l.code_panels.size()), static_cast<int64_t>(l.scale_panels.size())});
  }
  if (const auto it = kept.find(key); it != kept.end()) return it->second;
  // Prefill's and mixed batches' row counts vary from step to step: start
  // over rather than grow without bound.
  if (kept.size() >= 256) kept.clear();
  return kept.emplace(key, std::make_shared<const TileOrder>(order_tiles(prepared))).first->second;
}

// Rows [r0, r1) x panels [p0, p1) of a prepared product, on this thread.
void run_tile(const kernels::Kernels& k, const Prepared& p, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const Linear& l = *p.l;
  float* y = p.y + r0 * l.out;
  if (p.biased) {
    meter_linear(l, p0, p1);
    const int64_t kp = kernels::int8_padded_k(l.in);
    const kernels::Int8Panels w{l.code_panels.data(), l.scale_panels.data()};
    k.matmul_int8(p.biased + r0 * kp, p.row_scales + r0, r1 - r0, l.in, w, l.out, p0, p1, y, l.out);
  } else if (p.pairs) {
    meter_linear(l, p0, p1);
    const kernels::QuantizedPanels q{panel_format(l.format), l.code_panels.data(), l.scale_panels.data()};
    k.matmul_quantized_pairs(p.pairs + r0 * l.in / 2, r1 - r0, l.in, q, l.out, p0, p1, y, l.out);
  } else {
    linear_panels(k, l, p.x + r0 * l.in, r1 - r0, p0, p1, y, l.out);
  }
}

}  // namespace

void linear_forward_all(const kernels::Kernels& k, const std::vector<LinearProduct>& products) {
  std::vector<Prepared> prepared;
  prepared.reserve(products.size());
  std::vector<size_t> rounded;         // the prepared products whose inputs need rounding
  std::vector<int64_t> first_piece{0};  // of each of those's rows' pieces, in one numbering
  for (const LinearProduct& product : products) {
    const Linear& l = *product.layer;
    if (product.m <= 0) continue;
    const bool packed = !l.panels.empty() || !l.code_panels.empty();
    if (!packed && l.format != WeightFormat::kInt8Channel) {
      // Raw f32 weights (tests and tools): their own product, rounded first.
      DSV4_CHECK_MSG(static_cast<int64_t>(l.w.size()) == l.out * l.in, "a linear layer is used before it is packed");
      Prepared p;
      p.l = &l;
      p.m = product.m;
      if (allocate_input(product.x, p))
        parallel_for(p.m, 8, [&](int64_t r0, int64_t r1) { round_rows(k, p, r0, r1); });
      matmul(p.x, p.m, l.in, l.w.data(), l.out, product.y);
      if (product.written) (*product.written)(0, p.m, 0, l.out);
      continue;
    }
    Prepared& p = prepared.emplace_back();
    p.l = &l;
    p.m = product.m;
    p.y = product.y;
    p.written = product.written;
    p.source = product.x;
    // An input an earlier product rounded already is taken from it.
    const auto earlier = std::find_if(prepared.begin(), prepared.end() - 1, [&](const Prepared& e) { return same_input(e, p); });
    if (earlier != prepared.end() - 1 && earlier->in_task) {
      p.in_task = true;
      p.same_as = earlier - prepared.begin();
    } else if (earlier != prepared.end() - 1) {
      take_input(*earlier, p);
    } else if (rounds_input(l) && p.m * l.in <= kRoundInTaskValues) {
      p.in_task = true;
    } else if (allocate_input(product.x, p)) {
      rounded.push_back(prepared.size() - 1);
      first_piece.push_back(first_piece.back() + p.m * round_pieces(p));
    }
    p.t = tiling_of(l, p.m);
  }
  if (prepared.empty()) return;
  // Every bigger input that needs rounding, piece by piece of its rows, in one job.
  parallel_for(first_piece.back(), 4, [&](int64_t a, int64_t b) {
    size_t i = static_cast<size_t>(std::upper_bound(first_piece.begin(), first_piece.end(), a) - first_piece.begin()) - 1;
    for (; a < b; ++a) {
      while (a >= first_piece[i + 1]) ++i;
      Prepared& p = prepared[rounded[i]];
      const int64_t local = a - first_piece[i], pieces = round_pieces(p);
      round_piece_of_row(k, p, local / pieces, local % pieces);
    }
  });
  // One job: each task takes a run of tiles of about equal cost (TileOrder),
  // each tile rows x panels of one product; neighbouring tiles of one row
  // block go to the kernel together.
  const std::shared_ptr<const TileOrder> kept = kept_tile_order(prepared);
  const TileOrder& order = *kept;
  const std::vector<int64_t>& first_tile = order.first_tile;
  parallel_for(static_cast<int64_t>(order.task_first.size()) - 1, 1, [&](int64_t t0, int64_t t1) {
    int64_t a = order.task_first[t0];
    const int64_t b = order.task_first[t1];
    TaskInputs inputs(k, prepared);
    size_t i = static_cast<size_t>(std::upper_bound(first_tile.begin(), first_tile.end(), a) - first_tile.begin()) - 1;
    while (a < b) {
      while (a >= first_tile[i + 1]) ++i;
      const Prepared& p = inputs.of(order.product[i]);
      const Tiling& t = p.t;
      const int64_t local = a - first_tile[i], rb = local / t.runs(), run = local % t.runs();
      const int64_t last = std::min(b - first_tile[i], (rb + 1) * t.runs());  // tiles of this row block in the task
      const int64_t p0 = run * t.panels_per, p1 = std::min(t.panels, (last - rb * t.runs()) * t.panels_per);
      const int64_t r0 = rb * t.rows_per, r1 = std::min(p.m, (rb + 1) * t.rows_per);
      run_tile(k, p, r0, r1, p0, p1);
      if (p.written) (*p.written)(r0, r1, p0 * kernels::kPanel, std::min(p.l->out, p1 * kernels::kPanel));
      a = first_tile[i] + last;
    }
  });
}

WhenPiecesWritten::WhenPiecesWritten(int64_t rows, int64_t out, int64_t piece, int products, Done done)
    : out_(out), piece_(piece), pieces_((out + piece - 1) / piece), unwritten_(rows * pieces_), done_(std::move(done)) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < pieces_; ++q)
      unwritten_[r * pieces_ + q].store(products * (std::min(out, (q + 1) * piece) - q * piece), std::memory_order_relaxed);
  written_ = [this](int64_t r0, int64_t r1, int64_t f0, int64_t f1) { wrote(r0, r1, f0, f1); };
}

void WhenPiecesWritten::wrote(int64_t r0, int64_t r1, int64_t f0, int64_t f1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t q = f0 / piece_; q * piece_ < f1; ++q) {
      const int64_t j0 = q * piece_, j1 = std::min(out_, j0 + piece_);
      const int64_t count = std::min(f1, j1) - std::max(f0, j0);
      if (unwritten_[r * pieces_ + q].fetch_sub(count, std::memory_order_acq_rel) == count) done_(r, j0, j1);
    }
}

void linear_forward(const kernels::Kernels& k, const Linear& layer, const float* x, int64_t m, float* y) {
  linear_forward_all(k, {{&layer, x, m, y}});
}

}  // namespace dsv4
