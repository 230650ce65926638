"""A plain numpy forward pass of a deepseek2 / deepseek32 / glm-dsa GGUF, driven only by the GGUF
keys and tensors.

It is the executable form of NOTES.md: it reads model-f32.gguf (with the vendored gguf-py), runs
both MLA paths (decompressed MHA and absorbed MQA) in float64, with the DSA lightning indexer and
top-k sparse attention for deepseek32 / glm-dsa (indexer_select), and compares the logits with the
transformers reference written by make_fixtures.py / make_dsa_fixtures.py. If this agrees,
NOTES.md describes everything the C++ forward pass needs; if transformers or the converter change
semantics, it stops agreeing.

    tools/reference/.venv/bin/python tools/reference/gguf_forward.py [--ablations] [FIXTURE_DIR ...]
      (default: every tests/fixtures/reference/*/ and tests/fixtures/dsa-reference/*/)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent.parent / "tests" / "fixtures" / "reference"
DSA_FIXTURES = HERE.parent.parent / "tests" / "fixtures" / "dsa-reference"


def load_gguf(path: Path, llama_cpp: Path):
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    try:
        import gguf
    finally:
        sys.path.remove(str(llama_cpp / "gguf-py"))
    reader = gguf.GGUFReader(str(path))
    keys = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}
    # reader arrays are numpy views with shape = reversed(ne): [ne1, ne0] for 2-D, [ne2, ne1, ne0] for 3-D
    tensors = {t.name: np.asarray(t.data, dtype=np.float64) for t in reader.tensors}
    return keys, tensors


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def yarn_inv_freq(n_rot: int, base: float, factor: float, orig_ctx: int, beta_fast: float, beta_slow: float):
    """Per-pair rotation frequencies [n_rot/2] after YaRN (same as ggml's rope_yarn and
    transformers' _compute_yarn_parameters with truncate=True)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    extrapolation = base ** (-2.0 * i / n_rot)
    if factor == 1.0:
        return extrapolation

    def corr_dim(n_rotations: float) -> float:
        return n_rot * math.log(orig_ctx / (n_rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), n_rot - 1)
    ramp = np.clip((i - low) / max(high - low, 0.001), 0.0, 1.0)  # 0: keep, 1: interpolate
    return extrapolation * (1.0 - ramp) + (extrapolation / factor) * ramp


def rope_adjacent_pairs(x: np.ndarray, pos: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Rotates pairs (x[2i], x[2i+1]) by pos * inv_freq[i] (ggml 'normal' rope, GPT-J style).
    x: [T, ..., n_rot], pos: [T]."""
    angle = pos[:, None] * inv_freq[None, :]  # [T, n_rot/2]
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (angle.shape[1],)
    cos, sin = np.cos(angle).reshape(shape), np.sin(angle).reshape(shape)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def rope_halves(x: np.ndarray, pos: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """The other convention (NeoX style: pairs (x[i], x[i + n_rot/2])). WRONG for the MLA rope of all
    three architectures (--ablations shows the fixtures tell the two apart); RIGHT for the deepseek32
    indexer's rope (transformers' rotate_half, llama.cpp's LLAMA_ROPE_TYPE_NEOX)."""
    h = x.shape[-1] // 2
    angle = pos[:, None] * inv_freq[None, :]
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (angle.shape[1],)
    cos, sin = np.cos(angle).reshape(shape), np.sin(angle).reshape(shape)
    x0, x1 = x[..., :h], x[..., h:]
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


# The DSA lightning indexer's key LayerNorm epsilon. No GGUF key carries it: transformers
# (nn.LayerNorm(eps=1e-6)), DeepSeek's code and llama.cpp's deepseek32 use 1e-6; llama.cpp's glm-dsa
# leaves it 0 (an unset hparam, see NOTES.md).
INDEXER_NORM_EPS = 1e-6


def indexer_types(keys: dict, arch: str, n_layer: int) -> list[bool]:
    """Per trunk layer: True = "full" (runs the indexer), False = "shared" (reuses the previous full
    layer's selection). From {arch}.attention.indexer.types; without it, llama.cpp's rule: every layer
    full below a 1M context, else GLM-5.2's pattern (layers 0, 1 full, then one full layer in four)."""
    types = keys.get(f"{arch}.attention.indexer.types")
    if types is not None:
        assert len(types) == n_layer, (len(types), n_layer)
        return [bool(t) for t in types]
    if keys.get(f"{arch}.context_length", 0) < 1048576:
        return [True] * n_layer
    return [i < 2 or (i - 2) % 4 == 0 for i in range(n_layer)]


def indexer_select(keys: dict, w: dict, p: str, xn: np.ndarray, qr: np.ndarray, pos: np.ndarray,
                   inv_freq: np.ndarray, opts: dict, info: dict | None) -> list[np.ndarray]:
    """The DSA lightning indexer of one full layer: for each query t the key positions it attends to.
    xn: attn_norm output [T, E]; qr: the normalised q-LoRA latent (after attn_q_a_norm) [T, qL].
      q[t,h]  = rope(W_idx_q_b qr[t])[h]             [Hi, Di], rope on dims [0, n_rot) ([rope | nope])
      k[s]    = rope(LayerNorm(W_idx_k xn[s]))       [Di], one key head shared by all indexer heads
      wt[t,h] = (W_idx_proj xn[t])[h] / sqrt(Di * Hi)
      score[t,s] = sum_h wt[t,h] * ReLU(q[t,h] . k[s])   for s <= t
    and the top min(t+1, top_k) scores are kept. (transformers writes the same number as
    sum_h ReLU(q.k * Di^-0.5) * wt'[h] * Hi^-0.5; ReLU commutes with the positive scale.)"""
    a = keys["general.architecture"]
    n_head, head_dim = keys[f"{a}.attention.indexer.head_count"], keys[f"{a}.attention.indexer.key_length"]
    top_k, n_rot = keys[f"{a}.attention.indexer.top_k"], keys[f"{a}.rope.dimension_count"]
    # glm-dsa rotates adjacent pairs (as its MLA rope does); deepseek32 rotates halves (NeoX)
    rope = rope_adjacent_pairs if a == "glm-dsa" else rope_halves
    if opts.get("indexer_rope_swapped"):
        rope = rope_halves if rope is rope_adjacent_pairs else rope_adjacent_pairs
    T = xn.shape[0]
    q = (qr @ w[p + "indexer.attn_q_b.weight"].T).reshape(T, n_head, head_dim)
    k = layer_norm(xn @ w[p + "indexer.attn_k.weight"].T, w[p + "indexer.k_norm.weight"],
                   w[p + "indexer.k_norm.bias"], opts.get("indexer_norm_eps", INDEXER_NORM_EPS))
    if opts.get("indexer_rope_last"):  # wrong layout [nope | rope], for --ablations
        q = np.concatenate([q[..., :-n_rot], rope(q[..., -n_rot:], pos, inv_freq)], axis=-1)
        k = np.concatenate([k[..., :-n_rot], rope(k[..., -n_rot:], pos, inv_freq)], axis=-1)
    else:
        q = np.concatenate([rope(q[..., :n_rot], pos, inv_freq), q[..., n_rot:]], axis=-1)
        k = np.concatenate([rope(k[..., :n_rot], pos, inv_freq), k[..., n_rot:]], axis=-1)
    wt = (xn @ w[p + "indexer.proj.weight"].T) / math.sqrt(head_dim * n_head)     # [T, Hi]
    dots = np.einsum("thd,sd->ths", q, k)                                         # [T, Hi, T]
    if not opts.get("indexer_no_relu"):
        dots = np.maximum(dots, 0.0)
    score = np.einsum("th,ths->ts", wt, dots)
    selected, gaps = [], []
    for t in range(T):
        s = score[t, :t + 1]
        order = np.argsort(-s, kind="stable")
        selected.append(np.sort(order[:top_k]))
        if t + 1 > top_k:
            gaps.append((float(s[order[top_k - 1]] - s[order[top_k]]), t))
    if info is not None:
        info.setdefault("selected", {})[p[:-1]] = selected
        info.setdefault("gaps", {})[p[:-1]] = gaps
        info.setdefault("score_std", {})[p[:-1]] = float(np.std(score[np.tril_indices(T)]))
    return selected


def forward(keys: dict, w: dict, ids: list[int] | None, path: str, rope=rope_adjacent_pairs, opts: dict | None = None,
            info: dict | None = None, *, x0: np.ndarray | None = None, layers: list[int] | None = None,
            pos0: int = 0, final_norm: str = "output_norm.weight", hidden: bool = False):
    """Logits [T, vocab] for one sequence at positions 0..T-1. path: 'mha' or 'mqa'.
    Architectures deepseek2, deepseek32 and glm-dsa (the MTP block, blk.{n_layer}, is not run here:
    mtp_forward runs it through the keyword arguments). opts: {"dsa": False} runs dense MLA on a DSA
    model; other keys are the --ablations' wrong variants. info (optional dict) receives per-layer
    indexer selections and top-k boundary gaps. x0: the input rows instead of the embeddings of ids;
    layers: the blocks to run (default the trunk); pos0: the first row's position; final_norm: the
    norm before the output head; hidden: also return the normed rows, as (logits, hidden)."""
    opts = opts or {}
    a = keys["general.architecture"]
    assert a in ("deepseek2", "deepseek32", "glm-dsa"), a
    k = lambda name, default=None: keys.get(f"{a}.{name}", default)
    n_layer = k("block_count") - k("nextn_predict_layers", 0)  # the MTP block(s) come last
    n_head = k("attention.head_count")
    eps = k("attention.layer_norm_rms_epsilon")
    kv_lora = k("attention.kv_lora_rank")
    n_rot = k("rope.dimension_count")
    qk_head = k("attention.key_length_mla")          # qk_nope + qk_rope
    v_head = k("attention.value_length_mla")
    qk_nope = qk_head - n_rot
    n_dense = k("leading_dense_block_count")
    n_used = k("expert_used_count")
    n_group, n_group_used = k("expert_group_count", 1), k("expert_group_used_count", 1)
    # 1 softmax, 2 sigmoid; glm-dsa defaults to sigmoid when the key is absent (llama.cpp's loader)
    gating = k("expert_gating_func", 2 if a == "glm-dsa" else 1)
    w_scale = k("expert_weights_scale", 1.0)
    w_norm = k("expert_weights_norm", False)
    dsa = a != "deepseek2" and opts.get("dsa", True)
    full = indexer_types(keys, a, n_layer) if dsa else None

    factor = k("rope.scaling.factor", 1.0) if k("rope.scaling.type") == "yarn" else 1.0
    inv_freq = yarn_inv_freq(n_rot, k("rope.freq_base"), factor, k("rope.scaling.original_context_length", 0),
                             k("rope.scaling.yarn_beta_fast", 32.0), k("rope.scaling.yarn_beta_slow", 1.0))
    mscale = 1.0 + k("rope.scaling.yarn_log_multiplier", 0.0) * math.log(factor) if factor > 1 else 1.0
    kq_scale = mscale * mscale / math.sqrt(qk_head)

    T = len(ids) if x0 is None else x0.shape[0]
    pos = np.arange(pos0, pos0 + T, dtype=np.float64)
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    selected = None  # the last full layer's selection (shared layers reuse it)
    x = w["token_embd.weight"][ids] if x0 is None else x0  # [T, H]
    for il in range(n_layer) if layers is None else layers:
        p = f"blk.{il}."
        xn = rms_norm(x, w[p + "attn_norm.weight"], eps)
        if p + "attn_q_a.weight" in w:
            qr = rms_norm(xn @ w[p + "attn_q_a.weight"].T, w[p + "attn_q_a_norm.weight"], eps)
            q = qr @ w[p + "attn_q_b.weight"].T
        else:
            q = xn @ w[p + "attn_q.weight"].T
        q = q.reshape(T, n_head, qk_head)
        q_nope, q_pe = q[..., :qk_nope], rope(q[..., qk_nope:], pos, inv_freq)
        kv = xn @ w[p + "attn_kv_a_mqa.weight"].T                      # [T, kv_lora + n_rot]
        c_kv = rms_norm(kv[:, :kv_lora], w[p + "attn_kv_a_norm.weight"], eps)  # [T, kv_lora]
        k_pe = rope(kv[:, kv_lora:], pos, inv_freq)                     # [T, n_rot], shared by heads
        k_b = w[p + "attn_k_b.weight"]  # [n_head, kv_lora, qk_nope]  (ne {qk_nope, kv_lora, n_head})
        v_b = w[p + "attn_v_b.weight"]  # [n_head, v_head, kv_lora]   (ne {kv_lora, v_head, n_head})
        mask = causal
        if dsa and il < n_layer and (full[il] or not opts.get("shared_layers_dense")):  # no indexer in MTP
            if full[il]:
                selected = indexer_select(keys, w, p, xn, qr, pos, inv_freq, opts, info)
            mask = np.full((T, T), -np.inf)
            for t, sel in enumerate(selected):
                mask[t, sel] = 0.0
        if path == "mha":
            k_nope = np.einsum("tc,hcn->thn", c_kv, k_b)                # [T, n_head, qk_nope]
            v = np.einsum("tc,hvc->thv", c_kv, v_b)                     # [T, n_head, v_head]
            s = np.einsum("ihn,jhn->hij", q_nope, k_nope) + np.einsum("ihr,jr->hij", q_pe, k_pe)
            pr = softmax(s * kq_scale + mask)
            o = np.einsum("hij,jhv->ihv", pr, v)
        else:
            q_lat = np.einsum("thn,hcn->thc", q_nope, k_b)              # [T, n_head, kv_lora]
            s = np.einsum("ihc,jc->hij", q_lat, c_kv) + np.einsum("ihr,jr->hij", q_pe, k_pe)
            pr = softmax(s * kq_scale + mask)
            o_lat = np.einsum("hij,jc->ihc", pr, c_kv)                  # [T, n_head, kv_lora]
            o = np.einsum("ihc,hvc->ihv", o_lat, v_b)
        x = x + o.reshape(T, n_head * v_head) @ w[p + "attn_output.weight"].T

        xn = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        if il < n_dense:
            x = x + mlp(xn, w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"], w[p + "ffn_down.weight"])
            continue
        logits = xn @ w[p + "ffn_gate_inp.weight"].T                    # [T, n_expert]
        probs = 1.0 / (1.0 + np.exp(-logits)) if gating == 2 else softmax(logits)
        choice = probs + w[p + "exp_probs_b.bias"] if p + "exp_probs_b.bias" in w else probs.copy()
        n_expert = choice.shape[1]
        if n_group > 1:
            g = choice.reshape(T, n_group, n_expert // n_group)
            g_score = np.sort(g, axis=-1)[..., -2:].sum(-1)             # sum of the top 2 per group
            drop = np.argsort(-g_score, axis=-1)[:, n_group_used:]
            g = g.copy()
            for t in range(T):
                g[t, drop[t]] = -np.inf
            choice = g.reshape(T, n_expert)
        sel = np.argsort(-choice, axis=-1)[:, :n_used]                   # [T, n_used]
        wts = np.take_along_axis(probs, sel, axis=-1)                    # bias not in the weights
        if w_norm:
            wts = wts / wts.sum(-1, keepdims=True)
        wts = wts * w_scale
        out = mlp(xn, w[p + "ffn_gate_shexp.weight"], w[p + "ffn_up_shexp.weight"], w[p + "ffn_down_shexp.weight"])
        for t in range(T):
            for e, we in zip(sel[t], wts[t]):
                out[t] += we * mlp(xn[t:t + 1], w[p + "ffn_gate_exps.weight"][e], w[p + "ffn_up_exps.weight"][e],
                                   w[p + "ffn_down_exps.weight"][e])[0]
        x = x + out
    hn = rms_norm(x, w[final_norm], eps)
    logits = hn @ w["output.weight"].T
    return (logits, hn) if hidden else logits


def mtp_forward(keys: dict, w: dict, ids: list[int], path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first MTP (nextn) block's draft logits for one sequence, as llama.cpp's deepseek2 MTP graph
    computes them: row p (p = 0..T-2) from the pair (h_p, ids[p+1]) at position p+1, causal over the
    rows, where h_p is the trunk's hidden state after the output norm:
      z = eh_proj . [enorm(embed(ids[p+1])) ; hnorm(h_p)], then blk.{n_layer} as a decoder block,
      then nextn.shared_head_norm (else output_norm) and nextn.shared_head_head (else output).
    Returns (trunk logits [T, V], MTP logits [T-1, V], MTP hidden after shared_head_norm [T-1, E])."""
    a = keys["general.architecture"]
    eps = keys[f"{a}.attention.layer_norm_rms_epsilon"]
    n_layer = keys[f"{a}.block_count"] - keys.get(f"{a}.nextn_predict_layers", 0)
    p = f"blk.{n_layer}.nextn."
    logits, h = forward(keys, w, ids, path, hidden=True)
    embd = w.get(p + "embed_tokens.weight", w["token_embd.weight"])
    z = np.concatenate([rms_norm(embd[ids[1:]], w[p + "enorm.weight"], eps),
                        rms_norm(h[:-1], w[p + "hnorm.weight"], eps)], axis=-1) @ w[p + "eh_proj.weight"].T
    head_norm = p + "shared_head_norm.weight" if p + "shared_head_norm.weight" in w else "output_norm.weight"
    w_head = dict(w)
    if p + "shared_head_head.weight" in w:
        w_head["output.weight"] = w[p + "shared_head_head.weight"]
    mlogits, mh = forward(keys, w_head, None, path, x0=z, layers=[n_layer], pos0=1, final_norm=head_norm, hidden=True)
    return logits, mlogits, mh


def softmax(s: np.ndarray) -> np.ndarray:
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def mlp(x: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def check(model_dir: Path, llama_cpp: Path, ablation: str | None = None) -> dict:
    """Max |numpy - transformers| over all positions for each case and path. ablation: one of
    ABLATIONS (a deliberately wrong variant), or None. Cases with a dense reference (logits_dense:
    the DSA model with the indexer off) are also checked with opts {"dsa": False}."""
    index = json.loads((model_dir / "reference.json").read_text(encoding="utf-8"))
    keys, w = load_gguf(model_dir / index["gguf"]["file"], llama_cpp)
    rope, opts = rope_adjacent_pairs, {}
    if ablation is not None:
        keys, w, rope, opts = ABLATIONS[ablation](dict(keys), dict(w))
    result = {}
    for case, entry in index["cases"].items():
        ref = np.fromfile(model_dir / entry["logits"]["file"], dtype="<f4").reshape(entry["logits"]["shape"])
        for path in (("mha", "mqa") if ablation is None else ("mha",)):
            got = forward(keys, w, entry["token_ids"], path, rope, opts)
            result[f"{case}/{path}"] = float(np.max(np.abs(got - ref)))
        if "logits_dense" in entry and ablation is None:
            ref = np.fromfile(model_dir / entry["logits_dense"]["file"], dtype="<f4").reshape(
                entry["logits_dense"]["shape"])
            got = forward(keys, w, entry["token_ids"], "mqa", rope, {"dsa": False})
            result[f"{case}/dense"] = float(np.max(np.abs(got - ref)))
    return result


def _set(keys: dict, **kv) -> dict:
    arch = keys["general.architecture"]
    keys.update({f"{arch}.{k.replace('__', '.')}": v for k, v in kv.items()})
    return keys


R = rope_adjacent_pairs
ABLATIONS = {
    "rope on halves (NeoX) instead of adjacent pairs": lambda k, w: (k, w, rope_halves, {}),
    "rope.scaling ignored (no YaRN frequencies, no mscale)": lambda k, w: (_set(k, rope__scaling__type="none"), w, R, {}),
    "no mscale^2 in the softmax scale": lambda k, w: (_set(k, rope__scaling__yarn_log_multiplier=0.0), w, R, {}),
    "exp_probs_b ignored": lambda k, w: (k, {n: t for n, t in w.items() if "exp_probs_b" not in n}, R, {}),
    "expert groups ignored": lambda k, w: (_set(k, expert_group_count=1), w, R, {}),
    "expert_weights_norm ignored": lambda k, w: (_set(k, expert_weights_norm=False), w, R, {}),
    "expert_weights_scale ignored": lambda k, w: (_set(k, expert_weights_scale=1.0), w, R, {}),
    "rms eps 1e-5 instead of 1e-6": lambda k, w: (_set(k, attention__layer_norm_rms_epsilon=1e-5), w, R, {}),
}
DSA_ABLATIONS = {
    "DSA off (dense MLA)": {"dsa": False},
    "indexer rope type swapped (NORM <-> NEOX)": {"indexer_rope_swapped": True},
    "indexer rope on the last n_rot dims ([nope | rope])": {"indexer_rope_last": True},
    "indexer k LayerNorm eps 0 (llama.cpp glm-dsa)": {"indexer_norm_eps": 0.0},
    "indexer without ReLU": {"indexer_no_relu": True},
    "shared layers dense (no selection)": {"shared_layers_dense": True},
}
for _name, _opts in DSA_ABLATIONS.items():
    ABLATIONS[_name] = lambda k, w, o=_opts: (k, w, R, o)


def main() -> None:
    sys.path.insert(0, str(HERE))
    from make_fixtures import DEFAULT_LLAMA_CPP

    args = sys.argv[1:]
    ablations = "--ablations" in args
    args = [a for a in args if a != "--ablations"]
    dirs = [Path(a) for a in args] or sorted(p.parent for f in (FIXTURES, DSA_FIXTURES)
                                             for p in f.glob("*/reference.json"))
    worst = 0.0
    for d in dirs:
        diffs = check(d, DEFAULT_LLAMA_CPP)
        worst = max(worst, *diffs.values())
        print(f"{d.name}: max |numpy(GGUF) - transformers| logits: "
              + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
        if ablations:
            arch = json.loads((d / "reference.json").read_text())["hf_class"]
            for name in ABLATIONS:
                if name in DSA_ABLATIONS and arch not in ("GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"):
                    continue
                diffs = check(d, DEFAULT_LLAMA_CPP, name)
                print(f"  ablation '{name}': max diff {max(diffs.values()):.2e}")
    if worst > 1e-3:
        raise SystemExit(f"gguf_forward: max difference {worst:.3e} > 1e-3")


if __name__ == "__main__":
    main()
