// The chat-template Jinja engine, piece by piece. Every expected string was derived from jinja2's
// documented semantics and checked against Python jinja2 3.1 configured as transformers does
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks); tests/py/test_chat_templates.py
// compares whole real templates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "jinja/chat_template.h"
#include "jinja/lexer.h"
#include "jinja/pystr.h"
#include "jinja/value.h"
#include "util/error.h"

namespace mla {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& tmpl, const std::string& ctx = "{}") {
  ChatRenderOptions opt;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 31;
  tm.tm_hour = 12;
  tm.tm_min = 34;
  tm.tm_sec = 56;
  tm.tm_wday = 5;
  tm.tm_yday = 30;
  opt.now = tm;
  return ChatTemplate(tmpl).render(ordered_json::parse(ctx), opt);
}

// The error message of rendering tmpl, or "" if it renders.
std::string error_of(const std::string& tmpl, const std::string& ctx = "{}") {
  try {
    render(tmpl, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- lexer --------------------------------------------------------------------------------------

TEST(JinjaLexer, TokensCarryLineAndColumn) {
  auto toks = jinja::tokenize("ab\n{{ x.y|f(1, 'é') }}");
  ASSERT_GE(toks.size(), 12u);
  EXPECT_EQ(toks[0].type, jinja::TokenType::TokenType_data);
  EXPECT_EQ(toks[0].text, "ab\n");
  EXPECT_EQ(toks[1].type, jinja::TokenType::TokenType_var_begin);
  EXPECT_EQ(toks[1].line, 2);
  EXPECT_EQ(toks[1].column, 1);
  EXPECT_EQ(toks[2].type, jinja::TokenType::TokenType_name);
  EXPECT_EQ(toks[2].text, "x");
  EXPECT_EQ(toks[2].column, 4);
  EXPECT_EQ(toks[10].type, jinja::TokenType::TokenType_string);
  EXPECT_EQ(toks[10].text, "é");
  EXPECT_EQ(toks.back().type, jinja::TokenType::TokenType_eof);
}

TEST(JinjaLexer, NumbersAndOperators) {
  auto toks = jinja::tokenize("{{ 1_000 0x1f 2.5e3 // ** != }}");
  EXPECT_EQ(toks[1].int_value, 1000);
  EXPECT_EQ(toks[2].int_value, 31);
  EXPECT_DOUBLE_EQ(toks[3].float_value, 2500.0);
  EXPECT_EQ(toks[4].text, "//");
  EXPECT_EQ(toks[5].text, "**");
  EXPECT_EQ(toks[6].text, "!=");
}

TEST(JinjaLexer, WhitespaceControlTrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true %} b {% endif -%}  c"), "a b c");
  EXPECT_EQ(render("x {# c #}\ny"), "x y");
  EXPECT_EQ(render("{%- for m in messages %}\n  {{ m.role }}: {{ m.content }}\n{% endfor %}",
                   R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]})"),
            "  user: hi\n  assistant: yo\n");
  EXPECT_EQ(render("  {%+ if true %}p{% endif %}"), "  p");    // '+' disables lstrip_blocks
  EXPECT_EQ(render("{% if true %}x{% endif +%}\ny"), "x\ny");  // '+' disables trim_blocks
}

TEST(JinjaLexer, RawNewlinesAndTrailingNewline) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("line\r\nnext\r\n"), "line\nnext");  // newlines normalised, one trailing newline dropped
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(JinjaLexer, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("x {{ 'abc }}"), "chat template: line 1, column 6: unexpected char '''");
  EXPECT_EQ(error_of("a\n{# open"), "chat template: line 2, column 1: missing end of comment tag '#}'");
  EXPECT_EQ(error_of("a\n  {{ (1] }}"), "chat template: line 2, column 8: unexpected ']', expected ')'");
  EXPECT_EQ(error_of("{{ x"), "chat template: line 1, column 1: missing end of print tag '}}'");
}

// ---- parser -------------------------------------------------------------------------------------

TEST(JinjaParser, OperatorPrecedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 ** 2 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} "
                   "{{ 1 ~ 2 * 3 }} {{ not 1 == 2 }}"),
            "19 9 4 5 64 16 True");
  EXPECT_EQ(render("{{ 'abc' | upper | replace('B', '-') }} {{ 1 if false else 2 if false else 3 }}"), "A-C 3");
  // '~' binds tighter than '+': ('1' ~ '2') + 3
  EXPECT_NE(error_of("{{ 1 ~ 2 + 3 }}").find("can only concatenate str (not \"int\") to str"), std::string::npos);
}

TEST(JinjaParser, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("ab\n  {% unknown %}"), "chat template: line 2, column 6: unknown tag 'unknown'");
  EXPECT_EQ(error_of("{% for x in y %}"),
            "chat template: line 1, column 17: unexpected end of template: expected 'endfor' or 'else' to close "
            "the 'for' tag on line 1");
  EXPECT_EQ(error_of("{{ a b }}"), "chat template: line 1, column 6: expected 'end of print statement', got 'b'");
  EXPECT_EQ(error_of("{% if true %}{% endfor %}"),
            "chat template: line 1, column 17: unknown tag 'endfor' (the innermost open tag is 'if' on line 1)");
  EXPECT_EQ(error_of("{% macro m(a=1, b) %}{% endmacro %}"),
            "chat template: line 1, column 17: non-default argument follows default argument");
  EXPECT_EQ(error_of("x\n{% break %}"), "chat template: line 2, column 4: 'break' outside loop");
  EXPECT_EQ(error_of("{% include 'x' %}"),
            "chat template: line 1, column 4: the 'include' tag is not supported in chat templates");
}

TEST(JinjaParser, UnknownFilterIsAnErrorUnlessInsideAnIf) {
  // jinja2 rejects unknown filters when compiling, but inside an if (or a conditional
  // expression) only when the expression actually runs.
  EXPECT_EQ(error_of("line1\n  {{ x | foo }}"), "chat template: line 2, column 10: unknown filter 'foo'");
  EXPECT_EQ(render("{% if false %}{{ x | from_json }}{% endif %}ok"), "ok");
  EXPECT_EQ(error_of("{% if true %}{{ x | from_json }}{% endif %}"),
            "chat template: line 1, column 21: unknown filter 'from_json'");
  EXPECT_EQ(error_of("{% if true %}{% for i in x %}{{ i | foo }}{% endfor %}{% endif %}"),
            "chat template: line 1, column 37: unknown filter 'foo'");
  EXPECT_EQ(error_of("{{ 1 is nosuchtest }}"), "chat template: line 1, column 6: unknown test 'nosuchtest'");
}

// ---- values -------------------------------------------------------------------------------------

TEST(JinjaValue, PythonReprAndStr) {
  EXPECT_EQ(render("{{ x }}|{{ y }}", R"({"x": [1, "a'b", null, true, 2.0], "y": {"k": "v"}})"),
            "[1, \"a'b\", None, True, 2.0]|{'k': 'v'}");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 3.0 }} {{ 2.5e-7 }} {{ 123456789.0 }} {{ 1/3 }}"),
            "0.30000000000000004 1e+16 1e-05 3.0 2.5e-07 123456789.0 0.3333333333333333");
  EXPECT_EQ(jinja::py::repr("tab\there\n\u00a0\u200b'"), "\"tab\\there\\n\\xa0\\u200b'\"");
  EXPECT_EQ(jinja::py::float_repr(1e22), "1e+22");
  EXPECT_EQ(jinja::py::float_repr(-1234.5), "-1234.5");
  EXPECT_EQ(jinja::Value::tuple({jinja::Value::integer(1)}).repr(), "(1,)");
}

TEST(JinjaValue, JsonDumpsLikePython) {
  const char* ctx = R"({"x": {"z": "é", "a": [1, 2.5, null]}})";
  EXPECT_EQ(render("{{ x | tojson }}", ctx), R"({"z": "é", "a": [1, 2.5, null]})");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}", ctx),
            "{\n  \"z\": \"é\",\n  \"a\": [\n    1,\n    2.5,\n    null\n  ]\n}");
  EXPECT_EQ(render("{{ x | tojson(ensure_ascii=true, separators=(',', ':'), sort_keys=true) }}", ctx),
            R"({"a":[1,2.5,null],"z":"\u00e9"})");
  EXPECT_EQ(render(R"({{ '\u00e9\x41\n' | tojson }})"), R"("éA\n")");
  EXPECT_NE(error_of("{{ undefined_thing | tojson }}").find("Object of type Undefined is not JSON serializable"),
            std::string::npos);
}

TEST(JinjaValue, EqualityAndOrderingFollowPython) {
  using jinja::Value;
  EXPECT_TRUE(jinja::py_eq(Value::integer(1), Value::floating(1.0)));
  EXPECT_TRUE(jinja::py_eq(Value::boolean(true), Value::integer(1)));
  EXPECT_FALSE(jinja::py_eq(Value::list({Value::integer(1)}), Value::tuple({Value::integer(1)})));
  EXPECT_TRUE(jinja::py_lt(Value::string("a"), Value::string("b")));
  EXPECT_THROW(jinja::py_lt(Value::integer(1), Value::string("a")), jinja::Error);
  EXPECT_FALSE(Value::undefined().truthy());
  EXPECT_TRUE(Value::iterator({}).truthy());  // a generator object is always true in Python
}

// ---- interpreter --------------------------------------------------------------------------------

TEST(JinjaInterpreter, ScopesAndNamespaces) {
  // Each loop iteration starts from the outer value; assignments never leak out of the loop.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
      "6");
  EXPECT_EQ(render("{% if messages[0]['role'] == 'system' %}{% set messages = messages[1:] %}{% endif %}"
                   "{{ messages | length }}",
                   R"({"messages": [{"role": "system"}, {"role": "user"}]})"),
            "1");
  EXPECT_EQ(render("{% set a, b = 'xy' %}{{ b }}{{ a }}{% with c = 5 %}{{ c }}{% endwith %}{{ c is defined }}"),
            "yx5False");
  EXPECT_EQ(render("{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]"), "[captured 2]");
}

TEST(JinjaInterpreter, LoopsAndLoopVariables) {
  EXPECT_EQ(render("{% for x in 'abc' if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.last }} {% endfor %}"),
            "1aFalse 2cTrue ");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}"
                   "{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}{{ d | items | list }}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "b=1 a=2 [('b', 1), ('a', 2)]");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(JinjaInterpreter, Macros) {
  EXPECT_EQ(render("{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bo', greeting='Yo') }}"),
            "Hi, Ann! Yo, Bo!");
  EXPECT_EQ(render("{% macro m() %}{{ varargs | length }}{{ kwargs }}{% endmacro %}{{ m(1, 2, a=3) }}"), "2{'a': 3}");
  EXPECT_EQ(render("{% macro r(n) %}{% if n %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}"), "321");
  EXPECT_NE(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("takes not more than 1 argument(s)"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}").find("maximum recursion depth"),
            std::string::npos);
}

TEST(JinjaInterpreter, UndefinedBehavesLikeJinja2Undefined) {
  EXPECT_EQ(render("{{ u }}|{{ u is defined }}|{{ u | default('d') }}|{{ d.missing }}|{{ d.missing is defined }}",
                   R"({"d": {}})"),
            "|False|d||False");
  EXPECT_EQ(render("{{ m['content'] or '' }}|{{ m.get('name', 'anon') }}|{{ m.content is none }}",
                   R"({"m": {"content": null}})"),
            "|anon|True");
  EXPECT_EQ(error_of("{% for x in [1] %}\n{{ x.y.z }}{% endfor %}"),
            "chat template: line 2, column 8: 'int object' has no attribute 'y'");
  EXPECT_EQ(error_of("\n\n  {{ foo(1) }}"), "chat template: line 3, column 6: 'foo' is undefined");
}

TEST(JinjaInterpreter, SandboxRefusesMutation) {
  EXPECT_EQ(render("{{ x.append }}|{{ x.append is defined }}", R"({"x": []})"), "|False");
  EXPECT_EQ(error_of("{% set x = [1, 2] %}{{ x.append(3) }}"),
            "chat template: line 1, column 26: access to attribute 'append' of 'list' object is unsafe.");
}

TEST(JinjaInterpreter, RaiseExceptionAndStrftimeNow) {
  EXPECT_EQ(error_of("a\n{{ raise_exception('bad ' ~ 42) }}"), "chat template: line 2, column 4: bad 42");
  EXPECT_EQ(error_of("{{ raise_exception('two\\nlines') }}"), "chat template: line 1, column 4: two\\nlines");
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}"), "31 Jan 2025");
  EXPECT_EQ(render("{% generation %}G{% endgeneration %}"), "G");
}

TEST(JinjaInterpreter, StringsListsAndFilters) {
  EXPECT_EQ(render("{{ s.split() }} {{ s.strip() }} {{ s.rsplit(' ', 1) }} {{ s.title() }} {{ '</think>x' in s }}",
                   R"({"s": "  hello big world  "})"),
            "['hello', 'big', 'world'] hello big world ['  hello big world ', '']   Hello Big World   False");
  EXPECT_EQ(render("{{ s[1:4] }} {{ s[::-1] }} {{ l[-2:] }} {{ l[::2] }}", R"({"s": "héllo", "l": [1,2,3,4,5]})"),
            "éll olléh [4, 5] [1, 3, 5]");
  EXPECT_EQ(render("{{ l | selectattr('r', 'equalto', 'u') | map(attribute='c') | join(',') }}",
                   R"({"l": [{"r":"u","c":"1"},{"r":"a","c":"2"},{"r":"u","c":"3"}]})"),
            "1,3");
  EXPECT_EQ(render("{{ l | sort(attribute='n') | map(attribute='n') | list }} {{ ['b', 'A', 'a'] | unique | list }} "
                   "{{ [3, 1, 2] | sort(reverse=true) }}",
                   R"({"l": [{"n": 2}, {"n": 1}]})"),
            "[1, 2] ['b', 'A'] [3, 2, 1]");
  EXPECT_EQ(render("{{ text | indent(2) }}|{{ 'Hello World' | wordcount }}|{{ 'hello WORLD' | capitalize }}|"
                   "{{ 'a-b c' | title }}",
                   R"({"text": "a\nb\n\nc"})"),
            "a\n  b\n\n  c|2|Hello world|A-B C");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** -1 }} {{ 3 | round }} "
                   "{{ 2.5 | round }} {{ '4.7' | int }} {{ 'x' | float }}"),
            "3 -4 2 3.5 0.5 3 2.0 4 0.0");
  EXPECT_EQ(render("{{ '%s=%05.1f' % ('x', 3.14159) }} {{ '{}-{:>4}'.format('a', 'b') }}"), "x=003.1 a-   b");
  EXPECT_EQ(render("{{ l is sequence }} {{ d is mapping }} {{ s is string }} {{ 4 is divisibleby 2 }} {{ 3 is odd }}",
                   R"({"l": [], "d": {}, "s": ""})"),
            "True True True True True");
}

TEST(JinjaApi, ParseOnceRenderManyConcurrently) {
  ChatTemplate t("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  std::vector<std::string> outs(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", std::to_string(k)}}}}};
      for (int r = 0; r < 50; ++r) outs[k] = t.render(ctx);
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(outs[k], "<user>" + std::to_string(k));
  EXPECT_THROW(t.render(ordered_json::array()), Error);
  EXPECT_EQ(render_chat("{{ a }}{{ b }}", nlohmann::json{{"b", 2}, {"a", 1}}), "12");
}

TEST(JinjaApi, HostileInputGivesErrorsNotCrashes) {
  std::string deep = std::string(300, '(') + "1" + std::string(300, ')');
  EXPECT_NE(error_of("{{ " + deep + " }}").find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 300; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 10000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000) | length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("\xff\xfe{{ x }}").find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(error_of("{{ 99999999999999999999 }}").find("64-bit"), std::string::npos);
  // Deep or cyclic data built by a template, or handed in by the caller, is refused.
  EXPECT_NE(error_of("{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("nested more than 1000 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}").find("maximum recursion depth"),
            std::string::npos);
  std::string deep_json = std::string(5000, '[') + std::string(5000, ']');
  EXPECT_NE(error_of("{{ x }}", "{\"x\": " + deep_json + "}").find("nested more than 1000 levels"), std::string::npos);
}

}  // namespace
}  // namespace mla
