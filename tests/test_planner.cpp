// KV-cache capacity planner (include/qdec/planner.h): presets against the published parameter counts,
// hand-computed plans for two presets, seed 004's Llama-70B example, and each input error.
#include <gtest/gtest.h>

#include <string>

#include "qdec/formats.h"
#include "qdec/planner.h"

namespace qdec {
namespace {

bool mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(PlannerPresets, ParameterCountsMatchThePublishedModels) {
  // Published counts (sum of the checkpoint tensor sizes).
  const std::pair<const char*, int64_t> expected[] = {
      {"llama-2-7b", 6738415616},   {"llama-2-70b", 68976648192}, {"llama-3-8b", 8030261248},
      {"llama-3-70b", 70553706496}, {"smollm2-135m", 134515008},
  };
  ASSERT_EQ(model_preset_names().size(), std::size(expected));
  for (const auto& [name, params] : expected) {
    ModelShape m;
    ASSERT_TRUE(model_preset(name, &m).ok()) << name;
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(m.num_params, params) << name;
  }
  ModelShape m;
  ASSERT_TRUE(model_preset("llama-2-70b", &m).ok());
  EXPECT_EQ(m.num_layers, 80);
  EXPECT_EQ(m.num_qo_heads, 64);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  ASSERT_TRUE(model_preset("smollm2-135m", &m).ok());
  EXPECT_EQ(m.num_layers, 30);
  EXPECT_EQ(m.num_kv_heads, 3);
  EXPECT_EQ(m.head_dim, 64);
}

// llama-2-70b on 8 x 80 GB, bf16 weights, no reserve, context 4096, page_size 64:
//   weights per GPU  68,976,648,192 x 2 / 8 = 17,244,162,048 B;  KV per GPU 80e9 - that = 62,755,837,952 B
//   8 KV heads / 8 GPUs = 1 head per GPU
//   bf16  row 256 B (K) + 256 B (V), x 80 layers = 40,960 B/token/GPU (327,680 over 8 GPUs)
//         tokens 62,755,837,952 / 40,960 = 1,532,124; pages /64 = 23,939; batch 23,939 / 64 = 374
//   int8  row 128 + 2 = 130 B, x 2 x 80 = 20,800 B; tokens 3,017,107; pages 47,142; batch 736
//   int4  row 64 + 4 = 68 B, x 2 x 80 = 10,880 B; tokens 5,767,999; pages 90,124; batch 1,408
TEST(PlannerPlan, Llama2_70bOnEightGpus) {
  PlanOptions o;
  ASSERT_TRUE(model_preset("llama-2-70b", &o.model).ok());
  o.gpu_mem_bytes = 80'000'000'000;
  o.gpus = 8;
  o.weight_bytes_per_param = 2;
  o.reserve_bytes = 0;
  o.context = 4096;
  o.page_size = 64;
  PlanRow r;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.kv_heads_per_gpu, 1);
  EXPECT_EQ(r.kv_head_replicas, 1);
  EXPECT_EQ(r.weight_bytes_per_gpu, 17'244'162'048);
  EXPECT_EQ(r.kv_bytes_per_gpu, 62'755'837'952);
  EXPECT_EQ(r.bytes_per_token_gpu, 40'960);
  EXPECT_EQ(r.bytes_per_token_all_gpus, 327'680);
  EXPECT_EQ(r.bytes_per_token_logical, 327'680);
  EXPECT_EQ(r.tokens, 1'532'124);
  EXPECT_EQ(r.pages, 23'939);
  EXPECT_EQ(r.pages_per_seq, 64);
  EXPECT_EQ(r.max_batch, 374);
  ASSERT_TRUE(plan_capacity(o, KvFormat::int8(0), &r).ok());
  EXPECT_EQ(r.bytes_per_token_gpu, 20'800);
  EXPECT_EQ(r.tokens, 3'017'107);
  EXPECT_EQ(r.pages, 47'142);
  EXPECT_EQ(r.max_batch, 736);
  ASSERT_TRUE(plan_capacity(o, KvFormat::int4(1), &r).ok());
  EXPECT_EQ(r.bytes_per_token_gpu, 10'880);
  EXPECT_EQ(r.tokens, 5'767'999);
  EXPECT_EQ(r.max_batch, 1'408);

  std::vector<PlanRow> rows;
  ASSERT_TRUE(plan_all_formats(o, &rows).ok());
  const std::vector<KvFormat> formats = all_kv_formats();
  ASSERT_EQ(rows.size(), formats.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].k_format, formats[i]);
    // Bytes per token come from the real row layout (formats.h), scales included.
    EXPECT_EQ(rows[i].bytes_per_token_gpu, 80 * 2 * kv_row_bytes(formats[i], 128)) << formats[i].name();
  }
}

// llama-2-7b on one 80 GiB GPU, 2 GB reserve, context 3000 (not a page multiple), page_size 16:
//   memory 80 x 2^30 = 85,899,345,920; weights 6,738,415,616 x 2 = 13,476,831,232
//   KV = 85,899,345,920 - 2,000,000,000 - 13,476,831,232 = 70,422,514,688
//   bf16: 32 layers x 32 heads x 512 B = 524,288 B/token; tokens 134,320; pages 8,395;
//         ceil(3000 / 16) = 188 pages per sequence; batch 44
//   int4-g4: row 64 + 16 = 80 B, x 2 x 32 x 32 = 163,840 B; tokens 429,824; pages 26,864; batch 142
TEST(PlannerPlan, Llama2_7bOnOneGpuWithGiBAndReserve) {
  PlanOptions o;
  ASSERT_TRUE(model_preset("llama-2-7b", &o.model).ok());
  ASSERT_TRUE(parse_memory_size("80GiB", &o.gpu_mem_bytes).ok());
  ASSERT_TRUE(parse_memory_size("2GB", &o.reserve_bytes).ok());
  o.gpus = 1;
  o.context = 3000;
  o.page_size = 16;
  PlanRow r;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.kv_bytes_per_gpu, 70'422'514'688);
  EXPECT_EQ(r.bytes_per_token_gpu, 524'288);
  EXPECT_EQ(r.tokens, 134'320);
  EXPECT_EQ(r.pages, 8'395);
  EXPECT_EQ(r.pages_per_seq, 188);
  EXPECT_EQ(r.max_batch, 44);
  ASSERT_TRUE(plan_capacity(o, KvFormat::int4(4), &r).ok());
  EXPECT_EQ(r.bytes_per_token_gpu, 163'840);
  EXPECT_EQ(r.tokens, 429'824);
  EXPECT_EQ(r.pages, 26'864);
  EXPECT_EQ(r.max_batch, 142);
}

// Seed 004 (../shared/seeds/004_77f8adbf545cbb5c.txt, "The Necessity of Quantization"), as that text computes
// it. Its formulas did not survive in our copy of the text; what did: KV bytes per token = 2 (K and V) x 2 (bytes,
// 16-bit) x layers x num_heads x head_dim, the cache shaped [batch, seq_len, 2, num_head, head_dim] (every query
// head, i.e. no GQA); weights = 2 bytes x the parameter count; "exceeds the capacity of a single GPU, necessitating
// at least two GPUs"; "Given a maximum of 2048 tokens per request, the batch size is capped at 3". With
// Llama-70B's 80 layers, 64 heads x 128 = 8192 and 80 GB GPUs:
//   weights 2 x 70e9 = 140 GB > 80 GB (one GPU fails); two GPUs leave 160 - 140 = 20 GB (10 GB per GPU)
//   per token 2 x 2 x 80 x 8192 = 2,621,440 B (1,310,720 per GPU with 32 heads each)
//   tokens 20e9 / 2,621,440 = 7,629; batch at 2048 tokens = floor(7,629 / 2048) = 3
// The real Llama-2-70B has 8 KV heads (GQA): 327,680 B/token, 61,035 tokens, batch 29 (test below).
TEST(PlannerPlan, Seed004Llama70bExample) {
  PlanOptions o;
  o.model.name = "seed004-llama-70b";
  o.model.num_layers = 80;
  o.model.num_kv_heads = 64;  // the text's num_head: every query head cached
  o.model.head_dim = 128;
  ASSERT_TRUE(parse_param_count("70B", &o.model.num_params).ok());
  EXPECT_EQ(o.model.num_params, 70'000'000'000);
  ASSERT_TRUE(parse_memory_size("80GB", &o.gpu_mem_bytes).ok());
  o.weight_bytes_per_param = 2;
  o.reserve_bytes = 0;
  o.context = 2048;
  o.page_size = 16;
  PlanRow r;
  o.gpus = 1;
  const Status one = plan_capacity(o, KvFormat::bf16(), &r);
  EXPECT_EQ(one.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(one, "140.00 GB per GPU do not fit in 80.00 GB")) << one.to_string();
  o.gpus = 2;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.weight_bytes_per_gpu, 70'000'000'000);
  EXPECT_EQ(r.kv_bytes_per_gpu * 2, 20'000'000'000);
  EXPECT_EQ(r.bytes_per_token_all_gpus, 2 * 2 * 80 * 8192);
  EXPECT_EQ(r.bytes_per_token_all_gpus, 2'621'440);
  EXPECT_EQ(r.bytes_per_token_gpu, 1'310'720);
  EXPECT_EQ(r.tokens, 7'629);
  EXPECT_EQ(r.max_batch, 3);

  // The same hardware with the real model's GQA (8 KV heads): 8x the tokens.
  o.model.num_kv_heads = 8;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.bytes_per_token_all_gpus, 327'680);
  EXPECT_EQ(r.tokens, 61'035);
  EXPECT_EQ(r.max_batch, 29);
}

TEST(PlannerPlan, KvHeadsFewerThanGpusAreReplicated) {
  PlanOptions o;
  ASSERT_TRUE(model_preset("smollm2-135m", &o.model).ok());
  ASSERT_TRUE(parse_memory_size("24GB", &o.gpu_mem_bytes).ok());
  o.gpus = 9;  // 9 query heads, 3 KV heads: one query head per GPU, each KV head on 3 GPUs
  PlanRow r;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.kv_heads_per_gpu, 1);
  EXPECT_EQ(r.kv_head_replicas, 3);
  EXPECT_EQ(r.bytes_per_token_gpu, 30 * 1 * 2 * 128);  // head_dim 64: 128 B per bf16 row
  EXPECT_EQ(r.bytes_per_token_all_gpus, 9 * 30 * 2 * 128);
  EXPECT_EQ(r.bytes_per_token_logical, 3 * 30 * 2 * 128);
  o.gpus = 6;  // 9 query heads do not split over 6 GPUs
  const Status s = plan_capacity(o, KvFormat::bf16(), &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_qo_heads 9 is not divisible by gpus 6"), std::string::npos) << s.to_string();
  o.gpus = 3;
  ASSERT_TRUE(plan_capacity(o, KvFormat::bf16(), &r).ok());
  EXPECT_EQ(r.kv_heads_per_gpu, 1);
  EXPECT_EQ(r.kv_head_replicas, 1);
}

TEST(PlannerParse, MemorySizesAndParameterCounts) {
  int64_t b = 0;
  ASSERT_TRUE(parse_memory_size("80GB", &b).ok());
  EXPECT_EQ(b, 80'000'000'000);
  ASSERT_TRUE(parse_memory_size("80GiB", &b).ok());
  EXPECT_EQ(b, 85'899'345'920);
  ASSERT_TRUE(parse_memory_size(" 80 gb ", &b).ok());
  EXPECT_EQ(b, 80'000'000'000);
  ASSERT_TRUE(parse_memory_size("80", &b).ok());
  EXPECT_EQ(b, 80'000'000'000);
  ASSERT_TRUE(parse_memory_size("0.5GiB", &b).ok());
  EXPECT_EQ(b, 536'870'912);
  ASSERT_TRUE(parse_memory_size("512MiB", &b).ok());
  EXPECT_EQ(b, 536'870'912);
  ASSERT_TRUE(parse_memory_size("1e9B", &b).ok());
  EXPECT_EQ(b, 1'000'000'000);
  int64_t p = 0;
  ASSERT_TRUE(parse_param_count("70B", &p).ok());
  EXPECT_EQ(p, 70'000'000'000);
  ASSERT_TRUE(parse_param_count("135M", &p).ok());
  EXPECT_EQ(p, 135'000'000);
  ASSERT_TRUE(parse_param_count("6.74e9", &p).ok());
  EXPECT_EQ(p, 6'740'000'000);
  ASSERT_TRUE(parse_param_count("68976648192", &p).ok());
  EXPECT_EQ(p, 68'976'648'192);
}

TEST(PlannerErrors, BadTextNamesTheValue) {
  int64_t v = 0;
  for (const char* bad : {"", "GB", "-1GB", "80XB", "80 G B", "nan", "1e"}) {
    const Status s = parse_memory_size(bad, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(mentions(s, std::string("'") + bad + "'")) << s.to_string();
  }
  for (const char* bad : {"", "70X", "-5B", "0", "seventy"}) {
    const Status s = parse_param_count(bad, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(mentions(s, std::string("'") + bad + "'")) << s.to_string();
  }
  ModelShape m;
  const Status s = model_preset("llama-4-1t", &m);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(s, "'llama-4-1t'") && mentions(s, "llama-2-70b")) << s.to_string();
}

TEST(PlannerErrors, BadOptionsNameTheValue) {
  PlanOptions base;
  ASSERT_TRUE(model_preset("llama-3-8b", &base.model).ok());
  base.gpu_mem_bytes = 80'000'000'000;
  PlanRow r;
  ASSERT_TRUE(plan_capacity(base, KvFormat::int8(32), &r).ok());

  auto expect_error = [&](const PlanOptions& o, const std::string& text, KvFormat f = KvFormat::bf16()) {
    const Status s = plan_capacity(o, f, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_TRUE(mentions(s, text)) << s.to_string();
  };
  PlanOptions o = base;
  o.gpus = 3;  // 8 KV heads
  expect_error(o, "num_kv_heads 8 and gpus 3");
  o.model.num_qo_heads = 0;  // unknown query heads: only the KV split is checked
  expect_error(o, "num_kv_heads 8 and gpus 3");
  o = base;
  o.gpus = 64;  // 32 query heads
  expect_error(o, "num_qo_heads 32 is not divisible by gpus 64");
  o = base;
  o.gpus = 0;
  expect_error(o, "gpus 0");
  o = base;
  o.model.head_dim = 96;
  expect_error(o, "head_dim 96");
  o = base;
  o.model.num_layers = 0;
  expect_error(o, "num_layers 0");
  o = base;
  o.context = 0;
  expect_error(o, "context 0");
  o = base;
  o.page_size = 48;
  expect_error(o, "page_size 48");
  o = base;
  o.weight_bytes_per_param = 0;
  expect_error(o, "weight bytes per parameter");
  o = base;
  o.gpu_mem_bytes = 10'000'000'000;  // 16.06 GB of bf16 weights
  expect_error(o, "16.06 GB per GPU do not fit in 10.00 GB");
  o = base;
  o.reserve_bytes = 70'000'000'000;  // 80 - 70 - 16.06 < 0
  expect_error(o, "no memory left for the KV cache");
  o = base;
  expect_error(o, "int4 group count 3", KvFormat{KvKind::kINT4, 0, 3});
}

}  // namespace
}  // namespace qdec
