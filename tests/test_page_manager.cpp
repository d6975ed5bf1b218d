// Host page manager of the paged KV cache (include/qdec/page_manager.h): a property test of 10^5 random
// operations against an independent model, then one test per documented behaviour and error.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qdec/page_manager.h"
#include "test_util.h"

namespace qdec {
namespace {

using SeqId = PageManager::SeqId;

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

PageManager make(int num_pages, int page_size, int max_pages_per_seq) {
  PageManager m;
  const Status s = PageManager::create({num_pages, page_size, max_pages_per_seq}, &m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return m;
}

// Everything observable about a manager, for before/after comparisons.
struct Snapshot {
  std::vector<SeqId> ids;
  std::vector<int32_t> lens;
  std::vector<std::vector<int32_t>> pages;
  std::vector<int32_t> ref_counts;
  int num_free = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const PageManager& m) {
  Snapshot s;
  s.ids = m.sequence_ids();
  for (SeqId id : s.ids) {
    int32_t len = 0;
    std::vector<int32_t> p;
    EXPECT_TRUE(m.seq_len(id, &len).ok());
    EXPECT_TRUE(m.pages(id, &p).ok());
    s.lens.push_back(len);
    s.pages.push_back(p);
  }
  for (int32_t page = 0; page < m.num_pages(); ++page) {
    int32_t c = 0;
    EXPECT_TRUE(m.ref_count(page, &c).ok());
    s.ref_counts.push_back(c);
  }
  s.num_free = m.num_free_pages();
  return s;
}

// ---- The independent model ---------------------------------------------------------------------------------
// Sequences as (length, page list), a holder count per page. It cannot know which free page the manager picks,
// so it learns new page ids from the manager and checks they were free; everything else it predicts.
struct Model {
  int num_pages = 0, page_size = 0, max_pages = 0;
  std::map<SeqId, std::pair<int32_t, std::vector<int32_t>>> seqs;  // id -> (len, pages)
  std::vector<int> holders;
  int64_t writes = 0;  // committed token positions checked against the holder counts

  int free_count() const { return int(std::count(holders.begin(), holders.end(), 0)); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size - 1) / page_size; }
};

// Full comparison of manager and model (and the manager's own invariant check).
void expect_same(const PageManager& m, const Model& model, int64_t op) {
  ASSERT_TRUE(m.validate().ok()) << "op " << op << ": " << m.validate().to_string();
  std::vector<SeqId> ids;
  for (const auto& [id, s] : model.seqs) ids.push_back(id);
  ASSERT_EQ(m.sequence_ids(), ids) << "op " << op;
  std::set<int32_t> used;
  for (const auto& [id, s] : model.seqs) {
    int32_t len = -1;
    std::vector<int32_t> pages;
    ASSERT_TRUE(m.seq_len(id, &len).ok());
    ASSERT_TRUE(m.pages(id, &pages).ok());
    ASSERT_EQ(len, s.first) << "op " << op << " sequence " << id;
    ASSERT_EQ(pages, s.second) << "op " << op << " sequence " << id;
    used.insert(s.second.begin(), s.second.end());
  }
  for (int32_t page = 0; page < model.num_pages; ++page) {
    int32_t c = -1;
    ASSERT_TRUE(m.ref_count(page, &c).ok());
    ASSERT_EQ(c, model.holders[size_t(page)]) << "op " << op << " page " << page;
  }
  // Free count conserved: free + distinct used == num_pages.
  ASSERT_EQ(m.num_free_pages(), model.free_count()) << "op " << op;
  ASSERT_EQ(m.num_free_pages() + int(used.size()), model.num_pages) << "op " << op;
}

void check_exports(const PageManager& m, const Model& model, const std::vector<SeqId>& ids, int64_t op) {
  std::vector<int32_t> table, lens, start, room;
  ASSERT_TRUE(m.export_block_table(ids, &table, &lens).ok());
  ASSERT_TRUE(m.export_append_targets(ids, &start, &room).ok());
  const size_t row = size_t(model.max_pages);
  ASSERT_EQ(table.size(), ids.size() * row);
  ASSERT_EQ(lens.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& [len, pages] = model.seqs.at(ids[i]);
    for (size_t k = 0; k < row; ++k) {
      ASSERT_EQ(table[i * row + k], k < pages.size() ? pages[k] : kNoPage) << "op " << op << " row " << i;
    }
    ASSERT_EQ(lens[i], len);
    ASSERT_EQ(start[i], len);
    ASSERT_EQ(room[i], int32_t(pages.size()) * model.page_size - len);
    // The kernels read entries below ceil(seq_len / page_size): all real pages.
    ASSERT_LE(model.pages_for(len), int64_t(pages.size()));
  }
}

struct PropertyConfig {
  int num_pages, page_size, max_pages_per_seq, ops;
};

void run_property(const PropertyConfig& cfg, std::mt19937_64& rng) {
  SCOPED_TRACE("num_pages " + std::to_string(cfg.num_pages) + " page_size " + std::to_string(cfg.page_size) +
               " max_pages_per_seq " + std::to_string(cfg.max_pages_per_seq));
  PageManager m = make(cfg.num_pages, cfg.page_size, cfg.max_pages_per_seq);
  Model model{cfg.num_pages, cfg.page_size, cfg.max_pages_per_seq, {}, std::vector<int>(size_t(cfg.num_pages), 0)};
  const int32_t max_tokens = cfg.max_pages_per_seq * cfg.page_size;
  std::map<std::string, int64_t> outcomes;
  auto pick = [&](int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  auto some_id = [&]() -> SeqId {
    // Mostly a live sequence; sometimes one that was freed or never existed.
    if (model.seqs.empty() || pick(20) == 0) return pick(2) ? -1 - pick(5) : SeqId(pick(1000000));
    auto it = model.seqs.begin();
    std::advance(it, pick(int(model.seqs.size())));
    return it->first;
  };
  // A token count: mostly a decode step or a short prefill, sometimes large (max_pages_per_seq, pool size).
  auto some_count = [&]() -> int32_t {
    switch (pick(10)) {
      case 0:
        return pick(max_tokens + 2 * cfg.page_size);
      case 1:
        return -1 - pick(3);
      case 2:
        return pick(4 * cfg.page_size + 1);
      default:
        return 1 + pick(3);
    }
  };

  for (int64_t op = 0; op < cfg.ops; ++op) {
    const Snapshot before = snapshot(m);
    const int kind = pick(100);
    Status st;
    std::string what;
    if (kind < 8) {  // add
      what = "add";
      if (model.seqs.size() >= 48) continue;
      SeqId id = -1;
      st = m.add_sequence(&id);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(model.seqs.count(id), 0u);
      model.seqs[id] = {0, {}};
    } else if (kind < 45) {  // reserve: one sequence or a batch
      what = "reserve";
      std::vector<SeqId> ids;
      std::vector<int32_t> counts;
      const int b = pick(3) ? 1 : 1 + pick(6);
      for (int i = 0; i < b; ++i) {
        ids.push_back(some_id());
        counts.push_back(some_count());
      }
      // Expected outcome, computed by the model.
      bool bad = false;
      std::set<SeqId> seen;
      for (SeqId id : ids) bad |= !model.seqs.count(id) || !seen.insert(id).second;
      int64_t need = 0;
      for (size_t i = 0; i < ids.size() && !bad; ++i) {
        const auto& [len, pages] = model.seqs.at(ids[i]);
        const int64_t want = model.pages_for(int64_t(len) + counts[i]);
        bad |= counts[i] < 0 || want > cfg.max_pages_per_seq;
        need += std::max<int64_t>(0, want - int64_t(pages.size()));
      }
      st = b == 1 ? m.reserve(ids[0], counts[0]) : m.reserve(ids, counts);
      if (bad) {
        ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
      } else if (need > model.free_count()) {
        ASSERT_EQ(st.code(), StatusCode::kOutOfPages) << st.to_string();
        ASSERT_TRUE(mentions(st, std::to_string(need) + " new pages")) << st.to_string();
      } else {
        ASSERT_TRUE(st.ok()) << st.to_string();
        std::set<int32_t> taken;
        for (size_t i = 0; i < ids.size(); ++i) {
          auto& [len, pages] = model.seqs.at(ids[i]);
          std::vector<int32_t> now;
          ASSERT_TRUE(m.pages(ids[i], &now).ok());
          const size_t want =
              size_t(std::max<int64_t>(int64_t(pages.size()), model.pages_for(int64_t(len) + counts[i])));
          ASSERT_EQ(now.size(), want);
          ASSERT_TRUE(std::equal(pages.begin(), pages.end(), now.begin())) << "held pages changed";
          for (size_t k = pages.size(); k < now.size(); ++k) {
            ASSERT_GE(now[k], 0);
            ASSERT_LT(now[k], cfg.num_pages);
            ASSERT_EQ(model.holders[size_t(now[k])], 0) << "page " << now[k] << " was not free";
            ASSERT_TRUE(taken.insert(now[k]).second) << "page " << now[k] << " handed out twice";
            model.holders[size_t(now[k])] = 1;
          }
          pages = now;
        }
      }
    } else if (kind < 75) {  // commit (what an append writes)
      what = "commit";
      const SeqId id = some_id();
      int32_t n = 0;
      if (model.seqs.count(id)) {
        const auto& [len, pages] = model.seqs.at(id);
        const int32_t room = int32_t(pages.size()) * cfg.page_size - len;
        n = pick(8) ? pick(room + 1) : room + 1 + pick(3);
        if (pick(30) == 0) n = -1;
      }
      st = m.commit(id, n);
      if (!model.seqs.count(id) || n < 0) {
        ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
      } else {
        auto& [len, pages] = model.seqs.at(id);
        if (int64_t(len) + n > int64_t(pages.size()) * cfg.page_size) {
          ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
        } else {
          ASSERT_TRUE(st.ok()) << st.to_string();
          // The written positions [len, len + n): none may lie in a shared page.
          for (int64_t t = len; t < int64_t(len) + n; ++t) {
            const int32_t page = pages[size_t(t / cfg.page_size)];
            ASSERT_EQ(model.holders[size_t(page)], 1) << "sequence " << id << " position " << t << " writes page "
                                                      << page << " shared by " << model.holders[size_t(page)];
            ++model.writes;
          }
          len += n;
        }
      }
    } else if (kind < 85) {  // fork a prefix of full pages
      what = "fork";
      if (model.seqs.size() >= 48) continue;
      const SeqId src = some_id();
      int32_t k = 0;
      if (model.seqs.count(src)) {
        const int32_t full = model.seqs.at(src).first / cfg.page_size;
        k = pick(6) ? pick(full + 1) : full + 1;
        if (pick(30) == 0) k = -1;
      }
      SeqId child = -1;
      st = m.fork_prefix(src, k, &child);
      if (!model.seqs.count(src) || k < 0 || int64_t(k) * cfg.page_size > model.seqs.at(src).first) {
        ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
      } else {
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(model.seqs.count(child), 0u);
        const std::vector<int32_t> shared(model.seqs.at(src).second.begin(), model.seqs.at(src).second.begin() + k);
        for (int32_t page : shared) ++model.holders[size_t(page)];
        model.seqs[child] = {k * cfg.page_size, shared};
      }
    } else if (kind < 95) {  // free
      what = "free";
      const SeqId id = some_id();
      st = m.free_sequence(id);
      if (!model.seqs.count(id)) {
        ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
      } else {
        ASSERT_TRUE(st.ok()) << st.to_string();
        for (int32_t page : model.seqs.at(id).second) --model.holders[size_t(page)];
        model.seqs.erase(id);
      }
    } else {  // export a random batch (distinct ids) and compare with the model
      what = "export";
      std::vector<SeqId> ids;
      for (const auto& [id, s] : model.seqs)
        if (pick(2)) ids.push_back(id);
      std::shuffle(ids.begin(), ids.end(), rng);
      check_exports(m, model, ids, op);
      if (!ids.empty()) {
        ids.push_back(ids[size_t(pick(int(ids.size())))]);
        std::vector<int32_t> table;
        st = m.export_block_table(ids, &table, nullptr);
        ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
        ASSERT_TRUE(mentions(st, "appears twice")) << st.to_string();
        ASSERT_EQ(snapshot(m), before);
        st = Status::Ok();  // counted as one checked export
      }
    }
    ++outcomes[what + (st.ok() ? " ok" : std::string(" ") + status_code_name(st.code()))];
    // Any failed call leaves everything exactly as it was (strong guarantee).
    if (!st.ok()) {
      ASSERT_EQ(snapshot(m), before) << "op " << op << " " << what << " changed state: " << st.to_string();
    }
    expect_same(m, model, op);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The run must have exercised the interesting paths.
  for (const char* must :
       {"reserve ok", "reserve OutOfPages", "reserve InvalidArgument", "commit ok", "fork ok", "free ok"}) {
    EXPECT_GT(outcomes[must], 0) << must;
  }
  std::string summary;
  for (const auto& [k, v] : outcomes) summary += k + "=" + std::to_string(v) + " ";
  std::printf("[ page manager ] %d ops, %lld token writes checked: %s\n", cfg.ops, (long long)model.writes,
              summary.c_str());
}

TEST(PageManagerProperty, RandomOperationsMatchTheModel) {
  QDEC_TEST_RNG(rng);
  // 10^5 operations over four pools: small pages, page_size 1, large pages, a pool smaller than one sequence.
  const PropertyConfig configs[] = {
      {64, 16, 16, 30000},
      {200, 1, 40, 25000},
      {160, 64, 32, 25000},
      {37, 4, 50, 20000},
  };
  for (const PropertyConfig& c : configs) {
    run_property(c, rng);
    if (HasFatalFailure()) return;
  }
}

// ---- Behaviour ----------------------------------------------------------------------------------------------

TEST(PageManagerBasics, DecodeStepFlow) {
  PageManager m = make(8, 16, 4);
  SeqId a = -1, b = -1;
  ASSERT_TRUE(m.add_sequence(&a).ok());
  ASSERT_TRUE(m.add_sequence(&b).ok());
  EXPECT_NE(a, b);
  // Prefill 20 tokens into a (2 pages), 5 into b (1 page) in one batch.
  const std::vector<SeqId> ids = {a, b};
  ASSERT_TRUE(m.reserve(ids, std::vector<int32_t>{20, 5}).ok());
  EXPECT_EQ(m.num_free_pages(), 5);
  std::vector<int32_t> start, room;
  ASSERT_TRUE(m.export_append_targets(ids, &start, &room).ok());
  EXPECT_EQ(start, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(room, (std::vector<int32_t>{32, 16}));
  ASSERT_TRUE(m.commit(a, 20).ok());
  ASSERT_TRUE(m.commit(b, 5).ok());
  std::vector<int32_t> table, lens;
  ASSERT_TRUE(m.export_block_table(ids, &table, &lens).ok());
  // A fresh pool hands out pages 0, 1, 2, ... in order.
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, kNoPage, kNoPage, 2, kNoPage, kNoPage, kNoPage}));
  EXPECT_EQ(lens, (std::vector<int32_t>{20, 5}));
  // A decode step: one token each, no new page needed.
  ASSERT_TRUE(m.reserve(ids, std::vector<int32_t>{1, 1}).ok());
  EXPECT_EQ(m.num_free_pages(), 5);
  ASSERT_TRUE(m.export_append_targets(ids, &start, nullptr).ok());
  EXPECT_EQ(start, (std::vector<int32_t>{20, 5}));
  ASSERT_TRUE(m.commit(a, 1).ok());
  ASSERT_TRUE(m.commit(b, 1).ok());
  ASSERT_TRUE(m.export_block_table(ids, nullptr, &lens).ok());
  EXPECT_EQ(lens, (std::vector<int32_t>{21, 6}));
  int32_t needed = -1;
  ASSERT_TRUE(m.pages_needed(a, 12, &needed).ok());
  EXPECT_EQ(needed, 1);  // 21 + 12 = 33 tokens > 2 pages
  ASSERT_TRUE(m.free_sequence(a).ok());
  EXPECT_EQ(m.num_free_pages(), 7);
  EXPECT_FALSE(m.contains(a));
  EXPECT_TRUE(m.validate().ok());
  // An empty batch exports empty vectors.
  ASSERT_TRUE(m.export_block_table({}, &table, &lens).ok());
  EXPECT_TRUE(table.empty() && lens.empty());
}

TEST(PageManagerSharing, ForkedPagesAreCountedAndNeverWritten) {
  PageManager m = make(16, 4, 8);
  SeqId src = -1;
  ASSERT_TRUE(m.add_sequence(&src).ok());
  ASSERT_TRUE(m.reserve(src, 10).ok());  // pages 0, 1, 2
  ASSERT_TRUE(m.commit(src, 10).ok());   // page 2 half full
  // Two full pages can be shared, not three.
  SeqId child = -1;
  Status st = m.fork_prefix(src, 3, &child);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(st, "committed length is 10") && mentions(st, "at most 2")) << st.to_string();
  ASSERT_TRUE(m.fork_prefix(src, 2, &child).ok());
  int32_t len = 0, c = 0;
  ASSERT_TRUE(m.seq_len(child, &len).ok());
  EXPECT_EQ(len, 8);
  for (int32_t page : {0, 1}) {
    ASSERT_TRUE(m.ref_count(page, &c).ok());
    EXPECT_EQ(c, 2) << page;
  }
  ASSERT_TRUE(m.ref_count(2, &c).ok());
  EXPECT_EQ(c, 1);
  // The child's prefix tail (tokens 8, 9 of the common prompt) goes to a fresh page of its own.
  ASSERT_TRUE(m.reserve(child, 2).ok());
  std::vector<int32_t> pages;
  ASSERT_TRUE(m.pages(child, &pages).ok());
  EXPECT_EQ(pages, (std::vector<int32_t>{0, 1, 3}));
  ASSERT_TRUE(m.commit(child, 2).ok());
  // The source keeps appending into its own page 2.
  ASSERT_TRUE(m.commit(src, 2).ok());
  EXPECT_TRUE(m.validate().ok());
  // Freeing the source keeps the shared pages alive for the child.
  const int free_before = m.num_free_pages();
  ASSERT_TRUE(m.free_sequence(src).ok());
  EXPECT_EQ(m.num_free_pages(), free_before + 1);  // only page 2
  ASSERT_TRUE(m.ref_count(0, &c).ok());
  EXPECT_EQ(c, 1);
  // A fork of a fork, and a fork of zero pages (an empty sequence).
  SeqId grandchild = -1, empty = -1;
  ASSERT_TRUE(m.fork_prefix(child, 2, &grandchild).ok());
  ASSERT_TRUE(m.ref_count(1, &c).ok());
  EXPECT_EQ(c, 2);
  ASSERT_TRUE(m.fork_prefix(child, 0, &empty).ok());
  ASSERT_TRUE(m.seq_len(empty, &len).ok());
  EXPECT_EQ(len, 0);
  ASSERT_TRUE(m.free_sequence(child).ok());
  ASSERT_TRUE(m.free_sequence(grandchild).ok());
  ASSERT_TRUE(m.free_sequence(empty).ok());
  EXPECT_EQ(m.num_free_pages(), 16);
  EXPECT_EQ(m.num_sequences(), 0);
  EXPECT_TRUE(m.validate().ok());
}

// ---- Errors: each documented one, with the offending value in the message ---------------------------------

TEST(PageManagerErrors, CreateRejectsBadConfigs) {
  PageManager m;
  struct Case {
    PageManagerConfig cfg;
    const char* text;
  } cases[] = {
      {{0, 16, 4}, "num_pages 0"},
      {{8, 0, 4}, "page_size 0"},
      {{8, 24, 4}, "page_size 24"},
      {{8, -16, 4}, "page_size -16"},
      {{8, 131072, 4}, "page_size 131072"},
      {{8, 16, 0}, "max_pages_per_seq 0"},
      {{8, 65536, 1 << 16}, "max_pages_per_seq 65536 x page_size 65536"},
  };
  for (const Case& c : cases) {
    const Status s = PageManager::create(c.cfg, &m);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(mentions(s, c.text)) << s.to_string();
  }
  EXPECT_FALSE(PageManager::create({8, 16, 4}, nullptr).ok());
  // A manager that was never created takes no sequences.
  SeqId id = -1;
  EXPECT_EQ(m.add_sequence(&id).code(), StatusCode::kInvalidArgument);
}

TEST(PageManagerErrors, OutOfPagesIsDistinctAndChangesNothing) {
  PageManager m = make(4, 16, 8);
  SeqId a = -1, b = -1;
  ASSERT_TRUE(m.add_sequence(&a).ok());
  ASSERT_TRUE(m.add_sequence(&b).ok());
  ASSERT_TRUE(m.reserve(a, 40).ok());  // 3 pages
  ASSERT_TRUE(m.commit(a, 33).ok());
  const Snapshot before = snapshot(m);
  Status st = m.reserve(b, 17);  // 2 pages, 1 free
  EXPECT_EQ(st.code(), StatusCode::kOutOfPages);
  EXPECT_STREQ(status_code_name(st.code()), "OutOfPages");
  EXPECT_TRUE(mentions(st, "need 2 new pages but only 1 of 4 are free")) << st.to_string();
  EXPECT_EQ(snapshot(m), before);
  // A batch is all or nothing: b's page would fit, a's would not after it.
  st = m.reserve(std::vector<SeqId>{b, a}, std::vector<int32_t>{1, 16});
  EXPECT_EQ(st.code(), StatusCode::kOutOfPages) << st.to_string();
  EXPECT_EQ(snapshot(m), before);
  // Preempt (free a) and retry.
  ASSERT_TRUE(m.free_sequence(a).ok());
  EXPECT_TRUE(m.reserve(b, 17).ok());
  EXPECT_TRUE(m.validate().ok());
}

TEST(PageManagerErrors, MaxPagesPerSeqIsNotOutOfPages) {
  PageManager m = make(64, 16, 4);
  SeqId a = -1;
  ASSERT_TRUE(m.add_sequence(&a).ok());
  ASSERT_TRUE(m.reserve(a, 64).ok());  // exactly 4 pages
  ASSERT_TRUE(m.commit(a, 60).ok());
  const Snapshot before = snapshot(m);
  const Status st = m.reserve(a, 5);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(st, "sequence " + std::to_string(a) + " at length 60 + 5 tokens needs 5 pages") &&
              mentions(st, "max_pages_per_seq 4 (64 tokens)"))
      << st.to_string();
  EXPECT_EQ(snapshot(m), before);
}

TEST(PageManagerErrors, UnknownAndFreedIds) {
  PageManager m = make(8, 16, 4);
  SeqId a = -1;
  ASSERT_TRUE(m.add_sequence(&a).ok());
  ASSERT_TRUE(m.free_sequence(a).ok());
  SeqId out = -1;
  int32_t v = 0;
  std::vector<int32_t> vec;
  const std::string name = "sequence " + std::to_string(a);
  for (const Status& s : {m.reserve(a, 1), m.commit(a, 0), m.fork_prefix(a, 0, &out), m.free_sequence(a),
                          m.seq_len(a, &v), m.capacity(a, &v), m.pages(a, &vec), m.pages_needed(a, 1, &v),
                          m.export_block_table(std::vector<SeqId>{a}, &vec, nullptr),
                          m.export_append_targets(std::vector<SeqId>{a}, &vec, nullptr)}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(mentions(s, name + " ") && mentions(s, "does not exist")) << s.to_string();
  }
  const Status s = m.reserve(12345, 1);
  EXPECT_TRUE(mentions(s, "sequence 12345")) << s.to_string();
  // Ids are not reused.
  SeqId b = -1;
  ASSERT_TRUE(m.add_sequence(&b).ok());
  EXPECT_NE(a, b);
}

TEST(PageManagerErrors, BadCountsAndArguments) {
  PageManager m = make(8, 16, 4);
  SeqId a = -1, b = -1;
  ASSERT_TRUE(m.add_sequence(&a).ok());
  ASSERT_TRUE(m.add_sequence(&b).ok());
  ASSERT_TRUE(m.reserve(a, 10).ok());
  const Snapshot before = snapshot(m);
  Status s = m.reserve(a, -3);
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument && mentions(s, "negative token count -3")) << s.to_string();
  s = m.reserve(std::vector<SeqId>{a, b}, std::vector<int32_t>{1});
  EXPECT_TRUE(mentions(s, "2 sequence ids but 1 token counts")) << s.to_string();
  s = m.reserve(std::vector<SeqId>{a, b, a}, std::vector<int32_t>{1, 1, 1});
  EXPECT_TRUE(mentions(s, "sequence " + std::to_string(a) + " appears twice (entry 2)")) << s.to_string();
  s = m.commit(a, 17);  // capacity 16
  EXPECT_TRUE(mentions(s, "length 0 + 17 tokens exceeds its capacity of 16 tokens (1 pages)")) << s.to_string();
  s = m.commit(a, -1);
  EXPECT_TRUE(mentions(s, "negative token count -1")) << s.to_string();
  SeqId out = -1;
  s = m.fork_prefix(a, -2, &out);
  EXPECT_TRUE(mentions(s, "negative page count -2")) << s.to_string();
  s = m.fork_prefix(a, 1, &out);  // length 0: page 0 is not full
  EXPECT_TRUE(mentions(s, "committed length is 0")) << s.to_string();
  int32_t c = 0;
  s = m.ref_count(8, &c);
  EXPECT_TRUE(mentions(s, "page 8 is outside the pool 0..7")) << s.to_string();
  s = m.ref_count(-1, &c);
  EXPECT_TRUE(mentions(s, "page -1")) << s.to_string();
  s = m.pages_needed(a, -4, &c);
  EXPECT_TRUE(mentions(s, "negative token count -4")) << s.to_string();
  std::vector<int32_t> t;
  s = m.export_append_targets(std::vector<SeqId>{b, b}, &t, nullptr);
  EXPECT_TRUE(mentions(s, "appears twice (entry 1)")) << s.to_string();
  EXPECT_EQ(snapshot(m), before);
  EXPECT_TRUE(m.validate().ok());
}

}  // namespace
}  // namespace qdec
