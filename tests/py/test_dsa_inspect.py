"""`mla gguf inspect` on the DSA architectures: a metadata-only GGUF carrying the real GLM-5 keys
(values from the GLM-5 GGUF dumps summarised in the project's GLM-5 notes: 78 trunk layers + 1 MTP
block, hidden 6144, 64 heads, kv_lora 512, rope 64, indexer 32 x 128, top_k 2048, 202,752 tokens
of context) is described with its KV bytes per token (latent + indexer keys) and what the whole
trained context needs; a missing indexer key is one line naming it."""
import subprocess

import pytest
from conftest import run_mla

import gguf

GLM5 = {
    "block_count": 79, "nextn_predict_layers": 1, "context_length": 202752, "embedding_length": 6144,
    "feed_forward_length": 12288, "expert_feed_forward_length": 2048, "attention.head_count": 64,
    "attention.head_count_kv": 1, "attention.key_length": 576, "attention.value_length": 512,
    "attention.key_length_mla": 256, "attention.value_length_mla": 256, "attention.q_lora_rank": 2048,
    "attention.kv_lora_rank": 512, "rope.dimension_count": 64, "leading_dense_block_count": 3,
    "expert_count": 256, "expert_used_count": 8, "expert_shared_count": 1, "expert_group_count": 1,
    "expert_group_used_count": 1, "expert_gating_func": 2, "vocab_size": 154880,
    "attention.indexer.head_count": 32, "attention.indexer.key_length": 128, "attention.indexer.top_k": 2048,
}
FLOATS = {"rope.freq_base": 1e6, "attention.layer_norm_rms_epsilon": 1e-5, "expert_weights_scale": 2.5}


def write_glm5_metadata(path, drop=()):
    w = gguf.GGUFWriter(str(path), "glm-dsa")
    for k, v in GLM5.items():
        if k not in drop:
            w.add_uint32(f"glm-dsa.{k}", v)
    for k, v in FLOATS.items():
        w.add_float32(f"glm-dsa.{k}", v)
    w.add_bool("glm-dsa.expert_weights_norm", True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_glm5_kv_bytes_per_token(mla_bin, tmp_path):
    path = tmp_path / "glm5-metadata.gguf"
    write_glm5_metadata(path)
    out = run_mla(mla_bin, "gguf", "inspect", str(path)).stdout
    trunk = 79 - 1
    latent = trunk * (512 + 64) * 2          # F16 [c_kv | k_pe] per layer
    index = trunk * 128 * 2                  # F16 indexer key per (full) layer
    assert "derived hyper-parameters (glm-dsa)" in out
    assert f"layers                       {trunk} (3 dense, {trunk - 3} MoE)" in out
    assert "MTP (nextn) blocks           1 (blk.78.., run by --speculative-config)" in out
    assert f"{latent + index} B = latent {latent} B ({trunk} layers x 576 x 2) + indexer keys {index} B" in out
    gib = (latent + index) * 202752 / 2**30
    assert f"{gib:.2f} GiB for 202752 tokens (f16)" in out
    assert "DSA indexer                  32 heads x 128, top_k 2048, rope norm, 78 full / 0 shared layers" in out


@pytest.mark.parametrize("key", ["attention.indexer.head_count", "attention.indexer.top_k"])
def test_missing_indexer_key_is_one_line(mla_bin, tmp_path, key):
    path = tmp_path / "glm5-no-key.gguf"
    write_glm5_metadata(path, drop=(key,))
    r = subprocess.run([mla_bin, "run", "-m", str(path), "--tokens", "1", "-n", "1"], capture_output=True, text=True)  # noqa: PLW1510 (the caller checks the return code)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert any(f"missing required key 'glm-dsa.{key}'" in l for l in lines), r.stderr
    assert "Segmentation" not in r.stderr and "terminate called" not in r.stderr
