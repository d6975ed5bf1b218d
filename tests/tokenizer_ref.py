#!/usr/bin/env python3
"""Reference tokenizer for tests/test_tokenizer.cpp, and the generator of the Unicode tables in
src/model/tokenizer.cpp.

  tokenizer_ref.py encode MODEL.gguf TEXTS OUT
      Builds a Hugging Face `tokenizers` BPE from the GGUF's vocabulary and merges (read by the small GGUF
      reader below, independent of qdec's), with SmolLM2's pre-tokenizer (digits split one by one, then the
      GPT-2 byte-level regex) and its special tokens. TEXTS holds one hex-encoded UTF-8 text per line; OUT gets
      one line of space-separated token ids per text.
  tokenizer_ref.py check
      Exits 0 when `tokenizers` is importable (the C++ test skips otherwise).
  tokenizer_ref.py tables
      Prints the \\p{L} and \\p{N} code point ranges (general categories L* and N*) as C++ initializers.
"""
import struct
import sys

# GGUF value types (docs/model.md).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos : pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == _STRING:
            return string()
        if t == _ARRAY:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(_SCALARS[t])

    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    pos = 4
    take("<I")  # version
    take("<Q")  # tensor count
    n_kv = take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    return meta


def build_tokenizer(meta):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_special_tokens(specials)
    return tok


def encode(model, texts_path, out_path):
    tok = build_tokenizer(read_gguf_metadata(model))
    with open(texts_path) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # every text, the last included, ends with a newline
    texts = [bytes.fromhex(line).decode("utf-8") for line in lines]
    with open(out_path, "w") as out:
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            out.write(" ".join(map(str, ids)) + "\n")


def tables():
    import unicodedata

    def ranges(prefix):
        r, start = [], None
        for c in range(0x110000):
            if unicodedata.category(chr(c)).startswith(prefix):
                if start is None:
                    start = c
            elif start is not None:
                r.append((start, c - 1))
                start = None
        return r

    print(f"// Unicode {unicodedata.unidata_version}")
    for name, prefix in (("kLetterRanges", "L"), ("kNumberRanges", "N")):
        r = ranges(prefix)
        print(f"constexpr CodeRange {name}[] = {{")
        for i in range(0, len(r), 6):
            print("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in r[i : i + 6]))
        print("};")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "check":
        import tokenizers  # noqa: F401

        sys.exit(0)
    if len(sys.argv) == 2 and sys.argv[1] == "tables":
        tables()
    elif len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(__doc__)
