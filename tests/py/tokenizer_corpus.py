"""Deterministic mixed-text corpus for tokenizer comparisons (tests and tools/bench_tokenizer.py).

Real text found on a Debian machine (Python stdlib sources, /usr/share/common-licenses,
/usr/share/doc/*/copyright) plus generated strings from a seeded RNG: CJK, Hangul, Arabic,
Cyrillic/Greek/Indic, emoji sequences, numbers, whitespace runs, mojibake and other
invalid-looking sequences, contractions and special-token look-alikes. Items are 1..6 source
lines (newlines kept) or one generated string; every item is a Python str (valid Unicode).
"""
import glob
import os
import random
import sysconfig


def _read(path, limit):
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError):
        return ""


def _real_texts(rng, budget):
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    files += sorted(glob.glob("/usr/share/doc/*/copyright"))
    items, total = [], 0
    quotas = {"py": budget * 5 // 10, "lic": budget * 2 // 10, "doc": budget * 3 // 10}
    used = {"py": 0, "lic": 0, "doc": 0}
    for path in files:
        kind = "py" if path.endswith(".py") else "lic" if "common-licenses" in path else "doc"
        if used[kind] >= quotas[kind] or not os.path.isfile(path):
            continue
        text = _read(path, 64 * 1024)
        lines = text.splitlines(keepends=True)
        i = 0
        while i < len(lines) and used[kind] < quotas[kind]:
            k = rng.randint(1, 6)
            item = "".join(lines[i:i + k])
            i += k
            if item:
                items.append(item)
                n = len(item.encode("utf-8"))
                used[kind] += n
                total += n
    return items, total


def _chars(rng, ranges, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "❤️", "🦙", "✅", "🚀", "😶‍🌫️", "🧑🏿‍💻", "©", "™", "🀄", "🫠"]
WS = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff", "\u2003", "\x0b", "\x0c", "    ", "\t\t"]
ODD = ["\ufffd", "\\xff\\xfe", "Ã©tÃ©", "â€™s", "â€œquotedâ€\x9d", "\u0301start", "a\u0300\u0301\u0302", "\x00", "\x1b[31mred\x1b[0m",
       "\\ud800", "\ufff0\uffff", "\U0010fffd", "\u202eevil\u202c", "ﬁ ﬂ ﬃ", "Ｆｕｌｌｗｉｄｔｈ１２３", "①②③ ⅠⅡⅢ ½¾ ²³",
       "<｜User｜>", "<｜begin▁of▁sentence｜>", "<｜User", "<|EOT|>", "<think>", "</s>", "[INST]"]
WORDS = ["I'll", "WE'RE", "they've", "it's", "O'Neil", "x'ſ", "DON'T", "can't", "y'all", "'twas", "K", "Ω", "ΐ", "ﬃ"]


def _generated(rng):
    kind = rng.randrange(9)
    if kind == 0:  # CJK with kana and punctuation
        s = _chars(rng, [(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF), (0x3001, 0x3002), (0xFF01, 0xFF1F)],
                   rng.randint(5, 120))
    elif kind == 1:  # Hangul and Latin
        s = " ".join(_chars(rng, [(0xAC00, 0xD7A3)], rng.randint(1, 6)) if rng.random() < 0.7 else
                     rng.choice(["Seoul", "K-pop", "2024년"]) for _ in range(rng.randint(2, 20)))
    elif kind == 2:  # Arabic with diacritics and Arabic-Indic digits
        s = " ".join(_chars(rng, [(0x0621, 0x064A)] * 6 + [(0x064B, 0x0652), (0x0660, 0x0669)], rng.randint(2, 9))
                     for _ in range(rng.randint(2, 25)))
    elif kind == 3:  # Cyrillic, Greek, Devanagari, Thai, Hebrew words
        ranges = rng.choice([[(0x0410, 0x044F)], [(0x0391, 0x03C9), (0x1F00, 0x1FFC)], [(0x0905, 0x0939), (0x093E, 0x094D)],
                             [(0x0E01, 0x0E3A)], [(0x05D0, 0x05EA)]])
        s = " ".join(_chars(rng, ranges, rng.randint(1, 10)) for _ in range(rng.randint(2, 25)))
    elif kind == 4:  # emoji between words
        s = " ".join(rng.choice(EMOJI) * rng.randint(1, 3) if rng.random() < 0.5 else rng.choice(WORDS)
                     for _ in range(rng.randint(2, 20)))
    elif kind == 5:  # numbers
        parts = [str(rng.randint(0, 10 ** rng.randint(1, 15))), f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 6)}f}",
                 f"{rng.randint(0, 10**9):,}", f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                 "+1 (555) 010-" + str(rng.randint(1000, 9999)), "0x" + format(rng.getrandbits(64), "x"), "3" * rng.randint(1, 12)]
        s = " ".join(rng.choice(parts) for _ in range(rng.randint(1, 12)))
    elif kind == 6:  # whitespace runs around words
        s = "".join(rng.choice(WS) * rng.randint(1, 4) + rng.choice(WORDS + ["word", "x", "{", "}", "()"])
                    for _ in range(rng.randint(1, 15)))
    elif kind == 7:  # invalid-looking sequences
        s = "".join(rng.choice(ODD) + rng.choice(["", " ", "x", "\n"]) for _ in range(rng.randint(1, 10)))
    else:  # code-like punctuation soup
        s = "".join(rng.choice(["==", "!=", "->", "=>", "::", "/*", "*/", "//", "#!", "$$", "@@", "&&", "||", "...",
                                "```", "'''", '"""', "\\n", "%d", "{0}", " ", "\t", "\n", "x", "_", "__init__"])
                    for _ in range(rng.randint(3, 40)))
    return s


def build_corpus(min_bytes=1_100_000, seed=20240611):
    """Returns a list of str items whose UTF-8 sizes add up to at least min_bytes."""
    rng = random.Random(seed)
    items, total = _real_texts(rng, min_bytes * 6 // 10)
    while total < min_bytes:
        s = _generated(rng)
        items.append(s)
        total += len(s.encode("utf-8"))
    rng.shuffle(items)
    return items


def corpus_bytes(items):
    return sum(len(s.encode("utf-8")) for s in items)
