// mla tokenize: text → token ids with the vocabulary of a GGUF file; also the batch, decode,
// pre-tokenizer and benchmark modes the tests and docs/PERF.md use.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace mla::cli {
namespace {

struct TokenizeArgs {
  std::string model, text, file, pre, batch_jsonl, decode_jsonl, bench;
  bool ids_only = false, no_parse_special = false, add_special = false, skip_special = false;
  bool pretokenize = false;
  int bench_passes = 5;
};

std::string read_all(const std::string& path) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tokenize: cannot open '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Printable form of token bytes: C-style escapes for control characters, \xNN for bytes that
// are not valid UTF-8.
std::string escape_bytes(std::string_view s) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = p[i];
    if (c >= 0x80) {
      tok::Utf8Step st = tok::utf8_step(p + i, s.size() - i);
      if (st.kind == tok::Utf8Kind::VALID)
        out.append(s.substr(i, st.len)), i += st.len;
      else
        out += fmt::format("\\x{:02x}", c), i += 1;
      continue;
    }
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\'')
      out += "\\'";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out.push_back(static_cast<char>(c));
    ++i;
  }
  return out;
}

// Calls each(j, line_no) for every non-empty line of a JSONL file, parsed (line_no from 1); a line
// that is not JSON fails naming path:line.
void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, size_t)>& each) {
  std::istringstream in(read_all(path));
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("tokenize: {}:{}: invalid JSON: {}", path, line_no, e.what());
    }
    each(j, line_no);
  }
}

// Lines of a JSONL file, each a JSON string.
std::vector<std::string> read_jsonl_strings(const std::string& path) {
  std::vector<std::string> items;
  for_each_jsonl(path, [&](const nlohmann::json& j, size_t line_no) {
    if (!j.is_string()) fail("tokenize: {}:{}: expected a JSON string, got {}", path, line_no, j.type_name());
    items.push_back(j.get<std::string>());
  });
  return items;
}

void write_out(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

void run_pretokenize(const tok::PreTokenizer& pre, const TokenizeArgs& a) {
  std::vector<std::string_view> pieces;
  auto pieces_json = [&](std::string_view text) {
    pieces.clear();
    pre.split(text, pieces);
    nlohmann::json j = nlohmann::json::array();
    for (auto p : pieces) j.push_back(std::string(p));
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (!a.batch_jsonl.empty()) {
    std::string out;
    for (const auto& s : read_jsonl_strings(a.batch_jsonl)) out += pieces_json(s) + "\n";
    write_out(out);
  } else {
    write_out(pieces_json(a.file.empty() ? a.text : read_all(a.file)) + "\n");
  }
}

void run_batch(const Tokenizer& tok, const EncodeOptions& eo, const std::string& path) {
  std::string out;
  std::vector<TokenId> ids;
  for (const auto& s : read_jsonl_strings(path)) {
    ids.clear();
    tok.encode_append(s, eo, ids);
    out += '[';
    for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", ids[i]);
    out += "]\n";
  }
  write_out(out);
}

void run_decode(const Tokenizer& tok, const TokenizeArgs& a) {
  std::string out;
  StreamDetokenizer detok(tok, a.skip_special);
  for_each_jsonl(a.decode_jsonl, [&](const nlohmann::json& j, size_t line_no) {
    if (!j.is_array()) fail("tokenize: {}:{}: expected a JSON list of token ids", a.decode_jsonl, line_no);
    std::string text;
    for (const auto& v : j) {
      if (!v.is_number_integer()) fail("tokenize: {}:{}: expected integer token ids", a.decode_jsonl, line_no);
      detok.feed(v.get<TokenId>(), text);
    }
    detok.finish(text);
    out += nlohmann::json(text).dump() + "\n";
  });
  write_out(out);
}

// Single-thread encode throughput over the items of a JSONL file: one warm-up pass, then the
// best of `passes` timed passes (the BPE word cache is warm in the timed passes, as HF's is).
void run_bench(const Tokenizer& tok, const EncodeOptions& eo, const TokenizeArgs& a) {
  auto items = read_jsonl_strings(a.bench);
  size_t n_bytes = 0;
  for (const auto& s : items) n_bytes += s.size();
  std::vector<TokenId> ids;
  size_t n_tokens = 0;
  auto t_first = std::chrono::steady_clock::now();
  for (const auto& s : items) n_tokens += tok.encode(s, eo).size();
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_first).count();
  // Wall time and process CPU time per pass (the machine may be shared; CPU time is steadier).
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  double best = 1e30, best_cpu = 1e30;
  for (int p = 0; p < std::max(1, a.bench_passes); ++p) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_now();
    for (const auto& s : items) {
      ids.clear();
      tok.encode_append(s, eo, ids);
    }
    best_cpu = std::min(best_cpu, cpu_now() - c0);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  nlohmann::json j{{"items", items.size()},
                   {"bytes", n_bytes},
                   {"tokens", n_tokens},
                   {"passes", a.bench_passes},
                   {"seconds", best},
                   {"mb_per_s", n_bytes / best / 1e6},
                   {"tokens_per_s", n_tokens / best},
                   {"cpu_seconds", best_cpu},
                   {"cpu_mb_per_s", n_bytes / best_cpu / 1e6},
                   {"first_pass_seconds", first},
                   {"first_pass_mb_per_s", n_bytes / first / 1e6}};
  write_out(j.dump() + "\n");
}

void print_tokens(const Tokenizer& tok, const std::vector<TokenId>& ids, bool ids_only) {
  if (ids_only) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? ", " : "", ids[i]);
    write_out(out + "]\n");
    return;
  }
  std::string out;
  for (TokenId id : ids)
    fmt::format_to(std::back_inserter(out), "{:>7} -> '{}'\n", id, escape_bytes(tok.token_bytes(id)));
  write_out(out);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Tokenize text with the vocabulary of a GGUF file");
  static TokenizeArgs a;
  cmd->add_option("-m,--model", a.model, "GGUF file holding tokenizer.ggml.* (a model or a vocab-only file)")
      ->type_name("FILE");
  cmd->add_option("text", a.text, "Text to tokenize");
  cmd->add_option("-f,--file", a.file, "Read the text from FILE ('-' = stdin)")->type_name("FILE");
  cmd->add_flag("--ids-only", a.ids_only, "Print only the ids, as a JSON list");
  cmd->add_flag("--no-special,--no-parse-special", a.no_parse_special,
                "Treat special (CONTROL) token text as plain text, as for untrusted input");
  cmd->add_flag("--add-special", a.add_special, "Add BOS/EOS where the vocabulary's add_bos/add_eos say so");
  cmd->add_option("--tokenizer-pre", a.pre, "Use this pre-tokenizer instead of tokenizer.ggml.pre")->type_name("NAME");
  cmd->add_option("--batch-jsonl", a.batch_jsonl,
                  "Encode each line (a JSON string) of FILE; print one JSON id list per line")
      ->type_name("FILE");
  cmd->add_option(
         "--decode-jsonl", a.decode_jsonl,
         "Decode each line (a JSON id list) of FILE with the streaming detokenizer; print one JSON string per line")
      ->type_name("FILE");
  cmd->add_flag("--skip-special", a.skip_special, "With --decode-jsonl: leave special tokens out");
  cmd->add_flag(
      "--pretokenize", a.pretokenize,
      "Print the pre-tokenizer's pieces (JSON list of strings) instead of ids; -m is optional with --tokenizer-pre");
  cmd->add_option("--bench", a.bench, "Measure single-thread encode throughput over the lines (JSON strings) of FILE")
      ->type_name("FILE");
  cmd->add_option("--bench-passes", a.bench_passes, "Timed passes for --bench (the best is reported)");
  cmd->callback([] {
    if (a.pretokenize && a.model.empty()) {
      if (a.pre.empty()) fail("tokenize: --pretokenize needs -m FILE or --tokenizer-pre NAME");
      run_pretokenize(*tok::PreTokenizer::create(a.pre), a);
      return;
    }
    if (a.model.empty()) fail("tokenize: -m FILE is required");
    TokenizerOptions to;
    to.pre_override = a.pre;
    auto tok = Tokenizer::open(a.model, to);
    EncodeOptions eo;
    eo.add_special = a.add_special;
    eo.parse_special = !a.no_parse_special;
    if (a.pretokenize) return run_pretokenize(tok->pre_tokenizer(), a);
    if (!a.batch_jsonl.empty()) return run_batch(*tok, eo, a.batch_jsonl);
    if (!a.decode_jsonl.empty()) return run_decode(*tok, a);
    if (!a.bench.empty()) return run_bench(*tok, eo, a);
    std::string text = a.file.empty() ? a.text : read_all(a.file);
    print_tokens(*tok, tok->encode(text, eo), a.ids_only);
  });
}

}  // namespace mla::cli
