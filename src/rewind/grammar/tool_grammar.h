// Grammars for forced tool calls (tool_choice "required" or naming a function): the model's
// tool-call syntax around each declared function, its arguments constrained by the function's
// `parameters` schema (the JSON Schema subset of json_schema.h; a refused keyword is an error
// naming it and the tool when the function is marked strict, else relaxed away).
//
// Formats (chat/tool_calls.cpp parses all three back):
//   JsonTag   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>   (Qwen3, Granite)
//   XmlTag    <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>
//             \n</tool_call>   (Qwen3.5, rewind's ChatML template). A parameter whose schema is
//             a string is raw text without '<' (within minLength / maxLength; an enum or const
//             of strings: one of its values; a format: its unquoted form); any other is the
//             compact JSON of its schema. Declared parameters in order,
//             required ones always, optional ones possibly left out.
//   JsonList  <TOOLCALL>[{"name": "NAME", "arguments": ARGS}, ...]</TOOLCALL>   (Nemotron-H)
// Several calls are separated by a newline (JsonTag, XmlTag) or ", " (JsonList).
//
// Lazy (tool_choice "auto" with `strict` tools, as llama.cpp's grammar triggers): free text
// that never contains the format's opening tag ("<tool_call>", "<TOOLCALL>"), then optionally
// the tool calls from that tag on, as above. Only the functions marked "strict": true get
// their parameter schemas; the others take any arguments (a JSON object; XmlTag: any
// parameters whose values hold no '<').
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

enum class ToolCallFormat { JsonTag, XmlTag, JsonList };

struct ToolGrammarOptions {
  ToolCallFormat format = ToolCallFormat::JsonTag;
  std::string only;      // non-empty: only this function may be called
  bool parallel = true;  // one or more calls (else exactly one)
  bool lazy = false;     // free text first; the calls only from the opening tag on
  // Where the schemas of tools not marked strict were relaxed to compile (relax_json_schema in
  // json_schema.h), one line each ("tools[0].function.parameters: 'pattern' at #/..."); null:
  // not collected.
  std::vector<std::string>* relaxed = nullptr;
};

// The tag that opens the tool calls of `format` (the trigger of a lazy grammar), and the one
// that closes them. A tokenizer may mark them special (Qwen's do): the grammar's vocabulary
// must then keep those tokens as their text (VocabTrie::from_tokenizer's keep_special).
std::string tool_call_opening(ToolCallFormat format);
std::string tool_call_closing(ToolCallFormat format);

// True when some tool of `tools` has "function": {"strict": true}.
bool has_strict_tool(const nlohmann::ordered_json& tools);

// GBNF (root rule `root`) for the tool calls of `tools`, an OpenAI tools array
// ([{"type": "function", "function": {"name", "parameters"?, ...}}]). Errors: no tools, `only`
// not among them, a parameters schema the subset refuses.
Result<std::string> tool_call_gbnf(const nlohmann::ordered_json& tools,
                                   const ToolGrammarOptions& opt);

}  // namespace rw
