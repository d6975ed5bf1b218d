// Byte-level BPE tokenizer (GPT-2 style, as SmolLM2 uses it), built from a GGUF file's tokenizer metadata:
// `tokenizer.ggml.tokens`, `.merges`, `.token_type` and the special token ids. docs/model.md describes the
// pipeline; in short, encode() does
//   1. special tokens (control and user-defined types) matched on the raw text, longest first (parse_special);
//   2. pre-tokenizer on code points: with `tokenizer.ggml.pre` = smollm every \p{N} is its own piece, then the
//      GPT-2 regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+  on each piece;
//   3. each piece's bytes mapped to GPT-2's byte characters, then merged by merge rank (lowest rank first,
//      leftmost first among equals), the way Hugging Face `tokenizers` does it.
// decode() concatenates each token's bytes, so decode(encode(x)) == x for any byte string, valid UTF-8 or not,
// whose bytes all have a token: a byte missing from the vocabulary (SmolLM2 lacks 21 of the 256, among them
// the controls 0x04 0x06 0x13 0x14 0x16 0x1D) is dropped, as Hugging Face `tokenizers` and llama.cpp drop it.
// Like the rest of the library it never prints or exits: failures come back as a Status naming the value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qdec/gguf.h"
#include "qdec/status.h"

namespace qdec {

class Tokenizer {
 public:
  // `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
  enum TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };

  // Reads the tokenizer metadata of `file`. Unsupported: a `tokenizer.ggml.model` other than gpt2 or a
  // pre-tokenizer other than gpt2/smollm/starcoder/refact. InvalidArgument: missing keys, a merge whose parts
  // or result are not in the vocabulary, a normal token that is not byte-level text, an id outside the vocabulary.
  // On failure *out is left unchanged.
  static Status from_gguf(const GgufFile& file, Tokenizer* out);

  // Appends nothing on failure; on success *ids holds the tokens of `text` (no BOS is added: see
  // add_bos_token()). With parse_special, the text of a control or user-defined token becomes its id;
  // without it, that text is tokenized like any other.
  Status encode(std::string_view text, std::vector<int32_t>* ids, bool parse_special = true) const;
  // The bytes of the tokens, special tokens included as their text. InvalidArgument names the first id
  // outside [0, vocab_size()) and its position.
  Status decode(const std::vector<int32_t>& ids, std::string* text) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return unk_id_; }  // -1 when the file names none
  int32_t pad_id() const { return pad_id_; }  // -1 when the file names none
  bool add_bos_token() const { return add_bos_token_; }
  // True when the pre-tokenizer isolates every digit (smollm, starcoder, refact).
  bool split_digits() const { return split_digits_; }
  // False for a byte with no token in the vocabulary: encode() drops it.
  bool byte_has_token(uint8_t byte) const { return byte_to_id_[byte] >= 0; }
  // The vocabulary entry as stored (byte-level characters, e.g. "Ġthe"), and its type.
  const std::string& token_text(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  TokenType token_type(int32_t id) const { return types_[static_cast<size_t>(id)]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  void encode_piece(std::string_view piece, std::vector<int32_t>* ids) const;
  void encode_plain(std::string_view text, std::vector<int32_t>* ids) const;

  std::vector<std::string> tokens_;
  std::vector<std::string> token_bytes_;  // what decode() emits for each id
  std::vector<TokenType> types_;
  int32_t byte_to_id_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;                   // (left id << 32 | right id) -> merge
  std::vector<std::pair<std::string, int32_t>> special_tokens_;  // longest first
  bool special_first_byte_[256] = {};
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t pad_id_ = -1;
  bool add_bos_token_ = false;
  bool split_digits_ = false;
};

}  // namespace qdec
