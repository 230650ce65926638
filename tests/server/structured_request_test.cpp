// response_format / structured_outputs parsing (JSON → GrammarSpec, before compiling): the
// shapes of the OpenAI API reference (response_format json_object / json_schema) and of vLLM's
// StructuredOutputsParams (json, regex, choice, grammar, json_object, structural_tag,
// disable_any_whitespace), and 400s naming the field.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace mla::server {
namespace {

const ModelLimits kLimits{1000, 256};
const char* kMsgs = R"("messages": [{"role": "user", "content": "x"}])";

ChatRequest chat(const std::string& extra) {
  return parse_chat_request(json::parse(std::string("{") + kMsgs + ", " + extra + "}"), kLimits);
}

CompletionRequest completion(const std::string& extra) {
  return parse_completion_request(json::parse(R"({"prompt": "p", )" + extra + "}"), kLimits);
}

std::string chat_error(const std::string& extra) {
  try {
    chat(extra);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.what();
  }
  return "no error";
}

TEST(StructuredRequest, ResponseFormat) {
  EXPECT_FALSE(chat(R"("response_format": {"type": "text"})").structured);
  EXPECT_FALSE(chat(R"("max_tokens": 3)").structured);
  auto jo = chat(R"("response_format": {"type": "json_object"})").structured;
  ASSERT_TRUE(jo);
  EXPECT_EQ(jo->spec.kind, GrammarSpec::Kind::kJsonObject);
  EXPECT_EQ(jo->param, "response_format");
  auto js = chat(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "n", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})")
                .structured;
  ASSERT_TRUE(js);
  EXPECT_EQ(js->spec.kind, GrammarSpec::Kind::kJsonSchema);
  EXPECT_EQ(json::parse(js->spec.source),
            json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  // Completions take it too (as vLLM does).
  auto c = completion(R"("response_format": {"type": "json_object"})").structured;
  ASSERT_TRUE(c);
  EXPECT_EQ(c->spec.kind, GrammarSpec::Kind::kJsonObject);
}

TEST(StructuredRequest, StructuredOutputsKinds) {
  auto j =
      completion(R"("structured_outputs": {"json": {"type": "array"}, "disable_any_whitespace": true})").structured;
  ASSERT_TRUE(j);
  EXPECT_EQ(j->spec.kind, GrammarSpec::Kind::kJsonSchema);
  EXPECT_EQ(json::parse(j->spec.source), json::parse(R"({"type": "array"})"));
  EXPECT_FALSE(j->spec.any_whitespace);
  EXPECT_EQ(j->param, "structured_outputs");
  auto js = chat(R"("structured_outputs": {"json": "{\"type\": \"string\"}"})").structured;
  EXPECT_EQ(js->spec.source, R"({"type": "string"})");  // a string schema passes as it is
  EXPECT_TRUE(js->spec.any_whitespace);
  auto r = chat(R"("structured_outputs": {"regex": "[0-9]+"})").structured;
  EXPECT_EQ(r->spec.kind, GrammarSpec::Kind::kRegex);
  EXPECT_EQ(r->spec.source, "[0-9]+");
  auto ch = chat(R"("structured_outputs": {"choice": ["a", "b c"]})").structured;
  EXPECT_EQ(ch->spec.kind, GrammarSpec::Kind::kChoice);
  EXPECT_EQ(ch->spec.choices, (std::vector<std::string>{"a", "b c"}));
  auto g = chat(R"("structured_outputs": {"grammar": "root ::= \"x\""})").structured;
  EXPECT_EQ(g->spec.kind, GrammarSpec::Kind::kEbnf);
  auto o = chat(R"("structured_outputs": {"json_object": true})").structured;
  EXPECT_EQ(o->spec.kind, GrammarSpec::Kind::kJsonObject);
  auto t = chat(R"("structured_outputs": {"structural_tag": "{}"})").structured;
  EXPECT_EQ(t->spec.kind, GrammarSpec::Kind::kStructuralTag);
}

TEST(StructuredRequest, BadShapesAre400sNamingTheField) {
  EXPECT_EQ(chat_error(R"("response_format": "json")"),
            "response_format: 'response_format' must be an object, got string");
  EXPECT_EQ(chat_error(R"("response_format": {"type": "yaml"})"),
            "response_format: 'response_format.type' must be one of text, json_object, json_schema, "
            "got 'yaml'");
  EXPECT_EQ(chat_error(R"("response_format": {"type": "json_schema"})"),
            "response_format: 'response_format.json_schema' is required for type json_schema");
  EXPECT_EQ(chat_error(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})"),
            "response_format: 'response_format.json_schema.schema' is required");
  EXPECT_EQ(chat_error(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})"),
            "response_format.json_schema.schema: 'response_format.json_schema.schema' must be a JSON "
            "Schema object, got number");
  EXPECT_EQ(chat_error(R"("structured_outputs": {"regex": "a", "choice": ["a"]})"),
            "structured_outputs: 'structured_outputs' needs exactly one of json, regex, choice, "
            "grammar, json_object, structural_tag; got 2");
  EXPECT_EQ(chat_error(R"("structured_outputs": {})"),
            "structured_outputs: 'structured_outputs' needs exactly one of json, regex, choice, "
            "grammar, json_object, structural_tag; got 0");
  EXPECT_EQ(chat_error(R"("structured_outputs": {"choice": []})"),
            "structured_outputs: 'structured_outputs.choice' must be a non-empty list of strings");
  EXPECT_EQ(chat_error(R"("structured_outputs": {"choice": ["a", 1]})"),
            "structured_outputs.choice: 'structured_outputs.choice' must be a list of strings, got number");
  EXPECT_EQ(chat_error(R"("structured_outputs": {"regex": 5})"),
            "structured_outputs.regex: 'structured_outputs.regex' must be a string, got number");
  EXPECT_EQ(chat_error(R"("structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"})"),
            "structured_outputs: 'structured_outputs' and a 'response_format' other than text cannot "
            "both give a constraint");
}

TEST(StructuredRequest, VllmsOlderGuidedFieldsAreAliases) {
  auto r = completion(R"("guided_regex": "[0-9]+")").structured;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->spec.kind, GrammarSpec::Kind::kRegex);
  EXPECT_EQ(r->spec.source, "[0-9]+");
  auto c = chat(R"("guided_choice": ["a", "b"])").structured;
  EXPECT_EQ(c->spec.choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(chat_error(R"("guided_regex": "a", "guided_choice": ["a"])"),
            "structured_outputs: 'structured_outputs' needs exactly one of json, regex, choice, "
            "grammar, json_object, structural_tag; got 2");
  EXPECT_EQ(chat_error(R"("guided_json": {}, "structured_outputs": {"regex": "a"})"),
            "structured_outputs: 'guided_json' and 'structured_outputs' cannot be used together");
}

TEST(StructuredRequest, StructuredOutputsOptionsApplyToResponseFormat) {
  auto s = chat(R"("response_format": {"type": "json_object"},
                   "structured_outputs": {"disable_any_whitespace": true})")
               .structured;
  ASSERT_TRUE(s);
  EXPECT_EQ(s->spec.kind, GrammarSpec::Kind::kJsonObject);
  EXPECT_FALSE(s->spec.any_whitespace);
  EXPECT_EQ(s->param, "response_format");
}

TEST(StructuredRequest, SchemaPropertyOrderIsTheRequestsOrder) {
  const std::string body = std::string("{") + kMsgs + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "schema": {"type": "object", "properties":
      {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}, "required": ["zeta", "alpha"]}}}})";
  auto s = parse_chat_request(json::parse(body), kLimits).structured;
  ASSERT_TRUE(s);
  EXPECT_LT(s->spec.source.find("zeta"), s->spec.source.find("alpha"));
  EXPECT_EQ(json::parse(s->spec.source)["required"], json::parse(R"(["zeta", "alpha"])"));

  const std::string so = R"({"prompt": "p", "structured_outputs": {"json": {"properties": {"b": {}, "a": {}}}}})";
  auto c = parse_completion_request(json::parse(so), kLimits).structured;
  EXPECT_EQ(c->spec.source, R"({"properties":{"b":{},"a":{}}})");

  const std::string g = R"({"prompt": "p", "guided_json": {"properties": {"b": {}, "a": {}}}})";
  auto gj = parse_completion_request(json::parse(g), kLimits).structured;
  EXPECT_EQ(gj->spec.source, R"({"properties":{"b":{},"a":{}}})");
}

}  // namespace
}  // namespace mla::server
