"""`mla perplexity --kl-divergence-base / --kl-divergence` against llama.cpp's perplexity tool.

Fixtures (tests/fixtures/kld/, written by tools/llama-cpp/make_kld_fixtures.py with llama.cpp's
llama-perplexity from the llama-cpp-python 0.3.36 sdist (tools/llama-cpp/build-perplexity.sh, -nr);
ik_llama.cpp refuses the embedded model (its MLA check wants DeepSeek's 576/512 head sizes), and
both tools share the file format and the statistics; heldout-test.txt, n_ctx 64, 4 chunks = 124
scored tokens):
  llama-base-q8_0.kld  llama-perplexity --kl-divergence-base on models/tiny-q8_0.gguf;
  llama-stats.json     llama-perplexity --kl-divergence's final figures for tiny-q4_k and tiny-q8_0
                       against that base, and for tiny-q4_k against a base mla.cpp wrote for tiny-q8_0.

What must agree, and how closely:
  - the base side (PPL(base) and its error) comes from the file alone: mla.cpp reading llama's base
    must print llama's figures to the digits llama prints (6 decimals);
  - the model side is mla.cpp's forward pass against llama.cpp's on the same quantized file.
    test_q8_0_against_llama_base_is_the_noise_floor measures how far the two engines are apart on
    one file (when made: mean KL 1.3e-4, largest 2.9e-3, one top token of 124, |Δp| up to 0.010 per
    token, PPL 0.07%); the Q4_K comparison (mean KL 5.3e-3) may move by about that much. TOL gives
    each figure's allowance, relative to llama's value or absolute, a few times what the fixture
    showed (mean KL 1.8%, KL quantiles up to 15% on the 124 sorted values, Δp quantiles up to
    0.006, PPL(Q) 0.26%, ln(PPL ratio) 0.0026, no top-token flip). A sorted value moves by at most
    the largest per-token move, so the quantiles get the per-token allowance, not the mean's.
"""
import json
import math

import pytest
from conftest import REPO, run_mla

FIX = REPO / "tests" / "fixtures" / "kld"
TEXT = REPO / "tests" / "fixtures" / "tiny" / "heldout-test.txt"
LLAMA_BASE = FIX / "llama-base-q8_0.kld"
Q8, Q4 = "models/tiny-q8_0.gguf", "models/tiny-q4_k.gguf"
# figure: (relative, absolute); a figure passes within either.
TOL = {
    "ppl": (0.01, 0), "ppl_error": (0.02, 0),
    "ln_ppl_ratio": (0, 0.006), "ln_ppl_ratio_error": (0.05, 0),
    "ppl_ratio": (0, 0.006), "ppl_ratio_error": (0.05, 0),
    "ppl_diff": (0, 0.4), "ppl_diff_error": (0.05, 0),
    "cor_ln_ppl": (0, 0.001),
    "rms_delta_p": (0.1, 0), "rms_delta_p_error": (0.2, 0),
    "kld_mean": (0.06, 0), "kld_error": (0.1, 0), "kld_quantile": (0.25, 3e-4),
    "delta_p_mean": (0, 0.002), "delta_p_error": (0.1, 0), "delta_p_quantile": (0, 0.012),
}
TOP_FLIPS = 2


def stats():
    return json.loads((FIX / "llama-stats.json").read_text(encoding="utf-8"))


def kld_json(mla_bin, model, base, *extra):
    p = run_mla(mla_bin, "perplexity", "-m", REPO / model, "--kl-divergence-base", base, "--kl-divergence", "-t", "2",
                "--json", *extra)
    return json.loads(p.stdout)


def close(got, want, rel, abs_=0.0):
    return abs(got - want) <= max(rel * abs(want), abs_)


def assert_model_side(got, want):
    """Every figure of llama-perplexity's final block within TOL."""
    checks = [("cor_ln_ppl", "cor_ln_ppl", got["cor_ln_ppl"], want["cor_ln_ppl"])]
    for key in ("ppl", "ln_ppl_ratio", "ppl_ratio", "ppl_diff", "rms_delta_p"):
        checks.append((key, key, got[key]["value"], want[key]["value"]))
        checks.append((key + "_error", key + ".error", got[key]["error"], want[key]["error"]))
    for dist in ("kld", "delta_p"):
        for q, w in want[dist].items():
            tol = f"{dist}_{q}" if q in ("mean", "error") else f"{dist}_quantile"
            checks.append((tol, f"{dist}.{q}", got[dist][q], w))
    bad = []
    for tol, label, g, w in checks:
        rel, abs_ = TOL[tol]
        if not close(g, w, rel, abs_):
            bad.append(f"{label}: mla {g:.6g}, llama {w:.6g} (allowed: {rel:g} relative or {abs_:g})")
    flips = abs(got["same_top_p"]["value"] - want["same_top_p"]["value"]) * got["scored_tokens"]
    if flips > TOP_FLIPS + 1e-6:
        bad.append(f"same_top_p: mla {got['same_top_p']['value']:.4f}, llama {want['same_top_p']['value']:.4f}")
    assert not bad, "mla.cpp and llama-perplexity disagree:\n  " + "\n  ".join(bad)


def test_reads_llama_base_exactly(mla_bin):
    """The base side depends on the file alone: llama's PPL(base) and its error to the digits it
    prints (6 decimals), and the same 124 tokens (the text given with -f must tokenize to them)."""
    s = stats()
    want = s["llama_base"]["vs"][Q4]
    got = kld_json(mla_bin, Q4, LLAMA_BASE, "-f", TEXT)
    assert got["scored_tokens"] == 124 and got["n_ctx"] == s["n_ctx"] and got["chunks"] == s["chunks"]
    for part in ("value", "error"):
        assert abs(got["ppl_base"][part] - want["ppl_base"][part]) <= 1e-6, (part, got["ppl_base"], want["ppl_base"])
    # llama's own perplexity run of the base model, from the same logits before they were stored
    # (0.5 level of rounding per token: 2e-4 in log-probability)
    assert close(got["ppl_base"]["value"], s["llama_base"]["final_ppl"]["value"], 1e-4)


def test_q4_k_against_llama_base_matches_llama(mla_bin):
    got = kld_json(mla_bin, Q4, LLAMA_BASE)
    assert_model_side(got, stats()["llama_base"]["vs"][Q4])


def test_q8_0_against_llama_base_is_the_noise_floor(mla_bin):
    """mla.cpp's Q8_0 against llama.cpp's Q8_0 base: two engines on one file. Its KL is the noise the
    model-side tolerances above have to absorb: well under the Q4_K figure, and close to what
    llama.cpp measures against its own base (its own rounding, from the levels alone)."""
    s = stats()["llama_base"]["vs"]
    got = kld_json(mla_bin, Q8, LLAMA_BASE)
    assert got["kld"]["mean"] < 0.1 * s[Q4]["kld"]["mean"], (got["kld"], s[Q4]["kld"])
    assert got["same_top_p"]["value"] >= 1 - TOP_FLIPS / got["scored_tokens"]
    assert close(got["ppl"]["value"], got["ppl_base"]["value"], 2e-3)


def test_llama_reads_mla_base(mla_bin, tmp_path):
    """A base mla.cpp writes is what llama-perplexity read when the fixture was made: llama's figures
    for tiny-q4_k against mla's tiny-q8_0 base are mla's own, within the model-side tolerances, and
    the base side (mla's Q8_0 logits then and now) to 1e-4."""
    base = tmp_path / "mla-q8_0.kld"
    run_mla(mla_bin, "perplexity", "-m", REPO / Q8, "-f", TEXT, "-c", "64", "--chunks", "4", "-t", "2",
            "--kl-divergence-base", base)
    want = stats()["mla_base"]["vs"][Q4]
    got = kld_json(mla_bin, Q4, base)
    assert close(got["ppl_base"]["value"], want["ppl_base"]["value"], 1e-4), (got["ppl_base"], want["ppl_base"])
    assert_model_side(got, want)


def test_round_trip_is_zero(mla_bin, tmp_path):
    """A model against its own base: only the stored levels' rounding is left."""
    base = tmp_path / "q4.kld"
    ppl = json.loads(run_mla(mla_bin, "perplexity", "-m", REPO / Q4, "-f", TEXT, "-c", "64", "--chunks", "4", "-t",
                             "2", "--kl-divergence-base", base, "--json").stdout)
    assert base.stat().st_size == 20 + 4 * 256 + 124 * 4100 * 2
    got = kld_json(mla_bin, Q4, base)
    assert abs(got["kld"]["mean"]) < 1e-5 and got["kld"]["max"] < 1e-4
    assert got["same_top_p"]["value"] == 1.0
    assert close(got["ppl"]["value"], ppl["ppl"], 1e-6)  # the same logits; exp in float there, double here
    assert close(got["ppl_base"]["value"], ppl["ppl"], 1e-4)


def mla_fails(mla_bin, *args):
    p = run_mla(mla_bin, "perplexity", *args, check=False)
    assert p.returncode == 1, f"exit {p.returncode}: {p.stderr}"
    errors = [line for line in p.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, p.stderr
    return errors[0]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-100], "the file is truncated"),
    (lambda b: b[:12], "shorter than a base file's 20-byte header"),
    (lambda b: b"_LOGITS_" + b[8:], "does not start with \"_logits_\""),
    (lambda b: b + b"\0\0", "trailing bytes"),
    (lambda b: b[:20] + (5000).to_bytes(4, "little") + b[24:], "token 5000 at position 0 is outside its vocabulary"),
])
def test_bad_base_file_is_one_line(mla_bin, tmp_path, damage, message):
    bad = tmp_path / "bad.kld"
    bad.write_bytes(damage(LLAMA_BASE.read_bytes()))
    assert message in mla_fails(mla_bin, "-m", REPO / Q4, "--kl-divergence-base", bad, "--kl-divergence")


def test_base_must_fit_this_run(mla_bin, tmp_path):
    args = ("--kl-divergence-base", LLAMA_BASE, "--kl-divergence")
    assert "differs from the base" in mla_fails(mla_bin, "-m", REPO / Q4, "-c", "32", *args)
    other = REPO / "tests" / "fixtures" / "reference" / "deepseek-v3-tiny" / "model-f32.gguf"
    assert "has a vocabulary of 4096 tokens" in mla_fails(mla_bin, "-m", other, *args)
    shifted = tmp_path / "shifted.txt"
    shifted.write_text(TEXT.read_text(encoding="utf-8")[500:], encoding="utf-8")
    assert "does not tokenize as the base" in mla_fails(mla_bin, "-m", REPO / Q4, "-f", shifted, *args)
    assert "--chunks 0 leaves nothing to evaluate" in mla_fails(mla_bin, "-m", REPO / Q4, "--chunks", "0", *args)
    assert "needs --kl-divergence-base" in mla_fails(mla_bin, "-m", REPO / Q4, "--kl-divergence")
    assert "-f FILE is required" in mla_fails(mla_bin, "-m", REPO / Q4)
    unwritable = tmp_path / "no-such-dir" / "base.kld"
    assert "cannot write the KL-divergence base" in mla_fails(mla_bin, "-m", REPO / Q4, "-f", TEXT, "-c", "64",
                                                              "--kl-divergence-base", unwritable)


def test_text_output_has_llama_labels(mla_bin):
    """The final block carries llama-perplexity's labels, so scripts that read one read the other."""
    out = run_mla(mla_bin, "perplexity", "-m", REPO / Q4, "--kl-divergence-base", LLAMA_BASE, "--kl-divergence",
                  "-t", "2").stdout
    for label in ("Mean PPL(Q)                   :", "Mean    KLD:", "99.9%   KLD:", "Median  KLD:", " 0.1%   KLD:",
                  "Maximum Δp:", "RMS Δp    :", "Same top p:"):
        assert label in out, label
    assert not math.isnan(float(out.split("Mean    KLD:")[1].split()[0]))
