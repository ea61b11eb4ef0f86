// Internals of the Jinja interpreter (jinja.h), shared by its parser, renderer and builtins:
// values, the syntax tree, the per-render heap with its byte budget, and the error type.
// Values are small tagged unions; strings, lists and dicts live in the render's heap (or in
// the syntax tree, for literals) and are referenced by pointer, so copies are free and list
// elements keep their identity (which is how message iterations are traced).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rewind/chat/jinja.h"

namespace rw::jinja {

// A render-time or parse-time error; turned into a Result at the API edge.
struct JinjaError {
  std::string message;
  int line = 0, col = 0;
};

struct List;
struct Dict;
struct Node;

enum class Builtin : uint8_t { kRange, kNamespace, kRaiseException, kStrftimeNow, kDict };

struct Value {
  enum class T : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kList,
    kDict,
    kMacro,
    kFunc
  };
  T t = T::kUndefined;
  union {
    bool b;
    int64_t i;
    double f;
    const std::string* s;  // kStr (never null); kUndefined: the name, or null
    List* l;
    Dict* d;
    const Node* m;  // kMacro
    Builtin fn;     // kFunc
  };
  Value() : s(nullptr) {}

  static Value undefined(const std::string* name = nullptr) {
    Value v;
    v.s = name;
    return v;
  }
  static Value none() {
    Value v;
    v.t = T::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.t = T::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.t = T::kInt;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.t = T::kFloat;
    v.f = x;
    return v;
  }
  static Value str(const std::string* x) {
    Value v;
    v.t = T::kStr;
    v.s = x;
    return v;
  }
  static Value list(List* x) {
    Value v;
    v.t = T::kList;
    v.l = x;
    return v;
  }
  static Value dict(Dict* x) {
    Value v;
    v.t = T::kDict;
    v.d = x;
    return v;
  }
  static Value macro(const Node* x) {
    Value v;
    v.t = T::kMacro;
    v.m = x;
    return v;
  }
  static Value func(Builtin x) {
    Value v;
    v.t = T::kFunc;
    v.fn = x;
    return v;
  }

  bool is_undefined() const { return t == T::kUndefined; }
  bool is_str() const { return t == T::kStr; }
  bool is_number() const { return t == T::kInt || t == T::kFloat || t == T::kBool; }
};

struct List {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b)
};

struct Dict {
  enum class Kind : uint8_t { kPlain, kNamespace, kLoop };
  std::vector<std::pair<const std::string*, Value>> items;  // insertion order, unique keys
  Kind kind = Kind::kPlain;
  int32_t track = -1;  // index in the tracked list, or -1

  // Linear for small dicts; large ones (big tool schemas) get a hash index, built when first
  // needed and extended as keys are added, so lookups in loops stay O(1).
  const Value* find(std::string_view key) const {
    if (items.size() <= kIndexFrom) {
      for (const auto& [k, v] : items)
        if (*k == key) return &v;
      return nullptr;
    }
    for (size_t i = index_.size(); i < items.size(); ++i) index_.emplace(*items[i].first, i);
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  void set(const std::string* key, Value v) {
    if (const Value* old = find(*key)) {
      *const_cast<Value*>(old) = v;
      return;
    }
    items.emplace_back(key, v);
  }

 private:
  static constexpr size_t kIndexFrom = 16;
  mutable std::unordered_map<std::string_view, size_t> index_;
};

// ---- syntax tree -------------------------------------------------------------------------

enum class ExprKind : uint8_t {
  kLiteral,
  kName,
  kList,
  kTuple,
  kDict,
  kAttr,
  kItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNeg,
  kPos,
  kNot,
  kBinary,
  kCompare,
  kAnd,
  kOr,
  kCond,
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0, col = 0;
  std::string text;  // kName, kAttr (attribute), kFilter / kTest (name), kLiteral (string storage)
  Value lit;         // kLiteral
  bool negated = false;  // kTest: `is not`
  BinOp op = BinOp::kAdd;
  int height = 1;    // of this tree (bounded by the parser)
  int builtin = -1;  // kFilter / kTest: index into the builtin tables
  // Operands. kAttr: [obj]; kItem: [obj, key]; kSlice: [obj, start, stop, step] (nulls allowed);
  // kCall: [callee, positional...]; kFilter / kTest: [operand, positional...];
  // kDict: [k0, v0, k1, v1, ...]; kCompare: n+1 operands for n ops; kCond: [then, cond, else?].
  std::vector<ExprP> args;
  std::vector<CmpOp> cmp;
  std::vector<std::pair<std::string, ExprP>> kwargs;
};

enum class NodeKind : uint8_t {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetAttr,
  kSetBlock,
  kMacro,
  kBreak,
  kContinue,
  kGeneration,
};

using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0, col = 0;
  std::string text;                  // kText: data; kMacro: name; kSetAttr: attribute
  ExprP expr;                        // kOutput / kSet / kSetAttr: value; kFor: iterable
  ExprP filter;                      // kFor: `if` condition (may be null)
  std::vector<ExprP> conds;          // kIf: one per branch (else has none)
  std::vector<NodeList> bodies;      // kIf: branches (+ else); kFor: [body, else]; kMacro,
                                     // kSetBlock, kGeneration: [body]
  std::vector<std::string> targets;  // kFor / kSet / kSetBlock names; kSetAttr: [namespace]
  std::vector<std::pair<std::string, ExprP>> params;  // kMacro: name and default (may be null)
};

struct Template::Impl {
  NodeList body;
};

// ---- per-render heap ---------------------------------------------------------------------

// Owns every string, list and dict a render creates; freed all at once when the render ends
// (so reference cycles through namespaces cannot leak). Charges their bytes to the budget.
class Heap {
 public:
  explicit Heap(const Limits& limits) : limits_(limits) {}
  const std::string* str(std::string s);
  List* list(std::vector<Value> items = {}, bool tuple = false);
  Dict* dict(Dict::Kind kind = Dict::Kind::kPlain);
  void charge(size_t bytes);  // throws when the total budget is exceeded
  // Throws when a string of n bytes would exceed the per-string limit.
  void check_len(size_t n) const;
  const Limits& limits() const { return limits_; }

 private:
  const Limits& limits_;
  size_t used_ = 0;
  std::deque<std::string> strings_;
  std::deque<List> lists_;
  std::deque<Dict> dicts_;
};

// ---- builtins (jinja_builtins.cpp) ---------------------------------------------------------

class Renderer;

// Index of a filter or test by name, or -1.
int find_filter(std::string_view name);
int find_test(std::string_view name);
bool find_builtin(std::string_view name, Builtin* out);

[[noreturn]] void fail(const std::string& message);  // a JinjaError; the caller adds the position

// Python-style conversions. They charge steps to `r` and refuse values nested deeper than
// Limits::max_value_depth (a namespace can contain itself).
bool truthy(const Value& v);
std::string to_str(Renderer& r, const Value& v);  // str(v); Undefined -> ""
std::string repr(Renderer& r, const Value& v);
std::string type_name(const Value& v);
bool equal(Renderer& r, const Value& a, const Value& b);
int compare(Renderer& r, const Value& a, const Value& b);  // <0, 0, >0; throws when unordered

// JSON as Python's json.dumps (HF's tojson defaults: ensure_ascii=False, no indent).
struct JsonStyle {
  bool has_indent = false;
  std::string indent;  // per level, when has_indent
  std::string item_sep = ", ", key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string to_json(Renderer& r, const Value& v, const JsonStyle& style);
std::string float_repr(double d);  // Python's repr(float)

// Code-point aware helpers (an invalid UTF-8 byte counts as one code point).
size_t utf8_length(std::string_view s);
bool ascii_only(std::string_view s);
std::vector<size_t> utf8_offsets(std::string_view s);  // start of each code point, then size

Value apply_filter(Renderer& r, int id, const Value& v, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs);
bool apply_test(Renderer& r, int id, const Value& v, const std::vector<Value>& args);
// obj.name(args) for strings, lists, dicts and loop objects; *handled = false if no such method.
Value call_method(Renderer& r, const Value& obj, const std::string& name,
                  const std::vector<Value>& args,
                  const std::vector<std::pair<std::string, Value>>& kwargs, bool* handled);
Value call_builtin(Renderer& r, Builtin fn, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs);
// The iteration of a value as a `for` loop sees it (list items, dict keys, string characters;
// Undefined is empty). Throws for values that are not iterable.
std::vector<Value> iterate(Renderer& r, const Value& v);
// obj.name and obj[key] as jinja2 resolves them (a missing one is Undefined).
Value get_attr(Renderer& r, const Value& obj, const std::string& name);
Value get_item(Renderer& r, const Value& obj, const Value& key);

// What builtins need from the renderer.
class Renderer {
 public:
  virtual ~Renderer() = default;
  virtual Heap& heap() = 0;
  virtual void step(int64_t n = 1) = 0;
  virtual Value call_value(const Value& callee, const std::vector<Value>& args,
                           const std::vector<std::pair<std::string, Value>>& kwargs) = 0;
  virtual const RenderOptions& options() const = 0;
  Value make_str(std::string s) { return Value::str(heap().str(std::move(s))); }
  // Work on n bytes counts as n / 64 steps, so that string operations in loops stay bounded.
  void step_bytes(size_t n) { step(1 + static_cast<int64_t>(n / 64)); }
};

}  // namespace rw::jinja
