// GGUF v3 reader and CPU dequantization (docs/model.md).
//
// Parsing is one forward pass through a bounds-checked cursor. The pass validates everything (string
// lengths, array counts, nested arrays, bools, tensor geometry, offsets) and keeps only views, so the
// accessors decode from bytes already known to be in range; they still go through the same cursor, so a
// GgufValue built by hand cannot make them read out of bounds either. Counts read from the file are bounded
// by the bytes that remain before anything is allocated for them: a 40-byte file cannot ask for 2^60 keys.
#include "qdec/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "qdec/formats.h"

namespace qdec {
namespace {

// GGUF is little-endian and the loads below are plain memcpy: a big-endian host would need byte swaps.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

Status invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

// Prefix a failed status with where it happened (built only on the error path).
Status with_context(const Status& s, const std::string& context) {
  if (s.ok()) return s;
  return Status(s.code(), context + ": " + s.message());
}

std::string quoted(std::string_view s) {
  // Names come from untrusted bytes: show at most 80 of them and escape anything unprintable.
  std::string out = "'";
  const size_t n = std::min<size_t>(s.size(), 80);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > n) out += "...";
  out += "'";
  return out;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A cursor over [data, data + size) that never moves past the end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, size_t pos = 0) : data_(data), size_(size), pos_(pos) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  Status skip(uint64_t n, const char* what) {
    if (n > remaining()) {
      return invalid(std::string("truncated: ") + what + " at byte " + std::to_string(pos_) + " needs " +
                     std::to_string(n) + " bytes, only " + std::to_string(remaining()) + " left");
    }
    pos_ += static_cast<size_t>(n);
    return Status::Ok();
  }

  template <typename T>
  Status read(const char* what, T* out) {
    const size_t at = pos_;
    QDEC_RETURN_IF_ERROR(skip(sizeof(T), what));
    *out = load<T>(data_ + at);
    return Status::Ok();
  }

  // A GGUF string: u64 length, then that many bytes (no terminator).
  Status read_string(const char* what, std::string_view* out) {
    uint64_t len = 0;
    const size_t at = pos_;
    QDEC_RETURN_IF_ERROR(read(what, &len));
    if (len > remaining()) {
      return invalid(std::string(what) + " at byte " + std::to_string(at) + " has length " + std::to_string(len) +
                     ", but only " + std::to_string(remaining()) + " bytes remain");
    }
    *out = std::string_view(reinterpret_cast<const char*>(here()), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_;
};

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// Encoded size of a fixed-size value type; 0 for strings and arrays.
size_t fixed_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes one element of this type can take: bounds an array's count before it is walked.
size_t min_encoded_size(GgufValueType t) {
  if (t == GgufValueType::kString) return 8;  // the length
  if (t == GgufValueType::kArray) return 12;  // element type + count
  return fixed_size(t);
}

// Parse (and validate) one value of type `type` at the cursor; on success `out` views its bytes.
Status parse_value(Reader& r, GgufValueType type, int depth, GgufValue* out) {
  out->type = type;
  out->count = 0;
  out->elem_type = GgufValueType::kUint8;
  if (type == GgufValueType::kString) {
    std::string_view s;
    QDEC_RETURN_IF_ERROR(r.read_string("string value", &s));
    out->bytes = reinterpret_cast<const uint8_t*>(s.data());
    out->num_bytes = s.size();
    return Status::Ok();
  }
  if (type != GgufValueType::kArray) {
    out->bytes = r.here();
    out->num_bytes = fixed_size(type);
    QDEC_RETURN_IF_ERROR(r.skip(out->num_bytes, gguf_value_type_name(type)));
    if (type == GgufValueType::kBool && out->bytes[0] > 1) {
      return invalid("bool value is " + std::to_string(out->bytes[0]) + " (must be 0 or 1)");
    }
    return Status::Ok();
  }

  if (depth >= GgufFile::kMaxArrayDepth) {
    return invalid("arrays nested deeper than " + std::to_string(GgufFile::kMaxArrayDepth) + " levels");
  }
  uint32_t elem = 0;
  uint64_t count = 0;
  const size_t type_at = r.pos();
  QDEC_RETURN_IF_ERROR(r.read("array element type", &elem));
  if (!valid_value_type(elem)) {
    return invalid("array element type " + std::to_string(elem) + " at byte " + std::to_string(type_at) +
                   " is not a GGUF value type (0..12)");
  }
  QDEC_RETURN_IF_ERROR(r.read("array count", &count));
  const GgufValueType elem_type = static_cast<GgufValueType>(elem);
  const size_t min_size = min_encoded_size(elem_type);
  if (count > r.remaining() / min_size) {
    return invalid("array count " + std::to_string(count) + " of " + gguf_value_type_name(elem_type) +
                   " cannot fit in the " + std::to_string(r.remaining()) + " bytes that remain");
  }
  out->elem_type = elem_type;
  out->count = count;
  out->bytes = r.here();
  const size_t start = r.pos();
  if (const size_t size = fixed_size(elem_type); size != 0) {
    QDEC_RETURN_IF_ERROR(r.skip(count * size, "array elements"));  // count * size <= remaining: no overflow
    if (elem_type == GgufValueType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (out->bytes[i] > 1) {
          return invalid("bool element " + std::to_string(i) + " is " + std::to_string(out->bytes[i]) +
                         " (must be 0 or 1)");
        }
      }
    }
  } else {
    for (uint64_t i = 0; i < count; ++i) {
      GgufValue element;
      const Status s = parse_value(r, elem_type, depth + 1, &element);
      if (!s.ok()) return with_context(s, "array element " + std::to_string(i));
    }
  }
  out->num_bytes = r.pos() - start;
  return Status::Ok();
}

// The value type that stores a C++ type.
template <typename T>
constexpr GgufValueType value_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufValueType::kUint8;
  if constexpr (std::is_same_v<T, int8_t>) return GgufValueType::kInt8;
  if constexpr (std::is_same_v<T, uint16_t>) return GgufValueType::kUint16;
  if constexpr (std::is_same_v<T, int16_t>) return GgufValueType::kInt16;
  if constexpr (std::is_same_v<T, uint32_t>) return GgufValueType::kUint32;
  if constexpr (std::is_same_v<T, int32_t>) return GgufValueType::kInt32;
  if constexpr (std::is_same_v<T, uint64_t>) return GgufValueType::kUint64;
  if constexpr (std::is_same_v<T, int64_t>) return GgufValueType::kInt64;
  if constexpr (std::is_same_v<T, float>) return GgufValueType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return GgufValueType::kFloat64;
  if constexpr (std::is_same_v<T, bool>) return GgufValueType::kBool;
  if constexpr (std::is_same_v<T, std::string>) return GgufValueType::kString;
}

// ---- tensor types ---------------------------------------------------------------------------------------
// Block geometry from ggml's block definitions (ggml-common.h): fp16 scales are 2 bytes, K-quant
// super-blocks hold 256 values.
struct TypeRow {
  GgmlType type;
  GgmlTypeTraits traits;
};
constexpr TypeRow kTypes[] = {
    {GgmlType::kF32, {"f32", 1, 4}},
    {GgmlType::kF16, {"f16", 1, 2}},
    {GgmlType::kQ4_0, {"q4_0", 32, 18}},         // d, 16 bytes of nibbles
    {GgmlType::kQ4_1, {"q4_1", 32, 20}},         // d, m, 16 bytes of nibbles
    {GgmlType::kQ5_0, {"q5_0", 32, 22}},         // d, qh[4], qs[16]
    {GgmlType::kQ5_1, {"q5_1", 32, 24}},         // d, m, qh[4], qs[16]
    {GgmlType::kQ8_0, {"q8_0", 32, 34}},         // d, qs[32]
    {GgmlType::kQ8_1, {"q8_1", 32, 36}},         // d, s, qs[32]
    {GgmlType::kQ2_K, {"q2_k", 256, 84}},        // scales[16], qs[64], d, dmin
    {GgmlType::kQ3_K, {"q3_k", 256, 110}},       // hmask[32], qs[64], scales[12], d
    {GgmlType::kQ4_K, {"q4_k", 256, 144}},       // d, dmin, scales[12], qs[128]
    {GgmlType::kQ5_K, {"q5_k", 256, 176}},       // d, dmin, scales[12], qh[32], qs[128]
    {GgmlType::kQ6_K, {"q6_k", 256, 210}},       // ql[128], qh[64], scales[16], d
    {GgmlType::kQ8_K, {"q8_k", 256, 292}},       // f32 d, qs[256], bsums[16] (int16)
    {GgmlType::kIQ2_XXS, {"iq2_xxs", 256, 66}},  // d, qs[32] (uint16)
    {GgmlType::kIQ2_XS, {"iq2_xs", 256, 74}},    // d, qs[32] (uint16), scales[8]
    {GgmlType::kIQ3_XXS, {"iq3_xxs", 256, 98}},  // d, qs[96]
    {GgmlType::kIQ1_S, {"iq1_s", 256, 50}},      // d, qs[32], qh[8] (uint16)
    {GgmlType::kIQ4_NL, {"iq4_nl", 32, 18}},     // d, qs[16]
    {GgmlType::kIQ3_S, {"iq3_s", 256, 110}},     // d, qs[64], qh[8], signs[32], scales[4]
    {GgmlType::kIQ2_S, {"iq2_s", 256, 82}},      // d, qs[64], qh[8], scales[8]
    {GgmlType::kIQ4_XS, {"iq4_xs", 256, 136}},   // d, scales_h, scales_l[4], qs[128]
    {GgmlType::kI8, {"i8", 1, 1}},
    {GgmlType::kI16, {"i16", 1, 2}},
    {GgmlType::kI32, {"i32", 1, 4}},
    {GgmlType::kI64, {"i64", 1, 8}},
    {GgmlType::kF64, {"f64", 1, 8}},
    {GgmlType::kIQ1_M, {"iq1_m", 256, 56}},  // qs[32], qh[16], scales[8]
    {GgmlType::kBF16, {"bf16", 1, 2}},
    {GgmlType::kTQ1_0, {"tq1_0", 256, 54}},  // qs[48], qh[4], d
    {GgmlType::kTQ2_0, {"tq2_0", 256, 66}},  // qs[64], d
    {GgmlType::kMXFP4, {"mxfp4", 32, 17}},   // e8m0 scale, qs[16]
};

// ---- dequantization: one block of each type (layouts in docs/model.md) ----------------------------------
float half_at(const uint8_t* p) {
  return fp16_bits_to_float(load<uint16_t>(p));
}

// Q4_0: d, then 16 bytes; byte j holds value j (low nibble) and value j + 16 (high nibble); x = (q - 8) * d.
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: d, m, then nibbles as Q4_0; x = q * d + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q8_0: d, then 32 int8; x = q * d.
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q6_K: 256 values in two halves of 128. In half h, value 32 * k + l (k = 0..3, l = 0..31) takes its low
// 4 bits from ql[64h + l + 32 * (k & 1)] (low nibble for k < 2, high nibble otherwise) and its high 2 bits
// from bits 2k..2k+1 of qh[32h + l]; x = d * scales[8h + 2k + l / 16] * (q - 32).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t low_byte = ql[64 * h + l + 32 * (k & 1)];
        const int low = k < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
        const int high = (qh[32 * h + l] >> (2 * k)) & 3;
        const int q = (low | (high << 4)) - 32;
        const float scale = static_cast<float>(scales[8 * h + 2 * k + l / 16]);
        y[128 * h + 32 * k + l] = d * scale * static_cast<float>(q);
      }
    }
  }
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "u8";
    case GgufValueType::kInt8:
      return "i8";
    case GgufValueType::kUint16:
      return "u16";
    case GgufValueType::kInt16:
      return "i16";
    case GgufValueType::kUint32:
      return "u32";
    case GgufValueType::kInt32:
      return "i32";
    case GgufValueType::kFloat32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "u64";
    case GgufValueType::kInt64:
      return "i64";
    case GgufValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

bool ggml_type_traits(uint32_t type_id, GgmlTypeTraits* out) {
  for (const TypeRow& row : kTypes) {
    if (static_cast<uint32_t>(row.type) == type_id) {
      *out = row.traits;
      return true;
    }
  }
  return false;
}

const char* ggml_type_name(GgmlType type) {
  GgmlTypeTraits t;
  return ggml_type_traits(static_cast<uint32_t>(type), &t) ? t.name : "unknown";
}

bool ggml_type_can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Status ggml_dequantize(GgmlType type, const uint8_t* src, size_t src_bytes, uint64_t num_elements, float* out) {
  GgmlTypeTraits t;
  if (!ggml_type_traits(static_cast<uint32_t>(type), &t)) {
    return invalid("tensor type " + std::to_string(static_cast<uint32_t>(type)) + " is not a ggml type");
  }
  if (!ggml_type_can_dequantize(type)) {
    return Status(StatusCode::kUnsupported,
                  std::string("dequantizing ") + t.name + " is not implemented (f32 f16 bf16 q4_0 q4_1 q8_0 q6_k are)");
  }
  if (num_elements % t.block_elems != 0) {
    return invalid(std::to_string(num_elements) + " " + t.name + " values are not a whole number of " +
                   std::to_string(t.block_elems) + "-value blocks");
  }
  const uint64_t blocks = num_elements / t.block_elems;
  if (blocks > std::numeric_limits<uint64_t>::max() / t.block_bytes || blocks * t.block_bytes != src_bytes) {
    return invalid(std::to_string(num_elements) + " " + t.name + " values need " + std::to_string(blocks) +
                   " blocks of " + std::to_string(t.block_bytes) + " bytes, but " + std::to_string(src_bytes) +
                   " bytes were given");
  }
  if (num_elements != 0 && (src == nullptr || out == nullptr)) return invalid("null source or output pointer");

  const uint8_t* b = src;
  float* y = out;
  for (uint64_t i = 0; i < blocks; ++i, b += t.block_bytes, y += t.block_elems) {
    switch (type) {
      case GgmlType::kF32:
        *y = load<float>(b);
        break;
      case GgmlType::kF16:
        *y = fp16_bits_to_float(load<uint16_t>(b));
        break;
      case GgmlType::kBF16:
        *y = bf16_bits_to_float(load<uint16_t>(b));
        break;
      case GgmlType::kQ4_0:
        dequant_q4_0(b, y);
        break;
      case GgmlType::kQ4_1:
        dequant_q4_1(b, y);
        break;
      case GgmlType::kQ8_0:
        dequant_q8_0(b, y);
        break;
      case GgmlType::kQ6_K:
        dequant_q6_k(b, y);
        break;
      default:
        break;  // unreachable: ggml_type_can_dequantize filtered
    }
  }
  return Status::Ok();
}

// ---- GgufFile -------------------------------------------------------------------------------------------

GgufFile::~GgufFile() {
  reset();
}

GgufFile::GgufFile(GgufFile&& other) noexcept {
  *this = std::move(other);
}

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this == &other) return *this;
  reset();
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  mapping_ = std::exchange(other.mapping_, nullptr);
  mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
  version_ = std::exchange(other.version_, 0);
  alignment_ = std::exchange(other.alignment_, kDefaultAlignment);
  data_offset_ = std::exchange(other.data_offset_, 0);
  data_bytes_ = std::exchange(other.data_bytes_, 0);
  keys_ = std::move(other.keys_);
  values_ = std::move(other.values_);
  key_index_ = std::move(other.key_index_);
  tensors_ = std::move(other.tensors_);
  tensor_index_ = std::move(other.tensor_index_);
  other.reset();
  return *this;
}

void GgufFile::reset() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  data_ = nullptr;
  size_ = 0;
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  version_ = 0;
  alignment_ = kDefaultAlignment;
  data_offset_ = 0;
  data_bytes_ = 0;
  keys_.clear();
  values_.clear();
  key_index_.clear();
  tensors_.clear();
  tensor_index_.clear();
}

Status GgufFile::open(const std::string& path, GgufFile* out) {
  if (out == nullptr) return invalid("GgufFile::open: out is null");
  out->reset();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return invalid("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid("'" + path + "' is not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return invalid("'" + path + "' is empty (0 bytes), not a GGUF file");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED)
    return invalid("cannot mmap '" + path + "' (" + std::to_string(bytes) + " bytes): " + std::strerror(map_err));
  GgufFile file;
  file.mapping_ = map;
  file.mapping_bytes_ = bytes;
  file.data_ = static_cast<const uint8_t*>(map);
  file.size_ = bytes;
  const Status s = file.parse_impl();
  if (!s.ok()) return with_context(s, "'" + path + "'");  // file's destructor unmaps
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::parse(const uint8_t* data, size_t size, GgufFile* out) {
  if (out == nullptr) return invalid("GgufFile::parse: out is null");
  out->reset();
  if (data == nullptr && size != 0) return invalid("GgufFile::parse: data is null but size is " + std::to_string(size));
  GgufFile file;
  file.data_ = data;
  file.size_ = size;
  QDEC_RETURN_IF_ERROR(file.parse_impl());
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::parse_impl() {
  Reader r(data_, size_);
  if (size_ < 4) return invalid("file is " + std::to_string(size_) + " bytes, too short for the GGUF magic");
  uint32_t magic = 0;
  QDEC_RETURN_IF_ERROR(r.read("magic", &magic));
  if (magic != kMagic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    return invalid(std::string("bad magic ") + hex + " (bytes " +
                   quoted(std::string_view(reinterpret_cast<const char*>(data_), 4)) + "), expected 'GGUF'");
  }
  QDEC_RETURN_IF_ERROR(r.read("version", &version_));
  if (version_ != kVersion) {
    // A big-endian writer stores 3 as 0x03000000: say so rather than print 50331648 alone.
    const std::string hint = version_ == 0x03000000u ? " (a big-endian GGUF file?)" : "";
    return invalid("GGUF version " + std::to_string(version_) + hint + " is not supported (only version 3)");
  }
  uint64_t tensor_count = 0, kv_count = 0;
  QDEC_RETURN_IF_ERROR(r.read("tensor count", &tensor_count));
  QDEC_RETURN_IF_ERROR(r.read("metadata count", &kv_count));
  // Smallest encodings: a key/value is key length (8) + a 1-byte key + type (4) + a 1-byte value; a tensor
  // info is name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
  constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;
  if (kv_count > r.remaining() / kMinKvBytes) {
    return invalid("metadata count " + std::to_string(kv_count) + " cannot fit in the " +
                   std::to_string(r.remaining()) + " bytes after the header");
  }
  if (tensor_count > r.remaining() / kMinTensorBytes) {
    return invalid("tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
                   std::to_string(r.remaining()) + " bytes after the header");
  }

  // ---- metadata ----
  keys_.reserve(static_cast<size_t>(kv_count));
  values_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = "metadata entry " + std::to_string(i) + " at byte " + std::to_string(r.pos());
    std::string_view key;
    QDEC_RETURN_IF_ERROR(with_context(r.read_string("key", &key), where));
    if (key.empty()) return invalid(where + ": empty key");
    if (key.size() > kMaxKeyBytes) {
      return invalid(where + ": key length " + std::to_string(key.size()) + " exceeds " + std::to_string(kMaxKeyBytes));
    }
    const std::string key_where = "metadata key " + quoted(key);
    if (key_index_.count(key) != 0) return invalid(key_where + " appears twice");
    uint32_t type = 0;
    const size_t type_at = r.pos();
    QDEC_RETURN_IF_ERROR(with_context(r.read("value type", &type), key_where));
    if (!valid_value_type(type)) {
      return invalid(key_where + ": value type " + std::to_string(type) + " at byte " + std::to_string(type_at) +
                     " is not a GGUF value type (0..12)");
    }
    GgufValue value;
    QDEC_RETURN_IF_ERROR(with_context(parse_value(r, static_cast<GgufValueType>(type), 0, &value), key_where));
    key_index_.emplace(std::string(key), keys_.size());
    keys_.emplace_back(key);
    values_.push_back(value);
  }

  // general.alignment: a u32 power of two when present (the specification's type).
  if (const GgufValue* a = find("general.alignment"); a != nullptr) {
    if (a->type != GgufValueType::kUint32) {
      return invalid(std::string("general.alignment has type ") + gguf_value_type_name(a->type) + ", expected u32");
    }
    const uint32_t alignment = load<uint32_t>(a->bytes);
    if (!std::has_single_bit(alignment)) {
      return invalid("general.alignment " + std::to_string(alignment) + " is not a power of two");
    }
    alignment_ = alignment;
  }

  // ---- tensor infos ----
  if (tensor_count > r.remaining() / kMinTensorBytes) {
    return invalid("tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
                   std::to_string(r.remaining()) + " bytes after the metadata");
  }
  tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const std::string where = "tensor info " + std::to_string(i) + " at byte " + std::to_string(r.pos());
    TensorInfo info;
    std::string_view name;
    QDEC_RETURN_IF_ERROR(with_context(r.read_string("tensor name", &name), where));
    if (name.empty()) return invalid(where + ": empty tensor name");
    if (name.size() > kMaxTensorNameBytes) {
      return invalid(where + ": tensor name " + quoted(name) + " is " + std::to_string(name.size()) +
                     " bytes (at most " + std::to_string(kMaxTensorNameBytes) + ")");
    }
    info.name = std::string(name);
    const std::string tw = "tensor " + quoted(name);
    if (tensor_index_.count(name) != 0) return invalid(tw + " appears twice");
    uint32_t n_dims = 0;
    QDEC_RETURN_IF_ERROR(with_context(r.read("dimension count", &n_dims), tw));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return invalid(tw + ": dimension count " + std::to_string(n_dims) + " is not in 1.." + std::to_string(kMaxDims));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      QDEC_RETURN_IF_ERROR(with_context(r.read("dimension", &dim), tw));
      // ggml holds dims as int64: anything above INT64_MAX (a negative int64) is corrupt.
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return invalid(tw + ": dimension " + std::to_string(d) + " is " + std::to_string(dim) +
                       " (must be in 1..2^63-1)");
      }
      if (elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        return invalid(tw + ": the element count overflows at dimension " + std::to_string(d) + " (" +
                       std::to_string(dim) + ")");
      }
      elements *= dim;
      info.dims.push_back(dim);
    }
    uint32_t type = 0;
    QDEC_RETURN_IF_ERROR(with_context(r.read("tensor type", &type), tw));
    GgmlTypeTraits traits;
    if (!ggml_type_traits(type, &traits)) {
      return invalid(tw + ": tensor type " + std::to_string(type) + " is not a known ggml type");
    }
    info.type = static_cast<GgmlType>(type);
    // ggml quantizes rows independently: a row must be whole blocks.
    if (info.dims[0] % traits.block_elems != 0) {
      return invalid(tw + ": row length " + std::to_string(info.dims[0]) + " is not a multiple of the " + traits.name +
                     " block size " + std::to_string(traits.block_elems));
    }
    const uint64_t blocks = elements / traits.block_elems;
    if (blocks > std::numeric_limits<uint64_t>::max() / traits.block_bytes) {
      return invalid(tw + ": byte size of " + std::to_string(elements) + " " + traits.name + " values overflows");
    }
    info.num_elements = elements;
    info.num_bytes = blocks * traits.block_bytes;
    QDEC_RETURN_IF_ERROR(with_context(r.read("data offset", &info.offset), tw));
    if (info.offset % alignment_ != 0) {
      return invalid(tw + ": data offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                     std::to_string(alignment_));
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // ---- data section: starts at the next multiple of the alignment ----
  const uint64_t end_of_infos = r.pos();
  const uint64_t padded = end_of_infos + (alignment_ - 1);  // pos <= size_, alignment_ <= 2^31: no overflow
  data_offset_ = padded - padded % alignment_;
  if (data_offset_ > size_) {
    if (!tensors_.empty()) {
      return invalid("the data section would start at byte " + std::to_string(data_offset_) +
                     ", beyond the end of the file (" + std::to_string(size_) + " bytes)");
    }
    data_offset_ = 0;  // no tensors, no data section
    data_bytes_ = 0;
    return Status::Ok();
  }
  data_bytes_ = size_ - data_offset_;
  for (const TensorInfo& t : tensors_) {
    if (t.offset > data_bytes_ || t.num_bytes > data_bytes_ - t.offset) {
      return invalid("tensor " + quoted(t.name) + ": data [" + std::to_string(t.offset) + ", +" +
                     std::to_string(t.num_bytes) + ") lies outside the " + std::to_string(data_bytes_) +
                     "-byte data section");
    }
  }
  // Tensors must not share bytes: a writer bug or a crafted file otherwise aliases two weights.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& prev = tensors_[order[i - 1]];
    const TensorInfo& next = tensors_[order[i]];
    if (prev.offset + prev.num_bytes > next.offset) {  // both are within data_bytes_: no overflow
      return invalid("tensor " + quoted(next.name) + " at data offset " + std::to_string(next.offset) +
                     " overlaps tensor " + quoted(prev.name) + " [" + std::to_string(prev.offset) + ", +" +
                     std::to_string(prev.num_bytes) + ")");
    }
  }
  return Status::Ok();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &values_[it->second];
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

template <typename T>
Status GgufFile::value_as(const GgufValue& value, T* out) {
  constexpr GgufValueType want = value_type_of<T>();
  if (value.type != want) {
    return invalid(std::string("value has type ") + gguf_value_type_name(value.type) + ", not " +
                   gguf_value_type_name(want));
  }
  if constexpr (std::is_same_v<T, std::string>) {
    out->assign(reinterpret_cast<const char*>(value.bytes), value.num_bytes);
  } else {
    if (value.bytes == nullptr || value.num_bytes != sizeof(T)) {
      return invalid(std::string("malformed ") + gguf_value_type_name(want) + " value of " +
                     std::to_string(value.num_bytes) + " bytes");
    }
    if constexpr (std::is_same_v<T, bool>) {
      *out = value.bytes[0] != 0;
    } else {
      *out = load<T>(value.bytes);
    }
  }
  return Status::Ok();
}

template <typename T>
Status GgufFile::array_as(const GgufValue& value, std::vector<T>* out) {
  constexpr GgufValueType want = value_type_of<T>();
  if (value.type != GgufValueType::kArray || value.elem_type != want) {
    std::string has = gguf_value_type_name(value.type);
    if (value.type == GgufValueType::kArray) has += std::string(" of ") + gguf_value_type_name(value.elem_type);
    return invalid("value has type " + has + ", not array of " + gguf_value_type_name(want));
  }
  out->clear();
  if constexpr (std::is_same_v<T, std::string>) {
    Reader r(value.bytes, value.num_bytes);
    if (value.count > value.num_bytes / 8) return invalid("malformed array of strings");
    out->reserve(static_cast<size_t>(value.count));
    for (uint64_t i = 0; i < value.count; ++i) {
      std::string_view s;
      QDEC_RETURN_IF_ERROR(r.read_string("array string", &s));
      out->emplace_back(s);
    }
  } else {
    if (value.count > value.num_bytes / sizeof(T) || value.count * sizeof(T) != value.num_bytes) {
      return invalid("malformed array of " + std::to_string(value.count) + " " + gguf_value_type_name(want) + " in " +
                     std::to_string(value.num_bytes) + " bytes");
    }
    out->resize(static_cast<size_t>(value.count));
    for (size_t i = 0; i < out->size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        (*out)[i] = value.bytes[i] != 0;
      } else {
        (*out)[i] = load<T>(value.bytes + i * sizeof(T));
      }
    }
  }
  return Status::Ok();
}

Status GgufFile::array_elements(const GgufValue& value, std::vector<GgufValue>* out) {
  if (value.type != GgufValueType::kArray) {
    return invalid(std::string("value has type ") + gguf_value_type_name(value.type) + ", not array");
  }
  out->clear();
  if (value.count > value.num_bytes / min_encoded_size(value.elem_type)) return invalid("malformed array");
  Reader r(value.bytes, value.num_bytes);
  out->reserve(static_cast<size_t>(value.count));
  for (uint64_t i = 0; i < value.count; ++i) {
    GgufValue element;
    // Depth 1: the outer array was parsed at depth 0 and its nesting already validated.
    QDEC_RETURN_IF_ERROR(with_context(parse_value(r, value.elem_type, 1, &element), "element " + std::to_string(i)));
    out->push_back(element);
  }
  return Status::Ok();
}

template <typename T>
Status GgufFile::get(std::string_view key, T* out) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return invalid("metadata key " + quoted(key) + " is missing");
  return with_context(value_as(*v, out), "metadata key " + quoted(key));
}

template <typename T>
Status GgufFile::get_array(std::string_view key, std::vector<T>* out) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return invalid("metadata key " + quoted(key) + " is missing");
  return with_context(array_as(*v, out), "metadata key " + quoted(key));
}

Status GgufFile::dequantize(const TensorInfo& info, float* out) const {
  // `info` may come from another file or be edited by the caller: check its bytes lie in this file.
  if (info.offset > data_bytes_ || info.num_bytes > data_bytes_ - info.offset) {
    return invalid("tensor " + quoted(info.name) + ": data [" + std::to_string(info.offset) + ", +" +
                   std::to_string(info.num_bytes) + ") lies outside this file's " + std::to_string(data_bytes_) +
                   "-byte data section");
  }
  return with_context(
      ggml_dequantize(info.type, tensor_data(info), static_cast<size_t>(info.num_bytes), info.num_elements, out),
      "tensor " + quoted(info.name));
}

#define QDEC_GGUF_INSTANTIATE(T)                                                   \
  template Status GgufFile::get<T>(std::string_view, T*) const;                    \
  template Status GgufFile::get_array<T>(std::string_view, std::vector<T>*) const; \
  template Status GgufFile::value_as<T>(const GgufValue&, T*);                     \
  template Status GgufFile::array_as<T>(const GgufValue&, std::vector<T>*);
QDEC_GGUF_INSTANTIATE(uint8_t)
QDEC_GGUF_INSTANTIATE(int8_t)
QDEC_GGUF_INSTANTIATE(uint16_t)
QDEC_GGUF_INSTANTIATE(int16_t)
QDEC_GGUF_INSTANTIATE(uint32_t)
QDEC_GGUF_INSTANTIATE(int32_t)
QDEC_GGUF_INSTANTIATE(uint64_t)
QDEC_GGUF_INSTANTIATE(int64_t)
QDEC_GGUF_INSTANTIATE(float)
QDEC_GGUF_INSTANTIATE(double)
QDEC_GGUF_INSTANTIATE(bool)
QDEC_GGUF_INSTANTIATE(std::string)
#undef QDEC_GGUF_INSTANTIATE

}  // namespace qdec
