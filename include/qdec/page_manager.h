// Host-side bookkeeping of a paged KV cache: which pages of the pool each sequence holds, how long each
// sequence is, and which pages are shared between sequences through a common prefix. Pure host code: it never
// touches device memory; it produces the block tables and lengths the append and attention kernels read.
//
//   pool         page ids 0 .. num_pages - 1; a page holds page_size tokens (of every layer and KV head the
//                device pool puts in it: the manager only counts tokens)
//   sequence     an ordered list of pages (at most max_pages_per_seq) and a committed length; token t of the
//                sequence lives in its page t / page_size, slot t % page_size
//   capacity     pages held * page_size: how far the sequence may grow before it needs another page
//
// A decode or prefill step (docs/kvcache.md, "Page manager"):
//   1. reserve(ids, counts)        pages on demand for the tokens about to be appended (all or nothing)
//      on kOutOfPages: nothing changed; free (preempt) a sequence and retry
//   2. export_block_table(ids)     block table + seq_lens (the committed lengths = where the append starts)
//   3. append kernel               writes the new tokens at positions seq_len .. seq_len + count - 1
//   4. commit(id, count)           the new tokens become part of the sequence
//   5. export_block_table(ids)     seq_lens now include the new tokens: the attention kernel's input
//
// Prefix sharing: fork_prefix(source, k) creates a sequence that holds the first k pages of `source`, which
// must be full, committed pages (k * page_size <= source length). The new sequence's length is
// k * page_size; its next token goes to a fresh page of its own. A page with a reference count above 1 is
// therefore always entirely below the committed length of every sequence holding it, and since appends only
// write at positions >= the committed length, a shared page is never written. Forking at a point that is not
// a page boundary copies nothing: the caller forks at the last full page and appends the remaining tokens of
// the prefix into the new sequence (recomputing or copying them on the device).
//
// Every call either succeeds or returns an error and changes nothing (strong guarantee). Errors name the
// offending sequence id, page id or count.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "qdec/status.h"

namespace qdec {

// Block-table value of an entry past the pages a sequence holds. The attention kernel reads only entries
// i < ceil(seq_len / page_size); the append kernel only entries i < ceil((seq_len + count) / page_size),
// which reserve() guarantees are real pages.
constexpr int32_t kNoPage = -1;

struct PageManagerConfig {
  int num_pages = 0;          // pages in the pool, >= 1
  int page_size = 64;         // tokens per page: a power of two, 1 .. 65536 (the kernels accept fewer sizes)
  int max_pages_per_seq = 0;  // pages per sequence (the block table's row length), >= 1
};

class PageManager {
 public:
  using SeqId = int32_t;

  // An empty manager (no pages); use create().
  PageManager() = default;
  // Validates the config (num_pages >= 1, page_size a power of two, max_pages_per_seq >= 1 and
  // max_pages_per_seq * page_size <= INT32_MAX) and builds a manager with every page free.
  static Status create(const PageManagerConfig& config, PageManager* out);

  // ---- Sequences ----
  // A new empty sequence (length 0, no pages). Ids are never reused.
  Status add_sequence(SeqId* id);
  // Makes room for `num_tokens` more tokens after the committed length of each sequence, taking free pages
  // as needed: afterwards capacity(ids[i]) >= seq_len(ids[i]) + num_tokens[i]. All or nothing:
  //   kInvalidArgument  an unknown or repeated id, a negative count, or a sequence that would need more than
  //                     max_pages_per_seq pages (nothing changed)
  //   kOutOfPages       the pool has fewer free pages than the batch needs (nothing changed)
  Status reserve(std::span<const SeqId> ids, std::span<const int32_t> num_tokens);
  Status reserve(SeqId id, int32_t num_tokens);
  // The append of `num_tokens` tokens at positions seq_len .. seq_len + num_tokens - 1 has landed: the
  // committed length grows by num_tokens. Error if that exceeds the sequence's capacity (reserve first).
  // The pages written are never shared (see the header comment; checked again here).
  Status commit(SeqId id, int32_t num_tokens);
  // A new sequence sharing the first `num_pages` pages of `source` (reference counts + 1); its length is
  // num_pages * page_size, which must not exceed source's committed length. num_pages may be 0.
  Status fork_prefix(SeqId source, int32_t num_pages, SeqId* id);
  // Drops the sequence; each of its pages whose reference count reaches 0 returns to the pool.
  Status free_sequence(SeqId id);

  // ---- Export for the kernels (host vectors, ready to copy to the device) ----
  // block_table (if not null) becomes [ids.size(), max_pages_per_seq] int32, row i = the pages of ids[i]
  // (reserved pages included) then kNoPage; seq_lens (if not null) becomes [ids.size()] committed lengths,
  // which are also the positions where the next appended tokens go. Ids must be known and distinct.
  Status export_block_table(std::span<const SeqId> ids, std::vector<int32_t>* block_table,
                            std::vector<int32_t>* seq_lens) const;
  // Append targets: start_positions[i] = committed length of ids[i] (the first position new tokens are written
  // to), room[i] = capacity - length (how many tokens may be appended before the next reserve). Either may be
  // null.
  Status export_append_targets(std::span<const SeqId> ids, std::vector<int32_t>* start_positions,
                               std::vector<int32_t>* room) const;

  // ---- Queries ----
  const PageManagerConfig& config() const { return config_; }
  int num_pages() const { return config_.num_pages; }
  int page_size() const { return config_.page_size; }
  int max_pages_per_seq() const { return config_.max_pages_per_seq; }
  int num_free_pages() const { return static_cast<int>(free_pages_.size()); }
  int num_sequences() const { return static_cast<int>(seqs_.size()); }
  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  // Ids of the live sequences, ascending.
  std::vector<SeqId> sequence_ids() const;
  Status seq_len(SeqId id, int32_t* len) const;
  Status capacity(SeqId id, int32_t* tokens) const;
  Status pages(SeqId id, std::vector<int32_t>* pages) const;
  // Reference count of a page: 0 = free, 1 = owned by one sequence, > 1 = shared (read-only).
  Status ref_count(int32_t page, int32_t* count) const;
  // Free pages that reserve(id, num_tokens) would take (0 if the capacity already suffices).
  Status pages_needed(SeqId id, int32_t num_tokens, int32_t* new_pages) const;

  // Checks every invariant (reference counts = number of holders, free list = pages with count 0 and no
  // duplicates, no page twice in one sequence, lengths within capacity, shared pages entirely below the
  // length of each holder, page counts within max_pages_per_seq). Ok, or the first violation found.
  Status validate() const;

 private:
  struct Sequence {
    int32_t len = 0;
    std::vector<int32_t> pages;
  };
  Status find(SeqId id, const Sequence** seq) const;
  Status check_ids(std::span<const SeqId> ids, const char* what) const;
  int64_t pages_for(int64_t tokens) const { return (tokens + config_.page_size - 1) / config_.page_size; }

  PageManagerConfig config_;
  std::vector<int32_t> ref_counts_;  // [num_pages]
  std::vector<int32_t> free_pages_;  // stack; the back is taken first
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_id_ = 0;
};

}  // namespace qdec
