#include "model/contiguous_cache.h"

#include <cmath>

#include "base/check.h"

namespace dsv4 {

void reset_compressor_state(CompressorStateView state, int64_t floats) {
  for (int64_t i = 0; i < floats; ++i) {
    state.kv[i] = 0.0f;
    state.score[i] = -INFINITY;
  }
}

ContiguousCache::ContiguousCache(const CacheGeometry& geometry, int first_layer, int num_layers)
    : geometry_(geometry), first_layer_(first_layer), layers_(num_layers) {
  DSV4_CHECK(first_layer >= 0 && first_layer + num_layers <= static_cast<int>(geometry.layers.size()));
  for (int i = 0; i < num_layers; ++i) {
    const LayerCacheShape& s = geometry.layers[first_layer + i];
    Layer& l = layers_[i];
    l.window.assign(window_rows() * geometry.window_row_bytes, 0);
    l.state_kv.resize(s.state_floats);
    l.state_score.resize(s.state_floats);
    l.index_state_kv.resize(s.index_state_floats);
    l.index_state_score.resize(s.index_state_floats);
    reset_compressor_state({l.state_kv.data(), l.state_score.data()}, s.state_floats);
    reset_compressor_state({l.index_state_kv.data(), l.index_state_score.data()}, s.index_state_floats);
  }
}

int64_t ContiguousCache::bytes() const {
  int64_t n = 0;
  for (const Layer& l : layers_) {
    for (const auto* v : {&l.window, &l.compressed, &l.index_keys}) n += static_cast<int64_t>(v->size());
    for (const auto* v : {&l.state_kv, &l.state_score, &l.index_state_kv, &l.index_state_score})
      n += 4 * static_cast<int64_t>(v->size());
  }
  return n;
}

ContiguousCache::Layer& ContiguousCache::at(int layer) {
  DSV4_CHECK_MSG(layer >= first_layer_ && layer < first_layer_ + static_cast<int>(layers_.size()),
                 "cache layer outside this sequence's cache");
  return layers_[layer - first_layer_];
}

uint8_t* ContiguousCache::grow_row(std::vector<uint8_t>& rows, int64_t row, int64_t width) {
  if (static_cast<int64_t>(rows.size()) < (row + 1) * width) rows.resize((row + 1) * width, 0);
  return rows.data() + row * width;
}

uint8_t* ContiguousCache::window_row(int layer, int64_t pos) {
  return at(layer).window.data() + (pos % window_rows()) * geometry_.window_row_bytes;
}

uint8_t* ContiguousCache::compressed_row(int layer, int64_t row) {
  return grow_row(at(layer).compressed, row, geometry_.compressed_row_bytes);
}

uint8_t* ContiguousCache::index_row(int layer, int64_t row) {
  return grow_row(at(layer).index_keys, row, geometry_.index_row_bytes);
}

CompressorStateView ContiguousCache::compressor_state(int layer) {
  Layer& l = at(layer);
  return {l.state_kv.data(), l.state_score.data(), geometry_.compressor_slots(geometry_.layers[layer].ratio)};
}

CompressorStateView ContiguousCache::index_compressor_state(int layer) {
  Layer& l = at(layer);
  return {l.index_state_kv.data(), l.index_state_score.data(), geometry_.compressor_slots(4)};
}

}  // namespace dsv4
