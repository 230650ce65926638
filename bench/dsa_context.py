#!/usr/bin/env python3
"""Decode and prefill cost of DeepSeek Sparse Attention against dense MLA at growing context, on a
GLM-5-shaped synth model (real per-layer widths, two layers, 16 experts), with the FLOP and byte
model that predicts each figure.

    python3 bench/dsa_context.py [--mla build/mla] [--contexts 2048,8192,32768] [--threads 2]
                                 [--decode 16] [--model FILE] [--json OUT]

For every context L and --dsa on|off: one `mla run` request of L random prompt tokens (one
prefill, chunked by the engine) followed by --decode greedy tokens; reports prefill and decode
tokens/s. The model file is made once with `mla gguf synth --preset glm5 --n-vocab 32768` (Q4_K;
the real per-layer widths, a smaller vocabulary: the lm_head costs the same at every context) unless
--model is given. Timings come from mla run's own JSON (wall time of each phase)."""
import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# GLM-5 widths (the glm5 preset).
H, R, DR, DN, DV = 64, 512, 64, 192, 256      # heads, kv_lora, rope, nope, v
HI, DI, TOPK = 32, 128, 2048                   # indexer heads, dims, top_k


def attention_macs(L, sparse):
    """Multiply-adds of one decode token's attention in one layer at context L (MQA path)."""
    proj = H * (DN + DV) * R                       # absorb q_nope, un-absorb the latent output
    rows = min(L, TOPK) if sparse else L
    core = H * rows * (R + DR + R)                 # scores over [c_kv | k_pe], then Σ p · c_kv
    indexer = HI * DI * L if sparse else 0         # q·k per indexer head over the whole context
    return proj + core + indexer


def cache_bytes(L, sparse):
    """Cache bytes one decode token reads per layer (F16 cache): latent rows attended, indexer keys."""
    rows = min(L, TOPK) if sparse else L
    return rows * (R + DR) * 2 + (L * DI * 2 if sparse else 0)


def prefill_attention_macs(L, sparse):
    """Multiply-adds of a whole L-token prefill's attention in one layer. Dense goes down MHA
    (decompress each row once, then qk_head + v_head per visible row); sparse (the auto policy's
    choice for long contexts) down MQA over top_k rows, plus the indexer over every visible row."""
    visible = L * (L + 1) // 2
    if not sparse:
        return L * H * (DN + DV) * R + H * visible * (DN + DR + DV)
    selected = sum(min(i + 1, TOPK) for i in range(L))
    return L * H * (DN + DV) * R + H * selected * (R + DR + R) + HI * DI * visible


def run(mla, model, L, dsa, threads, n_decode, seed):
    rnd = random.Random(seed)
    tokens = [rnd.randrange(0, 32768) for _ in range(L)]
    tok_file = Path(f"/tmp/dsa_bench_{L}.txt")
    tok_file.write_text(",".join(map(str, tokens)) + "\n")  # one request of --batch (too long for argv)
    cmd = [mla, "run", "-m", model, "--batch", str(tok_file), "-n", str(n_decode), "--ignore-eos", "--json",
           "--threads", str(threads), "--dsa", dsa, "--kv-cache-tokens", str(L + n_decode + 64),
           "--max-num-batched-tokens", "2048"]
    r = subprocess.run(cmd, capture_output=True, text=True)  # noqa: PLW1510 (the caller checks the return code)
    if r.returncode != 0:
        sys.exit(f"mla run failed ({L}, dsa {dsa}): {r.stderr.strip().splitlines()[-1]}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mla", default=str(ROOT / "build" / "mla"))
    ap.add_argument("--model", default="")
    ap.add_argument("--contexts", default="2048,8192,32768")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--json", default="")
    ap.add_argument("--modes", default="on,off", help="which --dsa settings to run: on,off | on | off")
    a = ap.parse_args()
    model = a.model
    if not model:
        model = str(ROOT / "build" / "bench-models" / "glm5-preset-v32k-q4_k.gguf")
        if not os.path.exists(model):
            os.makedirs(os.path.dirname(model), exist_ok=True)
            subprocess.run([a.mla, "gguf", "synth", "--preset", "glm5", "--n-vocab", "32768", "-o", model], check=True)
    rows = []
    for L in [int(x) for x in a.contexts.split(",")]:
        for dsa in a.modes.split(","):
            j = run(a.mla, model, L, dsa, a.threads, a.decode, seed=L)
            sparse = dsa == "on"
            rows.append({"context": L, "dsa": dsa,
                         "prefill_tps": j["prefill_tokens_per_second"], "prefill_s": j["prefill_seconds"],
                         "decode_tps": j["decode_tokens_per_second"],
                         "decode_ms": 1000.0 / j["decode_tokens_per_second"],
                         "attn_macs_per_token_layer": attention_macs(L, sparse),
                         "cache_bytes_per_token_layer": cache_bytes(L, sparse),
                         "prefill_attn_macs_per_layer": prefill_attention_macs(L, sparse)})
            r = rows[-1]
            print(f"L={L:6d} dsa={dsa:3s} prefill {r['prefill_tps']:8.1f} t/s ({r['prefill_s']:7.1f} s)  "
                  f"decode {r['decode_tps']:6.2f} t/s ({r['decode_ms']:7.1f} ms)  model: attn "
                  f"{r['attn_macs_per_token_layer'] / 1e6:7.1f} M MAC/token/layer, cache "
                  f"{r['cache_bytes_per_token_layer'] / 1e6:6.2f} MB/token/layer, prefill attn "
                  f"{r['prefill_attn_macs_per_layer'] / 1e12:6.2f} T MAC/layer", flush=True)
    by = {(r["context"], r["dsa"]): r for r in rows}
    ctxs = sorted({r["context"] for r in rows})
    base = ctxs[0]
    for L in ctxs[1:]:
        for dsa in a.modes.split(","):
            if (base, dsa) not in by or (L, dsa) not in by:
                continue
            print(f"decode cost at {L} / at {base}, dsa {dsa}: "
                  f"{by[(L, dsa)]['decode_ms'] / by[(base, dsa)]['decode_ms']:.2f}x")
    for L in ctxs:
        if (L, "on") not in by or (L, "off") not in by:
            continue
        print(f"prefill of {L}: dsa on is {by[(L, 'off')]['prefill_s'] / by[(L, 'on')]['prefill_s']:.2f}x faster than off")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
