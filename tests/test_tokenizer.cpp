// Tokenizer tests: loading errors on small GGUF files built in memory, BPE merge order on a toy vocabulary,
// and on the real SmolLM2 file (skipped with a message when scripts/fetch_model.sh has not run): known ids,
// special tokens, round trips on hand-written and seeded random UTF-8, decode errors, speed, and identical ids
// to Hugging Face `tokenizers` through tests/tokenizer_ref.py (skipped when python3 or tokenizers is absent).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qdec/gguf.h"
#include "qdec/tokenizer.h"
#include "test_util.h"

namespace qdec {
namespace {

// ---- a tiny GGUF writer (metadata only) ------------------------------------------------------------------
class MetaWriter {
 public:
  void str(std::string_view key, std::string_view v) {
    begin(key, GgufValueType::kString);
    put_str(v);
  }
  void u32(std::string_view key, uint32_t v) {
    begin(key, GgufValueType::kUint32);
    put(v);
  }
  void strings(std::string_view key, const std::vector<std::string>& v) {
    begin(key, GgufValueType::kArray);
    put(static_cast<uint32_t>(GgufValueType::kString));
    put(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) put_str(s);
  }
  void i32s(std::string_view key, const std::vector<int32_t>& v) {
    begin(key, GgufValueType::kArray);
    put(static_cast<uint32_t>(GgufValueType::kInt32));
    put(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(x);
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    const auto append = [&](const void* p, size_t n) {
      out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    };
    const uint32_t magic = GgufFile::kMagic, version = 3;
    const uint64_t tensors = 0, kvs = count_;
    append(&magic, 4);
    append(&version, 4);
    append(&tensors, 8);
    append(&kvs, 8);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  template <typename T>
  void put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    body_.insert(body_.end(), raw, raw + sizeof(T));
  }
  void put_str(std::string_view s) {
    put(static_cast<uint64_t>(s.size()));
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void begin(std::string_view key, GgufValueType type) {
    put_str(key);
    put(static_cast<uint32_t>(type));
    ++count_;
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

// GPT-2's byte characters, in the order of the bytes (the toy vocabulary's first 256 tokens).
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out.push_back(s);
  }
  return out;
}

struct ToyFile {
  std::string model = "gpt2";
  std::string pre = "smollm";
  std::vector<std::string> extra_tokens = {"ab", "bc", "abc", "<|s|>", "Ġx"};
  std::vector<std::string> merges = {"b c", "a b", "ab c", "Ġ x"};
  uint32_t eos = 256 + 3;  // <|s|>
  std::vector<uint8_t> bytes;

  Status load(Tokenizer* tok, GgufFile* file) {
    MetaWriter w;
    w.str("tokenizer.ggml.model", model);
    w.str("tokenizer.ggml.pre", pre);
    std::vector<std::string> tokens = byte_tokens();
    tokens.insert(tokens.end(), extra_tokens.begin(), extra_tokens.end());
    std::vector<int32_t> types(tokens.size(), Tokenizer::kNormal);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == "<|s|>") types[i] = Tokenizer::kControl;
    }
    w.strings("tokenizer.ggml.tokens", tokens);
    w.i32s("tokenizer.ggml.token_type", types);
    w.strings("tokenizer.ggml.merges", merges);
    w.u32("tokenizer.ggml.eos_token_id", eos);
    bytes = w.bytes();
    QDEC_RETURN_IF_ERROR(GgufFile::parse(bytes.data(), bytes.size(), file));
    return Tokenizer::from_gguf(*file, tok);
  }
};

std::string text_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : "|") + tok.token_text(id);
  return s;
}

TEST(TokenizerToy, MergesByRank) {
  ToyFile toy;
  GgufFile file;
  Tokenizer tok;
  const Status s = toy.load(&tok, &file);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eos_id(), 259);
  EXPECT_EQ(tok.bos_id(), -1);
  std::vector<int32_t> ids;
  // "b c" outranks "a b": abc -> a|bc, and "ab c" never applies.
  ASSERT_TRUE(tok.encode("abc", &ids).ok());
  EXPECT_EQ(text_of(tok, ids), "a|bc");
  ASSERT_TRUE(tok.encode("abab", &ids).ok());
  EXPECT_EQ(text_of(tok, ids), "ab|ab");
  ASSERT_TRUE(tok.encode(" x x", &ids).ok());
  EXPECT_EQ(text_of(tok, ids), "Ġx|Ġx");
  ASSERT_TRUE(tok.encode("ab<|s|>bc", &ids).ok());
  EXPECT_EQ(text_of(tok, ids), "ab|<|s|>|bc");
  ASSERT_TRUE(tok.encode("ab<|s|>bc", &ids, /*parse_special=*/false).ok());
  EXPECT_EQ(text_of(tok, ids), "ab|<|||s|||>|bc");  // "<|", "s", "|>" are plain pieces
}

TEST(TokenizerToy, LoadErrors) {
  struct Case {
    const char* what;
    void (*edit)(ToyFile*);
    StatusCode code;
    const char* needle;
  };
  const Case cases[] = {
      {"model", [](ToyFile* t) { t->model = "llama"; }, StatusCode::kUnsupported, "'llama'"},
      {"pre", [](ToyFile* t) { t->pre = "qwen2"; }, StatusCode::kUnsupported, "'qwen2'"},
      {"merge part", [](ToyFile* t) { t->merges.push_back("zz c"); }, StatusCode::kInvalidArgument, "merges[4]"},
      {"merge result", [](ToyFile* t) { t->merges.push_back("c a"); }, StatusCode::kInvalidArgument, "makes a token"},
      {"merge form", [](ToyFile* t) { t->merges.push_back("abc"); }, StatusCode::kInvalidArgument, "'abc'"},
      {"eos", [](ToyFile* t) { t->eos = 5000; }, StatusCode::kInvalidArgument, "5000"},
      {"not byte-level", [](ToyFile* t) { t->extra_tokens.push_back("a b"); }, StatusCode::kInvalidArgument, "'a b'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ToyFile toy;
    c.edit(&toy);
    GgufFile file;
    Tokenizer tok;
    const Status s = toy.load(&tok, &file);
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
    EXPECT_EQ(tok.vocab_size(), 0);  // left unchanged
  }
  const std::vector<uint8_t> empty = MetaWriter().bytes();
  GgufFile file;
  ASSERT_TRUE(GgufFile::parse(empty.data(), empty.size(), &file).ok());
  Tokenizer tok;
  const Status s = Tokenizer::from_gguf(file, &tok);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokenizer.ggml.model"), std::string::npos) << s.to_string();
  std::vector<int32_t> ids;
  EXPECT_EQ(tok.encode("x", &ids).code(), StatusCode::kInvalidArgument);  // an empty tokenizer
}

// ---- the real model --------------------------------------------------------------------------------------

class TokenizerModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = qdec_find_model();
    if (path_.empty()) return;
    file_ = std::make_unique<GgufFile>();
    tok_ = std::make_unique<Tokenizer>();
    load_status_ = GgufFile::open(path_, file_.get());
    if (load_status_.ok()) load_status_ = Tokenizer::from_gguf(*file_, tok_.get());
  }
  static void TearDownTestSuite() {
    tok_.reset();
    file_.reset();
  }
  void SetUp() override {
    if (path_.empty()) GTEST_SKIP() << "no models/*.gguf (run scripts/fetch_model.sh, or set QDEC_MODEL)";
    ASSERT_TRUE(load_status_.ok()) << load_status_.to_string();
  }
  const Tokenizer& tok() const { return *tok_; }
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const {
    std::vector<int32_t> ids;
    const Status s = tok_->encode(text, &ids, parse_special);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return ids;
  }
  void expect_round_trip(const std::string& text, bool parse_special = true) const {
    std::string back;
    const Status s = tok_->decode(encode(text, parse_special), &back);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(back, text);
  }

  static inline std::string path_;
  static inline std::unique_ptr<GgufFile> file_;
  static inline std::unique_ptr<Tokenizer> tok_;
  static inline Status load_status_;
};

// Original text (written for this test): prose, contractions, numbers, code, whitespace runs and Unicode.
const char* const kCorpus[] = {
    "The lighthouse keeper's log was short that winter. She'd written \"calm seas\" on most days, and on the "
    "rest only the wind speed: 14 knots, 22 knots, once 41. We'll never know why she stopped on March 3rd; "
    "the last line reads, in full, \"Lamp's fine. I'm not.\"",
    "Recipe for 12 small loaves (about 1.5 kg of dough): 900 g flour, 600 ml water at 37\xC2\xB0"
    "C, 18 g salt "
    "and 9 g yeast. Mix, rest 20-30 min, fold 3x, then bake at 230\xC2\xB0"
    "C for 25'ish minutes. They're "
    "done when the crust sounds hollow -- don't open the oven before minute 15!",
    "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nprint([fib(i) for i in range(10)])  "
    "# [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int32_t> ids{1, 2, 3};\n\tif (argc > 1 && argv[1][0] "
    "== '-') return -1;\n\treturn ids.size() == 3 ? 0 : 1;   // ok\n}\n",
    "Prices rose 3.75% in Q2 2024 (vs. 2.1% in Q1); the index hit 10,482.33 on 2024-06-28T16:00:00Z. "
    "E-mail: team@example.org, phone +1 (555) 010-9999, ID #A7-B9_c2.",
    "Caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9"
    "e, na\xC3\xAFve fa\xC3\xA7"
    "ade, Stra\xC3\x9F"
    "e, "
    "\xC5\x81\xC3\xB3"
    "d\xC5\xBA, \xCE\x9A\xCE\xB1\xCE\xBB\xCE\xB7\xCE\xBC\xCE\xAD\xCF\x81\xCE\xB1, "
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80, "
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 "
    "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD9\xA1\xD9\xA2\xD9\xA3 \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8"
    "\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 x\xC2\xB2+y\xC2\xB3=\xC2\xBD",
    "   Leading spaces, trailing spaces   \n\n\n  \t mixed\twhitespace\r\n\u00a0non-breaking\u3000ideographic "
    "'s 't 're 've 'm 'll 'd 'S 'X ''s don't I'M YOU'RE   'tis o'clock",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat's 7*6?<|im_end|>\n"
    "<|im_start|>assistant\n42.<|im_end|><|endoftext|><|im_start|<|im_end|>>",
    "!!!??? ... --- *** ((())) [[]] {{}} <<>> ==> <=> && || :: ;; // /* */ #!/bin/sh $HOME ~/.config @@ -1,3 "
    "+1,4 @@ 0x1F 0b1010 1e-9 -0.0 +inf NaN 1_000_000",
};

TEST_F(TokenizerModel, Metadata) {
  EXPECT_EQ(tok().vocab_size(), 49152);
  EXPECT_EQ(tok().bos_id(), 1);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_EQ(tok().token_text(1), "<|im_start|>");
  EXPECT_EQ(tok().token_type(1), Tokenizer::kControl);
  EXPECT_TRUE(tok().split_digits());
  EXPECT_FALSE(tok().add_bos_token());
  EXPECT_TRUE(tok().byte_has_token('a'));
  EXPECT_FALSE(tok().byte_has_token(0x04));
}

// Ids recorded from Hugging Face tokenizers 0.23.3 (tests/tokenizer_ref.py) so the check runs without Python.
TEST_F(TokenizerModel, KnownIds) {
  EXPECT_EQ(encode("Hello world 123, it's  <|im_start|>user\n"),
            (std::vector<int32_t>{19556, 905, 216, 33, 34, 35, 28, 357, 506, 256, 1, 4093, 198}));
  EXPECT_EQ(encode(""), std::vector<int32_t>{});
  // Digits are isolated: " 2024" is a space and four digits.
  const std::vector<int32_t> ids = encode(" 2024");
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(tok().token_text(ids[0]), "Ġ");
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(tok().token_text(ids[i]).size(), 1u);
}

TEST_F(TokenizerModel, SpecialTokens) {
  const std::string chat = "<|im_start|>user\nhi<|im_end|><|im_start|>";
  const std::vector<int32_t> ids = encode(chat);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  for (int32_t id : encode(chat, /*parse_special=*/false)) EXPECT_GE(id, 17) << "special id without parse_special";
  expect_round_trip(chat, true);
  expect_round_trip(chat, false);
  // A prefix of a special token is plain text.
  for (int32_t id : encode("<|im_start|")) EXPECT_GE(id, 17);
  EXPECT_EQ(encode("<|endoftext|>"), std::vector<int32_t>{0});
}

TEST_F(TokenizerModel, RoundTripHandCases) {
  for (const char* text : kCorpus) expect_round_trip(text);
  for (const char* text :
       {"", " ", "  ", "\n", "a", "'", "'s", " 's", "1", " 1 ", "\xC2\xA0", "\xE2\x80\x8B", "e\xCC\x81",
        "\x01\x02\x03\x05\x07\x7F", "\xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88"}) {
    expect_round_trip(text);
  }
  // Invalid UTF-8 (stray continuation, truncated sequence, overlong, surrogate) round-trips byte for byte.
  for (const char* text : {"\x80", "a\xE4\xBD", "\xE0\x80\xAF", "\xED\xA0\x80z", "\xE4\xBDx\xF0\x9F\x98"}) {
    expect_round_trip(text);
  }
  // A byte with no token is dropped, like the reference does.
  std::string back;
  ASSERT_TRUE(tok()
                  .decode(encode("a\x04"
                                 "b"),
                          &back)
                  .ok());
  EXPECT_EQ(back, "ab");
}

// A random code point from blocks that exercise every class: ASCII (controls and spaces included),
// Latin-1, combining marks, Greek/Cyrillic, Arabic and its digits, Devanagari, CJK, Hangul, emoji and
// modifiers, the Unicode spaces, fullwidth forms, supplementary planes.
uint32_t random_code_point(std::mt19937_64& rng) {
  static const uint32_t kBlocks[][2] = {
      {0x00, 0x7F},       {0x20, 0x7E},       {0x20, 0x7E},       {0x30, 0x39},     {0x80, 0xFF},
      {0x100, 0x24F},     {0x300, 0x36F},     {0x370, 0x3FF},     {0x400, 0x4FF},   {0x600, 0x6FF},
      {0x900, 0x97F},     {0x1C, 0x1F},       {0x2000, 0x206F},   {0x2070, 0x218F}, {0x3000, 0x303F},
      {0x3040, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xFF00, 0xFFEF}, {0x1F300, 0x1FAFF},
      {0x1F3FB, 0x1F3FF}, {0x10000, 0x1FFFF}, {0x20000, 0x2FFFF}, {0xE000, 0xF8FF}, {0x1D400, 0x1D7FF},
  };
  const auto& block = kBlocks[rng() % std::size(kBlocks)];
  return block[0] + static_cast<uint32_t>(rng() % (block[1] - block[0] + 1));
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string random_utf8(std::mt19937_64& rng, size_t max_code_points) {
  std::string s;
  const size_t n = rng() % (max_code_points + 1);
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 8 == 0) {
      s += " '";  // contractions and quotes
      s += "strmvdl"[rng() % 7];
      continue;
    }
    append_utf8(random_code_point(rng), &s);
  }
  return s;
}

bool all_bytes_have_tokens(const Tokenizer& tok, const std::string& s) {
  for (char c : s) {
    if (!tok.byte_has_token(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

TEST_F(TokenizerModel, RoundTripRandomUtf8) {
  QDEC_TEST_RNG(rng);
  int tested = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const std::string text = random_utf8(rng, 40);
    if (!all_bytes_have_tokens(tok(), text)) continue;  // those bytes are dropped (tested above)
    SCOPED_TRACE(::testing::PrintToString(text));
    expect_round_trip(text, iter % 2 == 0);
    ++tested;
  }
  EXPECT_GT(tested, 1000);
}

TEST_F(TokenizerModel, RoundTripRandomBytes) {
  QDEC_TEST_RNG(rng);
  for (int iter = 0; iter < 1000; ++iter) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) {
      do {
        c = static_cast<char>(rng() & 0xFF);
      } while (!tok().byte_has_token(static_cast<uint8_t>(c)));
    }
    SCOPED_TRACE(::testing::PrintToString(text));
    expect_round_trip(text);
  }
}

TEST_F(TokenizerModel, DecodeErrors) {
  std::string text = "unchanged";
  for (int32_t bad : {-1, 49152, 1 << 30}) {
    const Status s = tok().decode({1, 2, bad, 3}, &text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("token id " + std::to_string(bad) + " at position 2"), std::string::npos)
        << s.to_string();
    EXPECT_EQ(text, "unchanged");
  }
  EXPECT_EQ(tok().decode({1}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tok().encode("x", nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(TokenizerModel, Speed) {
  std::string text;
  while (text.size() < 100 * 1024) {
    for (const char* p : kCorpus) text += p;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0) << text.size() << " bytes took " << s << " s";
  std::printf("encoded %zu bytes into %zu tokens in %.1f ms\n", text.size(), ids.size(), s * 1e3);
  // A single 100 KB run (one pre-token) stays fast too.
  const auto t1 = std::chrono::steady_clock::now();
  encode(std::string(100 * 1024, ' '));
  encode(std::string(100 * 1024, 'a'));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
}

// ---- identical ids to Hugging Face tokenizers --------------------------------------------------------------
std::string hex(const std::string& s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST_F(TokenizerModel, MatchesHuggingFaceTokenizers) {
#ifndef QDEC_SOURCE_DIR
  GTEST_SKIP() << "QDEC_SOURCE_DIR is not defined, so tests/tokenizer_ref.py cannot be found";
#else
  const std::string script = std::string(QDEC_SOURCE_DIR) + "/tests/tokenizer_ref.py";
  const std::string python = std::getenv("PYTHON") != nullptr ? std::getenv("PYTHON") : "python3";
  const std::string check = python + " " + shell_quote(script) + " check >/dev/null 2>&1";
  if (std::system(check.c_str()) != 0) {
    GTEST_SKIP() << "'" << python << "' cannot import tokenizers (pip install tokenizers) or run " << script;
  }
  QDEC_TEST_RNG(rng);
  std::vector<std::string> texts(std::begin(kCorpus), std::end(kCorpus));
  std::string all;
  for (const char* p : kCorpus) all += std::string(p) + "\n\n";
  texts.push_back(all);
  for (int i = 0; i < 500; ++i) texts.push_back(random_utf8(rng, 60));  // missing bytes included
  texts.push_back("");

  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("qdec_tokenizer_" + std::to_string(getpid()) + "_" + std::to_string(rng()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path in = dir / "texts.hex", out = dir / "ids.txt";
  {
    std::ofstream f(in);
    for (const std::string& t : texts) f << hex(t) << "\n";
  }
  const std::string cmd = python + " " + shell_quote(script) + " encode " + shell_quote(path_) + " " +
                          shell_quote(in.string()) + " " + shell_quote(out.string());
  const int rc = std::system(cmd.c_str());
  std::vector<std::vector<int32_t> > ref;
  {
    std::ifstream f(out);
    for (std::string line; std::getline(f, line);) {
      std::istringstream ss(line);
      std::vector<int32_t> ids;
      for (int32_t id; ss >> id;) ids.push_back(id);
      ref.push_back(ids);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ASSERT_EQ(rc, 0) << cmd;
  ASSERT_EQ(ref.size(), texts.size());
  size_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": " + ::testing::PrintToString(texts[i]));
    EXPECT_EQ(encode(texts[i]), ref[i]);
    total += ref[i].size();
  }
  std::printf("matched %zu texts, %zu tokens, against tokenizers\n", texts.size(), total);
#endif
}

}  // namespace
}  // namespace qdec
