// Shared by the append launcher (append.cu) and its CPU reference (kv_cache.cpp).
#pragma once

#include "qdec/kv_cache.h"

namespace qdec::kvcache {

// Full validation of an append; on success *num_tokens is the number of new rows.
Status validate_append(const KvAppendParams& p, int* num_tokens);

// Effective rotary dim (0 means head_dim).
inline int rotary_dim_of(const KvAppendParams& p) {
  return p.rotary_dim == 0 ? p.layout.head_dim : p.rotary_dim;
}

}  // namespace qdec::kvcache
