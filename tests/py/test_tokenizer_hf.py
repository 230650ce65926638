"""mla.cpp's tokenizer against HF tokenizers (PyPI `tokenizers`) on DeepSeek-V3.

Converts tests/fixtures/tokenizers/deepseek-v3 with `mla gguf vocab-from-hf`, then on a ≥1 MB
mixed corpus (tokenizer_corpus.py) checks, item by item: mla ids == HF
encode(text, add_special_tokens=False) ids, and the streaming decode of those ids == text.
Also: the converted GGUF's keys against tokenizer.json/tokenizer_config.json, special-token
matching, and every known pre-tokenizer's pieces against the equivalent HF pre_tokenizer
pipeline (Oniguruma vs our PCRE2 translation).
"""
import json
import os
import pathlib
import struct
import subprocess
import sys

import pytest
from tokenizers import Regex, Tokenizer
from tokenizers import pre_tokenizers as pt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_corpus

ROOT = pathlib.Path(__file__).resolve().parents[2]
DS3_DIR = ROOT / "tests" / "fixtures" / "tokenizers" / "deepseek-v3"
MLA = os.environ.get("MLA_BIN", str(ROOT / "build" / "mla"))


def run_mla(*args, check=True):
    r = subprocess.run([MLA, *map(str, args)], capture_output=True, check=False, text=True)
    if check and r.returncode != 0:
        pytest.fail(f"mla {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r


def write_jsonl(path, items):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(x) + "\n" for x in items)


def read_jsonl(text):
    # split on "\n" only: str.splitlines() would also split inside strings at U+2028, U+0085, ...
    return [json.loads(line) for line in text.split("\n") if line]


@pytest.fixture(scope="module")
def hf():
    if not (DS3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"missing test fixture {DS3_DIR}/tokenizer.json")
    return Tokenizer.from_file(str(DS3_DIR / "tokenizer.json"))


@pytest.fixture(scope="module")
def ds3_gguf(tmp_path_factory, hf):
    out = tmp_path_factory.mktemp("tok") / "deepseek-v3-vocab.gguf"
    r = run_mla("gguf", "vocab-from-hf", DS3_DIR, "-o", out)
    assert "pre 'deepseek-v3'" in r.stdout
    return out


@pytest.fixture(scope="module")
def corpus():
    items = tokenizer_corpus.build_corpus()
    assert tokenizer_corpus.corpus_bytes(items) >= 1_000_000
    return items


def read_gguf_metadata(path):
    """GGUF v2/v3 metadata as a dict, parsed per the GGUF spec (gguf-py's reader takes ~20 s on a
    128k-token vocabulary; this one well under a second)."""
    data = pathlib.Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        v = data[pos:pos + n].decode("utf-8")
        pos += n
        return v

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF" and take("4s") and take("I") in (2, 3)
    n_tensors, n_kv = take("Q"), take("Q")
    assert n_tensors == 0
    md = {}
    for _ in range(n_kv):
        k = string()
        md[k] = value(take("I"))
    return md


def test_converted_keys_match_hf_files(ds3_gguf, hf):
    md = read_gguf_metadata(ds3_gguf)

    def s(key):
        return md[key]

    def arr(key):
        return md[key]

    assert s("tokenizer.ggml.model") == "gpt2"
    assert s("tokenizer.ggml.pre") == "deepseek-v3"
    tokens = arr("tokenizer.ggml.tokens")
    assert len(tokens) == hf.get_vocab_size(with_added_tokens=True) == 128815
    assert all(tokens[i] == hf.id_to_token(i) for i in range(len(tokens)))
    types = arr("tokenizer.ggml.token_type")
    tj = json.loads((DS3_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    added = {a["id"]: a for a in tj["added_tokens"]}
    for i, t in enumerate(types):
        if i in added:  # special, or "<｜...｜>" which llama.cpp's converter also marks CONTROL
            looks = added[i]["content"].startswith(("<|", "<｜")) and added[i]["content"].endswith(("|>", "｜>"))
            assert t == (3 if added[i]["special"] or looks else 4), (i, added[i])
        else:
            assert t == 1, i
    merges = arr("tokenizer.ggml.merges")
    assert merges == tj["model"]["merges"]
    cfg = json.loads((DS3_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert md["tokenizer.ggml.bos_token_id"] == hf.token_to_id(cfg["bos_token"]["content"])
    assert md["tokenizer.ggml.eos_token_id"] == hf.token_to_id(cfg["eos_token"]["content"])
    assert md["tokenizer.ggml.padding_token_id"] == hf.token_to_id(cfg["pad_token"]["content"])
    assert md["tokenizer.ggml.add_bos_token"] is cfg["add_bos_token"]
    assert md["tokenizer.ggml.add_eos_token"] is cfg["add_eos_token"]
    assert s("tokenizer.chat_template") == cfg["chat_template"]


def test_corpus_ids_and_round_trip_match_hf(ds3_gguf, hf, corpus, tmp_path):
    inp = tmp_path / "corpus.jsonl"
    write_jsonl(inp, corpus)
    mine = read_jsonl(run_mla("tokenize", "-m", ds3_gguf, "--batch-jsonl", inp).stdout)
    assert len(mine) == len(corpus)
    ref = [e.ids for e in hf.encode_batch(corpus, add_special_tokens=False)]
    bad = [i for i in range(len(corpus)) if mine[i] != ref[i]]
    n_bytes = tokenizer_corpus.corpus_bytes(corpus)
    print(f"\ncorpus: {len(corpus)} items, {n_bytes} bytes, {sum(map(len, ref))} tokens; id mismatches: {len(bad)}")
    for i in bad[:3]:
        print(f"  item {i}: {corpus[i]!r}\n    hf:  {ref[i][:40]}\n    mla: {mine[i][:40]}")
    assert not bad, f"{len(bad)} of {len(corpus)} items differ from HF tokenizers"

    ids_file = tmp_path / "ids.jsonl"
    write_jsonl(ids_file, mine)
    decoded = read_jsonl(run_mla("tokenize", "-m", ds3_gguf, "--decode-jsonl", ids_file).stdout)
    bad_rt = [i for i in range(len(corpus)) if decoded[i] != corpus[i]]
    print(f"decode(encode(x)) != x for {len(bad_rt)} items")
    assert not bad_rt, f"first failing item: {corpus[bad_rt[0]]!r} -> {decoded[bad_rt[0]]!r}"


def test_deepseek_v3_special_tokens(ds3_gguf, hf, tmp_path):
    text = "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>"
    ids = json.loads(run_mla("tokenize", "-m", ds3_gguf, "--ids-only", text).stdout)
    assert ids == hf.encode(text, add_special_tokens=False).ids
    for t in ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"]:
        assert hf.token_to_id(t) in ids, t
    # As untrusted text: no CONTROL token appears and the text survives a round trip.
    plain = json.loads(run_mla("tokenize", "-m", ds3_gguf, "--ids-only", "--no-special", text).stdout)
    control = {hf.token_to_id(t) for t in ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"]}
    assert not control & set(plain)
    assert hf.decode(plain, skip_special_tokens=False) == text
    # --add-special prepends BOS (tokenizer_config.json: add_bos_token true, bos <｜begin▁of▁sentence｜>).
    withbos = json.loads(run_mla("tokenize", "-m", ds3_gguf, "--ids-only", "--add-special", "Hi").stdout)
    assert withbos == [hf.token_to_id("<｜begin▁of▁sentence｜>")] + hf.encode("Hi", add_special_tokens=False).ids


def test_unknown_pre_tokenizer_is_a_clear_error(ds3_gguf, tmp_path):
    r = run_mla("tokenize", "-m", ds3_gguf, "--tokenizer-pre", "no-such-pre", "x", check=False)
    assert r.returncode != 0
    assert "no-such-pre" in r.stderr and "deepseek-v3" in r.stderr
    # A tokenizer.json whose pre_tokenizer is unknown needs --pre.
    tj = json.loads((DS3_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,4}"
    d = tmp_path / "odd"
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    r = run_mla("gguf", "vocab-from-hf", d, "-o", tmp_path / "odd.gguf", check=False)
    assert r.returncode != 0 and "--pre" in r.stderr and "{1,4}" in r.stderr
    r = run_mla("gguf", "vocab-from-hf", d, "-o", tmp_path / "odd.gguf", "--pre", "deepseek-v3")
    assert "pre 'deepseek-v3'" in r.stdout


# HF pre_tokenizer pipelines equivalent to each known tokenizer.ggml.pre (as the models'
# tokenizer.json files define them; deepseek-v3 is the real file's).
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")
KIMI_RE = (r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
           r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
           r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
DS_LLM_LETTERS = (
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+")
DS_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"


def _split(pattern):
    return pt.Split(Regex(pattern), "isolated")


def _bl(use_regex=False):
    return pt.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def hf_pipelines(hf):
    return {
        "deepseek-v3": hf.pre_tokenizer,
        "deepseek-llm": pt.Sequence([_split("[\r\n]"), _split(DS_LLM_LETTERS),
                                     _split("\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"),
                                     _split("\\s+$"), _split(DS_CJK), pt.Digits(individual_digits=True), _bl()]),
        "deepseek-coder": pt.Sequence([_split("[\r\n]"), _split(r"\s?\p{L}+"), _split(r"\s?\p{P}+"), _split(DS_CJK),
                                       pt.Digits(individual_digits=True), _bl()]),
        "llama-bpe": pt.Sequence([_split(LLAMA3_RE), _bl()]),
        "glm4": pt.Sequence([_split(LLAMA3_RE), _bl()]),
        "qwen2": pt.Sequence([_split(QWEN2_RE), _bl()]),
        "gpt-2": _bl(use_regex=True),
        "smollm": pt.Sequence([pt.Digits(individual_digits=True), _bl(use_regex=True)]),
        "kimi-k2": pt.Sequence([_split(KIMI_RE), _bl()]),
        "default": pt.Sequence([_split(r"[\p{P}\$\+<=>\^~\|]+"),
                                _split(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"),
                                _split(r"\p{N}+"), _split("[0-9][0-9][0-9]"), _bl()]),
    }


def _byte_decoder():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-llm", "deepseek-coder", "llama-bpe", "glm4", "qwen2",
                                  "gpt-2", "smollm", "kimi-k2", "default"])
def test_pretokenizer_pieces_match_hf(name, hf, corpus, tmp_path):
    items = corpus[::3]  # a third of the corpus keeps this under a few seconds per pre-tokenizer
    inp = tmp_path / "items.jsonl"
    write_jsonl(inp, items)
    mine = read_jsonl(run_mla("tokenize", "--pretokenize", "--tokenizer-pre", name, "--batch-jsonl", inp).stdout)
    assert len(mine) == len(items), f"{name}: mla printed {len(mine)} lines for {len(items)} items"
    pipe = hf_pipelines(hf)[name]
    dec = _byte_decoder()
    bad = 0
    for text, got in zip(items, mine):
        ref = [bytes(dec[c] for c in p).decode("utf-8") for p, _ in pipe.pre_tokenize_str(text)]
        if got != ref:
            if bad < 3:
                print(f"{name}: {text!r}\n  hf:  {ref[:20]}\n  mla: {got[:20]}")
            bad += 1
    assert bad == 0, f"{name}: {bad} of {len(items)} items split differently from HF"
