#pragma once
// The tool-call formats (formats.cpp); use make_tool_call_format() rather than these.
#include <memory>
#include <string_view>

#include "server/tool_parsers/tool_parser.h"

namespace mla::server {

std::unique_ptr<ToolCallFormat> make_glm_format(std::string_view name);
std::unique_ptr<ToolCallFormat> make_deepseek_v3_format();
std::unique_ptr<ToolCallFormat> make_deepseek_v31_format();
std::unique_ptr<ToolCallFormat> make_deepseek_v32_format();
std::unique_ptr<ToolCallFormat> make_deepseek_v4_format();
std::unique_ptr<ToolCallFormat> make_kimi_k2_format();
std::unique_ptr<ToolCallFormat> make_hermes_format(std::string_view name);

}  // namespace mla::server
