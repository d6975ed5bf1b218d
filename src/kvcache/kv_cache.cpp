// Host side of the paged KV cache: page layout, the device pool, validation of appends, and the CPU ground
// truth of the append kernel (RoPE, then the formats library's quantizer, then tile_write_row).
#include "qdec/kv_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvcache/append_internal.h"
#include "kvcache/rope.h"

namespace qdec {
namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

std::string str(long long v) {
  return std::to_string(v);
}

float load_input(const void* base, size_t index, DType dtype) {
  const uint16_t bits = static_cast<const uint16_t*>(base)[index];
  return dtype == DType::kBF16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
}

}  // namespace

Status validate_page_layout(const KvPageLayout& l) {
  if (l.page_size < 16 || l.page_size > 256 || (l.page_size & (l.page_size - 1)) != 0)
    return Status(StatusCode::kUnsupported,
                  "page_size " + str(l.page_size) +
                      " is not supported: a power of two in 16..256 (values are stored in 16-token tensor-core "
                      "blocks, docs/formats.md)");
  if (l.num_kv_heads < 1) return invalid("num_kv_heads " + str(l.num_kv_heads) + " must be >= 1");
  QDEC_RETURN_IF_ERROR(validate_tile_layout(l.k_tile()));
  QDEC_RETURN_IF_ERROR(validate_tile_layout(l.v_tile()));
  return Status::Ok();
}

void set_paged_cache(DecodeAttentionParams* p, const KvPageLayout& layout, const void* pool, int num_pages,
                     const int32_t* block_table, const int32_t* block_table_host, int max_pages_per_seq) {
  p->k_format = layout.k_format;
  p->v_format = layout.v_format;
  p->head_dim = layout.head_dim;
  p->num_kv_heads = layout.num_kv_heads;
  p->page_size = layout.page_size;
  p->max_pages_per_seq = max_pages_per_seq;
  p->num_pages = num_pages;
  p->k_page_stride_bytes = layout.page_bytes();
  p->v_page_stride_bytes = layout.page_bytes();
  p->k_cache = pool;
  p->v_cache = pool ? static_cast<const uint8_t*>(pool) + layout.k_bytes_per_page() : nullptr;
  p->block_table = block_table;
  p->block_table_host = block_table_host;
}

Status KvPagePool::create(const KvPageLayout& layout, int num_pages, std::unique_ptr<KvPagePool>* out) {
  if (!out) return invalid("KvPagePool::create: output pointer is null");
  QDEC_RETURN_IF_ERROR(validate_page_layout(layout));
  if (num_pages < 1) return invalid("num_pages " + str(num_pages) + " must be >= 1");
  const size_t bytes = size_t(num_pages) * layout.page_bytes();
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::kOutOfMemory, "KV page pool of " + str(num_pages) + " pages (" + str(bytes) +
                                                " bytes): cudaMalloc failed: " + cudaGetErrorName(err));
  }
  out->reset(new KvPagePool(layout, num_pages, data));
  return Status::Ok();
}

KvPagePool::~KvPagePool() {
  if (data_) cudaFree(data_);
}

const char* rope_style_name(RopeStyle s) {
  switch (s) {
    case RopeStyle::kNone:
      return "none";
    case RopeStyle::kHalf:
      return "half";
    case RopeStyle::kInterleaved:
      return "interleaved";
  }
  return "invalid";
}

namespace kvcache {

Status validate_append(const KvAppendParams& p, int* num_tokens) {
  QDEC_RETURN_IF_ERROR(validate_page_layout(p.layout));
  const KvPageLayout& l = p.layout;
  if (p.batch < 1) return invalid("batch " + str(p.batch) + " must be >= 1");
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16)
    return invalid("dtype " + str(static_cast<int>(p.dtype)) + " is not bf16 or fp16");
  if (p.max_pages_per_seq < 1) return invalid("max_pages_per_seq " + str(p.max_pages_per_seq) + " must be >= 1");
  if (p.num_pages < 1) return invalid("num_pages " + str(p.num_pages) + " must be >= 1");
  if (!p.block_table && static_cast<long long>(p.num_pages) < static_cast<long long>(p.batch) * p.max_pages_per_seq)
    return invalid("num_pages " + str(p.num_pages) + " is smaller than batch * max_pages_per_seq = " +
                   str(static_cast<long long>(p.batch) * p.max_pages_per_seq) + " (no block table: identity mapping)");
  if (p.block_table && !p.block_table_host)
    return invalid("block_table_host is null (the host copy of block_table is required for validation)");
  if (p.rope != RopeStyle::kNone && p.rope != RopeStyle::kHalf && p.rope != RopeStyle::kInterleaved)
    return invalid("rope style " + str(static_cast<int>(p.rope)) + " is not none, half or interleaved");
  const int rot = kvcache::rotary_dim_of(p);
  if (p.rope != RopeStyle::kNone) {
    if (rot < 2 || rot > l.head_dim || rot % 2 != 0)
      return invalid("rotary_dim " + str(p.rotary_dim) + " must be even and in 2..head_dim " + str(l.head_dim) +
                     " (0 = head_dim)");
    if (!(p.rope_theta > 1.0f) || !std::isfinite(p.rope_theta))
      return invalid("rope_theta " + std::to_string(p.rope_theta) + " must be finite and > 1");
  }
  if (!(p.quant.fp8_static_scale >= 0.0f) || !std::isfinite(p.quant.fp8_static_scale))
    return invalid("fp8_static_scale " + std::to_string(p.quant.fp8_static_scale) + " must be finite and >= 0");
  struct NamedPtr {
    const char* name;
    const void* ptr;
    bool need16;
  };
  for (const NamedPtr& np :
       {NamedPtr{"k", p.k, true}, NamedPtr{"v", p.v, true}, NamedPtr{"pool", p.pool, true},
        NamedPtr{"start_pos", p.start_pos, false}, NamedPtr{"start_pos_host", p.start_pos_host, false}}) {
    if (!np.ptr) return invalid(std::string(np.name) + " is null");
    if (np.need16 && (reinterpret_cast<uintptr_t>(np.ptr) & 15u) != 0)
      return invalid(std::string(np.name) + " is not 16-byte aligned");
  }
  if (p.cu_seqlens && !p.cu_seqlens_host)
    return invalid("cu_seqlens_host is null (the host copy of cu_seqlens is required)");
  long long total = 0;
  const long long cap = static_cast<long long>(p.max_pages_per_seq) * l.page_size;
  for (int b = 0; b < p.batch; ++b) {
    long long n = 1;
    if (p.cu_seqlens) {
      if (b == 0 && p.cu_seqlens_host[0] != 0)
        return invalid("cu_seqlens[0] = " + str(p.cu_seqlens_host[0]) + " must be 0");
      n = static_cast<long long>(p.cu_seqlens_host[b + 1]) - p.cu_seqlens_host[b];
      if (n < 0)
        return invalid("cu_seqlens is decreasing at sequence " + str(b) + " (" + str(p.cu_seqlens_host[b]) + " -> " +
                       str(p.cu_seqlens_host[b + 1]) + ")");
    }
    total += n;
    const long long start = p.start_pos_host[b];
    if (start < 0) return invalid("start_pos[" + str(b) + "] = " + str(start) + " is negative");
    if (start + n > cap)
      return invalid("sequence " + str(b) + ": appending " + str(n) + " tokens at position " + str(start) +
                     " exceeds max_pages_per_seq * page_size = " + str(cap));
    if (n == 0 || !p.block_table_host) continue;
    for (long long page = start / l.page_size; page <= (start + n - 1) / l.page_size; ++page) {
      const int32_t e = p.block_table_host[static_cast<size_t>(b) * p.max_pages_per_seq + page];
      if (e < 0 || e >= p.num_pages)
        return invalid("block_table[" + str(b) + "][" + str(page) + "] = " + str(e) + " is outside the pool 0.." +
                       str(p.num_pages - 1));
    }
  }
  if (total > (1LL << 31) / std::max(1, l.num_kv_heads) / 32)
    return invalid("num_tokens " + str(total) + " x num_kv_heads " + str(l.num_kv_heads) + " is too large");
  *num_tokens = static_cast<int>(total);
  return Status::Ok();
}

}  // namespace kvcache

void rope_row_reference(RopeStyle style, int head_dim, int rotary_dim, float theta, int position, float* x) {
  if (style == RopeStyle::kNone || !x || head_dim <= 0) return;
  const int rot = rotary_dim == 0 ? head_dim : rotary_dim;
  if (rot < 2 || rot > head_dim || rot % 2) return;
  std::vector<float> in(x, x + rot);
  for (int d = 0; d < rot; ++d) {
    int partner, pair;
    bool first;
    rope::pair_of(static_cast<int>(style), rot, d, &partner, &pair, &first);
    x[d] = rope::rotate(first, in[d], in[partner], rope::inv_freq(theta, pair, rot), position);
  }
}

Status kv_append_reference(const KvAppendParams& p) {
  int num_tokens = 0;
  QDEC_RETURN_IF_ERROR(kvcache::validate_append(p, &num_tokens));
  const KvPageLayout& l = p.layout;
  const int D = l.head_dim;
  uint8_t* pool = static_cast<uint8_t*>(p.pool);
  std::vector<float> row(D);
  QuantizedRow q;
  for (int b = 0; b < p.batch; ++b) {
    const int first = p.cu_seqlens ? p.cu_seqlens[b] : b;
    const int n = p.cu_seqlens ? p.cu_seqlens[b + 1] - first : 1;
    for (int i = 0; i < n; ++i) {
      const int pos = p.start_pos[b] + i;
      const int page_index = pos / l.page_size;
      const int page = p.block_table ? p.block_table[static_cast<size_t>(b) * p.max_pages_per_seq + page_index]
                                     : b * p.max_pages_per_seq + page_index;
      for (int h = 0; h < l.num_kv_heads; ++h) {
        const size_t src = (static_cast<size_t>(first + i) * l.num_kv_heads + h) * D;
        for (int d = 0; d < D; ++d) row[d] = load_input(p.k, src + d, p.dtype);
        rope_row_reference(p.rope, D, p.rotary_dim, p.rope_theta, pos, row.data());
        quantize_row(l.k_format, D, row.data(), &q, p.quant);
        tile_write_row(l.k_tile(), KvRole::kKey, pool + l.k_tile_offset(page, h), pos % l.page_size, q);
        for (int d = 0; d < D; ++d) row[d] = load_input(p.v, src + d, p.dtype);
        quantize_row(l.v_format, D, row.data(), &q, p.quant);
        tile_write_row(l.v_tile(), KvRole::kValue, pool + l.v_tile_offset(page, h), pos % l.page_size, q);
      }
    }
  }
  return Status::Ok();
}

}  // namespace qdec
