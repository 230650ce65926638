"""Trains the tiny DeepSeek-V3-style model (transformers' own DeepseekV3ForCausalLM) on CPU.

    tools/train-tiny/.venv/bin/python tools/train-tiny/train.py --run NAME [--steps N] [--resume]

The model trained is transformers' DeepseekV3ForCausalLM itself (config in common.MODEL_CONFIG), so
the exported checkpoint computes exactly what was trained. MoE load balancing is DeepSeek-V3's
auxiliary-loss-free method: after every optimizer step each MoE layer's e_score_correction_bias
(a buffer, used for expert *selection* only) moves by --bias-rate towards balance:
bias_i += rate * sign(mean_load - load_i).

Batches: each row is CONTEXT tokens starting with BOS. With probability --chat-frac the row is
packed from synthetic chat turns (each starting with BOS), otherwise it is BOS + a window at a random
offset of the training token stream. Seeded (torch + numpy); the checkpoint (runs/NAME/ckpt.pt)
holds model, optimizer, step and both RNG states, so --resume continues the same run bit-exactly
apart from thread-scheduling effects. Logs to runs/NAME/log.jsonl; writes runs/NAME/loss.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

# Idle OpenMP threads sleep instead of spinning (matters on a shared, oversubscribed machine).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

from common import BOS_ID, CONTEXT, EXTRA_CONFIG, MODEL_CONFIG, RUNS, encode_chats, encode_split, load_tokenizer


def build_model(seed: int):
    import transformers
    torch.manual_seed(seed)
    config = transformers.DeepseekV3Config(**MODEL_CONFIG)
    for k, v in EXTRA_CONFIG.items():
        setattr(config, k, v)
    model = transformers.DeepseekV3ForCausalLM._from_config(config, attn_implementation="sdpa")
    return model


class Batches:
    def __init__(self, stream: np.ndarray, chats: list[np.ndarray], batch: int, chat_frac: float, seed: int):
        self.stream, self.chats, self.batch, self.chat_frac = stream, chats, batch, chat_frac
        self.rng = np.random.default_rng(seed)

    def next(self) -> torch.Tensor:
        rows = np.empty((self.batch, CONTEXT), dtype=np.int64)
        for r in range(self.batch):
            if self.rng.random() < self.chat_frac:
                parts, n = [], 0
                while n < CONTEXT:
                    c = self.chats[self.rng.integers(len(self.chats))]
                    parts.append(c)
                    n += len(c)
                rows[r] = np.concatenate(parts)[:CONTEXT]
            else:
                off = self.rng.integers(len(self.stream) - CONTEXT)
                rows[r, 0] = BOS_ID
                rows[r, 1:] = self.stream[off:off + CONTEXT - 1]
        return torch.from_numpy(rows)


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, windows: torch.Tensor, batch: int) -> float:
    model.eval()
    total = 0.0
    for i in range(0, len(windows), batch):
        total += lm_loss(model, windows[i:i + batch]).item() * len(windows[i:i + batch])
    model.train()
    return total / len(windows)


def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def plot(log_path, png_path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(log_path) as f:
        rows = [json.loads(line) for line in f]
    tr = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    va = [(r["step"], r["valid_loss"]) for r in rows if "valid_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if tr:
        s, l = zip(*tr)
        k = 20  # running mean over k logged steps
        sm = np.convolve(l, np.ones(k) / k, mode="valid") if len(l) >= k else l
        ax.plot(s, l, color="#bbb", lw=0.6, label="train (per step)")
        ax.plot(s[len(s) - len(sm):], sm, color="C0", label=f"train (mean of {k})")
    if va:
        s, l = zip(*va)
        ax.plot(s, l, "o-", color="C1", ms=3, label="valid")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(bottom=max(0.0, min([x[1] for x in tr + va] or [0]) - 0.3), top=min(9.0, max([x[1] for x in tr + va] or [9])))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("tiny DeepSeek-V3-style model: training loss")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="main")
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--chat-frac", type=float, default=0.15)
    # DeepSeek-V3 used 1e-3 over ~15k steps; at init this model's routers favour a few experts by
    # ~0.1 in sigmoid score (token-to-token spread ~0.05), which 1e-3 per step takes ~100 of our
    # ~1000 steps to undo. 5e-3 balances within ~20 steps; the jitter stays below the token spread.
    ap.add_argument("--bias-rate", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=1234)
    # One thread: on this shared 2-core machine (load ~13) two OpenMP threads ran 6x slower than one
    # (60 vs 380 tokens/s measured), the threads spin-waiting on each other.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=32)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    run_dir = RUNS / args.run
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path, log_path = run_dir / "ckpt.pt", run_dir / "log.jsonl"

    tok = load_tokenizer()
    stream = encode_split(tok, "train")
    chats = encode_chats(tok, "train")
    valid = encode_split(tok, "valid")
    n_win = min(args.eval_windows, (len(valid) - 1) // (CONTEXT - 1))
    windows = torch.from_numpy(np.stack([np.concatenate([[BOS_ID], valid[i * (CONTEXT - 1):(i + 1) * (CONTEXT - 1)]])
                                         for i in range(n_win)]).astype(np.int64))

    model = build_model(args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    batches = Batches(stream, chats, args.batch, args.chat_frac, args.seed)
    step = 0
    if args.resume and ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        batches.rng.bit_generator.state = ck["np_rng"]
        torch.set_rng_state(ck["torch_rng"])
        print(f"resumed {ckpt_path} at step {step}", flush=True)
    elif log_path.exists():
        log_path.unlink()

    # Capture each MoE layer's expert choice for the bias update.
    routers = [m for m in model.modules() if type(m).__name__ == "DeepseekV3TopkRouter"]
    picks: dict[int, torch.Tensor] = {}
    for i, r in enumerate(routers):
        r.register_forward_hook(lambda mod, inp, out, i=i: picks.__setitem__(i, out[2].detach()))

    print(f"params {n_params} ({n_params / 1e6:.2f} M); train tokens {len(stream)}; chats {len(chats)}; "
          f"valid windows {n_win}; steps {args.steps} x {args.batch} x {CONTEXT}", flush=True)
    with open(run_dir / "args.json", "w") as f:
        json.dump(vars(args) | {"n_params": n_params}, f, indent=1)

    model.train()
    log = open(log_path, "a")  # noqa: SIM115 - appended to for the whole run, closed at exit
    t_last = time.time()
    while step < args.steps:
        ids = batches.next()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss = lm_loss(model, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        with torch.no_grad():
            loads = []
            for i, r in enumerate(routers):
                load = torch.bincount(picks[i].reshape(-1), minlength=r.num_experts).float()
                r.e_score_correction_bias += args.bias_rate * torch.sign(load.mean() - load)
                loads.append((load.max() / load.mean()).item())
        step += 1
        dt = time.time() - t_last
        t_last = time.time()
        rec = {"step": step, "loss": round(loss.item(), 4), "lr": round(lr_at(step - 1, args), 6),
               "gnorm": round(gnorm, 3), "max_load": round(max(loads), 3), "tok_s": round(ids.numel() / dt)}
        if step % args.eval_every == 0 or step == args.steps:
            rec["valid_loss"] = round(evaluate(model, windows, args.batch), 4)
            t_last = time.time()
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if step % 10 == 0 or "valid_loss" in rec:
            print(json.dumps(rec), flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "np_rng": batches.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                        "args": vars(args)}, tmp)
            os.replace(tmp, ckpt_path)
            plot(log_path, run_dir / "loss.png")
    print("done", flush=True)


if __name__ == "__main__":
    main()
