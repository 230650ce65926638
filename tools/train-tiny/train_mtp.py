"""Trains the tiny model's MTP (nextn) layer on a frozen trunk taken from the shipped GGUF, on CPU.

    tools/train-tiny/.venv/bin/python tools/train-tiny/train_mtp.py --run NAME [--steps N] [--resume]
        [--trunk models/tiny-q8_0.gguf]

The trunk is the GGUF's (every tensor dequantized to float32 with gguf-py) in mtp_model.Trunk, a
torch port of tools/reference/gguf_forward.py checked against it at start (max |logit diff| is
logged, the run stops above 1e-3). It is frozen: its bytes in the shipped files do not change.

Objective: DeepSeek-V3's MTP loss for depth 1, L = lambda * CE(MTP row p, t_{p+2}) averaged over
the rows, lambda = 0.3 (the paper's weight for its first 10T tokens). With the trunk frozen the
weight only scales the gradient (AdamW is invariant to it up to eps and the clipping threshold).

Initialisation: the MTP decoder block is a copy of trunk layer 2 (the last MoE block: same shapes),
the norms are ones, eh_proj = a * [I | I] with a chosen so that z = a * (enorm(e) + hnorm(h)) has the
RMS of layer 2's input on the first batch. MoE balance as in train.py: the block's
e_score_correction_bias (exp_probs_b) moves by --bias-rate towards balance after every step.

Batches: train.py's (BOS + a window of the training stream, or packed chat turns), seeded.
Checkpoint runs/NAME/mtp.pt (module, optimizer, step, RNG states) every --ckpt-every steps and at
the end; --resume continues. Logs to runs/NAME/mtp-log.jsonl. --max-minutes stops early (saving)
when the step time runs out; the schedule is still the one for --steps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

from common import BOS_ID, CONTEXT, RUNS, encode_chats, encode_split, load_tokenizer
from mtp_model import MTP, Trunk, load_gguf, mtp_tensors_from_layer
from train import Batches

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MTP_LOSS_WEIGHT = 0.3


def check_trunk(keys: dict, tensors: dict, trunk: Trunk, ids: list[int]) -> float:
    """Max |torch trunk - gguf_forward.py (numpy float64, both MLA paths)| logits on ids."""
    sys.path.insert(0, str(REPO / "tools" / "reference"))
    import gguf_forward
    w64 = {k: v.astype(np.float64) for k, v in tensors.items()}
    with torch.no_grad():
        _, got = trunk(torch.tensor([ids]))
    return max(float(np.abs(got[0].numpy() - gguf_forward.forward(keys, w64, ids, path)).max())
               for path in ("mha", "mqa"))


def windows_of(stream: np.ndarray, n: int | None = None) -> torch.Tensor:
    """Consecutive BOS + (CONTEXT-1)-token windows of a split's stream."""
    n_all = (len(stream)) // (CONTEXT - 1)
    n = n_all if n is None else min(n, n_all)
    return torch.from_numpy(np.stack([np.concatenate([[BOS_ID], stream[i * (CONTEXT - 1):(i + 1) * (CONTEXT - 1)]])
                                      for i in range(n)]).astype(np.int64))


@torch.no_grad()
def evaluate(trunk: Trunk, mtp: MTP, windows: torch.Tensor, batch: int = 8) -> dict:
    """MTP cross-entropy, top-1 vs the text (t_{p+2}) and greedy acceptance (MTP argmax == the trunk's
    argmax at p+1, i.e. what a K=1 greedy speculative step accepts), teacher-forced on the text."""
    mtp.eval()
    n = ce = top1 = acc = trunk_top1 = 0.0
    for i in range(0, len(windows), batch):
        ids = windows[i:i + batch]
        h, logits = trunk(ids)
        _, ml = mtp(trunk, h[:, :-1], ids[:, 1:], torch.arange(1, ids.shape[1]))
        ml, tgt = ml[:, :-1], ids[:, 2:]
        ce += F.cross_entropy(ml.reshape(-1, ml.shape[-1]), tgt.reshape(-1), reduction="sum").item()
        d = ml.argmax(-1)
        top1 += (d == tgt).sum().item()
        acc += (d == logits[:, 1:-1].argmax(-1)).sum().item()
        trunk_top1 += (logits[:, 1:-1].argmax(-1) == tgt).sum().item()
        n += tgt.numel()
    mtp.train()
    return {"mtp_ce": ce / n, "mtp_top1": top1 / n, "accept_k1": acc / n, "trunk_top1_next": trunk_top1 / n,
            "rows": int(n)}


def plot(log_path: Path, png_path: Path) -> None:
    """The MTP loss curve: training CE per step (and its running mean), validation CE."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    tr = [(r["step"], r["mtp_ce"]) for r in rows if "mtp_ce" in r]
    va = [(r["step"], r["valid_mtp_ce"]) for r in rows if "valid_mtp_ce" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    s, lo = zip(*tr)
    k = 20
    sm = np.convolve(lo, np.ones(k) / k, mode="valid")
    ax.plot(s, lo, color="#bbb", lw=0.6, label="train (per step)")
    ax.plot(s[len(s) - len(sm):], sm, color="C0", label=f"train (mean of {k})")
    s, lo = zip(*va)
    ax.plot(s, lo, "o-", color="C1", ms=3, label="valid")
    ax.set_xlabel("step")
    ax.set_ylabel("MTP cross-entropy for t+2 (nats/token)")
    ax.set_ylim(min(x[1] for x in tr + va) - 0.3, 8.0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("tiny model: MTP layer on the frozen trunk")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="mtp")
    ap.add_argument("--trunk", type=Path, default=REPO / "models" / "tiny-q8_0.gguf")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--chat-frac", type=float, default=0.15)
    ap.add_argument("--bias-rate", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop (and save) after this much wall time")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--plot", type=Path, help="only plot runs/RUN/mtp-log.jsonl to this PNG")
    args = ap.parse_args()
    if args.plot:
        plot(RUNS / args.run / "mtp-log.jsonl", args.plot)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()

    run_dir = RUNS / args.run
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path, log_path = run_dir / "mtp.pt", run_dir / "mtp-log.jsonl"

    keys, tensors = load_gguf(args.trunk)
    trunk = Trunk(keys, tensors).eval()
    for p in trunk.parameters():
        p.requires_grad_(False)
    cfg = trunk.cfg
    # A file that already has an MTP block gives the same trunk (its first n_layer blocks); the block
    # itself is not used: training starts from trunk layer n_layer-1 as always.

    tok = load_tokenizer()
    stream, chats = encode_split(tok, "train"), encode_chats(tok, "train")
    valid = windows_of(encode_split(tok, "valid"), args.eval_windows)
    batches = Batches(stream, chats, args.batch, args.chat_frac, args.seed)

    diff = check_trunk(keys, tensors, trunk, [int(x) for x in valid[0, :64]])
    print(f"trunk check: max |torch - gguf_forward.py| logits {diff:.3e}", flush=True)
    if diff > 1e-3:
        raise SystemExit(f"train_mtp: the torch trunk disagrees with gguf_forward.py ({diff:.3e})")

    layer = cfg.n_layer  # the MTP block's index: blk.3
    with torch.no_grad():
        probe = batches.next()
        x2 = trunk.residual_before(probe, cfg.n_layer - 1)
        eh_scale = float(x2.pow(2).mean().sqrt()) / math.sqrt(2.0)
    batches = Batches(stream, chats, args.batch, args.chat_frac, args.seed)  # the probe does not consume data
    mtp = MTP(cfg, mtp_tensors_from_layer(tensors, cfg.n_layer - 1, layer, cfg.n_embd, eh_scale), f"blk.{layer}.")
    n_params = sum(p.numel() for p in mtp.parameters())
    decay = [p for p in mtp.parameters() if p.dim() >= 2]
    no_decay = [p for p in mtp.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step = 0
    if args.resume and ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        mtp.load_state_dict(ck["mtp"])
        opt.load_state_dict(ck["opt"])
        step, eh_scale = ck["step"], ck["eh_scale"]
        batches.rng.bit_generator.state = ck["np_rng"]
        torch.set_rng_state(ck["torch_rng"])
        print(f"resumed {ckpt_path} at step {step}", flush=True)
    elif log_path.exists():
        log_path.unlink()

    print(f"MTP params {n_params}; eh_proj init scale {eh_scale:.4f}; train tokens {len(stream)}; "
          f"steps {args.steps} x {args.batch} x {CONTEXT}", flush=True)
    with open(run_dir / "mtp-args.json", "w") as f:
        json.dump({k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                  | {"n_params": n_params, "eh_scale": eh_scale, "trunk_check": diff}, f, indent=1)

    def save() -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"mtp": mtp.state_dict(), "opt": opt.state_dict(), "step": step, "eh_scale": eh_scale,
                    "layer": layer, "np_rng": batches.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                    "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}, tmp)
        os.replace(tmp, ckpt_path)

    log = open(log_path, "a")  # noqa: SIM115 - appended to for the whole run
    if step == 0:
        rec = {"step": 0} | {"valid_" + k: round(v, 4) for k, v in evaluate(trunk, mtp, valid).items()}
        log.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)
    mtp.train()
    t_last = time.time()
    while step < args.steps:
        if args.max_minutes and time.time() - t_start > 60 * args.max_minutes:
            print(f"stopping at step {step}: --max-minutes {args.max_minutes} reached", flush=True)
            break
        ids = batches.next()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        with torch.no_grad():
            h, _ = trunk(ids, logits=False)
        _, ml = mtp(trunk, h[:, :-1], ids[:, 1:], torch.arange(1, ids.shape[1]))
        ce = F.cross_entropy(ml[:, :-1].reshape(-1, ml.shape[-1]), ids[:, 2:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (MTP_LOSS_WEIGHT * ce).backward()
        gnorm = torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0).item()
        opt.step()
        with torch.no_grad():
            sel = mtp.block.last_selection
            load = torch.bincount(sel.reshape(-1), minlength=cfg.n_expert).float()
            mtp.block.exp_probs_b += args.bias_rate * torch.sign(load.mean() - load)
        step += 1
        dt, t_last = time.time() - t_last, time.time()
        rec = {"step": step, "mtp_ce": round(ce.item(), 4), "lr": round(lr_at(step - 1, args), 6),
               "gnorm": round(gnorm, 3), "max_load": round((load.max() / load.mean()).item(), 3),
               "tok_s": round(ids.numel() / dt), "s": round(dt, 2)}
        if step % args.eval_every == 0 or step == args.steps:
            rec |= {"valid_" + k: round(v, 4) for k, v in evaluate(trunk, mtp, valid).items()}
            t_last = time.time()
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(json.dumps(rec), flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            save()
    save()
    plot(log_path, run_dir / "mtp-loss.png")
    print("done", flush=True)


if __name__ == "__main__":
    main()
