"""The tiny model's trunk and its MTP (nextn) block in torch, built from a GGUF's tensors.

The trunk is a port of tools/reference/gguf_forward.py's deepseek2 forward (decompressed-MHA path,
float32): it is checked against that numpy forward (`check_trunk`), which itself is checked against
transformers. The MTP block is DeepSeek-V3's multi-token-prediction module as llama.cpp runs it
for `deepseek2` files with nextn layers:

    z      = eh_proj · [enorm(embed(t_{p+1})) ; hnorm(h_p)]      (embedding first; eh_proj {2E -> E})
    z      = one decoder block (MLA + MoE with its shared expert), rope position p+1, causal over the
             MTP rows
    h'_p   = shared_head_norm(z)                                  (also the next chained step's h)
    logits = output · h'_p                                        (the trunk's head and embedding)

with h_p the trunk's hidden state at p after the output norm. Row p predicts t_{p+2}.

Parameters are named after the GGUF tensors: blk.N.attn_q_a.weight is `attn_q_a`,
blk.N.exp_probs_b.bias is `exp_probs_b` (a buffer: it steers expert selection only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
DEFAULT_LLAMA_CPP = (Path(os.environ.get("REFERENCE_CACHE_DIR", Path.home() / ".cache" / "mla"))
                     / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp")

# The MTP block's own tensors (besides an ordinary MoE block's).
NEXTN_TENSORS = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight")


def import_gguf(llama_cpp: Path = DEFAULT_LLAMA_CPP):
    gguf_py = llama_cpp / "gguf-py"
    if not (gguf_py / "gguf" / "__init__.py").is_file():
        raise SystemExit(f"gguf-py not found at {gguf_py} (run tools/llama-cpp/fetch-sdist.sh)")
    if str(gguf_py) not in sys.path:
        sys.path.insert(0, str(gguf_py))
    import gguf
    return gguf


def load_gguf(path: Path, llama_cpp: Path = DEFAULT_LLAMA_CPP) -> tuple[dict, dict[str, np.ndarray]]:
    """Keys and every tensor dequantized to float32 with gguf-py (numpy shape = reversed ne)."""
    gguf = import_gguf(llama_cpp)
    reader = gguf.GGUFReader(str(path))
    keys = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}
    tensors = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
               .reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    return keys, tensors


class Config:
    def __init__(self, keys: dict):
        a = keys["general.architecture"]
        assert a == "deepseek2", a
        k = lambda name: keys[f"{a}.{name}"]
        self.n_nextn = keys.get(f"{a}.nextn_predict_layers", 0)
        self.n_layer = k("block_count") - self.n_nextn
        self.n_embd, self.n_head = k("embedding_length"), k("attention.head_count")
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.kv_lora, self.n_rot = k("attention.kv_lora_rank"), k("rope.dimension_count")
        self.qk_head, self.v_head = k("attention.key_length_mla"), k("attention.value_length_mla")
        self.qk_nope = self.qk_head - self.n_rot
        self.n_dense = k("leading_dense_block_count")
        self.n_expert, self.n_used = k("expert_count"), k("expert_used_count")
        self.n_group, self.n_group_used = k("expert_group_count"), k("expert_group_used_count")
        assert k("expert_gating_func") == 2, "sigmoid gating expected"
        self.w_scale, self.w_norm = float(k("expert_weights_scale")), bool(k("expert_weights_norm"))
        assert keys.get(f"{a}.rope.scaling.type", "none") in ("none", ""), "no rope scaling expected"
        i = torch.arange(self.n_rot // 2, dtype=torch.float64)
        self.inv_freq = float(k("rope.freq_base")) ** (-2.0 * i / self.n_rot)  # float64
        self.kq_scale = 1.0 / (self.qk_head ** 0.5)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_pairs(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotates adjacent pairs (x[2i], x[2i+1]) by pos * inv_freq[i]. x: [B, T, ..., n_rot]; pos: [T]."""
    angle = pos.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 3) + (angle.shape[1],)
    cos, sin = angle.cos().to(x.dtype).reshape(shape), angle.sin().to(x.dtype).reshape(shape)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


BUFFERS = ("exp_probs_b",)


class Block(nn.Module):
    """One MLA + FFN decoder block (dense SwiGLU or MoE with a shared expert)."""

    def __init__(self, cfg: Config, tensors: dict[str, np.ndarray], prefix: str):
        super().__init__()
        self.cfg = cfg
        self.moe = prefix + "ffn_gate_inp.weight" in tensors
        self.w = nn.ParameterDict()
        for name, arr in tensors.items():
            if not name.startswith(prefix) or ".nextn." in name:
                continue
            key = name[len(prefix):].rsplit(".", 1)[0]
            if key in BUFFERS:
                self.register_buffer(key, torch.from_numpy(np.array(arr, dtype=np.float32)))
            else:
                self.w[key] = nn.Parameter(torch.from_numpy(np.array(arr, dtype=np.float32)))
        self.last_selection: torch.Tensor | None = None  # [N, n_used] experts picked in the last forward

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        c, w = self.cfg, self.w
        B, T, E = x.shape
        xn = rms_norm(x, w["attn_norm"], c.eps)
        qr = rms_norm(xn @ w["attn_q_a"].T, w["attn_q_a_norm"], c.eps)
        q = (qr @ w["attn_q_b"].T).view(B, T, c.n_head, c.qk_head)
        q_nope, q_pe = q[..., :c.qk_nope], rope_pairs(q[..., c.qk_nope:], pos, c.inv_freq)
        kv = xn @ w["attn_kv_a_mqa"].T
        c_kv = rms_norm(kv[..., :c.kv_lora], w["attn_kv_a_norm"], c.eps)
        k_pe = rope_pairs(kv[..., c.kv_lora:].unsqueeze(2), pos, c.inv_freq)        # [B, T, 1, n_rot]
        k_nope = torch.einsum("btc,hcn->bthn", c_kv, w["attn_k_b"])                  # [B, T, H, nope]
        v = torch.einsum("btc,hvc->bthv", c_kv, w["attn_v_b"])                      # [B, T, H, v]
        qh = torch.cat([q_nope, q_pe], -1).transpose(1, 2)
        kh = torch.cat([k_nope, k_pe.expand(B, T, c.n_head, c.n_rot)], -1).transpose(1, 2)
        o = F.scaled_dot_product_attention(qh, kh, v.transpose(1, 2), is_causal=True, scale=c.kq_scale)
        x = x + o.transpose(1, 2).reshape(B, T, c.n_head * c.v_head) @ w["attn_output"].T
        xn = rms_norm(x, w["ffn_norm"], c.eps)
        if not self.moe:
            return x + swiglu(xn, w["ffn_gate"], w["ffn_up"], w["ffn_down"])
        return x + self.moe_ffn(xn.reshape(B * T, E)).view(B, T, E)

    def moe_ffn(self, xn: torch.Tensor) -> torch.Tensor:
        c, w = self.cfg, self.w
        probs = torch.sigmoid(xn @ w["ffn_gate_inp"].T)                              # [N, n_expert]
        with torch.no_grad():
            choice = probs + self.exp_probs_b
            g = choice.view(-1, c.n_group, c.n_expert // c.n_group)
            g_score = g.topk(2, dim=-1).values.sum(-1)                               # [N, n_group]
            keep = g_score.topk(c.n_group_used, dim=-1).indices
            gmask = torch.full_like(g_score, float("-inf")).scatter_(1, keep, 0.0)
            choice = (g + gmask[..., None]).view(-1, c.n_expert)
            sel = choice.topk(c.n_used, dim=-1).indices                              # [N, n_used]
        self.last_selection = sel
        wts = probs.gather(1, sel)
        if c.w_norm:
            wts = wts / wts.sum(-1, keepdim=True)
        wts = wts * c.w_scale
        out = swiglu(xn, w["ffn_gate_shexp"], w["ffn_up_shexp"], w["ffn_down_shexp"])
        for e in range(c.n_expert):
            rows, slot = (sel == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            y = swiglu(xn[rows], w["ffn_gate_exps"][e], w["ffn_up_exps"][e], w["ffn_down_exps"][e])
            out = out.index_add(0, rows, y * wts[rows, slot][:, None])
        return out


class Trunk(nn.Module):
    def __init__(self, keys: dict, tensors: dict[str, np.ndarray]):
        super().__init__()
        self.cfg = Config(keys)
        self.embed = nn.Parameter(torch.from_numpy(tensors["token_embd.weight"].copy()))      # [V, E]
        self.output = nn.Parameter(torch.from_numpy(tensors["output.weight"].copy()))         # [V, E]
        self.output_norm = nn.Parameter(torch.from_numpy(tensors["output_norm.weight"].copy()))
        self.layers = nn.ModuleList(Block(self.cfg, tensors, f"blk.{i}.") for i in range(self.cfg.n_layer))

    def forward(self, ids: torch.Tensor, logits: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ids [B, T] at positions 0..T-1 -> (h [B, T, E] after the output norm, logits [B, T, V] or
        None when logits is False)."""
        pos = torch.arange(ids.shape[1])
        x = self.embed[ids]
        for layer in self.layers:
            x = layer(x, pos)
        h = rms_norm(x, self.output_norm, self.cfg.eps)
        return h, (h @ self.output.T if logits else None)

    def residual_before(self, ids: torch.Tensor, layer: int) -> torch.Tensor:
        """The residual stream entering trunk layer `layer` (its input, before attn_norm)."""
        pos = torch.arange(ids.shape[1])
        x = self.embed[ids]
        for block in self.layers[:layer]:
            x = block(x, pos)
        return x


class MTP(nn.Module):
    """The nextn block: its input projection and norms, one MoE decoder block, shared_head_norm."""

    def __init__(self, cfg: Config, tensors: dict[str, np.ndarray], prefix: str):
        super().__init__()
        t = lambda n: nn.Parameter(torch.from_numpy(np.array(tensors[prefix + n], dtype=np.float32)))
        self.eh_proj, self.enorm, self.hnorm = t("nextn.eh_proj.weight"), t("nextn.enorm.weight"), t("nextn.hnorm.weight")
        self.shared_head_norm = t("nextn.shared_head_norm.weight")
        self.block = Block(cfg, tensors, prefix)
        self.cfg = cfg

    def forward(self, trunk: Trunk, h: torch.Tensor, next_ids: torch.Tensor, pos: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """h [B, R, E] (the trunk's, or this block's own for a chained draft), next_ids [B, R] (the
        token after each h), pos [R] (positions of next_ids) -> (h' [B, R, E], logits [B, R, V])."""
        eps = self.cfg.eps
        z = torch.cat([rms_norm(trunk.embed[next_ids], self.enorm, eps), rms_norm(h, self.hnorm, eps)], -1)
        z = self.block(z @ self.eh_proj.T, pos)
        hn = rms_norm(z, self.shared_head_norm, eps)
        return hn, hn @ trunk.output.T


def mtp_tensors_from_layer(tensors: dict[str, np.ndarray], src_layer: int, dst_layer: int, n_embd: int,
                           eh_scale: float) -> dict[str, np.ndarray]:
    """An initial MTP block: a copy of trunk layer src_layer's tensors, norms of ones, and eh_proj =
    eh_scale * [I | I] (z = eh_scale * (enorm(e) + hnorm(h)))."""
    out = {}
    for name, arr in tensors.items():
        if name.startswith(f"blk.{src_layer}."):
            out[f"blk.{dst_layer}." + name[len(f"blk.{src_layer}."):]] = arr.copy()
    eye = np.eye(n_embd, dtype=np.float32) * eh_scale
    p = f"blk.{dst_layer}."
    out[p + "nextn.eh_proj.weight"] = np.concatenate([eye, eye], axis=1)     # numpy [E, 2E] = ne {2E, E}
    for n in ("nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"):
        out[p + n] = np.ones(n_embd, dtype=np.float32)
    return out


def mtp_state(mtp: MTP, layer: int) -> dict[str, np.ndarray]:
    """The MTP module's tensors under their GGUF names (numpy shape = reversed ne)."""
    p = f"blk.{layer}."
    out = {p + "nextn.eh_proj.weight": mtp.eh_proj, p + "nextn.enorm.weight": mtp.enorm,
           p + "nextn.hnorm.weight": mtp.hnorm, p + "nextn.shared_head_norm.weight": mtp.shared_head_norm}
    for k, v in mtp.block.w.items():
        out[p + k + ".weight"] = v
    for k in BUFFERS:
        if hasattr(mtp.block, k):
            out[p + k + ".bias"] = getattr(mtp.block, k)
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in out.items()}


@torch.no_grad()
def draft_logits(trunk: Trunk, mtp: MTP, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For one batch of sequences ids [B, T]: (trunk logits [B, T, V], MTP logits [B, T-1, V],
    MTP hidden [B, T-1, E]); MTP row p = the draft from (h_p, ids[p+1]) at position p+1."""
    h, logits = trunk(ids)
    hn, mlogits = mtp(trunk, h[:, :-1], ids[:, 1:], torch.arange(1, ids.shape[1]))
    return logits, mlogits, hn
