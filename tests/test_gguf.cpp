// GGUF reader tests: files built in memory by a small writer (every metadata type, every dequantized tensor
// type with hand-computed values), each documented validation error, truncation at every byte, and the real
// SmolLM2 file when scripts/fetch_model.sh has put it in models/.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "qdec/formats.h"
#include "qdec/gguf.h"
#include "test_util.h"

namespace qdec {
namespace {

// ---- a tiny GGUF writer --------------------------------------------------------------------------------
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b.insert(b.end(), raw, raw + sizeof(T));
  }
  void str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void append(const std::vector<uint8_t>& more) { b.insert(b.end(), more.begin(), more.end()); }
};

constexpr uint32_t code(GgufValueType t) {
  return static_cast<uint32_t>(t);
}
constexpr uint32_t code(GgmlType t) {
  return static_cast<uint32_t>(t);
}

struct TestTensor {
  TestTensor(std::string n, std::vector<uint64_t> d, uint32_t t, std::vector<uint8_t> bytes)
      : name(std::move(n)), dims(std::move(d)), type(t), data(std::move(bytes)) {}
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // written instead of the laid-out offset
};

struct TestFile {
  uint32_t magic = GgufFile::kMagic;
  uint32_t version = 3;
  Bytes kv;
  uint64_t num_kv = 0;
  std::optional<uint64_t> kv_count;      // written instead of num_kv
  std::optional<uint64_t> tensor_count;  // written instead of tensors.size()
  uint32_t alignment = 32;               // layout of the data section (write general.alignment to change it)
  std::vector<TestTensor> tensors;

  // Key and type; the caller appends the value to kv.
  Bytes& key(std::string_view k, GgufValueType type) {
    kv.str(k);
    kv.put<uint32_t>(code(type));
    ++num_kv;
    return kv;
  }
  template <typename V>
  void scalar(std::string_view k, GgufValueType type, V v) {
    key(k, type).put<V>(v);
  }

  std::vector<uint8_t> build() const {
    Bytes out;
    out.put<uint32_t>(magic);
    out.put<uint32_t>(version);
    out.put<uint64_t>(tensor_count.value_or(tensors.size()));
    out.put<uint64_t>(kv_count.value_or(num_kv));
    out.append(kv.b);
    // Data layout: each tensor at the next multiple of the alignment, the file ending with the last one.
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TestTensor& t : tensors) {
      next = (next + alignment - 1) / alignment * alignment;
      offsets.push_back(next);
      next += t.data.size();
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TestTensor& t = tensors[i];
      out.str(t.name);
      out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out.put<uint64_t>(d);
      out.put<uint32_t>(t.type);
      out.put<uint64_t>(t.offset.value_or(offsets[i]));
    }
    if (!tensors.empty()) {
      while (out.b.size() % alignment != 0) out.b.push_back(0);
      const size_t data_start = out.b.size();
      for (size_t i = 0; i < tensors.size(); ++i) {
        out.b.resize(data_start + offsets[i], 0);
        out.append(tensors[i].data);
      }
    }
    return out.b;
  }
};

Status parse(const std::vector<uint8_t>& bytes, GgufFile* f) {
  return GgufFile::parse(bytes.data(), bytes.size(), f);
}

// The parse fails and its message contains every one of `parts`.
::testing::AssertionResult ParseFails(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> parts) {
  GgufFile f;
  const Status s = parse(bytes, &f);
  if (s.ok()) return ::testing::AssertionFailure() << "parse succeeded";
  if (s.code() != StatusCode::kInvalidArgument) return ::testing::AssertionFailure() << "code: " << s.to_string();
  for (const char* p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks '" << p << "': " << s.to_string();
    }
  }
  if (f.num_metadata() != 0 || !f.tensors().empty()) return ::testing::AssertionFailure() << "output not left empty";
  return ::testing::AssertionSuccess();
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
void put_half(std::vector<uint8_t>& b, size_t at, uint16_t bits) {
  std::memcpy(b.data() + at, &bits, 2);
}

// ---- hand-built blocks, with the values they must dequantize to --------------------------------------------
struct Block {
  std::vector<uint8_t> bytes;
  std::vector<float> expected;
};

// Q4_0: d = 0.5 (fp16 0x3800); byte j = j (low) | (15 - j) << 4 (high): x[j] = (j - 8) / 2, x[j + 16] = (7 - j) / 2.
Block q4_0_block() {
  Block b{std::vector<uint8_t>(18), std::vector<float>(32)};
  put_half(b.bytes, 0, 0x3800);
  for (int j = 0; j < 16; ++j) {
    b.bytes[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    b.expected[j] = (j - 8) * 0.5f;
    b.expected[j + 16] = (7 - j) * 0.5f;
  }
  return b;
}

// Q4_1: d = 0.25 (0x3400), m = -1 (0xBC00); byte j = j | (j ^ 5) << 4: x[j] = j / 4 - 1, x[j + 16] = (j ^ 5) / 4 - 1.
Block q4_1_block() {
  Block b{std::vector<uint8_t>(20), std::vector<float>(32)};
  put_half(b.bytes, 0, 0x3400);
  put_half(b.bytes, 2, 0xBC00);
  for (int j = 0; j < 16; ++j) {
    b.bytes[4 + j] = static_cast<uint8_t>(j | ((j ^ 5) << 4));
    b.expected[j] = j * 0.25f - 1.0f;
    b.expected[j + 16] = (j ^ 5) * 0.25f - 1.0f;
  }
  return b;
}

// Q8_0: d = 2 (0x4000); q[j] = 4 j - 64 except the extremes q[0] = -128, q[31] = 127: x = 2 q.
Block q8_0_block() {
  Block b{std::vector<uint8_t>(34), std::vector<float>(32)};
  put_half(b.bytes, 0, 0x4000);
  for (int j = 0; j < 32; ++j) {
    const int q = j == 0 ? -128 : j == 31 ? 127 : 4 * j - 64;
    b.bytes[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    b.expected[j] = 2.0f * q;
  }
  return b;
}

// Q6_K (ql[128] qh[64] scales[16] d): d = 0.5, every scale 1 except scales[1] = -2 (values 16..31) and
// scales[15] = 3 (values 240..255); ql and qh zero (q = -32) except the bytes set below, each decoded by hand.
Block q6_k_block() {
  Block b{std::vector<uint8_t>(210, 0), std::vector<float>(256)};
  uint8_t* ql = b.bytes.data();
  uint8_t* qh = b.bytes.data() + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(b.bytes.data() + 192);
  put_half(b.bytes, 208, 0x3800);
  for (int s = 0; s < 16; ++s) sc[s] = 1;
  sc[1] = -2;
  sc[15] = 3;
  for (int i = 0; i < 256; ++i) b.expected[i] = 0.5f * -32.0f;
  for (int i = 16; i < 32; ++i) b.expected[i] = 0.5f * -2.0f * -32.0f;
  for (int i = 240; i < 256; ++i) b.expected[i] = 0.5f * 3.0f * -32.0f;
  // ql[0] = 0x5A: value 0 low bits 0xA, value 64 low bits 0x5. ql[32] = 0x0F: value 32 low bits 0xF.
  // qh[0] = 0b10'01'11'00: high bits of values 0, 32, 64, 96 are 0, 3, 1, 2.
  ql[0] = 0x5A;
  ql[32] = 0x0F;
  qh[0] = 0x9C;
  b.expected[0] = 0.5f * (10 - 32);              // q = 0xA
  b.expected[32] = 0.5f * ((15 | 3 << 4) - 32);  // q = 63
  b.expected[64] = 0.5f * ((5 | 1 << 4) - 32);   // q = 21
  b.expected[96] = 0.5f * ((0 | 2 << 4) - 32);   // q = 32: exactly 0
  // Value 17 (first half, first quarter): low bits in ql[17], scale -2.
  ql[17] = 0x03;
  b.expected[17] = 0.5f * -2.0f * (3 - 32);
  // Value 255 (second half, last quarter, l = 31): high nibble of ql[64 + 32 + 31], bits 6..7 of qh[32 + 31].
  ql[127] = 0xF0;
  qh[63] = 0xC0;
  b.expected[255] = 0.5f * 3.0f * (63 - 32);
  return b;
}

Block repeat(const Block& one, int times) {
  Block b;
  for (int i = 0; i < times; ++i) {
    b.bytes.insert(b.bytes.end(), one.bytes.begin(), one.bytes.end());
    b.expected.insert(b.expected.end(), one.expected.begin(), one.expected.end());
  }
  return b;
}

// A file with metadata of every type and one tensor of every dequantized type.
TestFile full_file() {
  TestFile f;
  f.scalar<uint8_t>("t.u8", GgufValueType::kUint8, 250);
  f.scalar<int8_t>("t.i8", GgufValueType::kInt8, -128);
  f.scalar<uint16_t>("t.u16", GgufValueType::kUint16, 65535);
  f.scalar<int16_t>("t.i16", GgufValueType::kInt16, -32768);
  f.scalar<uint32_t>("t.u32", GgufValueType::kUint32, 4000000000u);
  f.scalar<int32_t>("t.i32", GgufValueType::kInt32, -2000000000);
  f.scalar<uint64_t>("t.u64", GgufValueType::kUint64, 0xFEDCBA9876543210ull);
  f.scalar<int64_t>("t.i64", GgufValueType::kInt64, std::numeric_limits<int64_t>::min());
  f.scalar<float>("t.f32", GgufValueType::kFloat32, -1.5f);
  f.scalar<double>("t.f64", GgufValueType::kFloat64, 1e300);
  f.scalar<uint8_t>("t.bool", GgufValueType::kBool, 1);
  f.key("t.str", GgufValueType::kString).str("llama");
  f.key("t.empty_str", GgufValueType::kString).str("");
  {
    Bytes& b = f.key("t.arr_i32", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kInt32));
    b.put<uint64_t>(3);
    for (int32_t v : {-1, 0, 7}) b.put<int32_t>(v);
  }
  {
    Bytes& b = f.key("t.arr_f64", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kFloat64));
    b.put<uint64_t>(2);
    b.put<double>(0.25);
    b.put<double>(-3.0);
  }
  {
    Bytes& b = f.key("t.arr_bool", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kBool));
    b.put<uint64_t>(3);
    for (uint8_t v : {1, 0, 1}) b.put<uint8_t>(v);
  }
  {
    Bytes& b = f.key("t.arr_u8_empty", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kUint8));
    b.put<uint64_t>(0);
  }
  {
    Bytes& b = f.key("t.arr_str", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kString));
    b.put<uint64_t>(3);
    for (const char* s : {"<s>", "", "h\xC3\xA9llo"}) b.str(s);
  }
  {
    // [["a", "bc"], [], ["def"]]
    Bytes& b = f.key("t.arr_arr_str", GgufValueType::kArray);
    b.put<uint32_t>(code(GgufValueType::kArray));
    b.put<uint64_t>(3);
    b.put<uint32_t>(code(GgufValueType::kString));
    b.put<uint64_t>(2);
    b.str("a");
    b.str("bc");
    b.put<uint32_t>(code(GgufValueType::kString));
    b.put<uint64_t>(0);
    b.put<uint32_t>(code(GgufValueType::kString));
    b.put<uint64_t>(1);
    b.str("def");
  }
  // The remaining scalar types as arrays too.
  auto arr = [&](const char* key, GgufValueType t, auto... vals) {
    Bytes& b = f.key(key, GgufValueType::kArray);
    b.put<uint32_t>(code(t));
    b.put<uint64_t>(sizeof...(vals));
    (b.put(vals), ...);
  };
  arr("t.arr_u8", GgufValueType::kUint8, uint8_t{1}, uint8_t{255});
  arr("t.arr_i8", GgufValueType::kInt8, int8_t{-1}, int8_t{127});
  arr("t.arr_u16", GgufValueType::kUint16, uint16_t{65535});
  arr("t.arr_i16", GgufValueType::kInt16, int16_t{-300}, int16_t{300});
  arr("t.arr_u32", GgufValueType::kUint32, uint32_t{1}, uint32_t{2}, uint32_t{3});
  arr("t.arr_u64", GgufValueType::kUint64, uint64_t{1} << 63);
  arr("t.arr_i64", GgufValueType::kInt64, int64_t{-5});
  arr("t.arr_f32", GgufValueType::kFloat32, 0.5f, -0.0f);

  f.tensors.push_back({"w.f32", {3, 2}, code(GgmlType::kF32), f32_bytes({1, -2, 3.5f, 0, -0.0f, 1e-30f})});
  f.tensors.push_back({"w.f16", {4}, code(GgmlType::kF16), u16_bytes({0x3C00, 0xC000, 0x3800, 0x7BFF})});
  f.tensors.push_back({"w.bf16", {3}, code(GgmlType::kBF16), u16_bytes({0x3F80, 0xC040, 0x4049})});
  f.tensors.push_back({"w.q4_0", {32, 2}, code(GgmlType::kQ4_0), repeat(q4_0_block(), 2).bytes});
  f.tensors.push_back({"w.q4_1", {64}, code(GgmlType::kQ4_1), repeat(q4_1_block(), 2).bytes});
  f.tensors.push_back({"w.q8_0", {32, 1, 3}, code(GgmlType::kQ8_0), repeat(q8_0_block(), 3).bytes});
  f.tensors.push_back({"w.q6_k", {256, 2}, code(GgmlType::kQ6_K), repeat(q6_k_block(), 2).bytes});
  return f;
}

std::vector<float> expected_values(const std::string& name) {
  if (name == "w.f32") return {1, -2, 3.5f, 0, -0.0f, 1e-30f};
  if (name == "w.f16") return {1.0f, -2.0f, 0.5f, 65504.0f};
  if (name == "w.bf16") return {1.0f, -3.0f, 3.140625f};
  if (name == "w.q4_0") return repeat(q4_0_block(), 2).expected;
  if (name == "w.q4_1") return repeat(q4_1_block(), 2).expected;
  if (name == "w.q8_0") return repeat(q8_0_block(), 3).expected;
  if (name == "w.q6_k") return repeat(q6_k_block(), 2).expected;
  return {};
}

void expect_bit_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    EXPECT_EQ(g, w) << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// ---- well-formed files ---------------------------------------------------------------------------------
TEST(Gguf, MetadataOfEveryType) {
  const std::vector<uint8_t> bytes = full_file().build();
  GgufFile f;
  ASSERT_TRUE(parse(bytes, &f).ok()) << parse(bytes, &f).to_string();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.num_metadata(), 27u);
  EXPECT_EQ(f.metadata_keys().front(), "t.u8");

#define EXPECT_GET(Type, key, want)        \
  {                                        \
    Type v{};                              \
    const Status s = f.get<Type>(key, &v); \
    EXPECT_TRUE(s.ok()) << s.to_string();  \
    EXPECT_EQ(v, want) << key;             \
  }
  EXPECT_GET(uint8_t, "t.u8", 250);
  EXPECT_GET(int8_t, "t.i8", -128);
  EXPECT_GET(uint16_t, "t.u16", 65535);
  EXPECT_GET(int16_t, "t.i16", -32768);
  EXPECT_GET(uint32_t, "t.u32", 4000000000u);
  EXPECT_GET(int32_t, "t.i32", -2000000000);
  EXPECT_GET(uint64_t, "t.u64", 0xFEDCBA9876543210ull);
  EXPECT_GET(int64_t, "t.i64", std::numeric_limits<int64_t>::min());
  EXPECT_GET(float, "t.f32", -1.5f);
  EXPECT_GET(double, "t.f64", 1e300);
  EXPECT_GET(bool, "t.bool", true);
  EXPECT_GET(std::string, "t.str", "llama");
  EXPECT_GET(std::string, "t.empty_str", "");
#undef EXPECT_GET

#define EXPECT_ARRAY(Type, key, ...)                       \
  {                                                        \
    std::vector<Type> v;                                   \
    const Status s = f.get_array<Type>(key, &v);           \
    EXPECT_TRUE(s.ok()) << s.to_string();                  \
    EXPECT_EQ(v, (std::vector<Type>{__VA_ARGS__})) << key; \
  }
  EXPECT_ARRAY(int32_t, "t.arr_i32", -1, 0, 7);
  EXPECT_ARRAY(double, "t.arr_f64", 0.25, -3.0);
  EXPECT_ARRAY(bool, "t.arr_bool", true, false, true);
  EXPECT_ARRAY(uint8_t, "t.arr_u8_empty");
  EXPECT_ARRAY(std::string, "t.arr_str", "<s>", "", "h\xC3\xA9llo");
  EXPECT_ARRAY(uint8_t, "t.arr_u8", 1, 255);
  EXPECT_ARRAY(int8_t, "t.arr_i8", -1, 127);
  EXPECT_ARRAY(uint16_t, "t.arr_u16", 65535);
  EXPECT_ARRAY(int16_t, "t.arr_i16", -300, 300);
  EXPECT_ARRAY(uint32_t, "t.arr_u32", 1, 2, 3);
  EXPECT_ARRAY(uint64_t, "t.arr_u64", uint64_t{1} << 63);
  EXPECT_ARRAY(int64_t, "t.arr_i64", -5);
  EXPECT_ARRAY(float, "t.arr_f32", 0.5f, -0.0f);
#undef EXPECT_ARRAY

  // Arrays of arrays of strings, walked through array_elements.
  const GgufValue* nested = f.find("t.arr_arr_str");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, GgufValueType::kArray);
  EXPECT_EQ(nested->elem_type, GgufValueType::kArray);
  std::vector<GgufValue> rows;
  ASSERT_TRUE(GgufFile::array_elements(*nested, &rows).ok());
  ASSERT_EQ(rows.size(), 3u);
  const std::vector<std::vector<std::string>> want = {{"a", "bc"}, {}, {"def"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::string> row;
    ASSERT_TRUE(GgufFile::array_as(rows[i], &row).ok());
    EXPECT_EQ(row, want[i]);
  }
  std::vector<GgufValue> scalars;
  ASSERT_TRUE(GgufFile::array_elements(*f.find("t.arr_i16"), &scalars).ok());
  ASSERT_EQ(scalars.size(), 2u);
  int16_t second = 0;
  ASSERT_TRUE(GgufFile::value_as(scalars[1], &second).ok());
  EXPECT_EQ(second, 300);
}

TEST(Gguf, GetterErrorsNameTheKeyAndTypes) {
  const std::vector<uint8_t> bytes = full_file().build();
  GgufFile f;
  ASSERT_TRUE(parse(bytes, &f).ok());
  uint64_t u64 = 0;
  Status s = f.get("t.u32", &u64);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'t.u32'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("u32, not u64"), std::string::npos) << s.message();
  s = f.get("no.such.key", &u64);
  EXPECT_NE(s.message().find("'no.such.key' is missing"), std::string::npos) << s.message();
  std::vector<std::string> strs;
  s = f.get_array("t.arr_i32", &strs);
  EXPECT_NE(s.message().find("array of i32, not array of string"), std::string::npos) << s.message();
  s = f.get_array("t.str", &strs);
  EXPECT_NE(s.message().find("string, not array"), std::string::npos) << s.message();
  std::string str;
  s = f.get("t.arr_str", &str);
  EXPECT_NE(s.message().find("array, not string"), std::string::npos) << s.message();
  std::vector<GgufValue> elems;
  EXPECT_FALSE(GgufFile::array_elements(*f.find("t.str"), &elems).ok());
}

TEST(Gguf, TensorInfosAndDequantization) {
  const TestFile spec = full_file();
  const std::vector<uint8_t> bytes = spec.build();
  GgufFile f;
  ASSERT_TRUE(parse(bytes, &f).ok());
  ASSERT_EQ(f.tensors().size(), spec.tensors.size());
  EXPECT_EQ(f.data_offset() % 32, 0u);
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TestTensor& want = spec.tensors[i];
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(t.name, want.name);
    EXPECT_EQ(t.dims, want.dims);
    EXPECT_EQ(code(t.type), want.type);
    EXPECT_EQ(t.num_bytes, want.data.size());
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(std::memcmp(f.tensor_data(t), want.data.data(), want.data.size()), 0);
    EXPECT_EQ(f.find_tensor(want.name), &t);
    EXPECT_TRUE(ggml_type_can_dequantize(t.type));
    std::vector<float> out(t.num_elements, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(f.dequantize(t, out.data()).ok());
    expect_bit_equal(out, expected_values(want.name), want.name);
  }
  EXPECT_EQ(f.find_tensor("w.none"), nullptr);
  EXPECT_EQ(f.find_tensor("w.q4_0")->num_elements, 64u);
  EXPECT_EQ(f.find_tensor("w.q6_k")->num_bytes, 420u);
  EXPECT_STREQ(ggml_type_name(GgmlType::kQ6_K), "q6_k");
}

// Q6_K on random blocks: the test packs 6-bit codes from the layout's description (docs/model.md) and
// compares with x = d * scale * (q - 32).
TEST(Gguf, Q6KRandomBlocks) {
  QDEC_TEST_RNG(rng);
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<uint8_t> block(210, 0);
    int q[256];
    int8_t scales[16];
    for (int& v : q) v = static_cast<int>(rng() % 64);
    for (int8_t& s : scales) s = static_cast<int8_t>(rng() % 256);
    const uint16_t d_bits = float_to_fp16_bits(std::ldexp(static_cast<float>(rng() % 1000 + 1), -12));
    for (int i = 0; i < 256; ++i) {
      const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
      uint8_t& low = block[64 * half + 32 * (quarter % 2) + l];
      low |= static_cast<uint8_t>((q[i] & 15) << (quarter < 2 ? 0 : 4));
      block[128 + 32 * half + l] |= static_cast<uint8_t>((q[i] >> 4) << (2 * quarter));
    }
    std::memcpy(block.data() + 192, scales, 16);
    put_half(block, 208, d_bits);
    std::vector<float> out(256);
    ASSERT_TRUE(ggml_dequantize(GgmlType::kQ6_K, block.data(), block.size(), 256, out.data()).ok());
    const float d = fp16_bits_to_float(d_bits);
    for (int i = 0; i < 256; ++i) {
      const int sub = i / 16;  // 16 sub-blocks of 16 values, in order
      EXPECT_EQ(out[i], d * static_cast<float>(scales[sub]) * static_cast<float>(q[i] - 32)) << i;
    }
  }
}

TEST(Gguf, DequantizeChecksSizes) {
  std::vector<uint8_t> src(34);
  std::vector<float> out(64);
  Status s = ggml_dequantize(GgmlType::kQ8_0, src.data(), src.size(), 16, out.data());
  EXPECT_NE(s.message().find("not a whole number of 32-value blocks"), std::string::npos) << s.message();
  s = ggml_dequantize(GgmlType::kQ8_0, src.data(), src.size(), 64, out.data());
  EXPECT_NE(s.message().find("34 bytes were given"), std::string::npos) << s.message();
  s = ggml_dequantize(GgmlType::kQ4_K, src.data(), 144, 256, out.data());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("q4_k"), std::string::npos) << s.message();
  s = ggml_dequantize(static_cast<GgmlType>(4), src.data(), 0, 0, out.data());
  EXPECT_NE(s.message().find("type 4"), std::string::npos) << s.message();
}

TEST(Gguf, OpenMapsAFile) {
  const std::vector<uint8_t> bytes = full_file().build();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("qdec_gguf_test_" + std::to_string(qdec_test_rng_seed()) + ".gguf"))
          .string();
  {
    FILE* fp = std::fopen(path.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
    std::fclose(fp);
  }
  GgufFile f;
  const Status s = GgufFile::open(path, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(f.file_bytes(), bytes.size());
  // Moving keeps the mapping and the views valid.
  GgufFile moved = std::move(f);
  EXPECT_EQ(f.tensors().size(), 0u);
  std::string arch;
  ASSERT_TRUE(moved.get("t.str", &arch).ok());
  EXPECT_EQ(arch, "llama");
  const GgufTensorInfo* t = moved.find_tensor("w.q4_1");
  ASSERT_NE(t, nullptr);
  std::vector<float> out(t->num_elements);
  ASSERT_TRUE(moved.dequantize(*t, out.data()).ok());
  expect_bit_equal(out, expected_values("w.q4_1"), "w.q4_1");
  std::filesystem::remove(path);

  Status missing = GgufFile::open(path, &f);
  EXPECT_NE(missing.message().find(path), std::string::npos) << missing.message();
  // An empty file is an error, not an mmap of zero bytes.
  FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  missing = GgufFile::open(path, &f);
  EXPECT_NE(missing.message().find("empty"), std::string::npos) << missing.message();
  std::filesystem::remove(path);
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  TestFile spec;
  spec.scalar<uint32_t>("general.alignment", GgufValueType::kUint32, 256);
  spec.alignment = 256;
  spec.tensors.push_back({"a", {3}, code(GgmlType::kF32), f32_bytes({1, 2, 3})});
  spec.tensors.push_back({"b", {2}, code(GgmlType::kF32), f32_bytes({4, 5})});
  GgufFile f;
  const std::vector<uint8_t> bytes = spec.build();
  ASSERT_TRUE(parse(bytes, &f).ok()) << parse(bytes, &f).to_string();
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset(), 256u);
  EXPECT_EQ(f.tensors()[1].offset, 256u);
  std::vector<float> out(2);
  ASSERT_TRUE(f.dequantize(f.tensors()[1], out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{4, 5}));
  // An offset that is 32- but not 256-aligned breaks the declared alignment.
  spec.tensors[1].offset = 128;
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor 'b'", "data offset 128", "alignment 256"}));
}

TEST(Gguf, NoTensorsNoDataSection) {
  TestFile spec;
  spec.key("general.architecture", GgufValueType::kString).str("llama");
  GgufFile f;
  const std::vector<uint8_t> bytes = spec.build();
  ASSERT_TRUE(parse(bytes, &f).ok());
  EXPECT_TRUE(f.tensors().empty());
  TestFile empty;
  ASSERT_TRUE(parse(empty.build(), &f).ok());
  EXPECT_EQ(f.num_metadata(), 0u);
}

// ---- malformed files -----------------------------------------------------------------------------------
TEST(GgufErrors, BadMagicAndVersion) {
  TestFile spec;
  spec.magic = 0x46554746;  // "FGUF"
  EXPECT_TRUE(ParseFails(spec.build(), {"bad magic", "'FGUF'"}));
  for (uint32_t v : {1u, 2u, 4u}) {
    spec = TestFile();
    spec.version = v;
    EXPECT_TRUE(ParseFails(spec.build(), {("GGUF version " + std::to_string(v) + " ").c_str(), "only version 3"}));
  }
  spec.version = 0x03000000;
  EXPECT_TRUE(ParseFails(spec.build(), {"big-endian"}));
  EXPECT_TRUE(ParseFails({}, {"0 bytes"}));
  EXPECT_TRUE(ParseFails({'G', 'G'}, {"2 bytes"}));
}

// Every proper prefix of a valid file (which ends with its last tensor) is an error, never a crash. The
// prefix is copied to a buffer of exactly its size so that a sanitizer build catches any over-read.
TEST(GgufErrors, TruncationAtEveryByte) {
  const std::vector<uint8_t> bytes = full_file().build();
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    GgufFile f;
    const Status s = GgufFile::parse(prefix.empty() ? nullptr : prefix.data(), prefix.size(), &f);
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " of " << bytes.size() << " bytes parsed";
    ASSERT_FALSE(s.message().empty());
  }
  GgufFile f;
  EXPECT_TRUE(parse(bytes, &f).ok());
}

TEST(GgufErrors, AbsurdCounts) {
  TestFile spec;
  spec.kv_count = uint64_t{1} << 62;
  EXPECT_TRUE(ParseFails(spec.build(), {"metadata count 4611686018427387904"}));
  spec = TestFile();
  spec.tensor_count = ~uint64_t{0};
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor count 18446744073709551615"}));
  // Fewer bytes than the smallest key/value (14).
  spec = TestFile();
  spec.kv_count = 1;
  spec.kv.put<uint16_t>(7);
  EXPECT_TRUE(ParseFails(spec.build(), {"metadata count 1 cannot fit in the 2 bytes"}));
  // Enough bytes for the count, not for the key it promises.
  spec = TestFile();
  spec.kv_count = 1;
  spec.kv.put<uint64_t>(100);
  spec.kv.put<uint64_t>(0);
  EXPECT_TRUE(ParseFails(spec.build(), {"metadata entry 0", "key at byte 24 has length 100, but only 8 bytes remain"}));
}

TEST(GgufErrors, StringLengths) {
  TestFile spec;
  spec.kv.put<uint64_t>(~uint64_t{0});  // key length 2^64 - 1
  spec.kv.put<uint32_t>(0);
  spec.kv.put<uint8_t>(0);
  spec.kv.put<uint8_t>(0);
  spec.num_kv = 1;
  EXPECT_TRUE(ParseFails(spec.build(), {"key", "length 18446744073709551615"}));
  spec = TestFile();
  Bytes& b = spec.key("k", GgufValueType::kString);
  b.put<uint64_t>(uint64_t{1} << 63);
  EXPECT_TRUE(ParseFails(spec.build(), {"'k'", "length 9223372036854775808"}));
  spec = TestFile();
  spec.key("", GgufValueType::kString).str("value");
  EXPECT_TRUE(ParseFails(spec.build(), {"empty key"}));
}

TEST(GgufErrors, Arrays) {
  // 2^61 u64 elements: count * 8 would wrap to 0 in unchecked arithmetic.
  TestFile spec;
  Bytes& b = spec.key("big", GgufValueType::kArray);
  b.put<uint32_t>(code(GgufValueType::kUint64));
  b.put<uint64_t>(uint64_t{1} << 61);
  b.put<uint64_t>(0);
  EXPECT_TRUE(ParseFails(spec.build(), {"'big'", "array count 2305843009213693952"}));
  // Strings: the count is bounded by 8 bytes per element.
  spec = TestFile();
  Bytes& s = spec.key("strs", GgufValueType::kArray);
  s.put<uint32_t>(code(GgufValueType::kString));
  s.put<uint64_t>(3);
  s.str("x");
  s.str("y");
  EXPECT_TRUE(ParseFails(spec.build(), {"'strs'", "array count 3"}));
  // An element string that runs past the end.
  spec = TestFile();
  Bytes& s2 = spec.key("strs", GgufValueType::kArray);
  s2.put<uint32_t>(code(GgufValueType::kString));
  s2.put<uint64_t>(2);
  s2.str("x");
  s2.put<uint64_t>(1000);
  s2.put<uint64_t>(0);
  EXPECT_TRUE(ParseFails(spec.build(), {"'strs'", "array element 1", "length 1000"}));
  // Unknown element type.
  spec = TestFile();
  Bytes& u = spec.key("u", GgufValueType::kArray);
  u.put<uint32_t>(13);
  u.put<uint64_t>(0);
  EXPECT_TRUE(ParseFails(spec.build(), {"'u'", "array element type 13"}));
  // Nesting deeper than kMaxArrayDepth.
  spec = TestFile();
  Bytes& n = spec.key("deep", GgufValueType::kArray);
  for (int i = 0; i < 20; ++i) {
    n.put<uint32_t>(code(GgufValueType::kArray));
    n.put<uint64_t>(1);
  }
  n.put<uint32_t>(code(GgufValueType::kUint8));
  n.put<uint64_t>(0);
  EXPECT_TRUE(ParseFails(spec.build(), {"'deep'", "nested deeper than 8"}));
  // A bool that is neither 0 nor 1.
  spec = TestFile();
  Bytes& bl = spec.key("flags", GgufValueType::kArray);
  bl.put<uint32_t>(code(GgufValueType::kBool));
  bl.put<uint64_t>(2);
  bl.put<uint8_t>(1);
  bl.put<uint8_t>(2);
  EXPECT_TRUE(ParseFails(spec.build(), {"'flags'", "bool element 1 is 2"}));
}

TEST(GgufErrors, MetadataValues) {
  TestFile spec;
  spec.scalar<uint8_t>("b", GgufValueType::kBool, 7);
  EXPECT_TRUE(ParseFails(spec.build(), {"'b'", "bool value is 7"}));
  spec = TestFile();
  spec.scalar<uint8_t>("t", static_cast<GgufValueType>(99), 0);
  EXPECT_TRUE(ParseFails(spec.build(), {"'t'", "value type 99"}));
  spec = TestFile();
  spec.scalar<uint8_t>("dup", GgufValueType::kUint8, 1);
  spec.scalar<uint8_t>("dup", GgufValueType::kUint8, 2);
  EXPECT_TRUE(ParseFails(spec.build(), {"'dup' appears twice"}));
  spec = TestFile();
  spec.scalar<uint32_t>("general.alignment", GgufValueType::kUint32, 48);
  EXPECT_TRUE(ParseFails(spec.build(), {"general.alignment 48 is not a power of two"}));
  spec = TestFile();
  spec.scalar<uint32_t>("general.alignment", GgufValueType::kUint32, 0);
  EXPECT_TRUE(ParseFails(spec.build(), {"general.alignment 0"}));
  spec = TestFile();
  spec.scalar<uint64_t>("general.alignment", GgufValueType::kUint64, 64);
  EXPECT_TRUE(ParseFails(spec.build(), {"general.alignment has type u64"}));
}

TestFile one_tensor(std::vector<uint64_t> dims, uint32_t type, size_t bytes) {
  TestFile spec;
  spec.tensors.push_back({"w", std::move(dims), type, std::vector<uint8_t>(bytes, 0)});
  return spec;
}

TEST(GgufErrors, TensorInfos) {
  TestFile spec = one_tensor({8}, code(GgmlType::kF32), 32);
  spec.tensors[0].offset = 8;
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor 'w'", "data offset 8", "alignment 32"}));
  spec.tensors[0].offset = 64;
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor 'w'", "[64, +32)", "outside the 32-byte data section"}));
  // offset + size wraps around 2^64 in unchecked arithmetic.
  spec.tensors[0].offset = ~uint64_t{31};
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor 'w'", "outside"}));

  EXPECT_TRUE(ParseFails(one_tensor({8}, 4, 32).build(), {"tensor 'w'", "tensor type 4 is not a known ggml type"}));
  EXPECT_TRUE(ParseFails(one_tensor({8}, 1000, 32).build(), {"tensor type 1000"}));
  EXPECT_TRUE(ParseFails(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, code(GgmlType::kF32), 0).build(),
                         {"tensor 'w'", "element count overflows at dimension 1"}));
  EXPECT_TRUE(ParseFails(one_tensor({8, 0}, code(GgmlType::kF32), 0).build(), {"dimension 1 is 0"}));
  EXPECT_TRUE(ParseFails(one_tensor({uint64_t{1} << 63}, code(GgmlType::kI8), 0).build(),
                         {"dimension 0 is 9223372036854775808"}));
  EXPECT_TRUE(ParseFails(one_tensor({1, 1, 1, 1, 1}, code(GgmlType::kF32), 4).build(), {"dimension count 5"}));
  EXPECT_TRUE(ParseFails(one_tensor({}, code(GgmlType::kF32), 4).build(), {"dimension count 0"}));
  EXPECT_TRUE(ParseFails(one_tensor({16}, code(GgmlType::kQ4_0), 9).build(),
                         {"row length 16 is not a multiple of the q4_0 block size 32"}));
  // Byte size: 2^62 values of f32 take 2^64 bytes.
  EXPECT_TRUE(ParseFails(one_tensor({uint64_t{1} << 31, uint64_t{1} << 31}, code(GgmlType::kF32), 0).build(),
                         {"byte size", "overflows"}));
  // Bytes missing at the end.
  spec = one_tensor({8}, code(GgmlType::kF32), 32);
  std::vector<uint8_t> short_file = spec.build();
  short_file.resize(short_file.size() - 4);
  EXPECT_TRUE(ParseFails(short_file, {"tensor 'w'", "outside the 28-byte data section"}));

  spec = one_tensor({8}, code(GgmlType::kF32), 32);
  spec.tensors[0].name = std::string(65, 'n');
  EXPECT_TRUE(ParseFails(spec.build(), {"65 bytes (at most 64)"}));
  spec.tensors[0].name = "";
  EXPECT_TRUE(ParseFails(spec.build(), {"empty tensor name"}));

  spec = one_tensor({8}, code(GgmlType::kF32), 32);
  spec.tensors.push_back(spec.tensors[0]);
  EXPECT_TRUE(ParseFails(spec.build(), {"tensor 'w' appears twice"}));
  spec.tensors[1].name = "v";
  spec.tensors[1].offset = 0;  // aliases w
  EXPECT_TRUE(ParseFails(spec.build(), {"overlaps tensor"}));
}

TEST(GgufErrors, UnsupportedTypeParsesButDoesNotDequantize) {
  const std::vector<uint8_t> bytes = one_tensor({256}, code(GgmlType::kQ4_K), 144).build();
  GgufFile f;
  ASSERT_TRUE(parse(bytes, &f).ok());
  std::vector<float> out(256);
  const Status s = f.dequantize(f.tensors()[0], out.data());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("tensor 'w'"), std::string::npos) << s.message();
  // A tensor info edited by the caller cannot make dequantize read past the data section.
  GgufTensorInfo bad = f.tensors()[0];
  bad.type = GgmlType::kF32;
  bad.offset = 4096;
  EXPECT_NE(f.dequantize(bad, out.data()).message().find("outside"), std::string::npos);
}

// ---- the real model --------------------------------------------------------------------------------------

TEST(GgufModel, SmolLM2) {
  const std::string path = qdec_find_model();
  if (path.empty()) GTEST_SKIP() << "no models/*.gguf (run scripts/fetch_model.sh, or set QDEC_MODEL)";
  GgufFile f;
  const Status s = GgufFile::open(path, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::string arch;
  ASSERT_TRUE(f.get("general.architecture", &arch).ok());
  EXPECT_EQ(arch, "llama");
  uint32_t blocks = 0, heads = 0, kv_heads = 0, alignment_default = f.alignment();
  ASSERT_TRUE(f.get("llama.block_count", &blocks).ok());
  ASSERT_TRUE(f.get("llama.attention.head_count", &heads).ok());
  ASSERT_TRUE(f.get("llama.attention.head_count_kv", &kv_heads).ok());
  EXPECT_EQ(blocks, 30u);
  EXPECT_EQ(heads, 9u);
  EXPECT_EQ(kv_heads, 3u);
  EXPECT_EQ(alignment_default, 32u);
  std::vector<std::string> tokens;
  ASSERT_TRUE(f.get_array("tokenizer.ggml.tokens", &tokens).ok());
  EXPECT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[1], "<|im_start|>");

  ASSERT_EQ(f.tensors().size(), 272u);
  std::vector<float> out;
  for (const GgufTensorInfo& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    out.assign(t.num_elements, std::numeric_limits<float>::quiet_NaN());
    const Status d = f.dequantize(t, out.data());
    ASSERT_TRUE(d.ok()) << d.to_string();
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isfinite(out[i])) << "value " << i << " = " << out[i];
  }
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
}

// ---- fuzz seeds ----------------------------------------------------------------------------------------
// QDEC_GGUF_CORPUS=dir writes this file's well-formed GGUF files there, as seeds for tests/fuzz/gguf_fuzz.
TEST(GgufCorpus, Write) {
  const char* dir = std::getenv("QDEC_GGUF_CORPUS");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "set QDEC_GGUF_CORPUS=dir to write fuzz seeds";
  std::filesystem::create_directories(dir);
  TestFile aligned;
  aligned.scalar<uint32_t>("general.alignment", GgufValueType::kUint32, 64);
  aligned.alignment = 64;
  aligned.tensors.push_back({"a", {32}, code(GgmlType::kQ8_0), q8_0_block().bytes});
  aligned.tensors.push_back({"b", {256}, code(GgmlType::kQ6_K), q6_k_block().bytes});
  TestFile metadata_only = full_file();
  metadata_only.tensors.clear();
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds = {
      {"full.gguf", full_file().build()},
      {"aligned.gguf", aligned.build()},
      {"metadata_only.gguf", metadata_only.build()},
      {"empty.gguf", TestFile().build()},
  };
  for (const auto& [name, bytes] : seeds) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    FILE* fp = std::fopen(path.c_str(), "wb");
    ASSERT_NE(fp, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
    std::fclose(fp);
  }
}

}  // namespace
}  // namespace qdec
