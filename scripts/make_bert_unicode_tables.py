#!/usr/bin/env python3
# Writes framework/text/bert_unicode_tables.cpp: what Hugging Face's BertNormalizer and
# BertPreTokenizer do to each Unicode code point, read off PyPI's `tokenizers` itself
# (one call per code point and property), so that Kiln's WordPiece tokenizer agrees with
# it character for character whatever Unicode version either side was built with.
#
# Regenerate (from the repository root, with a python that has PyPI's tokenizers; made
# with the one in /work/venv-torch, version in the generated file's first line):
#     /work/venv-torch/bin/python scripts/make_bert_unicode_tables.py
#
# The tables (code points; surrogates are not characters and are left out):
#   removed      clean_text drops them (NUL, U+FFFD, control and format characters)
#   to_space     clean_text makes them a space (whitespace other than ' ')
#   cjk          handle_chinese_chars puts a space on each side of them
#   strip        strip_accents: NFD, then every nonspacing mark dropped; the mapped text
#                of each code point it changes (Hangul syllables are left out: their
#                decomposition into jamo is arithmetic, done in bert_normalizer.cpp)
#   lower        lowercase: Rust's char::to_lowercase, the text of each code point it
#                changes
#   split_space  BertPreTokenizer splits on them and drops them (char::is_whitespace)
#   punctuation  BertPreTokenizer makes each one a word of its own
import sys

import tokenizers
from tokenizers import normalizers, pre_tokenizers

OUT = "framework/text/bert_unicode_tables.cpp"
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        yield c


def hangul_jamo(c):
    s = c - HANGUL_FIRST
    lead, vowel, trail = 0x1100 + s // 588, 0x1161 + (s % 588) // 28, 0x11A7 + s % 28
    return chr(lead) + chr(vowel) + (chr(trail) if trail != 0x11A7 else "")


def normalizer(clean=False, chinese=False, strip=False, lower=False):
    return normalizers.BertNormalizer(clean_text=clean, handle_chinese_chars=chinese, strip_accents=strip,
                                      lowercase=lower)


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def cpp_string(s):
    return '"' + "".join("\\x%02x" % b if b >= 0x80 or b < 0x20 or b in (0x22, 0x5C) else chr(b)
                         for b in s.encode("utf-8")) + '"'


def main():
    clean, chinese = normalizer(clean=True), normalizer(chinese=True)
    strip, lower = normalizer(strip=True), normalizer(lower=True)
    pre = pre_tokenizers.BertPreTokenizer()
    removed, to_space, cjk, split_space, punctuation = [], [], [], [], []
    strip_map, lower_map = [], []
    for c in code_points():
        ch = chr(c)
        cleaned = clean.normalize_str(ch)
        if cleaned == "":
            removed.append(c)
        elif cleaned == " " and ch != " ":
            to_space.append(c)
        else:
            assert cleaned == ch, hex(c)
        if chinese.normalize_str(ch) == " " + ch + " ":
            cjk.append(c)
        stripped = strip.normalize_str(ch)
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            assert stripped == hangul_jamo(c), hex(c)
        elif stripped != ch:
            strip_map.append((c, stripped))
        lowered = lower.normalize_str(ch)
        if lowered != ch:
            lower_map.append((c, lowered))
        words = [w for w, _ in pre.pre_tokenize_str("a" + ch + "b")]
        if words == ["a", "b"]:
            split_space.append(c)
        elif words == ["a", ch, "b"]:
            punctuation.append(c)
        else:
            assert words == ["a" + ch + "b"], (hex(c), words)

    lines = [
        "// Written by scripts/make_bert_unicode_tables.py (tokenizers %s); do not edit by hand." % tokenizers.__version__,
        "// What Hugging Face's BertNormalizer and BertPreTokenizer do to each code point.",
        '#include "text/bert_unicode_tables.h"',
        "",
        "namespace kiln::text::bert_tables {",
        "",
    ]

    def range_table(name, cps):
        rs = ranges(cps)
        lines.append("const CodeRange %s[] = {" % name)
        for i in range(0, len(rs), 6):
            lines.append("    " + " ".join("{0x%X, 0x%X}," % (a, b) for a, b in rs[i:i + 6]))
        lines.append("};")
        lines.append("const size_t %s_size = %d;" % (name, len(rs)))
        lines.append("")

    def map_table(name, pairs):
        lines.append("const CodeMapping %s[] = {" % name)
        for c, s in pairs:
            lines.append("    {0x%X, %s}," % (c, cpp_string(s)))
        lines.append("};")
        lines.append("const size_t %s_size = %d;" % (name, len(pairs)))
        lines.append("")

    range_table("kRemoved", removed)
    range_table("kToSpace", to_space)
    range_table("kCjk", cjk)
    range_table("kSplitSpace", split_space)
    range_table("kPunctuation", punctuation)
    map_table("kStrip", strip_map)
    map_table("kLower", lower_map)
    lines.append("}  // namespace kiln::text::bert_tables")
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: removed %d, to_space %d, cjk %d, split_space %d, punctuation %d, strip %d, lower %d"
          % (OUT, len(removed), len(to_space), len(cjk), len(split_space), len(punctuation), len(strip_map),
             len(lower_map)), file=sys.stderr)


if __name__ == "__main__":
    main()
