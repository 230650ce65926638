// The cost of parsing a chat output for reasoning and tool calls while it streams, per token.
//
//   parse_stream/<format>  a 40 KB output (16 KB of reasoning, 16 KB of text, 8 tool calls with
//                          ~1 KB of arguments each) fed 4 bytes at a time, about a token each,
//                          through ChatOutputStream: bytes/s and tokens/s (items)
//   parse_whole/<format>   the same output parsed once (the non-streamed response)
//
// A decode step of the real models takes tens of milliseconds; the parser's per-token cost is to
// be compared with that.
#include <benchmark/benchmark.h>

#include <string>

#include "server/chat_output.h"

namespace mla::server {
namespace {

std::string call_text(std::string_view format, int i) {
  const std::string value(1000, 'a' + i % 26);
  if (format == "glm45")
    return "<tool_call>search<arg_key>query</arg_key><arg_value>" + value +
           "</arg_value><arg_key>n</arg_key><arg_value>" + std::to_string(i) + "</arg_value></tool_call>";
  if (format == "deepseek_v31")
    return "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"" + value + "\", \"n\": " + std::to_string(i) +
           "}<｜tool▁call▁end｜>";
  return "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"" + value +
         "\", \"n\": " + std::to_string(i) + "}}\n</tool_call>\n";
}

std::string output_text(std::string_view format) {
  std::string s(16 << 10, 'r');
  s += "</think>";
  s += std::string(16 << 10, 'c');
  if (format == "deepseek_v31") s += "<｜tool▁calls▁begin｜>";
  for (int i = 0; i < 8; ++i) s += call_text(format, i);
  if (format == "deepseek_v31") s += "<｜tool▁calls▁end｜>";
  return s;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "search",
  "parameters": {"type": "object", "properties": {"query": {"type": "string"},
  "n": {"type": "integer"}}}}}])");

void run(benchmark::State& state, const char* format, bool streamed) {
  auto fmt = make_tool_call_format(format);
  OutputParsing p;
  p.tool_format = fmt.get();
  p.tools = kTools;
  p.reasoning_open = true;
  const std::string text = output_text(format);
  size_t n_calls = 0;
  for (auto _ : state) {
    if (streamed) {
      ChatOutputStream s(p);
      for (size_t i = 0; i < text.size(); i += 4) {
        ChatDelta d = s.feed(std::string_view(text).substr(i, 4));
        n_calls += d.tool_calls.size();
      }
      n_calls += s.finish().tool_calls.size();
    } else {
      n_calls += parse_chat_output(p, text).tool_calls.size();
    }
  }
  benchmark::DoNotOptimize(n_calls);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * (text.size() / 4)));
}

void register_all() {
  for (const char* f : {"glm45", "deepseek_v31", "hermes"}) {
    benchmark::RegisterBenchmark((std::string("parse_stream/") + f).c_str(),
                                 [f](benchmark::State& s) { run(s, f, true); });
    benchmark::RegisterBenchmark((std::string("parse_whole/") + f).c_str(),
                                 [f](benchmark::State& s) { run(s, f, false); });
  }
}

const bool kRegistered = (register_all(), true);

}  // namespace
}  // namespace mla::server
