// A checkpoint's tokenizer_config.json, read by the tokenizer (add_bos_token / add_eos_token),
// the chat template (bos_token, eos_token, chat_template) and convert (the special ids).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "rewind/base/result.h"

namespace rw {

// dir/tokenizer_config.json as an object (an empty one when the file is absent); an error
// naming the file when it is not a JSON object.
Result<nlohmann::json> read_tokenizer_config(const std::string& dir);

// A special token's text in it (bos_token, eos_token, pad_token): a string or {"content": ...};
// "" when absent, null or of another shape.
std::string special_token_text(const nlohmann::json& cfg, const char* key);

}  // namespace rw
