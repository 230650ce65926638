"""`mla gguf split` / `mla gguf merge` against llama.cpp's llama-gguf-split (the sha256 of what it
wrote, recorded by tools/llama-cpp/make_split_fixtures.py), opening split models by any shard's
name, and `mla run` on a split model giving the single file's logits."""
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mla

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "split"
MANIFEST = json.loads((FIX / "llama-gguf-split.json").read_text())
CASES = [(m, c) for m, e in MANIFEST["inputs"].items() for c in e["cases"]]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_with_mla(mla_bin, model, case, tmp_path) -> list[Path]:
    entry = MANIFEST["inputs"][model]
    src = REPO / entry["input"]
    assert sha256(src) == entry["input_sha256"], f"{src} changed since the fixtures were made"
    out = tmp_path / "ours"
    out.mkdir(exist_ok=True)
    run_mla(mla_bin, "gguf", "split", *entry["cases"][case]["options"], str(src), str(out / model))
    return sorted(out.glob(f"{model}-*-of-*.gguf"))


@pytest.mark.parametrize("model,case", CASES)
def test_split_and_merge_are_byte_identical_to_llama_cpp(mla_bin, model, case, tmp_path):
    want = MANIFEST["inputs"][model]["cases"][case]
    shards = split_with_mla(mla_bin, model, case, tmp_path)
    assert [s.name for s in shards] == [w["name"] for w in want["shards"]]
    for s, w in zip(shards, want["shards"]):
        assert (s.stat().st_size, sha256(s)) == (w["bytes"], w["sha256"]), s.name
    # The shards are now llama.cpp's bytes; merging them must give llama.cpp's merge.
    merged = tmp_path / "merged.gguf"
    run_mla(mla_bin, "gguf", "merge", str(shards[0]), str(merged))
    assert (merged.stat().st_size, sha256(merged)) == (want["merged"]["bytes"], want["merged"]["sha256"])


def test_llama_cpp_shards_open_and_merge(mla_bin, tmp_path):
    model, case = "deepseek-v2-lite-tiny", "tensors-16"
    want = MANIFEST["inputs"][model]["cases"][case]
    shards = [FIX / w["name"] for w in want["shards"]]
    for s, w in zip(shards, want["shards"]):
        assert sha256(s) == w["sha256"], f"{s} is not the recorded llama.cpp output"
    single = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", str(REPO / MANIFEST["inputs"][model]["input"])).stdout)
    for s in shards:  # any shard's name opens the whole model
        info = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", str(s)).stdout)
        assert info["file"] == str(shards[0])
        assert [(t["name"], t["type"], t["ne"]) for t in info["tensors"]] == \
               [(t["name"], t["type"], t["ne"]) for t in single["tensors"]]
        keys = {m["key"]: m["value"] for m in info["metadata"]}
        assert keys["split.count"] == len(shards) and keys["split.tensors.count"] == len(single["tensors"])
    merged = tmp_path / "merged.gguf"
    run_mla(mla_bin, "gguf", "merge", str(shards[1]), str(merged))
    assert sha256(merged) == want["merged"]["sha256"]
    again = run_mla(mla_bin, "gguf", "merge", str(shards[0]), str(merged), check=False)
    assert again.returncode != 0 and "already exists" in again.stderr


def test_run_on_a_shard_equals_the_single_file(mla_bin, tmp_path):
    model = "deepseek-v3-tiny"
    shards = split_with_mla(mla_bin, model, "tensors-16", tmp_path)
    assert len(shards) == 4
    single = REPO / MANIFEST["inputs"][model]["input"]
    results = {}
    for name, path in [("single", single), ("shard3", shards[2])]:
        dump = tmp_path / f"{name}.f32"
        r = run_mla(mla_bin, "run", "-m", str(path), "--tokens", "5,9,200,31,7,64,3", "-n", "6", "--json",
                    "--ignore-eos", "--threads", "2", "--dump-logits", str(dump))
        results[name] = (json.loads(r.stdout)["continuation"], np.fromfile(dump, dtype="<f4"))
    assert results["single"][0] == results["shard3"][0]
    assert results["single"][1].size == 12 * 512
    assert np.array_equal(results["single"][1], results["shard3"][1])


def one_line_error(p, *needles):
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_missing_or_foreign_shard_is_one_line_naming_the_file(mla_bin, tmp_path):
    shards = split_with_mla(mla_bin, "deepseek-v2-lite-tiny", "tensors-16", tmp_path)
    shards[1].unlink()
    for args in (["gguf", "inspect", str(shards[0])], ["run", "-m", str(shards[2]), "--tokens", "1,2", "-n", "1"]):
        one_line_error(run_mla(mla_bin, *args, check=False), str(shards[1]), "missing")
    # Shard 2 of another split (the size-1M one has 4 shards) under this model's name.
    (tmp_path / "other").mkdir()
    other = split_with_mla(mla_bin, "deepseek-v2-lite-tiny", "size-1M", tmp_path / "other")
    shutil.copy(other[1], shards[1])
    one_line_error(run_mla(mla_bin, "gguf", "inspect", str(shards[0]), check=False), str(shards[1]),
                   "split.count is 4, expected 3")


def test_split_option_errors(mla_bin, tmp_path):
    src = str(REPO / MANIFEST["inputs"]["deepseek-v2-lite-tiny"]["input"])
    prefix = str(tmp_path / "m")
    cases = [
        (["--split-max-size", "1M", "--split-max-tensors", "4"], "not both"),
        (["--split-max-size", "10K"], "followed by M or G"),
        (["--split-max-size", "0M"], "must be positive"),
        (["--split-max-tensors", "0"], "at least 1"),
    ]
    for opts, needle in cases:
        one_line_error(run_mla(mla_bin, "gguf", "split", *opts, src, prefix, check=False), needle)
    assert not list(tmp_path.glob("m-*"))


def test_inspect_lists_every_shard(mla_bin):
    import gguf

    want = MANIFEST["inputs"]["deepseek-v2-lite-tiny"]["cases"]["tensors-16"]["shards"]
    shards = [FIX / w["name"] for w in want]
    # Reference: each shard read on its own by gguf-py, and the file sizes.
    counts = [len(gguf.GGUFReader(str(s)).tensors) for s in shards]
    sizes = [s.stat().st_size for s in shards]
    info = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", str(shards[-1])).stdout)
    assert [(x["file"], x["bytes"], x["tensors"]) for x in info["shards"]] == \
           [(str(s), n, c) for s, n, c in zip(shards, sizes, counts)]
    assert [t["shard"] for t in info["tensors"]] == [i for i, c in enumerate(counts) for _ in range(c)]
    text = run_mla(mla_bin, "gguf", "inspect", str(shards[0])).stdout
    assert f"shards ({len(shards)}, {sum(sizes)} bytes in all" in text
    for i, (s, n, c) in enumerate(zip(shards, sizes, counts)):
        assert re.search(rf"^\s+{i + 1}\s+{re.escape(str(s))}\s+{n}\s+{c}$", text, re.MULTILINE), text
    single = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json",
                                str(REPO / MANIFEST["inputs"]["deepseek-v2-lite-tiny"]["input"])).stdout)
    assert len(single["shards"]) == 1 and single["shards"][0]["tensors"] == len(single["tensors"])
    assert "shards (" not in run_mla(mla_bin, "gguf", "inspect", single["file"]).stdout


def test_dry_run_prints_the_plan_and_writes_nothing(mla_bin, tmp_path):
    model = "deepseek-v2-lite-tiny"
    want = MANIFEST["inputs"][model]["cases"]["tensors-16"]["shards"]
    out = run_mla(mla_bin, "gguf", "split", "--dry-run", "--split-max-tensors", "16",
                  str(REPO / MANIFEST["inputs"][model]["input"]), str(tmp_path / model)).stdout
    assert f"-> {len(want)} shards" in out
    for w in want:
        assert str(tmp_path / w["name"]) in out
    assert not list(tmp_path.iterdir())


def test_quantize_of_a_split_model_is_one_file(mla_bin, tmp_path):
    want = MANIFEST["inputs"]["deepseek-v2-lite-tiny"]["cases"]["tensors-16"]["shards"]
    out = tmp_path / "q8.gguf"
    run_mla(mla_bin, "gguf", "quantize", str(FIX / want[0]["name"]), str(out), "q8_0")
    info = json.loads(run_mla(mla_bin, "gguf", "inspect", "--json", str(out)).stdout)
    assert not [m["key"] for m in info["metadata"] if m["key"].startswith("split.")]
    assert len(info["shards"]) == 1 and len(info["tensors"]) == 44
