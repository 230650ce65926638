"""Greedy MTP speculative decoding of the tiny model in llama.cpp's llama-server against this
project's reference simulation, on the same prompts.

    .venv/bin/python compare_mtp_llama.py [--server LLAMA_SERVER] [--model models/tiny-q8_0.gguf]
        [--k 1 2 3 4] [--prompts 24] [--gen 32] [--json OUT]

llama.cpp side: `llama-server --spec-type draft-mtp --spec-draft-n-max K --spec-draft-p-min 0`
(its MTP draft for deepseek2 files with nextn layers), one request per prompt (token ids, greedy,
n_predict = --gen, no prompt cache); its response's timings give draft_n and draft_n_accepted.
Reference side: mtp_reference.chained on the greedy continuation of the torch trunk (every tensor
dequantized with gguf-py, float32): the drafts a greedy decoder with K chained drafts per step
makes and the ones accepted. Both sides' generated tokens are compared too (llama.cpp computes
with the quantized weights and quantized activations, the reference with the dequantized weights:
a near tie can flip a token, and the counts then differ for that prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import torch

from common import BOS_ID, encode_split, load_tokenizer
from mtp_reference import chained, fixture_prompts, greedy, load_model

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_SERVER = (Path(os.environ.get("REFERENCE_CACHE_DIR", Path.home() / ".cache" / "mla"))
                  / "llama.cpp-0.3.36-build" / "bin" / "llama-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def llama_run(server: Path, model: Path, k: int, prompts: list[list[int]], gen: int, threads: int) -> list[dict]:
    port = free_port()
    cmd = [str(server), "-m", str(model), "--port", str(port), "-c", "512", "-np", "1", "-t", str(threads),
           "--no-repack", "--spec-type", "draft-mtp", "--spec-draft-n-max", str(k), "--spec-draft-p-min", "0",
           "--no-warmup"]
    log = open(HERE / "runs" / f"llama-server-k{k}.log", "w")  # noqa: SIM115 - closed below
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if p.poll() is not None:
                raise SystemExit(f"llama-server exited ({p.returncode}); see runs/llama-server-k{k}.log")
            time.sleep(0.5)
        out = []
        for ids in prompts:
            r = post(port, "/completion", {"prompt": ids, "n_predict": gen, "temperature": 0.0, "top_k": 1,
                                           "cache_prompt": False, "return_tokens": True, "ignore_eos": True})
            t = r.get("timings", {})
            out.append({"tokens": r.get("tokens", []), "drafted": t.get("draft_n", 0),
                        "accepted": t.get("draft_n_accepted", 0)})
        return out
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", type=Path, default=DEFAULT_SERVER)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "tiny-q8_0.gguf")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--prompts", type=int, default=24, help="test-split prompts besides the fixture's 3")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.server.is_file():
        raise SystemExit(f"compare_mtp_llama: {args.server} not found (tools/llama-cpp/build-perplexity.sh builds it)")

    test = encode_split(load_tokenizer(), "test")
    step = (len(test) - args.prompt_len) // args.prompts
    prompts = [ids for _, ids in fixture_prompts()]
    prompts += [[BOS_ID] + test[i * step:i * step + args.prompt_len - 1].tolist() for i in range(args.prompts)]

    _, _, trunk, mtp = load_model(args.model)
    ref = []
    for ids in prompts:
        seq = greedy(trunk, torch.tensor([ids]), args.gen)
        sim = chained(trunk, mtp, seq, len(ids), max(args.k))["simulated"]
        ref.append({"tokens": seq[0, len(ids):].tolist(), "sim": sim})

    res = {"model": args.model.name, "prompts": len(prompts), "generated": args.gen, "by_k": {}}
    for k in args.k:
        got = llama_run(args.server, args.model, k, prompts, args.gen, args.threads)
        same = [g["tokens"] == r["tokens"] for g, r in zip(got, ref)]
        both = [i for i, s in enumerate(same) if s]

        def tot(rows: list[dict], key: str, both: list[int] = both) -> int:
            return int(sum(rows[i][key] for i in both))

        ref_rows = [r["sim"][f"K{k}"] for r in ref]
        row = {"tokens_identical": f"{sum(same)} of {len(prompts)}",
               "llama_cpp": {"drafted": tot(got, "drafted"), "accepted": tot(got, "accepted")},
               "reference": {"drafted": tot(ref_rows, "drafted"), "accepted": tot(ref_rows, "accepted")},
               "per_prompt_equal_counts": int(sum(got[i]["drafted"] == ref_rows[i]["drafted"]
                                                  and got[i]["accepted"] == ref_rows[i]["accepted"] for i in both)),
               "per_prompt": [{"llama_cpp": [g["drafted"], g["accepted"]], "reference": [r["drafted"], r["accepted"]],
                               "same_tokens": s} for g, r, s in zip(got, ref_rows, same)]}
        for side in ("llama_cpp", "reference"):
            d = row[side]
            d["acceptance"] = round(d["accepted"] / max(1, d["drafted"]), 4)
        res["by_k"][f"K{k}"] = row
        print(json.dumps({k2: v for k2, v in row.items() if k2 != "per_prompt"} | {"K": k}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
