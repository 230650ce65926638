// The doctor's layout check: the canaries through the file converted to the other MLA layout
// (split attn_k_b + attn_v_b, or fused attn_kv_b), which must agree with the reference runs.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "doctor/checks.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "util/error.h"

namespace mla::doctor {

namespace {

// The file in the other MLA layout: convert_mla_layout into a temporary file, which is removed
// as soon as it is mapped (the mapping keeps its pages). The conversion copies every tensor but
// the MLA projections unchanged, so only W_UK / W_UV are taken from the copy (bound without
// repacking or prefaulting it) and the rest are w's own, packed copies included: the doctor holds
// one repacked copy of the weights, and the comparison differs in the layout alone.
std::unique_ptr<Deepseek2Bundle> load_other_layout(const std::string& path, const DeepseekWeights& w,
                                                   MlaLayout target) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mla-doctor-layout-XXXXXX").string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) fail("doctor: cannot create a temporary file in {}", std::filesystem::temp_directory_path().string());
  close(fd);
  struct Remove {
    std::string p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{tmpl};
  convert_mla_layout(path, tmpl, target);
  auto b = std::make_unique<Deepseek2Bundle>();
  b->file = GgufFile::open(tmpl);
  b->config = load_deepseek_config(*b->file);
  WeightLoadOptions wo = weight_options_for(MlaPathPolicy::Auto, true);
  wo.repack = false;
  const DeepseekWeights converted = bind_deepseek_weights(*b->file, b->config, wo);
  b->weights = w;
  b->weights.layout = converted.layout;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    LayerWeights& L = b->weights.layers[il];
    const LayerWeights& from = converted.layers[il];
    L.w_uk = from.w_uk;
    L.w_uk_t = from.w_uk_t;
    L.w_uv = from.w_uv;
    L.mla_f32 = from.mla_f32;
  }
  return b;
}

}  // namespace

void run_layout_variant(const std::string& path, const DeepseekWeights& w,
                        const std::vector<std::vector<int32_t>>& canaries, const std::vector<PromptRun>& refs,
                        const DoctorOptions& opt, DoctorReport& r) {
  const bool to_fused = w.layout == MlaLayout::Split;
  const std::string lname = to_fused ? "fused layout" : "split layout";
  PathComparison mha = named(lname + ", mha"), mqa = named(lname + ", mqa");
  auto skip = [&](const std::string& why) {
    for (auto* p : {&mha, &mqa}) {
      p->status = CheckStatus::NotApplicable;
      p->note = why;
      r.paths.push_back(*p);
    }
  };
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path));
  if (!opt.layout) return skip("skipped (--no-layout)");
  if (size > opt.layout_max_bytes)
    return skip(fmt::format("skipped: the copy would take {:.1f} GiB (limit --layout-max-bytes {:.1f} GiB)",
                            size / 1073741824.0, opt.layout_max_bytes / 1073741824.0));
  std::unique_ptr<Deepseek2Bundle> other;
  try {
    other = load_other_layout(path, w, to_fused ? MlaLayout::Fused : MlaLayout::Split);
  } catch (const Error& e) {
    for (auto* p : {&mha, &mqa}) {
      p->status = CheckStatus::Fail;
      p->note = fmt::format("the {} copy does not load: {}", lname, e.what());
      r.paths.push_back(*p);
    }
    return;
  }
  for (size_t i = 0; i < canaries.size(); ++i) {
    const int n = static_cast<int>(refs[i].tokens.size());
    accumulate_comparison(refs[i],
                          run_prompt(other->config, other->weights, canaries[i], {mha.name, MlaPathPolicy::Mha, 0},
                                     &refs[i].tokens, n, opt),
                          mha);
    accumulate_comparison(refs[i],
                          run_prompt(other->config, other->weights, canaries[i], {mqa.name, MlaPathPolicy::Mqa, 0},
                                     &refs[i].tokens, n, opt),
                          mqa);
  }
  r.paths.push_back(mha);
  r.paths.push_back(mqa);
}

}  // namespace mla::doctor
