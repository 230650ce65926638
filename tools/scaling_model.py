#!/usr/bin/env python3
"""The paper model of docs/SCALING.md: for an MLA-MoE configuration split over N ranks the way
src/parallel/ splits it, the weight bytes each rank holds, the bytes each exchange moves per token
and layer, and the decode and prefill speed this predicts on a given network.

    tools/scaling_model.py                    # the tables of docs/SCALING.md (GLM-5, DeepSeek-V3.2)
    tools/scaling_model.py --check BENCH.json --config synth.json
        # the communication rank 0 counts in `mla bench --json` (comm_bytes_per_token of the tg
        # test) against the protocol's count for that synth configuration

Assumptions are arguments (node memory bandwidth, prefill FLOP rate, per-message latency); the
defaults are stated in docs/SCALING.md. Every matrix is taken at Q4_K (4.5 bits per weight).
"""
import argparse
import json
import math

Q4K = 144 / 256  # bytes per weight: a 256-weight Q4_K block is 144 bytes
F32 = 4

# The published configurations (config.json of the checkpoints; GLM-5 from the transformers
# GlmMoeDsaConfig defaults and its training scripts: 3 dense + 75 MoE layers, 256 experts).
MODELS = {
    "GLM-5": {"n_layer": 78, "n_dense": 3, "n_embd": 6144, "n_head": 64, "q_lora": 2048, "kv_lora": 512,
              "qk_nope": 192, "qk_rope": 64, "v_head": 256, "n_ff": 12288, "n_ff_exp": 2048, "n_expert": 256,
              "n_used": 8, "n_shared": 1, "n_vocab": 154880, "idx_head": 32, "idx_dim": 128},
    "DeepSeek-V3.2": {"n_layer": 61, "n_dense": 3, "n_embd": 7168, "n_head": 128, "q_lora": 1536, "kv_lora": 512,
                      "qk_nope": 128, "qk_rope": 64, "v_head": 128, "n_ff": 18432, "n_ff_exp": 2048, "n_expert": 256,
                      "n_used": 8, "n_shared": 1, "n_vocab": 129280, "idx_head": 64, "idx_dim": 128},
}


def ceil_div(a, b):
    return -(-a // b)


def weights(c, n):
    """Bytes of rank 0's share (the largest: the extra unit of an uneven split, and the lm_head),
    by part. The embedding is not counted: a rank pages in the rows of the tokens it sees."""
    E, H, L, D = c["n_embd"], c["n_head"], c["n_layer"], c["n_dense"]
    qk_head = c["qk_nope"] + c["qk_rope"]
    h = ceil_div(H, n)
    attn = (c["q_lora"] * h * qk_head + ceil_div(E, n) * H * c["v_head"]  # q_b rows, attn_output rows
            + E * c["q_lora"] + E * (c["kv_lora"] + c["qk_rope"])) * Q4K  # q_a, kv_a: every rank's
    idx = (c["q_lora"] * c["idx_head"] * c["idx_dim"] + E * c["idx_dim"] + E * c["idx_head"]) * Q4K
    # W_UK and W_UV as F32 (W_UK in the absorbed and the decompressed layout), derived at load
    # from attn_k_b / attn_v_b for every head on every rank today; a rank reads its heads' slices.
    wkv_f32 = H * c["kv_lora"] * (2 * c["qk_nope"] + c["v_head"]) * F32
    wkv_read = h * c["kv_lora"] * (c["qk_nope"] + c["v_head"]) * F32  # MQA decode: W_UK and W_UV of its heads
    dense = (ceil_div(c["n_ff"], n) * E * 2 + ceil_div(E, n) * c["n_ff"]) * Q4K
    expert = 3 * E * c["n_ff_exp"] * Q4K
    shared_f = c["n_ff_exp"] * c["n_shared"]
    shared = (ceil_div(shared_f, n) * E * 2 + ceil_div(E, n) * shared_f) * Q4K
    router = E * c["n_expert"] * F32  # llama-quantize keeps ffn_gate_inp in F32
    lm_head = c["n_vocab"] * E * Q4K
    fixed = L * (attn + idx) + D * dense + (L - D) * (shared + router) + lm_head
    experts = (L - D) * ceil_div(c["n_expert"], n) * expert
    return {"fixed": fixed, "experts": experts, "expert": expert, "wkv_f32": L * wkv_f32, "wkv_read": L * wkv_read,
            "total": fixed + L * wkv_f32 + experts}


def exchanges(c, n, t=1, moe=True, last=False):
    """(bytes rank 0 counts (sent + received), [(kind, bytes per rank, hops)]) for one layer
    of a step of t tokens. kind: gather (all_gather, ring: n - 1 hops of the block), chain (n - 1
    sequential sends of the partial sums), bcast (the sums from the last rank)."""
    E = c["n_embd"]
    rows = 1 if last else t  # the last layer carries on only the rows whose logits are wanted
    out = [("gather", t * ceil_div(c["n_head"], n) * c["v_head"] * F32),  # attention heads
           ("gather", t * ceil_div(E, n) * F32)]  # attn_output rows
    if moe:
        shared_f = c["n_ff_exp"] * c["n_shared"]
        out += [("chain", rows * E * F32), ("gather", rows * ceil_div(shared_f, n) * F32),
                ("gather", rows * ceil_div(E, n) * F32), ("bcast", rows * E * F32)]
    else:
        out += [("gather", rows * ceil_div(c["n_ff"], n) * F32), ("gather", rows * ceil_div(E, n) * F32)]
    if n == 1:
        return 0, []
    counted = 0
    for kind, b in out:
        counted += b * n if kind == "gather" else b  # gather: sent b, received (n - 1) b
    return counted, out


def step_message(t, n_seqs, ctx, block=16):
    """The step broadcast: header and payload (int32s), per the protocol in parallel/step_wire."""
    ints = 3 * t + 6 * n_seqs + sum(ctx) + n_seqs + sum(ceil_div(x, block) for x in ctx)
    return 40 + 4 * ints


def seconds_per_step(c, n, t, bw_gbps, alpha, mem_gbs, flops, ctx):
    """Predicted time of one step of t tokens (one sequence): compute (memory- or FLOP-bound,
    the larger) plus communication (ring gathers, the chain, a binomial broadcast)."""
    if n == 1:
        comm = 0.0
    else:
        beta = bw_gbps * 1e9 / 8  # bytes/s
        comm = math.ceil(math.log2(n)) * (alpha + step_message(t, 1, [ctx]) / beta)
        for il in range(c["n_layer"]):
            _, ex = exchanges(c, n, t, moe=il >= c["n_dense"], last=il == c["n_layer"] - 1)
            for kind, b in ex:
                hops = math.ceil(math.log2(n)) if kind == "bcast" else n - 1
                comm += hops * (alpha + b / beta)
    w = weights(c, n)
    L, D = c["n_layer"], c["n_dense"]
    # A step reads each distinct expert its tokens picked once: with t tokens routed uniformly,
    # the expected distinct experts of a layer, of which this rank holds 1/n.
    distinct = c["n_expert"] * (1 - (1 - c["n_used"] / c["n_expert"]) ** t)
    read = w["fixed"] + w["wkv_read"] + (L - D) * distinct / n * w["expert"]
    macs = (w["fixed"] / Q4K + (L - D) * c["n_used"] / n * w["expert"] / Q4K) * t  # weights used per token
    compute = max(read / (mem_gbs * 1e9), 2 * macs / flops)
    return compute + comm, comm


def table(name, c, args):
    lines = [f"### {name}", "",
             ("| N | weights on rank 0 | of it routed experts | F32 W_UK/W_UV (every rank) | exchange bytes per token "
              "per MoE layer (rank 0) | decode tok/s 25 Gb/s | decode tok/s 100 Gb/s | prefill tok/s 25 Gb/s | "
              "prefill tok/s 100 Gb/s |"),
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in (1, 2, 4, 8):
        w = weights(c, n)
        counted, _ = exchanges(c, n, 1, moe=True)
        dec = [1 / seconds_per_step(c, n, 1, bw, args.alpha, args.mem_gbs, args.flops, args.ctx)[0] for bw in (25, 100)]
        pre = [args.chunk / seconds_per_step(c, n, args.chunk, bw, args.alpha, args.mem_gbs, args.flops,
                                             args.ctx)[0] for bw in (25, 100)]
        lines.append(f"| {n} | {w['total'] / 2**30:.1f} GiB | {w['experts'] / 2**30:.1f} GiB | "
                     f"{w['wkv_f32'] / 2**30:.1f} GiB | {counted / 1e3:.1f} KB | {dec[0]:.2f} | {dec[1]:.2f} | "
                     f"{pre[0]:.0f} | {pre[1]:.0f} |")
    return "\n".join(lines)


def check(bench_path, config_path):
    with open(config_path) as f:
        cfg = json.load(f)
    keys = {"n_layer": "n_layer", "n_dense": "n_layer_dense_lead", "n_embd": "n_embd", "n_head": "n_head",
            "v_head": "v_head", "n_ff": "n_ff", "n_ff_exp": "n_ff_exp", "n_shared": "n_expert_shared"}
    c = {k: cfg[v] for k, v in keys.items()}
    with open(bench_path) as f:
        rows = json.load(f)
    for row in rows:
        if row["n_gen"] == 0:
            continue
        n, g = row["n_ranks"], row["n_gen"]
        counted = 0
        for step in range(g):  # decode steps: contexts 2 .. g + 1 after a 1-token prompt
            counted += step_message(1, 1, [step + 2]) * (n - 1)
            for il in range(c["n_layer"]):
                counted += exchanges(c, n, 1, moe=il >= c["n_dense"], last=il == c["n_layer"] - 1)[0]
        print(f"{row['test']} N={n}: engine counted {row['comm_bytes_per_token']:.1f} B/token, "
              f"model {counted / g:.1f} B/token")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mem-gbs", type=float, default=200.0, help="memory bandwidth a node achieves, GB/s")
    ap.add_argument("--flops", type=float, default=1.5e12, help="multiply-adds x2 per second a node achieves")
    ap.add_argument("--alpha", type=float, default=20e-6, help="seconds per message (latency)")
    ap.add_argument("--chunk", type=int, default=512, help="prefill tokens per step")
    ap.add_argument("--ctx", type=int, default=4096, help="context length of the decoding sequence")
    ap.add_argument("--check", help="mla bench --json output to compare with")
    ap.add_argument("--config", help="the synth config of that bench run")
    args = ap.parse_args()
    if args.check:
        check(args.check, args.config)
        return
    for name, c in MODELS.items():
        print(table(name, c, args))
        print()
        for n in (2, 4, 8):
            _, ex = exchanges(c, n, 1, moe=True)
            print(f"{name} N={n} per token per MoE layer: " + ", ".join(f"{k} {b} B" for k, b in ex))
        print()


if __name__ == "__main__":
    main()
