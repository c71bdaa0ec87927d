// The chat page served at / (src/server/chat_page.html, built into the
// binary by CMake: no file is read at run time).
#pragma once

#include <string_view>

namespace dsv4 {

std::string_view chat_page_html();

}  // namespace dsv4
