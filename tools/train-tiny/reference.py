"""transformers-side references for the exported model: perplexity and greedy continuations.

    .venv/bin/python reference.py HF_DIR perplexity TEXT [-c CTX] [--chunks N]
    .venv/bin/python reference.py HF_DIR golden OUT.json [-n N]

perplexity: the method of llama.cpp's perplexity tool (and `mla perplexity`) on the float32
  transformers model: the text is tokenized once with BOS; chunks of CTX tokens, each with its first
  token replaced by BOS, evaluated independently; the logits at positions CTX/2 .. CTX-2 score the
  next token; prints running PPL per chunk and "Final estimate: PPL = x +/- err" (and --json).
golden: for each prompt in PROMPTS (raw text, and one chat turn rendered with the chat template),
  BOS + prompt ids, then N greedy tokens by a manual loop (full recompute each step, argmax, no
  stopping at EOS); writes prompts, ids, continuation ids and decoded text, and the top-2 logit
  margin of every step (a test comparing another implementation can tell a near-tie from a bug).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

PROMPTS = [
    {"name": "hello", "text": "Hello"},
    {"name": "python", "text": "Python is a programming language that"},
    {"name": "list", "text": "A list is"},
    {"name": "module", "text": "The json module"},
    {"name": "chat", "chat": "What is a dictionary?"},
]


def load(hf_dir: Path):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return tok, model


def perplexity(args) -> None:
    tok, model = load(args.hf_dir)
    text = Path(args.text).read_text(encoding="utf-8")
    ids = tok(text, add_special_tokens=True)["input_ids"]
    n_ctx = args.ctx or model.config.max_position_embeddings
    if len(ids) < 2 * n_ctx:
        sys.exit(f"reference: {args.text} tokenizes to {len(ids)} tokens; need {2 * n_ctx}")
    n_chunk = len(ids) // n_ctx if args.chunks < 0 else min(args.chunks, len(ids) // n_ctx)
    first = n_ctx // 2
    bos = tok.bos_token_id
    nll = nll2 = 0.0
    count = 0
    running = []
    with torch.no_grad():
        for i in range(n_chunk):
            chunk = list(ids[i * n_ctx:(i + 1) * n_ctx])
            chunk[0] = bos
            logits = model(input_ids=torch.tensor([chunk])).logits[0].double()
            logp = torch.log_softmax(logits[first:n_ctx - 1], dim=-1)
            v = -logp.gather(1, torch.tensor(chunk[first + 1:n_ctx]).unsqueeze(1)).squeeze(1)
            nll += v.sum().item()
            nll2 += (v * v).sum().item()
            count += len(v)
            running.append(math.exp(nll / count))
            if not args.json:
                print(f"[{i + 1}]{running[-1]:.4f},", end="", flush=True)
    mean = nll / count
    ppl = math.exp(mean)
    var = nll2 / count - mean * mean
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else 0.0
    if args.json:
        print(json.dumps({"n_tokens": len(ids), "n_ctx": n_ctx, "chunks": n_chunk, "scored_tokens": count,
                          "mean_nll": mean, "ppl": ppl, "ppl_error": err, "running_ppl": running}))
    else:
        print(f"\nFinal estimate: PPL = {ppl:.4f} +/- {err:.5f}")


def golden(args) -> None:
    tok, model = load(args.hf_dir)
    out = []
    for p in PROMPTS:
        if "chat" in p:
            text = tok.apply_chat_template([{"role": "user", "content": p["chat"]}], tokenize=False,
                                           add_generation_prompt=True)
        else:
            text = p["text"]
        ids = tok(text, add_special_tokens=True)["input_ids"]
        seq = list(ids)
        cont, margins = [], []
        with torch.no_grad():
            for _ in range(args.n):
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
                top = torch.topk(logits, 2)
                nxt = int(top.indices[0])
                margins.append(round(float(top.values[0] - top.values[1]), 6))
                cont.append(nxt)
                seq.append(nxt)
        out.append({"name": p["name"], "prompt_text": text, "prompt_ids": ids, "continuation_ids": cont,
                    "continuation_text": tok.decode(cont), "top2_margins": margins})
        print(f"{p['name']}: {text!r} -> {tok.decode(cont)!r}", flush=True)
    Path(args.out).write_text(json.dumps({"n_predict": args.n, "cases": out}, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir", type=Path)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("perplexity")
    p.add_argument("text")
    p.add_argument("-c", "--ctx", type=int, default=0)
    p.add_argument("--chunks", type=int, default=-1)
    p.add_argument("--json", action="store_true")
    g = sub.add_parser("golden")
    g.add_argument("out")
    g.add_argument("-n", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    perplexity(args) if args.cmd == "perplexity" else golden(args)


if __name__ == "__main__":
    main()
