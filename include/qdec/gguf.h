// GGUF v3 reader: header, metadata (every value type, arrays and nested arrays included), tensor infos and
// the tensor data, memory-mapped read-only; CPU dequantization of the tensor types qdec loads.
// docs/model.md describes the file layout, the validation rules and the fetch step for the SmolLM2 model.
//
// The reader is strict because its input is untrusted: every count, length, offset and size is checked
// against the bytes that remain before it is used, all arithmetic on file values is overflow-checked, and a
// malformed file yields a Status naming the offending key, tensor, count or byte offset. It never reads out
// of bounds, prints, exits or aborts (a libFuzzer target, tests/fuzz/gguf_fuzz.cpp, keeps it honest).
//
// Metadata values and tensor data are views into the file bytes: they stay valid while the GgufFile lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qdec/status.h"

namespace qdec {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

// Tensor element types, numbered as ggml's `ggml_type`. Every type listed here is accepted by the parser
// (its block geometry is known, so sizes and offsets can be validated); ggml_type_can_dequantize() says
// which ones dequantize() implements. Ids not listed (4, 5, 31..33 and 36..38 were retired) are rejected.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Block geometry of a tensor type: `block_elems` values are stored in `block_bytes` bytes.
struct GgmlTypeTraits {
  const char* name = nullptr;
  uint32_t block_elems = 0;
  uint32_t block_bytes = 0;
};
// False when `type_id` is not a known ggml type.
bool ggml_type_traits(uint32_t type_id, GgmlTypeTraits* out);
// "q4_1", or "unknown" for an id outside the enum.
const char* ggml_type_name(GgmlType type);
// F32, F16, BF16, Q4_0, Q4_1, Q8_0 and Q6_K.
bool ggml_type_can_dequantize(GgmlType type);

// Dequantize `num_elements` values of `type` from `src` (which holds `src_bytes` bytes) into `out`.
// num_elements must be a multiple of the block size and src_bytes exactly the blocks' size.
Status ggml_dequantize(GgmlType type, const uint8_t* src, size_t src_bytes, uint64_t num_elements, float* out);

// One metadata value: a view into the file. Scalars and strings are decoded by GgufFile::value_as,
// arrays by GgufFile::array_as (typed) or GgufFile::array_elements (one GgufValue per element, for arrays
// of arrays).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType elem_type = GgufValueType::kUint8;  // arrays only
  uint64_t count = 0;                               // arrays only: number of elements
  const uint8_t* bytes = nullptr;  // the encoded value (strings: without the length; arrays: the elements)
  size_t num_bytes = 0;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // bytes from the start of the data section (a multiple of the alignment)
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
};

class GgufFile {
 public:
  using TensorInfo = GgufTensorInfo;

  static constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
  static constexpr size_t kMaxTensorNameBytes = 64;  // GGML_MAX_NAME, including ggml's terminating NUL
  static constexpr size_t kMaxKeyBytes = 65535;      // the specification's limit on a key
  static constexpr int kMaxArrayDepth = 8;           // arrays of arrays: bounds the parser's recursion

  GgufFile() = default;
  ~GgufFile();
  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Map `path` read-only and parse it. On failure *out is left empty.
  static Status open(const std::string& path, GgufFile* out);
  // Parse `size` bytes at `data`. Nothing is copied except names: the bytes must outlive *out.
  static Status parse(const uint8_t* data, size_t size, GgufFile* out);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t file_bytes() const { return size_; }
  // Byte offset of the data section in the file (0 when the file has no tensors and no data section).
  uint64_t data_offset() const { return data_offset_; }

  // ---- metadata ----------------------------------------------------------------------------------------
  size_t num_metadata() const { return keys_.size(); }
  // Keys in file order.
  const std::vector<std::string>& metadata_keys() const { return keys_; }
  // nullptr when the key is absent.
  const GgufValue* find(std::string_view key) const;

  // Typed getters: InvalidArgument naming the key when it is absent or holds another type (no implicit
  // conversions, so a u32 field read as u64 is an error that says what the file holds).
  // T: uint8_t int8_t uint16_t int16_t uint32_t int32_t uint64_t int64_t float double bool std::string.
  template <typename T>
  Status get(std::string_view key, T* out) const;
  // Arrays of any scalar type or of strings: the key must hold an array whose element type is T's.
  template <typename T>
  Status get_array(std::string_view key, std::vector<T>* out) const;

  // The same decoding on a value in hand (array elements from array_elements, for instance).
  template <typename T>
  static Status value_as(const GgufValue& value, T* out);
  template <typename T>
  static Status array_as(const GgufValue& value, std::vector<T>* out);
  // One GgufValue per element of an array of any type (the way to walk arrays of arrays).
  static Status array_elements(const GgufValue& value, std::vector<GgufValue>* out);

  // ---- tensors -----------------------------------------------------------------------------------------
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when no tensor has this name.
  const TensorInfo* find_tensor(std::string_view name) const;
  // The tensor's bytes (info.num_bytes of them).
  const uint8_t* tensor_data(const TensorInfo& info) const { return data_ + data_offset_ + info.offset; }
  // Dequantize the whole tensor into out[0 .. info.num_elements).
  Status dequantize(const TensorInfo& info, float* out) const;

 private:
  Status parse_impl();
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // owned mmap (open) or nullptr (parse)
  size_t mapping_bytes_ = 0;

  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
  std::vector<std::string> keys_;
  std::vector<GgufValue> values_;
  std::map<std::string, size_t, std::less<>> key_index_;  // std::less<> finds by string_view
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace qdec
