// mla template render --template FILE --context FILE [--batch] [--now TIME]
// Renders a chat template. Plain mode prints the rendered text exactly (no newline added); a
// template error exits 1 with one line on stderr. --batch takes a JSON list of contexts and
// prints a JSON list with {"output": TEXT} or {"error": MESSAGE} per context (one process for many
// renders, as the conformance tests need).
#include <fmt/format.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "jinja/chat_template.h"
#include "util/error.h"

namespace mla::cli {
namespace {

std::tm parse_time(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end != '\0') fail("--now: expected YYYY-MM-DDTHH:MM:SS, got '{}'", s);
  // Fill tm_wday/tm_yday (for %a, %j, ...) without moving the wall-clock time.
  std::tm copy = tm;
  copy.tm_isdst = -1;
  std::time_t t = timegm(&copy);
  std::tm norm{};
  gmtime_r(&t, &norm);
  return norm;
}

struct Options {
  std::string template_path, context_path, now;
  bool batch = false;
};

void run_render(const Options& o) {
  std::string source = read_text_file(o.template_path, "template file");
  nlohmann::ordered_json ctx;
  try {
    ctx = nlohmann::ordered_json::parse(read_text_file(o.context_path, "context file"));
  } catch (const nlohmann::json::exception& e) {
    fail("context file '{}' is not valid JSON: {}", o.context_path, e.what());
  }
  ChatRenderOptions opt;
  if (!o.now.empty()) opt.now = parse_time(o.now);

  if (!o.batch) {
    std::string out = ChatTemplate(source).render(ctx, opt);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  if (!ctx.is_array()) fail("--batch: the context file must hold a JSON list of contexts");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  std::optional<ChatTemplate> tmpl;
  std::string parse_error;
  try {
    tmpl.emplace(source);
  } catch (const Error& e) {
    parse_error = e.what();
  }
  for (const auto& c : ctx) {
    nlohmann::ordered_json r = nlohmann::ordered_json::object();
    if (!tmpl) {
      r["error"] = parse_error;
    } else {
      try {
        r["output"] = tmpl->render(c, opt);
      } catch (const Error& e) {
        r["error"] = e.what();
      }
    }
    results.push_back(std::move(r));
  }
  std::string text = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void register_template(CLI::App& app) {
  auto* tmpl = app.add_subcommand("template", "Chat templates (Jinja)");
  tmpl->require_subcommand(1);
  auto* render = tmpl->add_subcommand("render", "Render a chat template with a JSON context");
  auto opts = std::make_shared<Options>();
  render->add_option("--template", opts->template_path, "Jinja chat template file")->required();
  render
      ->add_option("--context", opts->context_path,
                   "JSON file: the template variables (messages, tools, add_generation_prompt, ...)")
      ->required();
  render->add_flag("--batch", opts->batch, "context file holds a list of contexts; print a JSON list of results");
  render->add_option("--now", opts->now, "fixed time for strftime_now(), YYYY-MM-DDTHH:MM:SS");
  render->callback([opts] { run_render(*opts); });
}

}  // namespace mla::cli
