// libFuzzer target for the GGUF reader: any byte string must parse to a file or to an error, never crash,
// hang or read out of bounds; a file that parses must decode all of its metadata and dequantize its tensors.
//
// Build and run (clang; docs/model.md):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude src/model/gguf.cpp \
//     src/formats/kv_formats.cpp src/runtime/status.cpp tests/fuzz/gguf_fuzz.cpp -o gguf_fuzz
//   ./gguf_fuzz -max_total_time=60 -max_len=65536 corpus/
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qdec/gguf.h"

namespace {

// Tensors above this many values are skipped: the fuzzer checks the decoding, not the machine's memory.
constexpr uint64_t kMaxElements = uint64_t{1} << 20;

// Decode a value as every type; exactly the matching one may succeed. Recurses into arrays of arrays.
void touch(const qdec::GgufValue& v, int depth) {
  using qdec::GgufFile;
  uint8_t u8;
  int8_t i8;
  uint16_t u16;
  int16_t i16;
  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  double f64;
  bool b;
  std::string s;
  (void)GgufFile::value_as(v, &u8);
  (void)GgufFile::value_as(v, &i8);
  (void)GgufFile::value_as(v, &u16);
  (void)GgufFile::value_as(v, &i16);
  (void)GgufFile::value_as(v, &u32);
  (void)GgufFile::value_as(v, &i32);
  (void)GgufFile::value_as(v, &u64);
  (void)GgufFile::value_as(v, &i64);
  (void)GgufFile::value_as(v, &f32);
  (void)GgufFile::value_as(v, &f64);
  (void)GgufFile::value_as(v, &b);
  (void)GgufFile::value_as(v, &s);
  if (v.type != qdec::GgufValueType::kArray) return;
  std::vector<uint8_t> au8;
  std::vector<int64_t> ai64;
  std::vector<double> af64;
  std::vector<bool> ab;
  std::vector<std::string> as;
  (void)GgufFile::array_as(v, &au8);
  (void)GgufFile::array_as(v, &ai64);
  (void)GgufFile::array_as(v, &af64);
  (void)GgufFile::array_as(v, &ab);
  (void)GgufFile::array_as(v, &as);
  std::vector<qdec::GgufValue> elems;
  if (depth < qdec::GgufFile::kMaxArrayDepth && GgufFile::array_elements(v, &elems).ok()) {
    for (size_t i = 0; i < elems.size() && i < 64; ++i) touch(elems[i], depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Parse from an exact-size copy so that ASan sees any read past the end of the input.
  std::vector<uint8_t> bytes(data, data + size);
  qdec::GgufFile file;
  const qdec::Status s = qdec::GgufFile::parse(bytes.empty() ? nullptr : bytes.data(), bytes.size(), &file);
  if (!s.ok()) {
    if (s.message().empty()) __builtin_trap();  // every error must say what is wrong
    return 0;
  }
  for (const std::string& key : file.metadata_keys()) {
    const qdec::GgufValue* v = file.find(key);
    if (v == nullptr) __builtin_trap();  // every listed key must be found
    touch(*v, 0);
  }
  static std::vector<float> out(kMaxElements);
  for (const qdec::GgufTensorInfo& t : file.tensors()) {
    if (file.find_tensor(t.name) != &t) __builtin_trap();
    if (t.num_elements > kMaxElements) continue;
    const qdec::Status d = file.dequantize(t, out.data());
    // Parsing validated the geometry, so only an unimplemented type may fail.
    if (!d.ok() && qdec::ggml_type_can_dequantize(t.type)) __builtin_trap();
  }
  return 0;
}
