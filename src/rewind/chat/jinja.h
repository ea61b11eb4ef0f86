// A Jinja2 subset interpreter for chat templates, configured like Hugging Face transformers'
// environment (trim_blocks, lstrip_blocks, loop controls, one trailing newline dropped, HF's
// `tojson`, `raise_exception`, `strftime_now`, no mutation of lists or dicts as in its
// ImmutableSandboxedEnvironment). Values behave like Python's: None/True/False print as such,
// lists and dicts print as Python reprs, string length/index/slices count code points, `/` is
// true division, `//` and `%` floor, ints are 64-bit (overflow is an error), dicts keep
// insertion order. Checked against jinja2 3.1 on the Qwen3/3.5, Llama 3.1, Gemma and Mistral
// templates, byte for byte on the Granite-4.0, Nemotron-Nano-v2 and Nemotron-3-Nano templates
// (tests/data/templates) and on randomly generated templates (whitespace control, expressions).
//
// Supported: {{ }}, {% %}, {# #}, {% raw %}, whitespace control (- and +); if/elif/else, for
// (tuple targets, `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem/cycle, break/continue; assignments in the body last one iteration, as in
// jinja2), set (name, tuple, ns.attr, block form), macro (defaults, keyword arguments,
// recursion), generation (HF's tag; renders its body); expressions: literals, lists, tuples,
// dicts, attribute/item access, slices, calls, filters, tests, `a if c else b`, and/or/not,
// in/not in, chained comparisons, + - * / // % ** ~. Filters, tests, global functions and
// string/dict/list methods: the list in jinja_builtins.cpp.
// Not supported (a parse error naming them): extends/include/import/block, call and filter
// blocks, with, do, recursive loops, `*args`/`**kwargs`, \N{NAME} string escapes; unknown
// filters and tests are parse errors (as in jinja2). Differences that real templates do not meet:
// `str % args` formatting is an error; filters that return generators in jinja2 (map, select,
// items, ...) return lists.
//
// Undefined behaves as jinja2's default Undefined: empty when printed or iterated, false,
// equal to nothing; an attribute or item of it, arithmetic on it, or calling it is an error.
// A missing attribute or key of a defined value is Undefined. Parse and run-time errors are
// one line starting "line L, column C: " (the column counts code points).
//
// Limits (Limits below) bound every render: output bytes and the size of any one string,
// bytes of all values created, steps (each evaluated expression or statement, plus one per 64
// bytes that a string operation reads), loop iterations, nesting depth at parse time (100
// blocks/parentheses, expression trees 150 deep) and run time, and value nesting (a namespace
// can contain itself). A template cannot hang, exhaust memory or overflow the stack.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"

namespace rw::jinja {

struct Limits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendered text, and any one string value
  size_t max_total_bytes = size_t{256} << 20;  // all strings and lists created in one render
  int64_t max_steps = 20'000'000;              // evaluated nodes, + 1 per 64 bytes scanned
  int64_t max_loop_iterations = 1'000'000;     // all loops of one render together
  int max_depth = 400;                         // run-time nesting (statements, exprs, macros)
  int max_value_depth = 128;                   // nesting of values when printed or compared
};

// Where iterations over the elements of one tracked list (the variable named by
// RenderOptions::tracked) began and ended in the output. One pass per `for` loop execution
// that wrote to the top-level output (not inside a macro call or a block `set`) and met at
// least one tracked element (by identity, so `messages[1:]` and `messages|reverse` count).
struct LoopPass {
  struct Iteration {
    int32_t index;  // position of the element in the tracked list
    size_t begin;   // output length when the iteration started
    size_t end;     // ... and when it ended
  };
  std::vector<Iteration> iterations;  // only those over tracked elements, in loop order
  size_t begin = 0, end = 0;          // output length before and after the whole loop
};

struct RenderOptions {
  Limits limits;
  std::string tracked;  // variable name whose list elements are traced; "" = none
  std::vector<LoopPass>* trace = nullptr;  // receives the passes when non-null
  // strftime_now's clock: this local time when set, else the system's (tests pin it so that
  // renderings compare with jinja2's under a fixed clock).
  std::optional<std::tm> now;
};

class Template {
 public:
  // Parses `source` (line breaks \r\n and \r become \n; one trailing newline is dropped, as
  // jinja2 does by default). Unknown filters and tests are parse errors, as in jinja2.
  static Result<Template> parse(std::string_view source);

  // Renders with `vars` (a JSON object; its members are the template's variables). Thread-safe:
  // a Template is immutable and each render has its own state. Cost: bounded by the limits.
  Result<std::string> render(const nlohmann::ordered_json& vars, const RenderOptions& opt) const;
  // The same with more variables from a nlohmann::json object (its keys come sorted), added
  // after `vars` (which win on a clash).
  Result<std::string> render(const nlohmann::ordered_json& vars, const nlohmann::json& more,
                             const RenderOptions& opt) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rw::jinja
