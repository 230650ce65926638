#!/usr/bin/env bash
# Writes tests/fixtures/ik-recipes: small DeepSeek-style files quantized by ik_llama.cpp's own
# llama-quantize with the per-tensor recipes of published uploads (recipes/*.txt), and
# ik_llama.cpp's logits on each, in several of its MLA modes (dump_logits.cpp), so that
# tests/py/test_ik_recipes.py compares mla.cpp with ik_llama.cpp on them without an ik build.
#   bash tools/ik-llama/make-recipe-fixtures.sh IK_SRC [IK_BUILD]
# IK_SRC: the ik_llama.cpp checkout; IK_BUILD (default IK_SRC/build): a CMake build of it with
# BUILD_SHARED_LIBS=OFF and the llama-quantize target built (bin/llama-quantize, src/libllama.a,
# ggml/src/libggml.a). Env: MLA_BIN (default build/mla, for `mla gguf synth`), CXX (default g++),
# PYTHON (default python3, standard library only), OUT (default tests/fixtures/ik-recipes).
#
# The two base files are random-weight deepseek2 models at DeepSeek-V3's attention widths
# (kv_lora_rank 512, rope 64, nope 128, v 128: ik_llama.cpp's MLA kernels take no others; it also
# wants a multiple of 4 heads) with a small hidden size, 4 heads, 2 layers (1 dense, 1 MoE),
# 8 experts of 256 (4 used + 1 shared) and the
# 512-token vocabulary of tests/fixtures/reference: "ik" as ik_llama.cpp's converter writes a
# DeepSeek file (attn_kv_b plus 2-D attn_k_b / attn_v_b), "mainline" as llama.cpp's does (3-D
# attn_k_b / attn_v_b only). A recipe names its base on a "# BASE" line. No importance matrix:
# the comparison is of two engines on the same bytes, not of the quantization's quality.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IK_SRC="${1:?usage: make-recipe-fixtures.sh IK_SRC [IK_BUILD]}"
IK_BUILD="${2:-$IK_SRC/build}"
OUT="${OUT:-$REPO/tests/fixtures/ik-recipes}"
MLA="${MLA_BIN:-$REPO/build/mla}"
QUANTIZE="$IK_BUILD/bin/llama-quantize"
for f in "$QUANTIZE" "$IK_BUILD/src/libllama.a" "$IK_BUILD/ggml/src/libggml.a" "$MLA"; do
    [ -e "$f" ] || { echo "missing $f (build ik_llama.cpp's llama-quantize with -DBUILD_SHARED_LIBS=OFF; build mla)" >&2; exit 1; }
done

# The token sequence every mode evaluates (ids of the 512-token vocabulary; BOS first).
TOKENS=0,110,135,200,16,102,115,205,376,291,5,333,412,133,349,185,366,94,493,420,16,153,348,454,436,40,190,7,58,220,181,219
# ik_llama.cpp modes, NAME:MLA:FA:UBATCH, the whole sequence in one ubatch: -mla 1 with flash
# attention off and on, and -mla 3 -fa 1 (its default; a file without attn_kv_b runs it as -mla 1).
# (Not -ub 1: ik's logits for a lone first token differ from its batched ones, by up to 0.5 on F32
# weights, where mla.cpp and ik's batched prefill agree to 1e-5.)
MODES=(mla1:1:0:512 mla1-fa:1:1:512 mla3-fa:3:1:512)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SYNTH=(gguf synth --arch deepseek2 --n-layer 2 --n-layer-dense-lead 1 --n-embd 256 --n-ff 512 --n-head 4
       --q-lora-rank 256 --kv-lora-rank 512 --qk-nope 128 --qk-rope 64 --v-head 128 --n-expert 8
       --n-expert-used 4 --n-expert-shared 1 --n-ff-exp 256 --type f16 --seed 39
       --vocab "$REPO/tests/fixtures/reference/deepseek-v3-tiny/model-f32.gguf" --name "mla.cpp ik recipe base")
"$MLA" "${SYNTH[@]}" --layout fused --ik-mla-tensors true -o "$WORK/base-ik.gguf"
"$MLA" "${SYNTH[@]}" --layout split -o "$WORK/base-mainline.gguf"

# ik's llama.h, libllama.a and libggml.a (C and C++ with OpenMP).
"${CXX:-g++}" -std=c++17 -O2 -I "$IK_SRC/include" -I "$IK_SRC/ggml/include" "$HERE/dump_logits.cpp" \
    "$IK_BUILD/src/libllama.a" "$IK_BUILD/ggml/src/libggml.a" -fopenmp -pthread -ldl -lm -o "$WORK/dump_logits"

mkdir -p "$OUT"
rm -f "$OUT"/*.gguf "$OUT"/*.f32 "$OUT"/manifest.json
names=()
for recipe in "$HERE"/recipes/*.txt; do
    name="$(basename "$recipe" .txt)"
    base="$(sed -n 's/^# BASE \(.*\)$/\1/p' "$recipe")"
    rules="$(grep -v '^#' "$recipe" | grep -v '^$' | paste -sd, -)"
    # Every 2-D weight is named by a rule; the positional type (Q8_0) is llama-quantize's required
    # file type, which a rule overrides.
    "$QUANTIZE" --ignore-imatrix-rules --custom-q "$rules" "$WORK/base-$base.gguf" "$OUT/$name.gguf" Q8_0 2 \
        > "$WORK/$name.quantize.log" 2>&1 || { cat "$WORK/$name.quantize.log" >&2; exit 1; }
    grep -E "converting to|fallback" "$WORK/$name.quantize.log" | sed 's/^/  /'
    "$WORK/dump_logits" "$OUT/$name.gguf" "$TOKENS" "$OUT/$name" "${MODES[@]}"
    # The same weights without activation quantization: ik's own F32 dequantization of the file
    # (llama-quantize --allow-requantize to F32; not committed), through -mla 1: the exact
    # arithmetic both engines' quantized matmuls approximate.
    "$QUANTIZE" --allow-requantize "$OUT/$name.gguf" "$WORK/$name-f32.gguf" F32 2 > "$WORK/$name.f32.log" 2>&1 \
        || { cat "$WORK/$name.f32.log" >&2; exit 1; }
    "$WORK/dump_logits" "$WORK/$name-f32.gguf" "$TOKENS" "$OUT/$name" f32-mla1:1:0:512
    names+=("$name:$base")
done

"${PYTHON:-python3}" - "$OUT" "$TOKENS" "$(git -C "$IK_SRC" rev-parse HEAD)" "${MODES[*]}" "${names[@]}" <<'EOF'
import hashlib, json, sys
from pathlib import Path
out, tokens, ik_commit, modes, names = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]
sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
files = {}
for item in names:
    name, base = item.split(":")
    files[name] = {
        "gguf": f"{name}.gguf", "gguf_sha256": sha(out / f"{name}.gguf"), "base": base,
        "logits": {m.split(":")[0]: {"file": f"{name}.{m.split(':')[0]}.f32",
                                    "sha256": sha(out / f"{name}.{m.split(':')[0]}.f32")} for m in modes},
        "dequantized_logits": {"file": f"{name}.f32-mla1.f32", "sha256": sha(out / f"{name}.f32-mla1.f32")},
    }
manifest = {
    "made_by": "tools/ik-llama/make-recipe-fixtures.sh (recipes in tools/ik-llama/recipes)",
    "ik_llama_cpp_commit": ik_commit,
    "tokens": [int(t) for t in tokens.split(",")],
    "n_vocab": 512,
    "modes": {m.split(":")[0]: {"mla": int(m.split(":")[1]), "fa": int(m.split(":")[2]), "ubatch": int(m.split(":")[3])}
              for m in modes},
    "files": files,
}
(out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
EOF
ls -la "$OUT"
