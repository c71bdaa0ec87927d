// The fuzz targets' checks (fuzz_checks.cc): each takes arbitrary bytes,
// returns when the code under test handled them (accepted, or refused with
// an error) and aborts on a broken property.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv4::fuzz {

void check_safetensors(const uint8_t* data, size_t size);  // safetensors header parsing
void check_config(const uint8_t* data, size_t size);       // config.json parsing
void check_tokenizer(const uint8_t* data, size_t size);    // DeepSeek tokenizer encode/decode round trip
void check_chat_parse(const uint8_t* data, size_t size);   // chat-encoding parse of completions
void check_request(const uint8_t* data, size_t size);      // HTTP request-body parsing into plans (Responses too)
void check_http(const uint8_t* data, size_t size);         // HTTP/1.1 request parsing from bytes cut anywhere

}  // namespace dsv4::fuzz
