// Bad input to decode_attention returns an error naming the offending value and launches nothing.
// Validation runs before any device work, so these tests run without a GPU (forced split counts keep the
// planner off the device); the "launches nothing" check needs one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attention/decode_timeline.h"
#include "attention/split_plan.h"
#include "gpu_util.h"
#include "qdec/attention.h"
#include "runtime/cuda_check.h"

namespace qdec {
namespace {

// A valid problem with fake (never dereferenced) device pointers.
struct Fixture {
  std::vector<int32_t> lens{5, 100};
  alignas(16) uint8_t fake[64] = {};
  DecodeAttentionParams p;
  Fixture() {
    p.batch = 2;
    p.num_qo_heads = 8;
    p.num_kv_heads = 2;
    p.q_dtype = DType::kBF16;
    const ContiguousKvLayout kl{{KvFormat::int4(4), 128, 64}, 2, 128, 2};
    set_contiguous_cache(&p, kl, fake, kl, fake);
    p.seq_lens = reinterpret_cast<const int32_t*>(fake);
    p.seq_lens_host = lens.data();
    p.q = fake;
    p.o = fake + 16;
    p.num_splits = 1;
  }
};

void expect_error(const std::function<void(Fixture&)>& mutate, StatusCode code, const std::string& needle) {
  Fixture f;
  mutate(f);
  const Status s = decode_attention(f.p, nullptr);
  EXPECT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
}

TEST(DecodeErrors, GroupSizeNotDividing) {
  expect_error([](Fixture& f) { f.p.num_qo_heads = 7; }, StatusCode::kInvalidArgument, "num_qo_heads 7");
}
TEST(DecodeErrors, GroupSizeTooLarge) {
  expect_error([](Fixture& f) { f.p.num_qo_heads = 34; }, StatusCode::kUnsupported, "group_size 17");
}
TEST(DecodeErrors, UnsupportedHeadDim) {
  expect_error([](Fixture& f) { f.p.head_dim = 96; }, StatusCode::kUnsupported, "head_dim 96");
  expect_error([](Fixture& f) { f.p.head_dim = 256; }, StatusCode::kUnsupported, "head_dim 256");
}
TEST(DecodeErrors, SeqLenZero) {
  expect_error([](Fixture& f) { f.lens[1] = 0; }, StatusCode::kInvalidArgument, "seq_lens[1] = 0");
}
TEST(DecodeErrors, SeqLenBeyondTmax) {
  expect_error([](Fixture& f) { f.lens[0] = 129; }, StatusCode::kInvalidArgument, "seq_lens[0] = 129");
}
TEST(DecodeErrors, CtaWarps) {
  expect_error([](Fixture& f) { f.p.cta_warps = -1; }, StatusCode::kInvalidArgument, "cta_warps -1");
  // The fixture is int4-g4 at head_dim 128, group_size 4: 8 (base), 4 (small pages) and 16 are compiled.
  expect_error([](Fixture& f) { f.p.cta_warps = 12; }, StatusCode::kUnsupported, "cta_warps 12 is not compiled");
  expect_error([](Fixture& f) { f.p.cta_warps = 32; }, StatusCode::kUnsupported, "supported: 0 (automatic), 8, 4, 16");
  // 16 warps: int4 V caches with one head tile only.
  expect_error(
      [](Fixture& f) {
        f.p.num_qo_heads = 32;  // group_size 16
        f.p.cta_warps = 16;
      },
      StatusCode::kUnsupported, "group_size 16; supported: 0 (automatic), 8, 4");
  expect_error(
      [](Fixture& f) {
        const ContiguousKvLayout kl{{KvFormat::bf16(), 128, 64}, 2, 128, 2};
        set_contiguous_cache(&f.p, kl, f.fake, kl, f.fake);
        f.p.cta_warps = 16;
      },
      StatusCode::kUnsupported,
      "cta_warps 16 is not compiled for (bf16, bf16) at head_dim 128 and group_size 4; "
      "supported: 0 (automatic), 8, 4");
  expect_error(
      [](Fixture& f) {
        const ContiguousKvLayout kl{{KvFormat::int4(4), 64, 64}, 2, 128, 2};
        set_contiguous_cache(&f.p, kl, f.fake, kl, f.fake);
        f.p.cta_warps = 8;
      },
      StatusCode::kUnsupported, "at head_dim 64 and group_size 4; supported: 0 (automatic), 4");
}
TEST(DecodeErrors, NullPointers) {
  expect_error([](Fixture& f) { f.p.q = nullptr; }, StatusCode::kInvalidArgument, "q is null");
  expect_error([](Fixture& f) { f.p.o = nullptr; }, StatusCode::kInvalidArgument, "o is null");
  expect_error([](Fixture& f) { f.p.k_cache = nullptr; }, StatusCode::kInvalidArgument, "k_cache is null");
  expect_error([](Fixture& f) { f.p.v_cache = nullptr; }, StatusCode::kInvalidArgument, "v_cache is null");
  expect_error([](Fixture& f) { f.p.seq_lens = nullptr; }, StatusCode::kInvalidArgument, "seq_lens is null");
  expect_error([](Fixture& f) { f.p.seq_lens_host = nullptr; }, StatusCode::kInvalidArgument, "seq_lens_host is null");
}
TEST(DecodeErrors, MisalignedPointers) {
  expect_error([](Fixture& f) { f.p.q = f.fake + 2; }, StatusCode::kInvalidArgument, "q is not 16-byte aligned");
  expect_error([](Fixture& f) { f.p.k_cache = f.fake + 8; }, StatusCode::kInvalidArgument,
               "k_cache is not 16-byte aligned");
  expect_error([](Fixture& f) { f.p.o = f.fake + 4; }, StatusCode::kInvalidArgument, "o is not 16-byte aligned");
}
TEST(DecodeErrors, MismatchedFormats) {
  expect_error(
      [](Fixture& f) {
        f.p.k_format = KvFormat::bf16();
        f.p.v_format = KvFormat::int8(0);
      },
      StatusCode::kInvalidArgument, "k_format bf16 and v_format int8");
  expect_error(
      [](Fixture& f) {
        f.p.k_format = f.p.v_format = KvFormat::fp16();
        f.p.q_dtype = DType::kBF16;
      },
      StatusCode::kInvalidArgument, "q_dtype bf16");
  expect_error(
      [](Fixture& f) {
        f.p.k_format = KvFormat::int4(1);
        f.p.v_format = KvFormat::int8(32);
      },
      StatusCode::kUnsupported, "(int4, int8-g32)");
}
TEST(DecodeErrors, Int4EightGroupsNeedsHeadDim128) {
  expect_error(
      [](Fixture& f) {
        f.p.head_dim = 64;
        f.p.k_format = f.p.v_format = KvFormat::int4(8);
        f.p.k_page_stride_bytes = f.p.v_page_stride_bytes = 1 << 20;
      },
      StatusCode::kUnsupported, "(int4-g8, int4-g8) at head_dim 64");
}
TEST(DecodeErrors, BadPageSize) {
  expect_error([](Fixture& f) { f.p.page_size = 48; }, StatusCode::kInvalidArgument, "page_size 48");
  expect_error([](Fixture& f) { f.p.page_size = 8; }, StatusCode::kInvalidArgument, "page_size 8");
}
TEST(DecodeErrors, BadSplitsAndStride) {
  expect_error([](Fixture& f) { f.p.num_splits = -1; }, StatusCode::kInvalidArgument, "num_splits -1");
  expect_error([](Fixture& f) { f.p.k_page_stride_bytes = 100; }, StatusCode::kInvalidArgument,
               "k_page_stride_bytes 100");
  expect_error([](Fixture& f) { f.p.batch = 0; }, StatusCode::kInvalidArgument, "batch 0");
  expect_error([](Fixture& f) { f.p.sm_scale = -1.f; }, StatusCode::kInvalidArgument, "sm_scale");
}
TEST(DecodeErrors, MoreBadValues) {
  expect_error([](Fixture& f) { f.p.batch = 70000; }, StatusCode::kInvalidArgument, "batch 70000");
  expect_error(
      [](Fixture& f) {
        f.p.batch = 65535;
        f.p.num_kv_heads = 4096;
        f.p.num_qo_heads = 65536;  // group_size 16
      },
      StatusCode::kInvalidArgument, "batch * num_qo_heads = 4294901760 exceeds 2147483647");
  expect_error([](Fixture& f) { f.p.v_page_stride_bytes = 32; }, StatusCode::kInvalidArgument,
               "v_page_stride_bytes 32");
  expect_error([](Fixture& f) { f.p.num_pages = 3; }, StatusCode::kInvalidArgument, "num_pages 3");
  expect_error([](Fixture& f) { f.p.max_pages_per_seq = 0; }, StatusCode::kInvalidArgument, "max_pages_per_seq 0");
  expect_error([](Fixture& f) { f.p.lse = reinterpret_cast<float*>(f.fake + 2); }, StatusCode::kInvalidArgument,
               "lse is not 4-byte aligned");
  expect_error([](Fixture& f) { f.p.block_table = reinterpret_cast<const int32_t*>(f.fake + 1); },
               StatusCode::kInvalidArgument, "block_table is not 4-byte aligned");
  expect_error([](Fixture& f) { f.p.seq_lens = reinterpret_cast<const int32_t*>(f.fake + 2); },
               StatusCode::kInvalidArgument, "seq_lens is not 4-byte aligned");
}
TEST(DecodeErrors, WorkspaceMisaligned) {
  expect_error(
      [](Fixture& f) {
        f.p.num_splits = 2;
        f.p.workspace = f.fake + 8;
        f.p.workspace_bytes = size_t(1) << 30;
      },
      StatusCode::kInvalidArgument, "workspace is not 16-byte aligned");
}
TEST(DecodeErrors, WorkspaceTooSmall) {
  expect_error([](Fixture& f) { f.p.num_splits = 4; }, StatusCode::kOutOfMemory, "workspace of 0 bytes");
}

// On a GPU: a rejected call leaves the output untouched (nothing was launched).
TEST(DecodeErrors, RejectedCallLaunchesNothing) {
  QDEC_SKIP_WITHOUT_GPU();
  test::DeviceBuffer out(2 * 8 * 128 * 2);
  QDEC_CUDA_CHECK(cudaMemset(out.get(), 0x5A, out.bytes()));
  Fixture f;
  f.p.o = out.get();
  f.lens[0] = 0;  // invalid
  EXPECT_FALSE(decode_attention(f.p, nullptr).ok());
  QDEC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> host(out.bytes());
  QDEC_CUDA_CHECK(cudaMemcpy(host.data(), out.get(), host.size(), cudaMemcpyDeviceToHost));
  for (uint8_t x : host) ASSERT_EQ(x, 0x5A);
}

// The split planner (host only, no GPU): the counts its estimate picks on an H200 (132 SMs) for the benchmark's
// shapes, which the split sweep of docs/attention.md v21 measured among the fastest, and its bounds.
TEST(DecodeSplitPlan, BenchmarkShapesOnH200) {
  using attention::choose_splits;
  // (sequence x KV head) pairs, cap, max_len, stage tokens. 4-warp CTAs (64-token stages), 4 per SM: int4 or
  // head_dim 64.
  EXPECT_EQ(choose_splits(8, 132, 4, 131072, 64), 64);  // long 128K int4: 64 x 32 stages, not 60 x 35
  EXPECT_EQ(choose_splits(8, 132, 4, 32768, 64), 32);   // long 32K int4
  EXPECT_EQ(choose_splits(32, 132, 4, 8192, 64), 8);    // seed 000 B = 32 int4
  EXPECT_EQ(choose_splits(128, 132, 4, 8192, 64), 4);   // B = 128 int4
  EXPECT_EQ(choose_splits(256, 132, 4, 8192, 64), 2);   // B = 256 int4
  EXPECT_EQ(choose_splits(512, 132, 4, 8192, 64), 1);   // B = 512
  EXPECT_EQ(choose_splits(192, 132, 4, 4096, 64), 2);   // SmolLM2 (64 x 3 KV heads, head_dim 64)
  // 8-bit caches at head_dim 64 beyond one round (s15c): partly filled SMs at r / 4 of a full one. SmolLM2 family at
  // B = 256 (768 pairs): 2 splits (112.7 us measured; unsplit 137.2), where the fitted rates keep 1.
  EXPECT_EQ(choose_splits(768, 132, 4, 4096, 64), 1);
  EXPECT_EQ(choose_splits(768, 132, 4, 4096, 64, /*linear_partial=*/true), 2);
  EXPECT_EQ(choose_splits(1056, 132, 4, 4096, 64, true), 1);  // B = 352: two whole rounds unsplit
  // 8- and 16-bit caches at head_dim 128: one 8-warp CTA (128-token stages) per SM, as 2 CTAs of 4 warps were
  // (v21's counts, 33 / 32 / 8 / 4 / 2 / 1 splits, halved: B = 128 needs no split and no merge).
  EXPECT_EQ(choose_splits(8, 132, 1, 131072, 128), 16);  // long 128K bf16 / int8
  EXPECT_EQ(choose_splits(8, 132, 1, 32768, 128), 16);   // long 32K
  EXPECT_EQ(choose_splits(32, 132, 1, 8192, 128), 4);    // B = 32
  EXPECT_EQ(choose_splits(64, 132, 1, 8192, 128), 2);    // B = 64
  EXPECT_EQ(choose_splits(128, 132, 1, 8192, 128), 1);   // B = 128
  EXPECT_EQ(choose_splits(256, 132, 1, 8192, 128), 1);   // B = 256
  // v21's 4-warp plan for them (cap 2), kept for the A/B build (QDEC_DECODE_FOUR_WARPS).
  EXPECT_EQ(choose_splits(8, 132, 2, 131072, 64), 33);
  EXPECT_EQ(choose_splits(128, 132, 2, 8192, 64), 2);
}

// The cap of the 8-warp int4 kernels from the DRAM bandwidth (session 19), and the plans it gives on 132 SMs.
TEST(DecodeSplitPlan, Int4CapFromBandwidth) {
  using attention::choose_splits;
  using attention::int4_split_ctas_per_sm;
  EXPECT_EQ(int4_split_ctas_per_sm(4814.0, 132), 2);  // H200: 32.8 GB/s reachable per SM
  EXPECT_EQ(int4_split_ctas_per_sm(3352.0, 132), 1);  // H100 SXM: 22.9
  EXPECT_EQ(int4_split_ctas_per_sm(2039.0, 108), 1);  // A100 80GB: 17.0
  EXPECT_EQ(int4_split_ctas_per_sm(0.0, 132), 2);     // unknown bandwidth: the H200's plan
  EXPECT_EQ(int4_split_ctas_per_sm(4000.0, 0), 2);
  // H200 (cap 2, 128-token stages): the plans of docs/attention.md v22.
  EXPECT_EQ(choose_splits(8, 132, 2, 131072, 128), 32);  // long 128K int4: 32 x 8
  EXPECT_EQ(choose_splits(8, 132, 2, 32768, 128), 32);   // long 32K
  EXPECT_EQ(choose_splits(32, 132, 2, 8192, 128), 8);    // B = 32
  EXPECT_EQ(choose_splits(64, 132, 2, 8192, 128), 4);    // B = 64
  // H100 (cap 1): the counts the session 19 sweep measured fastest at long context and B = 64.
  EXPECT_EQ(choose_splits(8, 132, 1, 131072, 128), 16);
  EXPECT_EQ(choose_splits(8, 132, 1, 32768, 128), 16);
  EXPECT_EQ(choose_splits(64, 132, 1, 8192, 128), 2);
}

// One 16-warp CTA per SM for long int4-V sequences (session 36): floor(sms / ctas) splits once each split holds
// >= 8192 tokens of the longest sequence and >= 3/4 of the SMs are busy; 0 (the 8-warp plan stays) otherwise.
TEST(DecodeSplitPlan, WideSplitCount) {
  using attention::wide_split_count;
  EXPECT_EQ(wide_split_count(8, 132, 131072), 16);  // long 128K: 128 CTAs of 8192 tokens
  EXPECT_EQ(wide_split_count(8, 132, 262144), 16);
  EXPECT_EQ(wide_split_count(8, 132, 131071), 0);  // 8191 tokens per split
  EXPECT_EQ(wide_split_count(8, 132, 98304), 0);   // 6144: measured no faster
  EXPECT_EQ(wide_split_count(8, 132, 32768), 0);
  EXPECT_EQ(wide_split_count(4, 132, 1 << 20), 33);
  EXPECT_EQ(wide_split_count(40, 132, 1 << 20), 3);  // 120 CTAs
  EXPECT_EQ(wide_split_count(50, 132, 1 << 20), 2);  // 100 CTAs: 3/4 of the SMs
  EXPECT_EQ(wide_split_count(45, 132, 1 << 20), 0);  // 2 splits: 90 CTAs, under 3/4 of the SMs
  EXPECT_EQ(wide_split_count(66, 132, 1 << 20), 2);
  EXPECT_EQ(wide_split_count(67, 132, 1 << 20), 0);  // one split: the unsplit rule's case
  EXPECT_EQ(wide_split_count(133, 132, 1 << 20), 0);
  EXPECT_EQ(wide_split_count(0, 132, 1 << 20), 0);
  EXPECT_EQ(wide_split_count(8, 0, 1 << 20), 0);
}

// Programmatic dependent launches are dropped (stream order) for split grids of one wave of several CTAs per SM only.
TEST(DecodeSplitPlan, ProgrammaticLaunchPays) {
  using attention::programmatic_launch_pays;
  EXPECT_FALSE(programmatic_launch_pays(8, 256, 132, 2));   // seed000 B = 32 int4: 256 CTAs, 2 per SM fit
  EXPECT_FALSE(programmatic_launch_pays(2, 384, 132, 5));   // the SmolLM2 shape: 384 CTAs of 4 warps
  EXPECT_FALSE(programmatic_launch_pays(2, 264, 132, 2));   // exactly one full wave
  EXPECT_TRUE(programmatic_launch_pays(1, 256, 132, 2));    // unsplit (B = 256): keeps PDL
  EXPECT_TRUE(programmatic_launch_pays(4, 128, 132, 2));    // at most one CTA per SM (padded instead)
  EXPECT_TRUE(programmatic_launch_pays(16, 132, 132, 1));   // one per SM, exactly
  EXPECT_TRUE(programmatic_launch_pays(2, 265, 132, 2));    // more than one wave
  EXPECT_TRUE(programmatic_launch_pays(8, 4096, 132, 16));  // many CTAs, several waves
}

// The shared memory that keeps a programmatic dependent launch at one CTA per SM: one CTA with the per-CTA
// reservation fits, two do not, in 128-byte steps.
TEST(DecodeSplitPlan, OneCtaPerSmSmem) {
  using attention::one_cta_per_sm_smem;
  for (const auto& [per_sm, reserved] : {std::pair{233472, 1024}, std::pair{167936, 1024}, std::pair{102400, 0}}) {
    const int pad = one_cta_per_sm_smem(per_sm, reserved);
    EXPECT_EQ(pad % 128, 0) << per_sm;
    EXPECT_LE(pad + reserved, per_sm) << per_sm;
    EXPECT_GT(2 * (pad + reserved), per_sm) << per_sm;
    EXPECT_LT(pad - 128 + reserved, per_sm / 2 + 1) << per_sm;  // the smallest such multiple of 128
  }
  EXPECT_EQ(one_cta_per_sm_smem(233472, 1024), 115840);  // sm_90: 228 KB per SM, 1 KB reserved per CTA
}

// The automatic plan of the long shapes (B = 1, 32 query / 8 KV heads, head_dim 128, int4 cache, 64-token pages) on
// this device, through the public queries (nothing is launched): 16 warps and wide_split_count's splits at 128K where
// the 8-warp int4 plan is two CTAs per SM (int4_split_ctas_per_sm), the 8-warp plan at 32K and elsewhere.
TEST(DecodeSplitPlan, WidePlanOnThisDevice) {
  QDEC_SKIP_WITHOUT_GPU();
  DeviceInfo dev;
  ASSERT_TRUE(current_device_info(&dev).ok());
  for (int len : {32768, 131072}) {
    Fixture f;
    f.lens = {len};
    f.p.batch = 1;
    f.p.num_qo_heads = 32;
    f.p.num_kv_heads = 8;
    const ContiguousKvLayout kl{{KvFormat::int4(1), 128, 64}, 1, len, 8};
    set_contiguous_cache(&f.p, kl, f.fake, kl, f.fake);
    f.p.seq_lens_host = f.lens.data();
    f.p.num_splits = 0;
    int splits = 0, warps = 0;
    ASSERT_TRUE(decode_attention_num_splits(f.p, &splits).ok());
    ASSERT_TRUE(decode_attention_cta_warps(f.p, &warps).ok());
    const bool two_per_sm = attention::int4_split_ctas_per_sm(dev.dram_gbps, dev.sm_count) == 2;
    const int wide = attention::wide_split_count(8, dev.sm_count, len);
    std::printf("note: %s, %d SMs, %.0f GB/s: len %d -> %d splits x %d warps\n", dev.name.c_str(), dev.sm_count,
                dev.dram_gbps, len, splits, warps);
    if (two_per_sm && wide > 0) {
      EXPECT_EQ(warps, 16) << "len " << len;
      EXPECT_EQ(splits, wide) << "len " << len;
    } else {
      EXPECT_EQ(warps, 8) << "len " << len;
      EXPECT_GE(splits, 2) << "len " << len;
    }
  }
}

// The phase-timeline probe outside a QDEC_DECODE_TIMELINE build: kUnsupported naming the CMake option, no CUDA call;
// a read into null tables is rejected in any build.
TEST(DecodeErrors, TimelineOutsideTheProbeBuild) {
  std::vector<unsigned long long> att, merge;
  EXPECT_EQ(attention::decode_timeline(false, nullptr, &merge).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(attention::decode_timeline(false, &att, nullptr).code(), StatusCode::kInvalidArgument);
  if (attention::decode_timeline_built()) GTEST_SKIP() << "this library is a QDEC_DECODE_TIMELINE build";
  for (const bool reset : {true, false}) {
    const Status s = attention::decode_timeline(reset, &att, &merge);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << "reset " << reset;
    EXPECT_NE(s.message().find("-DQDEC_DECODE_TIMELINE=ON"), std::string::npos) << s.message();
  }
}

TEST(DecodeSplitPlan, Bounds) {
  using attention::choose_splits;
  EXPECT_EQ(choose_splits(1, 132, 4, 1, 64), 1);
  EXPECT_EQ(choose_splits(1, 132, 4, 255, 64), 1);  // splits keep >= 4 stages of 64 tokens
  EXPECT_EQ(choose_splits(65535 * 8, 132, 4, 8192, 64), 1);
  for (int len : {256, 1000, 4096, 100000, 1 << 20})
    for (int ctas : {1, 7, 64, 1000}) {
      for (int stage : {64, 128}) {
        const int s = choose_splits(ctas, 132, stage == 64 ? 4 : 1, len, stage);
        EXPECT_GE(s, 1) << "ctas " << ctas << " len " << len << " stage " << stage;
        EXPECT_LE(s, std::max(1, std::min(256, len / (4 * stage))))
            << "ctas " << ctas << " len " << len << " stage " << stage;
      }
    }
}

}  // namespace
}  // namespace qdec
