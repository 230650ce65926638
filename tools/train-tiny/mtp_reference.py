"""Measures and pins down the tiny model's MTP layer from the shipped GGUF files.

    .venv/bin/python mtp_reference.py tokenizer MLA_BIN
        the ids of data/tokenizer/tokenizer.json (which train_mtp.py trains on) against
        `mla tokenize` on the GGUF's vocabulary, on documents of the training and test splits
    .venv/bin/python mtp_reference.py eval MODEL.gguf [--json OUT] [--prompts N] [--gen G]
        acceptance on the held-out test split (see `evaluate` and `chained`)
    .venv/bin/python mtp_reference.py fixture models/tiny-q8_0.gguf OUT_DIR
        tests/fixtures/tiny-mtp/: draft_logits.json and one float32 file per case

Every tensor is dequantized to float32 with gguf-py (for the q8_0 file: the values of the F32 copy
tests/py/gguf_f32.py writes). The model is mtp_model.Trunk + mtp_model.MTP, the module train_mtp.py
trains; the fixture runs it in float64 and checks it against tools/reference/gguf_forward.py's
numpy mtp_forward (both MLA paths).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common import BOS_ID, DATA, encode_chats, encode_split, load_tokenizer
from mtp_model import MTP, Trunk, load_gguf
from train_mtp import evaluate, windows_of

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def load_model(path: Path, dtype=torch.float32) -> tuple[dict, dict, Trunk, MTP]:
    keys, tensors = load_gguf(path)
    trunk = Trunk(keys, tensors).eval()
    if trunk.cfg.n_nextn != 1:
        raise SystemExit(f"mtp_reference: {path} has {trunk.cfg.n_nextn} nextn layers, expected 1")
    mtp = MTP(trunk.cfg, tensors, f"blk.{trunk.cfg.n_layer}.").eval()
    return keys, tensors, trunk.to(dtype), mtp.to(dtype)


def cmd_tokenizer(args) -> None:
    tok = load_tokenizer()
    docs = []
    for split in ("train", "test"):
        text = (DATA / f"{split}.txt").read_text(encoding="utf-8").split("\n\n")
        docs += [d.strip() for d in text if d.strip()][: args.docs]
    lines = "".join(json.dumps(d) + "\n" for d in docs)
    tmp = HERE / "runs" / "tokenizer-check.jsonl"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(lines, encoding="utf-8")
    out = subprocess.run([str(args.mla), "tokenize", "-m", str(REPO / "models" / "tiny-q8_0.gguf"),
                          "--no-special", "--batch-jsonl", str(tmp)], check=True, capture_output=True, text=True).stdout
    got = [json.loads(x) for x in out.splitlines()]
    ref = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    bad = sum(a != b for a, b in zip(got, ref)) + abs(len(got) - len(ref))
    n_tok = sum(len(r) for r in ref)
    print(json.dumps({"documents": len(docs), "tokens": n_tok, "documents_differing": bad}))
    if bad:
        raise SystemExit("mtp_reference: the training tokenizer and the GGUF vocabulary disagree")


@torch.no_grad()
def greedy(trunk: Trunk, prompts: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy continuation (n_new tokens) of equally long prompts [B, P] by the trunk."""
    ids = prompts
    for _ in range(n_new):
        _, logits = trunk(ids)
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return ids


@torch.no_grad()
def chained(trunk: Trunk, mtp: MTP, seqs: torch.Tensor, start: int, k_max: int = 4) -> dict:
    """Chained-draft acceptance on greedy sequences seqs [B, T] (each token after `start` is the
    trunk's argmax, so a draft is accepted iff it equals the next token of the sequence).
    For every position p >= start-1 with p+2 < T: draft 1 from the pair (h_p, s_{p+1}) (the MTP
    cache holding the trunk's pairs 0..p-1); draft j+1 from (h'_j, d_j) at position p+1+j, h'_j the
    MTP's own shared_head_norm output of the previous draft row, its cache holding the pairs 0..p
    and the chained rows before it. Counts, for j = 1..k_max, the drafts made (all earlier ones
    accepted) and accepted. Then simulates greedy speculative decoding with K = 1..k_max drafts per
    step from `start` on, drafting at most (tokens still to generate - 1) per step as llama-server
    does: drafted and accepted tokens, tokens per trunk step."""
    B, T = seqs.shape
    made, acc = np.zeros(k_max, int), np.zeros(k_max, int)
    run_len = np.full((B, T), -1)  # run_len[b, p]: drafts accepted in a row from position p (<= k_max)
    for b in range(B):
        ids = seqs[b:b + 1]
        h, _ = trunk(ids, logits=False)
        hn, ml = mtp(trunk, h[:, :-1], ids[:, 1:], torch.arange(1, T))
        for p in range(start - 1, T - 2):
            d, hprev, n_ok = int(ml[0, p].argmax()), hn[:, p:p + 1], 0
            rows_h, rows_t = h[:, :p + 1], ids[:, 1:p + 2]
            for j in range(k_max):
                if p + 2 + j >= T:
                    break
                made[j] += 1
                if d != int(ids[0, p + 2 + j]):
                    break
                acc[j] += 1
                n_ok += 1
                if j + 1 == k_max or p + 3 + j >= T:
                    break
                rows_h, rows_t = torch.cat([rows_h, hprev], 1), torch.cat([rows_t, ids[:, p + 2 + j:p + 3 + j]], 1)
                hc, lc = mtp(trunk, rows_h, rows_t, torch.arange(1, rows_t.shape[1] + 1))
                d, hprev = int(lc[0, -1].argmax()), hc[:, -1:]
            run_len[b, p] = n_ok
    sim = {}
    for K in range(1, k_max + 1):
        steps = drafted = accepted = tokens = 0
        for b in range(B):
            p = start - 1  # after the prefill: s_{p+1} is known, h_p too
            while p + 2 < T:
                # No draft whose bonus token would pass the end (llama-server's n_remaining - 1 cap):
                # with one token left the step is a plain decode.
                nd = min(K, T - 3 - p)
                n = int(min(run_len[b, p], nd))
                drafted += nd
                accepted += n
                steps += 1
                tokens += n + 1
                p += n + 1
        sim[f"K{K}"] = {"steps": steps, "drafted": drafted, "accepted": accepted,
                        "acceptance": round(accepted / drafted, 4), "tokens_per_step": round(tokens / steps, 4)}
    return {"per_position": [{"k": j + 1, "drafted": int(made[j]), "accepted": int(acc[j]),
                              "rate": round(acc[j] / max(1, made[j]), 4)} for j in range(k_max)],
            "simulated": sim}


def cmd_eval(args) -> None:
    torch.set_num_threads(args.threads)
    t0 = time.time()
    _, _, trunk, mtp = load_model(args.model)
    test = encode_split(load_tokenizer(), "test")
    res = {"model": args.model.name, "teacher_forced": evaluate(trunk, mtp, windows_of(test, args.windows))}
    print(json.dumps(res), flush=True)
    step = (len(test) - args.prompt_len) // args.prompts
    prompts = torch.from_numpy(np.stack([np.concatenate([[BOS_ID], test[i * step:i * step + args.prompt_len - 1]])
                                         for i in range(args.prompts)]).astype(np.int64))
    seqs = greedy(trunk, prompts, args.gen)
    res["greedy"] = {"prompts": args.prompts, "prompt_tokens": args.prompt_len, "generated": args.gen,
                     **chained(trunk, mtp, seqs, args.prompt_len)}
    res["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


FIXTURE_GEN = 32  # greedy tokens generated per fixture case


def fixture_prompts() -> list[tuple[str, list[int]]]:
    tok = load_tokenizer()
    test = encode_split(tok, "test")
    chat = encode_chats(tok, "test")[2]
    cut = int(np.nonzero(chat == 3)[0][0]) + 2  # through "<|assistant|>\n"
    prompts = [("test split, tokens 1000..1039", [BOS_ID] + test[1000:1040].tolist()),
               ("test split, tokens 40000..40058", [BOS_ID] + test[40000:40059].tolist()),
               ("test chat 2, its prompt through the assistant header", chat[:cut].tolist())]
    assert all(20 <= len(p) <= 60 for _, p in prompts), [len(p) for _, p in prompts]
    return prompts


def cmd_fixture(args) -> None:
    sys.path.insert(0, str(REPO / "tools" / "reference"))
    import gguf_forward
    torch.set_num_threads(args.threads)
    keys, tensors, trunk, mtp = load_model(args.model, torch.float64)
    w64 = {k: v.astype(np.float64) for k, v in tensors.items()}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for i, (what, ids) in enumerate(fixture_prompts()):
        t = torch.tensor([ids])
        with torch.no_grad():
            h, logits = trunk(t)
            _, ml = mtp(trunk, h[:, :-1], t[:, 1:], torch.arange(1, len(ids)))
        ml = ml[0].numpy()
        diffs = {}
        for path in ("mha", "mqa"):
            ref_t, ref_m, _ = gguf_forward.mtp_forward(keys, w64, ids, path)
            diffs[path] = max(float(np.abs(ref_m - ml).max()), float(np.abs(ref_t - logits[0].numpy()).max()))
        if max(diffs.values()) > 1e-9:
            raise SystemExit(f"mtp_reference: case {i}: torch and gguf_forward.py differ by {diffs}")
        name = f"case{i}.f32"
        ml.astype("<f4").tofile(out / name)
        trunk_arg = logits[0].argmax(-1).numpy()      # [T]: the trunk's next token after each position
        mtp_arg = ml.argmax(-1)                        # [R]: row p's draft for position p+2
        seq = greedy(trunk, t, FIXTURE_GEN)
        sim = chained(trunk, mtp, seq, len(ids), 1)["simulated"]["K1"]
        cases.append({"what": what, "tokens": ids, "file": name, "rows": len(ids) - 1, "vocab": int(ml.shape[1]),
                      "trunk_argmax": trunk_arg[1:].tolist(), "mtp_argmax": mtp_arg.tolist(),
                      "accepted_k1_teacher_forced": int((trunk_arg[1:] == mtp_arg).sum()),
                      "max_abs_logit": round(float(np.abs(ml).max()), 4),
                      "max_abs_diff_vs_gguf_forward_py": diffs,
                      "greedy": {"tokens": seq[0, len(ids):].tolist(), "k1": sim}})
        print(f"case {i}: {len(ids)} tokens; torch vs numpy {diffs}; accepted {cases[-1]['accepted_k1_teacher_forced']}"
              f" of {len(ids) - 1}; greedy K=1 {sim}", flush=True)
    doc = {"model": "the F32 copy of models/tiny-q8_0.gguf: .venv/bin/python tests/py/gguf_f32.py "
                    "models/tiny-q8_0.gguf OUT.gguf (every tensor dequantized by gguf-py)",
           "computed_by": "tools/train-tiny/mtp_reference.py fixture (mtp_model.Trunk + MTP in float64)",
           "cases": cases}
    (out / "draft_logits.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"mtp_reference: wrote {out / 'draft_logits.json'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("tokenizer")
    a.add_argument("mla", type=Path)
    a.add_argument("--docs", type=int, default=300, help="documents per split")
    a = sub.add_parser("eval")
    a.add_argument("model", type=Path)
    a.add_argument("--json", type=Path)
    a.add_argument("--windows", type=int, help="test windows of 256 tokens (default: the whole split)")
    a.add_argument("--prompts", type=int, default=24)
    a.add_argument("--prompt-len", type=int, default=32)
    a.add_argument("--gen", type=int, default=64)
    a.add_argument("--threads", type=int, default=1)
    a = sub.add_parser("fixture")
    a.add_argument("model", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    {"tokenizer": cmd_tokenizer, "eval": cmd_eval, "fixture": cmd_fixture}[args.cmd](args)


if __name__ == "__main__":
    main()
