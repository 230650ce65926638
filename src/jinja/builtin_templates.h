#pragma once
// Chat templates compiled into the binary (models/templates, embedded by cmake/embed_files.cmake
// into build/generated/builtin_templates.cpp), for models whose published GGUFs carry no
// tokenizer.chat_template: DeepSeek ships none for V4, only a Python encoder (docs/DEEPSEEK-V4.md §6).
#include <string_view>

namespace mla::jinja::builtin {

extern const std::string_view kDeepseekV4Template;  // models/templates/deepseek-v4.jinja

}  // namespace mla::jinja::builtin
