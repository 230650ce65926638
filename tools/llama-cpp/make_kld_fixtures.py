"""Regenerate tests/fixtures/kld/: llama-perplexity's KL-divergence figures on the embedded models.

    .venv/bin/python tools/llama-cpp/make_kld_fixtures.py LLAMA_PERPLEXITY [--mla build/mla] [-- EXTRA ARGS]

LLAMA_PERPLEXITY is llama.cpp's `llama-perplexity` (tools/llama-cpp/build-perplexity.sh builds it;
give it `-- -nr`: with weight repacking that build aborts on this model, see
tools/train-tiny/compare_perplexity.py). ik_llama.cpp's shares the format and the statistics but
refuses the embedded model (its MLA check wants DeepSeek's 576/512 head sizes). Everything runs on tests/fixtures/tiny/heldout-test.txt
with n_ctx 64 and 4 chunks: 4 * 31 = 124 scored tokens, the fewest chunks of this context over
llama-perplexity's 100-token minimum for its final statistics; each scored token stores 4100 uint16
(vocabulary 4096), so a base is 1 MB.

Writes:
  llama-base-q8_0.kld  llama-perplexity --kl-divergence-base on models/tiny-q8_0.gguf;
  llama-stats.json     what llama-perplexity --kl-divergence printed, parsed:
      llama_base.vs[MODEL]  models/tiny-q4_k.gguf and models/tiny-q8_0.gguf against llama-base-q8_0.kld;
      mla_base.vs[MODEL]    models/tiny-q4_k.gguf against a base that `mla perplexity
                            --kl-divergence-base` wrote for models/tiny-q8_0.gguf (not kept: the test
                            writes it again), i.e. llama.cpp reading mla.cpp's file.
Figures are stored as `mla perplexity --kl-divergence --json` names them (fractions, not percent).
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "kld"
TEXT = REPO / "tests" / "fixtures" / "tiny" / "heldout-test.txt"
MODELS = {"q8_0": REPO / "models" / "tiny-q8_0.gguf", "q4_k": REPO / "models" / "tiny-q4_k.gguf"}
N_CTX, CHUNKS, THREADS = 64, 4, 2

NUM = r"(-?[0-9.]+|nan|-?inf)"
QUANTILE_LABELS = {"Maximum": "max", "99.9%": "p99.9", "99.0%": "p99", "95.0%": "p95", "90.0%": "p90",
                   "75.0%": "p75", "Median": "median", "25.0%": "p25", "10.0%": "p10", "5.0%": "p5",
                   "1.0%": "p1", "0.1%": "p0.1", "Minimum": "min"}


def run(cmd: list) -> str:
    print("+", " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p.stdout + "\n" + p.stderr


def run_until(cmd: list, pattern: str, tries: int = 4) -> str:
    """run(cmd) until its output holds `pattern`: llama.cpp's logger writes from its own thread and
    now and then loses the last lines at exit."""
    for _ in range(tries):
        text = run(cmd)
        if re.search(pattern, text):
            return text
        print(f"  ('{pattern}' missing from the output: again)", file=sys.stderr)
    raise SystemExit(f"no '{pattern}' in llama-perplexity's output after {tries} runs:\n{text[-3000:]}")


def value_error(text: str, label: str, percent: bool = False) -> dict:
    m = re.search(re.escape(label) + r"\s*:\s*" + NUM + r"\s*±\s*" + NUM, text)
    if not m:
        raise SystemExit(f"no '{label}' line in llama-perplexity's output")
    scale = 0.01 if percent else 1.0
    return {"value": float(m.group(1)) * scale, "error": float(m.group(2)) * scale}


def quantiles(text: str, metric: str, percent: bool) -> dict:
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*(Maximum|Minimum|Median|[0-9.]+%)\s+" + metric + r":\s*" + NUM + r"%?\s*$", line)
        if m:
            out[QUANTILE_LABELS[m.group(1)]] = float(m.group(2)) * (0.01 if percent else 1.0)
    return out


def parse_kld(text: str) -> dict:
    """The final statistics of llama-perplexity --kl-divergence, keyed as mla's --json."""
    cor = re.search(r"Cor\(ln\(PPL\(Q\)\), ln\(PPL\(base\)\)\):\s*" + NUM + "%", text)
    kld = value_error(text, "Mean    KLD")
    dp = value_error(text, "Mean    Δp", percent=True)
    stats = {
        "ppl": value_error(text, "Mean PPL(Q)"),
        "ppl_base": value_error(text, "Mean PPL(base)"),
        "cor_ln_ppl": float(cor.group(1)) / 100 if cor else None,
        "ln_ppl_ratio": value_error(text, "Mean ln(PPL(Q)/PPL(base))"),
        "ppl_ratio": value_error(text, "Mean PPL(Q)/PPL(base)"),
        "ppl_diff": value_error(text, "Mean PPL(Q)-PPL(base)"),
        "kld": {"mean": kld["value"], "error": kld["error"], **quantiles(text, "KLD", False)},
        "delta_p": {"mean": dp["value"], "error": dp["error"], **quantiles(text, "Δp", True)},
        "rms_delta_p": value_error(text, "RMS Δp", percent=True),
        "same_top_p": value_error(text, "Same top p", percent=True),
    }
    if len(stats["kld"]) != 13 or len(stats["delta_p"]) != 15:
        raise SystemExit(f"llama-perplexity printed an unexpected quantile list:\n{text[-3000:]}")
    return stats


def kl_divergence(llama: str, extra: list, model: Path, base: Path) -> dict:
    text = run_until([llama, "-m", model, "-c", N_CTX, "-b", N_CTX, "-t", THREADS, "--kl-divergence-base", base,
                      "--kl-divergence", *extra], r"Same top p:")
    return parse_kld(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("llama_perplexity")
    ap.add_argument("--mla", default=str(REPO / "build" / "mla"))
    ap.add_argument("extra", nargs="*", help="more llama-perplexity arguments (after --)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    llama_base = OUT / "llama-base-q8_0.kld"
    final_re = r"Final estimate: PPL.*?= ([0-9.]+) \+/- ([0-9.]+)"
    text = run_until([args.llama_perplexity, "-m", MODELS["q8_0"], "-f", TEXT, "-c", N_CTX, "-b", N_CTX, "--chunks",
                      CHUNKS, "-t", THREADS, "--kl-divergence-base", llama_base, *args.extra], final_re)
    final = re.search(final_re, text)
    version = run([args.llama_perplexity, "--version"]).strip().splitlines()[0]
    stats = {
        "llama_perplexity": {"binary": Path(args.llama_perplexity).name, "version": version,
                             "extra_args": args.extra},
        "text": str(TEXT.relative_to(REPO)), "n_ctx": N_CTX, "chunks": CHUNKS, "threads": THREADS,
        "llama_base": {"file": llama_base.name, "model": str(MODELS["q8_0"].relative_to(REPO)),
                       "final_ppl": {"value": float(final.group(1)), "error": float(final.group(2))}, "vs": {}},
        "mla_base": {"model": str(MODELS["q8_0"].relative_to(REPO)), "vs": {}},
    }
    for name in ("q4_k", "q8_0"):
        stats["llama_base"]["vs"][str(MODELS[name].relative_to(REPO))] = kl_divergence(
            args.llama_perplexity, args.extra, MODELS[name], llama_base)
    with tempfile.TemporaryDirectory() as tmp:
        mla_base = Path(tmp) / "mla-base-q8_0.kld"
        run([args.mla, "perplexity", "-m", MODELS["q8_0"], "-f", TEXT, "-c", N_CTX, "--chunks", CHUNKS, "-t", THREADS,
             "--kl-divergence-base", mla_base])
        stats["mla_base"]["vs"][str(MODELS["q4_k"].relative_to(REPO))] = kl_divergence(
            args.llama_perplexity, args.extra, MODELS["q4_k"], mla_base)
    (OUT / "llama-stats.json").write_text(json.dumps(stats, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {llama_base} ({llama_base.stat().st_size} bytes) and {OUT / 'llama-stats.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
