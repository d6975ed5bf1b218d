// Host page manager of the paged KV cache (include/qdec/page_manager.h, docs/kvcache.md "Page manager").
//
// State: a reference count per page, a stack of free pages, and per sequence its page list and committed
// length. Every mutating call validates everything it needs and computes its result before the first write, so
// an error leaves the state exactly as it was (strong guarantee).
#include "qdec/page_manager.h"

#include <algorithm>
#include <climits>
#include <string>
#include <unordered_set>

namespace qdec {

namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

std::string seq_name(PageManager::SeqId id) {
  return "sequence " + std::to_string(id);
}

bool is_pow2(int x) {
  return x > 0 && (x & (x - 1)) == 0;
}

}  // namespace

Status PageManager::create(const PageManagerConfig& config, PageManager* out) {
  if (out == nullptr) return invalid("PageManager::create: output pointer is null");
  if (config.num_pages < 1) return invalid("num_pages " + std::to_string(config.num_pages) + " must be >= 1");
  if (!is_pow2(config.page_size) || config.page_size > 65536) {
    return invalid("page_size " + std::to_string(config.page_size) + " is not a power of two in 1..65536");
  }
  if (config.max_pages_per_seq < 1) {
    return invalid("max_pages_per_seq " + std::to_string(config.max_pages_per_seq) + " must be >= 1");
  }
  if (int64_t(config.max_pages_per_seq) * config.page_size > INT32_MAX) {
    return invalid("max_pages_per_seq " + std::to_string(config.max_pages_per_seq) + " x page_size " +
                   std::to_string(config.page_size) + " tokens exceeds the int32 range of seq_lens");
  }
  PageManager m;
  m.config_ = config;
  m.ref_counts_.assign(size_t(config.num_pages), 0);
  m.free_pages_.resize(size_t(config.num_pages));
  // Page 0 on top of the stack: a fresh pool hands out 0, 1, 2, ...
  for (int i = 0; i < config.num_pages; ++i) m.free_pages_[size_t(i)] = config.num_pages - 1 - i;
  *out = std::move(m);
  return Status::Ok();
}

Status PageManager::find(SeqId id, const Sequence** seq) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return invalid(seq_name(id) + " does not exist (never added, or freed)");
  *seq = &it->second;
  return Status::Ok();
}

Status PageManager::check_ids(std::span<const SeqId> ids, const char* what) const {
  std::unordered_set<SeqId> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!contains(ids[i])) {
      return invalid(std::string(what) + ": " + seq_name(ids[i]) + " (entry " + std::to_string(i) +
                     ") does not exist (never added, or freed)");
    }
    if (!seen.insert(ids[i]).second) {
      return invalid(std::string(what) + ": " + seq_name(ids[i]) + " appears twice (entry " + std::to_string(i) + ")");
    }
  }
  return Status::Ok();
}

Status PageManager::add_sequence(SeqId* id) {
  if (id == nullptr) return invalid("add_sequence: output pointer is null");
  if (config_.num_pages == 0) return invalid("add_sequence: the manager was not created (PageManager::create)");
  if (next_id_ == INT32_MAX) return invalid("add_sequence: sequence ids are exhausted (2^31 - 1 created)");
  const SeqId new_id = next_id_;
  seqs_.emplace(new_id, Sequence{});
  ++next_id_;
  *id = new_id;
  return Status::Ok();
}

Status PageManager::reserve(std::span<const SeqId> ids, std::span<const int32_t> num_tokens) {
  if (ids.size() != num_tokens.size()) {
    return invalid("reserve: " + std::to_string(ids.size()) + " sequence ids but " + std::to_string(num_tokens.size()) +
                   " token counts");
  }
  QDEC_RETURN_IF_ERROR(check_ids(ids, "reserve"));
  // Plan: new pages per sequence, checked against max_pages_per_seq, then against the free pool.
  std::vector<int32_t> new_pages(ids.size(), 0);
  int64_t total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Sequence& s = seqs_.at(ids[i]);
    if (num_tokens[i] < 0) {
      return invalid("reserve: negative token count " + std::to_string(num_tokens[i]) + " for " + seq_name(ids[i]));
    }
    const int64_t want_tokens = int64_t(s.len) + num_tokens[i];
    const int64_t want_pages = pages_for(want_tokens);
    if (want_pages > config_.max_pages_per_seq) {
      return invalid("reserve: " + seq_name(ids[i]) + " at length " + std::to_string(s.len) + " + " +
                     std::to_string(num_tokens[i]) + " tokens needs " + std::to_string(want_pages) +
                     " pages, more than max_pages_per_seq " + std::to_string(config_.max_pages_per_seq) + " (" +
                     std::to_string(int64_t(config_.max_pages_per_seq) * config_.page_size) + " tokens)");
    }
    new_pages[i] = static_cast<int32_t>(std::max<int64_t>(0, want_pages - int64_t(s.pages.size())));
    total += new_pages[i];
  }
  if (total > int64_t(free_pages_.size())) {
    return Status(StatusCode::kOutOfPages, "reserve: " + std::to_string(ids.size()) + " sequence(s) need " +
                                               std::to_string(total) + " new pages but only " +
                                               std::to_string(free_pages_.size()) + " of " +
                                               std::to_string(config_.num_pages) + " are free; nothing was changed");
  }
  // Commit the plan; nothing below can fail (capacities were reserved by the checks above, and a vector of at
  // most max_pages_per_seq entries is reserved before pages leave the free list).
  for (size_t i = 0; i < ids.size(); ++i) seqs_.at(ids[i]).pages.reserve(size_t(config_.max_pages_per_seq));
  for (size_t i = 0; i < ids.size(); ++i) {
    Sequence& s = seqs_.at(ids[i]);
    for (int32_t k = 0; k < new_pages[i]; ++k) {
      const int32_t page = free_pages_.back();
      free_pages_.pop_back();
      ref_counts_[size_t(page)] = 1;
      s.pages.push_back(page);
    }
  }
  return Status::Ok();
}

Status PageManager::reserve(SeqId id, int32_t num_tokens) {
  return reserve(std::span<const SeqId>(&id, 1), std::span<const int32_t>(&num_tokens, 1));
}

Status PageManager::commit(SeqId id, int32_t num_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return invalid("commit: " + seq_name(id) + " does not exist (never added, or freed)");
  Sequence& s = it->second;
  if (num_tokens < 0) {
    return invalid("commit: negative token count " + std::to_string(num_tokens) + " for " + seq_name(id));
  }
  const int64_t new_len = int64_t(s.len) + num_tokens;
  const int64_t cap = int64_t(s.pages.size()) * config_.page_size;
  if (new_len > cap) {
    return invalid("commit: " + seq_name(id) + " at length " + std::to_string(s.len) + " + " +
                   std::to_string(num_tokens) + " tokens exceeds its capacity of " + std::to_string(cap) + " tokens (" +
                   std::to_string(s.pages.size()) + " pages); reserve first");
  }
  // The written positions [len, new_len) lie in pages the sequence owns alone (header comment); a shared page
  // here would mean the manager's own invariant broke.
  for (int64_t p = s.len / config_.page_size; p < pages_for(new_len); ++p) {
    const int32_t page = s.pages[size_t(p)];
    if (ref_counts_[size_t(page)] != 1) {
      return Status(StatusCode::kInvalidArgument,
                    "commit: internal invariant broken: " + seq_name(id) + " would write page " + std::to_string(page) +
                        " with reference count " + std::to_string(ref_counts_[size_t(page)]));
    }
  }
  s.len = static_cast<int32_t>(new_len);
  return Status::Ok();
}

Status PageManager::fork_prefix(SeqId source, int32_t num_pages, SeqId* id) {
  if (id == nullptr) return invalid("fork_prefix: output pointer is null");
  const Sequence* src = nullptr;
  if (Status st = find(source, &src); !st.ok()) return invalid("fork_prefix: " + st.message());
  if (num_pages < 0) {
    return invalid("fork_prefix: negative page count " + std::to_string(num_pages) + " for " + seq_name(source));
  }
  const int64_t tokens = int64_t(num_pages) * config_.page_size;
  if (tokens > src->len) {
    return invalid("fork_prefix: " + std::to_string(num_pages) + " pages (" + std::to_string(tokens) + " tokens) of " +
                   seq_name(source) + " are not all full: its committed length is " + std::to_string(src->len) +
                   " (only full pages, at most " + std::to_string(src->len / config_.page_size) + ", can be shared)");
  }
  for (int32_t k = 0; k < num_pages; ++k) {
    if (ref_counts_[size_t(src->pages[size_t(k)])] == INT32_MAX) {
      return invalid("fork_prefix: page " + std::to_string(src->pages[size_t(k)]) + " has the maximum reference count");
    }
  }
  if (next_id_ == INT32_MAX) return invalid("fork_prefix: sequence ids are exhausted (2^31 - 1 created)");
  Sequence child;
  child.pages.reserve(size_t(config_.max_pages_per_seq));
  child.pages.assign(src->pages.begin(), src->pages.begin() + num_pages);
  child.len = static_cast<int32_t>(tokens);
  const SeqId new_id = next_id_;
  seqs_.emplace(new_id, std::move(child));  // may throw only on allocation failure, before any count changes
  ++next_id_;
  for (int32_t page : seqs_.at(new_id).pages) ++ref_counts_[size_t(page)];
  *id = new_id;
  return Status::Ok();
}

Status PageManager::free_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return invalid("free_sequence: " + seq_name(id) + " does not exist (never added, or freed)");
  free_pages_.reserve(size_t(config_.num_pages));
  // Release in reverse, so that a sequence's first page ends on top of the free stack.
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p) {
    if (--ref_counts_[size_t(*p)] == 0) free_pages_.push_back(*p);
  }
  seqs_.erase(it);
  return Status::Ok();
}

Status PageManager::export_block_table(std::span<const SeqId> ids, std::vector<int32_t>* block_table,
                                       std::vector<int32_t>* seq_lens) const {
  QDEC_RETURN_IF_ERROR(check_ids(ids, "export_block_table"));
  const size_t row = size_t(config_.max_pages_per_seq);
  if (block_table != nullptr) block_table->assign(ids.size() * row, kNoPage);
  if (seq_lens != nullptr) seq_lens->assign(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Sequence& s = seqs_.at(ids[i]);
    if (block_table != nullptr) std::copy(s.pages.begin(), s.pages.end(), block_table->begin() + i * row);
    if (seq_lens != nullptr) (*seq_lens)[i] = s.len;
  }
  return Status::Ok();
}

Status PageManager::export_append_targets(std::span<const SeqId> ids, std::vector<int32_t>* start_positions,
                                          std::vector<int32_t>* room) const {
  QDEC_RETURN_IF_ERROR(check_ids(ids, "export_append_targets"));
  if (start_positions != nullptr) start_positions->assign(ids.size(), 0);
  if (room != nullptr) room->assign(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Sequence& s = seqs_.at(ids[i]);
    if (start_positions != nullptr) (*start_positions)[i] = s.len;
    if (room != nullptr) (*room)[i] = static_cast<int32_t>(int64_t(s.pages.size()) * config_.page_size - s.len);
  }
  return Status::Ok();
}

std::vector<PageManager::SeqId> PageManager::sequence_ids() const {
  std::vector<SeqId> ids;
  ids.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status PageManager::seq_len(SeqId id, int32_t* len) const {
  if (len == nullptr) return invalid("seq_len: output pointer is null");
  const Sequence* s = nullptr;
  QDEC_RETURN_IF_ERROR(find(id, &s));
  *len = s->len;
  return Status::Ok();
}

Status PageManager::capacity(SeqId id, int32_t* tokens) const {
  if (tokens == nullptr) return invalid("capacity: output pointer is null");
  const Sequence* s = nullptr;
  QDEC_RETURN_IF_ERROR(find(id, &s));
  *tokens = static_cast<int32_t>(int64_t(s->pages.size()) * config_.page_size);
  return Status::Ok();
}

Status PageManager::pages(SeqId id, std::vector<int32_t>* out) const {
  if (out == nullptr) return invalid("pages: output pointer is null");
  const Sequence* s = nullptr;
  QDEC_RETURN_IF_ERROR(find(id, &s));
  *out = s->pages;
  return Status::Ok();
}

Status PageManager::ref_count(int32_t page, int32_t* count) const {
  if (count == nullptr) return invalid("ref_count: output pointer is null");
  if (page < 0 || page >= config_.num_pages) {
    return invalid("ref_count: page " + std::to_string(page) + " is outside the pool 0.." +
                   std::to_string(config_.num_pages - 1));
  }
  *count = ref_counts_[size_t(page)];
  return Status::Ok();
}

Status PageManager::pages_needed(SeqId id, int32_t num_tokens, int32_t* new_pages) const {
  if (new_pages == nullptr) return invalid("pages_needed: output pointer is null");
  const Sequence* s = nullptr;
  QDEC_RETURN_IF_ERROR(find(id, &s));
  if (num_tokens < 0) {
    return invalid("pages_needed: negative token count " + std::to_string(num_tokens) + " for " + seq_name(id));
  }
  *new_pages = static_cast<int32_t>(
      std::min<int64_t>(INT32_MAX, std::max<int64_t>(0, pages_for(int64_t(s->len) + num_tokens) - s->pages.size())));
  return Status::Ok();
}

Status PageManager::validate() const {
  const int n = config_.num_pages;
  if (ref_counts_.size() != size_t(n)) {
    return invalid("validate: " + std::to_string(ref_counts_.size()) + " reference counts for " + std::to_string(n) +
                   " pages");
  }
  std::vector<int32_t> holders(size_t(n), 0);
  for (const auto& [id, s] : seqs_) {
    if (id < 0 || id >= next_id_) return invalid("validate: " + seq_name(id) + " has an id never handed out");
    if (s.pages.size() > size_t(config_.max_pages_per_seq)) {
      return invalid("validate: " + seq_name(id) + " holds " + std::to_string(s.pages.size()) +
                     " pages, more than max_pages_per_seq " + std::to_string(config_.max_pages_per_seq));
    }
    if (s.len < 0 || int64_t(s.len) > int64_t(s.pages.size()) * config_.page_size) {
      return invalid("validate: " + seq_name(id) + " has length " + std::to_string(s.len) + " beyond its " +
                     std::to_string(s.pages.size()) + " pages");
    }
    std::unordered_set<int32_t> mine;
    for (int32_t page : s.pages) {
      if (page < 0 || page >= n) {
        return invalid("validate: " + seq_name(id) + " holds page " + std::to_string(page) + " outside the pool");
      }
      if (!mine.insert(page).second) {
        return invalid("validate: " + seq_name(id) + " holds page " + std::to_string(page) + " twice");
      }
      ++holders[size_t(page)];
    }
  }
  for (const auto& [id, s] : seqs_) {
    for (size_t k = 0; k < s.pages.size(); ++k) {
      const int32_t page = s.pages[k];
      if (holders[size_t(page)] > 1 && int64_t(k + 1) * config_.page_size > s.len) {
        return invalid("validate: page " + std::to_string(page) + " is shared by " +
                       std::to_string(holders[size_t(page)]) + " sequences but is page " + std::to_string(k) + " of " +
                       seq_name(id) + " whose length " + std::to_string(s.len) +
                       " does not cover it (it could be written)");
      }
    }
  }
  std::vector<uint8_t> on_free_list(size_t(n), 0);
  for (int32_t page : free_pages_) {
    if (page < 0 || page >= n) return invalid("validate: free list holds page " + std::to_string(page));
    if (on_free_list[size_t(page)]++) {
      return invalid("validate: page " + std::to_string(page) + " is on the free list twice");
    }
  }
  for (int page = 0; page < n; ++page) {
    if (ref_counts_[size_t(page)] != holders[size_t(page)]) {
      return invalid("validate: page " + std::to_string(page) + " has reference count " +
                     std::to_string(ref_counts_[size_t(page)]) + " but " + std::to_string(holders[size_t(page)]) +
                     " holders");
    }
    if ((holders[size_t(page)] == 0) != (on_free_list[size_t(page)] != 0)) {
      return invalid("validate: page " + std::to_string(page) + " has " + std::to_string(holders[size_t(page)]) +
                     " holders and is " + (on_free_list[size_t(page)] ? "" : "not ") + "on the free list");
    }
  }
  return Status::Ok();
}

}  // namespace qdec
