// Renderer of the Jinja subset (jinja.h): walks the syntax tree with a stack of scopes
// (context variables, template top level, one per `for` loop and macro call), an output
// stack (the top-level output, plus one buffer per macro call or block `set` being captured),
// and the limits of jinja.h. Scoping follows jinja2: `set` inside a loop or macro stays there;
// a macro sees its arguments, then the template's top level, then the context.
// Loop tracing (RenderOptions::tracked) records, for loops writing to the top-level output,
// where each iteration over an element of the tracked list began and ended.
#include <cmath>
#include <limits>

#include "rewind/chat/jinja_internal.h"

namespace rw::jinja {

namespace {

using KwArgs = std::vector<std::pair<std::string, Value>>;

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

struct Frame {
  std::vector<std::pair<const std::string*, Value>> vars;
  const Value* find(std::string_view name) const {
    for (auto it = vars.rbegin(); it != vars.rend(); ++it)
      if (*it->first == name) return &it->second;
    return nullptr;
  }
  void set(const std::string* name, Value v) {
    for (auto& [k, x] : vars)
      if (*k == *name) {
        x = v;
        return;
      }
    vars.emplace_back(name, v);
  }
};

const std::string kLoop = "loop", kIndex = "index", kIndex0 = "index0", kRevindex = "revindex",
                  kRevindex0 = "revindex0", kFirst = "first", kLast = "last", kLength = "length",
                  kPrevitem = "previtem", kNextitem = "nextitem", kDepth = "depth",
                  kDepth0 = "depth0";

bool int_like(const Value& v) {
  return v.t == Value::T::kInt || v.t == Value::T::kBool;
}
int64_t as_int(const Value& v) {
  return v.t == Value::T::kBool ? (v.b ? 1 : 0) : v.i;
}
double as_double(const Value& v) {
  return v.t == Value::T::kFloat ? v.f : static_cast<double>(as_int(v));
}

class Render final : public Renderer {
 public:
  explicit Render(const RenderOptions& opt) : opt_(opt), lim_(opt.limits), heap_(lim_) {}

  Heap& heap() override { return heap_; }
  const RenderOptions& options() const override { return opt_; }

  void step(int64_t n = 1) override {
    steps_ += n;
    if (steps_ > lim_.max_steps)
      fail("template exceeded the step limit (" + std::to_string(lim_.max_steps) + ")");
  }

  std::string run(const NodeList& body, const nlohmann::ordered_json& vars,
                  const nlohmann::json* more) {
    if (!vars.is_object() || (more && !more->is_object()))
      fail("template variables must be a JSON object");
    frames_.emplace_back();  // context
    add_vars(vars);
    if (more) add_vars(*more);
    frames_.emplace_back();  // template top level
    floor_ = 1;
    out_.emplace_back();
    exec_body(body);
    return std::move(out_[0]);
  }

  Value call_value(const Value& callee, const std::vector<Value>& args,
                   const KwArgs& kwargs) override {
    switch (callee.t) {
      case Value::T::kMacro:
        return call_macro(*callee.m, args, kwargs);
      case Value::T::kFunc:
        return call_builtin(*this, callee.fn, args, kwargs);
      case Value::T::kUndefined:
        fail(callee.s ? "'" + *callee.s + "' is undefined" : std::string("value is undefined"));
      default:
        fail("'" + type_name(callee) + "' object is not callable");
    }
  }

 private:
  struct Depth {
    Depth(Render* r) : r_(r) {
      if (++r_->depth_ > r_->lim_.max_depth)
        fail("template recursion deeper than " + std::to_string(r_->lim_.max_depth));
    }
    ~Depth() { --r_->depth_; }
    Render* r_;
  };

  static void locate(JinjaError& e, int line, int col) {
    if (e.line == 0) {
      e.line = line;
      e.col = col;
    }
  }

  template <typename J>
  void add_vars(const J& vars) {
    for (const auto& [k, v] : vars.items()) {
      if (frames_[0].find(k)) continue;
      const std::string* name = heap_.str(k);
      Value x = from_json(v, 0);
      if (!opt_.tracked.empty() && k == opt_.tracked && x.t == Value::T::kList) {
        for (size_t i = 0; i < x.l->items.size(); ++i)
          if (x.l->items[i].t == Value::T::kDict) x.l->items[i].d->track = static_cast<int32_t>(i);
      }
      frames_[0].set(name, x);
    }
  }

  template <typename Json>
  Value from_json(const Json& j, int depth) {
    if (depth > lim_.max_value_depth) fail("template input nested too deeply");
    step();
    using J = typename Json::value_t;
    switch (j.type()) {
      case J::boolean:
        return Value::boolean(j.template get<bool>());
      case J::number_integer:
        return Value::integer(j.template get<int64_t>());
      case J::number_unsigned: {
        const uint64_t u = j.template get<uint64_t>();
        if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return Value::integer(static_cast<int64_t>(u));
        return Value::real(static_cast<double>(u));
      }
      case J::number_float:
        return Value::real(j.template get<double>());
      case J::string:
        return make_str(j.template get<std::string>());
      case J::array: {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto& x : j) items.push_back(from_json(x, depth + 1));
        return Value::list(heap_.list(std::move(items)));
      }
      case J::object: {
        Dict* d = heap_.dict();
        for (const auto& [k, x] : j.items())
          d->items.emplace_back(heap_.str(k), from_json(x, depth + 1));
        heap_.charge(d->items.size() * sizeof(d->items[0]));
        return Value::dict(d);
      }
      default:
        return Value::none();
    }
  }

  // ---- scopes and output ---------------------------------------------------------------

  Value lookup(const std::string& name) {
    for (size_t i = frames_.size(); i-- > floor_;)
      if (const Value* v = frames_[i].find(name)) return *v;
    if (floor_ > 1)
      if (const Value* v = frames_[1].find(name)) return *v;
    if (const Value* v = frames_[0].find(name)) return *v;
    Builtin b;
    if (find_builtin(name, &b)) return Value::func(b);
    return Value::undefined(&name);
  }

  void emit(std::string_view s) {
    std::string& o = out_.back();
    if (o.size() + s.size() > lim_.max_output_bytes)
      fail("template output exceeds the limit of " + std::to_string(lim_.max_output_bytes) +
           " bytes");
    o.append(s);
  }

  // ---- statements ------------------------------------------------------------------------

  Flow exec_body(const NodeList& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n) {
    Depth d(this);
    step();
    try {
      return exec_inner(n);
    } catch (JinjaError& e) {
      locate(e, n.line, n.col);
      throw;
    }
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    Frame& f = frames_.back();
    if (targets.size() == 1) {
      f.set(&targets[0], v);
      return;
    }
    if (v.t != Value::T::kList || v.l->items.size() != targets.size())
      fail("cannot unpack " + type_name(v) + " into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) f.set(&targets[i], v.l->items[i]);
  }

  std::string capture(const NodeList& body) {
    out_.emplace_back();
    exec_body(body);
    std::string s = std::move(out_.back());
    out_.pop_back();
    return s;
  }

  Flow exec_inner(const Node& n) {
    switch (n.kind) {
      case NodeKind::kText:
        emit(n.text);
        return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = eval(*n.expr);
        if (v.is_str())
          emit(*v.s);
        else
          emit(to_str(*this, v));
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        for (size_t i = 0; i < n.conds.size(); ++i)
          if (truthy(eval(*n.conds[i]))) return exec_body(n.bodies[i]);
        if (n.bodies.size() > n.conds.size()) return exec_body(n.bodies.back());
        return Flow::kNormal;
      case NodeKind::kFor:
        return exec_for(n);
      case NodeKind::kSet:
        assign(n.targets, eval(*n.expr));
        return Flow::kNormal;
      case NodeKind::kSetAttr: {
        const Value ns = lookup(n.targets[0]);
        if (ns.t != Value::T::kDict || ns.d->kind != Dict::Kind::kNamespace)
          fail("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
        ns.d->set(&n.text, eval(*n.expr));
        heap_.charge(sizeof(ns.d->items[0]));
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock:
        frames_.back().set(&n.targets[0], make_str(capture(n.bodies[0])));
        return Flow::kNormal;
      case NodeKind::kMacro:
        frames_.back().set(&n.text, Value::macro(&n));
        return Flow::kNormal;
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      case NodeKind::kGeneration:
        return exec_body(n.bodies[0]);
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.expr);
    std::vector<Value> items = iterate(*this, seq);
    heap_.charge(items.size() * sizeof(Value));
    frames_.emplace_back();
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& x : items) {
        count_iteration();
        assign(n.targets, x);
        if (truthy(eval(*n.filter))) kept.push_back(x);
      }
      items.swap(kept);
    }
    const bool tracing = opt_.trace && out_.size() == 1;
    LoopPass pass;
    pass.begin = out_[0].size();
    Dict* loop = heap_.dict(Dict::Kind::kLoop);
    const int64_t len = static_cast<int64_t>(items.size());
    for (const std::string* k : {&kIndex, &kIndex0, &kRevindex, &kRevindex0, &kFirst, &kLast,
                                 &kLength, &kPrevitem, &kNextitem, &kDepth, &kDepth0})
      loop->items.emplace_back(k, Value());
    heap_.charge(loop->items.size() * sizeof(loop->items[0]));
    for (int64_t i = 0; i < len; ++i) {
      count_iteration();
      const Value& x = items[static_cast<size_t>(i)];
      auto& li = loop->items;
      li[0].second = Value::integer(i + 1);
      li[1].second = Value::integer(i);
      li[2].second = Value::integer(len - i);
      li[3].second = Value::integer(len - i - 1);
      li[4].second = Value::boolean(i == 0);
      li[5].second = Value::boolean(i == len - 1);
      li[6].second = Value::integer(len);
      li[7].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined(&kPrevitem);
      li[8].second = i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined(&kNextitem);
      li[9].second = Value::integer(1);
      li[10].second = Value::integer(0);
      frames_.back().vars.clear();  // jinja2: assignments in the body do not outlive an iteration
      assign(n.targets, x);
      frames_.back().set(&kLoop, Value::dict(loop));
      const bool traced = tracing && x.t == Value::T::kDict && x.d->track >= 0;
      const size_t begin = out_[0].size();
      const Flow f = exec_body(n.bodies[0]);
      if (traced) pass.iterations.push_back({x.d->track, begin, out_[0].size()});
      if (f == Flow::kBreak) break;
    }
    frames_.pop_back();
    if (items.empty() && n.bodies.size() > 1) {
      const Flow f = exec_body(n.bodies[1]);
      if (f != Flow::kNormal) return f;
    }
    if (tracing && !pass.iterations.empty()) {
      pass.end = out_[0].size();
      opt_.trace->push_back(std::move(pass));
    }
    return Flow::kNormal;
  }

  void count_iteration() {
    if (++iterations_ > lim_.max_loop_iterations)
      fail("template exceeded the loop iteration limit (" +
           std::to_string(lim_.max_loop_iterations) + ")");
  }

  Value call_macro(const Node& m, const std::vector<Value>& args, const KwArgs& kwargs) {
    Depth d(this);
    if (args.size() > m.params.size())
      fail("macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments, got " +
           std::to_string(args.size()));
    Frame f;
    std::vector<bool> given(m.params.size(), false);
    for (size_t i = 0; i < args.size(); ++i) {
      f.set(&m.params[i].first, args[i]);
      given[i] = true;
    }
    for (const auto& [k, v] : kwargs) {
      size_t i = 0;
      while (i < m.params.size() && m.params[i].first != k) ++i;
      if (i == m.params.size()) fail("macro '" + m.text + "' has no argument named '" + k + "'");
      f.set(&m.params[i].first, v);
      given[i] = true;
    }
    const size_t saved_floor = floor_;
    frames_.push_back(std::move(f));
    floor_ = frames_.size() - 1;
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (given[i]) continue;
      const Value v =
          m.params[i].second ? eval(*m.params[i].second) : Value::undefined(&m.params[i].first);
      frames_.back().set(&m.params[i].first, v);
    }
    std::string s = capture(m.bodies[0]);
    frames_.pop_back();
    floor_ = saved_floor;
    return make_str(std::move(s));
  }

  // ---- expressions -----------------------------------------------------------------------

  Value eval(const Expr& e) {
    Depth d(this);
    step();
    try {
      return eval_inner(e);
    } catch (JinjaError& err) {
      locate(err, e.line, e.col);
      throw;
    }
  }

  void eval_args(const Expr& e, size_t first, std::vector<Value>* args, KwArgs* kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) args->push_back(eval(*e.args[i]));
    for (const auto& [k, x] : e.kwargs) kwargs->emplace_back(k, eval(*x));
  }

  [[noreturn]] static void fail_undefined(const Value& v) {
    fail(v.s ? "'" + *v.s + "' is undefined" : std::string("value is undefined"));
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.lit;
      case ExprKind::kName:
        return lookup(e.text);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a));
        return Value::list(heap_.list(std::move(items), e.kind == ExprKind::kTuple));
      }
      case ExprKind::kDict: {
        Dict* d = heap_.dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_str()) fail("dict keys must be strings, got " + type_name(k));
          d->set(k.s, eval(*e.args[i + 1]));
        }
        heap_.charge(d->items.size() * sizeof(d->items[0]));
        return Value::dict(d);
      }
      case ExprKind::kAttr:
        return get_attr(*this, eval(*e.args[0]), e.text);
      case ExprKind::kItem: {
        const Value obj = eval(*e.args[0]);
        return get_item(*this, obj, eval(*e.args[1]));
      }
      case ExprKind::kSlice:
        return eval_slice(e);
      case ExprKind::kCall:
        return eval_call(e);
      case ExprKind::kFilter: {
        const Value v = eval(*e.args[0]);
        std::vector<Value> args;
        KwArgs kwargs;
        eval_args(e, 1, &args, &kwargs);
        return apply_filter(*this, e.builtin, v, args, kwargs);
      }
      case ExprKind::kTest: {
        const Value v = eval(*e.args[0]);
        std::vector<Value> args;
        KwArgs kwargs;
        eval_args(e, 1, &args, &kwargs);
        if (!kwargs.empty()) fail("tests take no keyword arguments");
        return Value::boolean(apply_test(*this, e.builtin, v, args) != e.negated);
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        const Value v = eval(*e.args[0]);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number())
          fail("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") +
               ": '" + type_name(v) + "'");
        if (e.kind == ExprKind::kPos) return v.t == Value::T::kBool ? Value::integer(v.b) : v;
        if (v.t == Value::T::kFloat) return Value::real(-v.f);
        if (as_int(v) == std::numeric_limits<int64_t>::min()) fail("integer overflow");
        return Value::integer(-as_int(v));
      }
      case ExprKind::kNot:
        return Value::boolean(!truthy(eval(*e.args[0])));
      case ExprKind::kBinary: {
        const Value a = eval(*e.args[0]);
        const Value b = eval(*e.args[1]);
        return binary(e.op, a, b);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.cmp.size(); ++i) {
          const Value right = eval(*e.args[i + 1]);
          if (!compare_op(e.cmp[i], left, right)) return Value::boolean(false);
          left = right;
        }
        return Value::boolean(true);
      }
      case ExprKind::kAnd: {
        const Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case ExprKind::kOr: {
        const Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case ExprKind::kCond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args.size() > 2 ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    std::vector<Value> args;
    KwArgs kwargs;
    if (callee.kind == ExprKind::kAttr) {
      const Value obj = eval(*callee.args[0]);
      if (obj.is_undefined()) fail_undefined(obj);
      eval_args(e, 1, &args, &kwargs);
      bool handled = false;
      const Value r = call_method(*this, obj, callee.text, args, kwargs, &handled);
      if (handled) return r;
      const Value f = get_attr(*this, obj, callee.text);
      if (f.is_undefined())
        fail("'" + type_name(obj) + "' object has no attribute '" + callee.text + "'");
      return call_value(f, args, kwargs);
    }
    const Value f = eval(callee);
    eval_args(e, 1, &args, &kwargs);
    return call_value(f, args, kwargs);
  }

  Value eval_slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    if (obj.is_undefined()) fail_undefined(obj);
    int64_t bound[3] = {0, 0, 1};
    bool has[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      const Value v = eval(*e.args[k + 1]);
      if (v.t == Value::T::kNone) continue;
      if (!int_like(v)) fail("slice indices must be integers or None");
      bound[k] = as_int(v);
      has[k] = true;
    }
    const int64_t stepv = bound[2];
    if (stepv == 0) fail("slice step cannot be zero");
    std::vector<size_t> off;  // code point offsets (empty for ASCII: byte i is code point i)
    int64_t n;
    if (obj.is_str()) {
      step_bytes(obj.s->size());
      if (!ascii_only(*obj.s)) off = utf8_offsets(*obj.s);
      n = off.empty() ? static_cast<int64_t>(obj.s->size()) : static_cast<int64_t>(off.size()) - 1;
    } else if (obj.t == Value::T::kList) {
      n = static_cast<int64_t>(obj.l->items.size());
    } else {
      return Value::undefined();
    }
    auto adjust = [&](int64_t x) {
      if (x < 0) {
        x += n;
        if (x < 0) x = stepv < 0 ? -1 : 0;
      } else if (x >= n) {
        x = stepv < 0 ? n - 1 : n;
      }
      return x;
    };
    const int64_t start = has[0] ? adjust(bound[0]) : (stepv < 0 ? n - 1 : 0);
    const int64_t stop = has[1] ? adjust(bound[1]) : (stepv < 0 ? -1 : n);
    // Python's slice length: all indices are within [-1, n], so no overflow.
    int64_t count = 0;
    if (stepv > 0 && stop > start) count = (stop - start + stepv - 1) / stepv;
    if (stepv < 0 && start > stop) count = (start - stop + (-stepv) - 1) / (-stepv);
    if (obj.is_str()) {
      auto at = [&](int64_t i) {
        return off.empty() ? static_cast<size_t>(i) : off[static_cast<size_t>(i)];
      };
      std::string out;
      if (stepv == 1 && count > 0) {
        out = obj.s->substr(at(start), at(start + count) - at(start));
      } else {
        step(count);
        for (int64_t k = 0, i = start; k < count; ++k, i += stepv)
          out.append(*obj.s, at(i), at(i + 1) - at(i));
      }
      return make_str(std::move(out));
    }
    step(count);
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0, i = start; k < count; ++k, i += stepv)
      items.push_back(obj.l->items[static_cast<size_t>(i)]);
    return Value::list(heap_.list(std::move(items)));
  }

  bool compare_op(CmpOp op, const Value& a, const Value& b) {
    switch (op) {
      case CmpOp::kEq:
        return equal(*this, a, b);
      case CmpOp::kNe:
        return !equal(*this, a, b);
      case CmpOp::kLt:
        return compare(*this, a, b) < 0;
      case CmpOp::kLe:
        return compare(*this, a, b) <= 0;
      case CmpOp::kGt:
        return compare(*this, a, b) > 0;
      case CmpOp::kGe:
        return compare(*this, a, b) >= 0;
      case CmpOp::kIn:
      case CmpOp::kNotIn: {
        bool found = false;
        if (b.is_str()) {
          if (!a.is_str())
            fail("'in <string>' requires string as left operand, not " + type_name(a));
          step_bytes(b.s->size());
          found = b.s->find(*a.s) != std::string::npos;
        } else if (b.t == Value::T::kDict) {
          found = a.is_str() && b.d->find(*a.s) != nullptr;
        } else if (b.t == Value::T::kList) {
          for (const Value& x : b.l->items) {
            step();
            if (equal(*this, x, a)) {
              found = true;
              break;
            }
          }
        } else if (!b.is_undefined()) {
          fail("argument of type '" + type_name(b) + "' is not iterable");
        }
        return op == CmpOp::kIn ? found : !found;
      }
    }
    return false;
  }

  [[noreturn]] static void fail_operands(const char* op, const Value& a, const Value& b) {
    fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
         type_name(b) + "'");
  }

  Value repeat(const Value& seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.is_str()) {
      if (times > 0 && seq.s->size() > 0 &&
          static_cast<uint64_t>(times) > lim_.max_output_bytes / seq.s->size())
        heap_.check_len(lim_.max_output_bytes + 1);
      std::string out;
      out.reserve(seq.s->size() * static_cast<size_t>(times));
      for (int64_t i = 0; i < times; ++i) out += *seq.s;
      return make_str(std::move(out));
    }
    const size_t n = seq.l->items.size();
    if (times > 0 && n > 0 &&
        static_cast<uint64_t>(times) > lim_.max_total_bytes / (n * sizeof(Value)))
      heap_.charge(lim_.max_total_bytes + 1);
    std::vector<Value> items;
    items.reserve(n * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i)
      items.insert(items.end(), seq.l->items.begin(), seq.l->items.end());
    return Value::list(heap_.list(std::move(items), seq.l->tuple));
  }

  Value binary(BinOp op, const Value& a, const Value& b) {
    using T = Value::T;
    if (op == BinOp::kConcat) {
      std::string s = to_str(*this, a);
      const std::string t = to_str(*this, b);
      heap_.check_len(s.size() + t.size());
      s += t;
      return make_str(std::move(s));
    }
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    static const char* const kSym[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    const char* sym = kSym[static_cast<int>(op)];
    if (op == BinOp::kAdd) {
      if (a.is_str() && b.is_str()) {
        heap_.check_len(a.s->size() + b.s->size());
        return make_str(*a.s + *b.s);
      }
      if (a.t == T::kList && b.t == T::kList) {
        std::vector<Value> items = a.l->items;
        items.insert(items.end(), b.l->items.begin(), b.l->items.end());
        return Value::list(heap_.list(std::move(items)));
      }
    }
    if (op == BinOp::kMul) {
      if ((a.is_str() || a.t == T::kList) && int_like(b)) return repeat(a, as_int(b));
      if (int_like(a) && (b.is_str() || b.t == T::kList)) return repeat(b, as_int(a));
    }
    if (!a.is_number() || !b.is_number()) {
      if (op == BinOp::kMod && a.is_str()) fail("string formatting with % is not supported");
      fail_operands(sym, a, b);
    }
    if (int_like(a) && int_like(b) && op != BinOp::kDiv) {
      const int64_t x = as_int(a), y = as_int(b);
      int64_t r = 0;
      switch (op) {
        case BinOp::kAdd:
          if (__builtin_add_overflow(x, y, &r)) fail("integer overflow");
          return Value::integer(r);
        case BinOp::kSub:
          if (__builtin_sub_overflow(x, y, &r)) fail("integer overflow");
          return Value::integer(r);
        case BinOp::kMul:
          if (__builtin_mul_overflow(x, y, &r)) fail("integer overflow");
          return Value::integer(r);
        case BinOp::kFloorDiv:
        case BinOp::kMod: {
          if (y == 0) fail("integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) fail("integer overflow");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return Value::integer(op == BinOp::kFloorDiv ? q : m);
        }
        case BinOp::kPow: {
          if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
          int64_t acc = 1, base = x, e = y;
          while (e > 0) {
            if (e & 1)
              if (__builtin_mul_overflow(acc, base, &acc)) fail("integer overflow");
            e >>= 1;
            if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
          }
          return Value::integer(acc);
        }
        default:
          break;
      }
    }
    const double x = as_double(a), y = as_double(b);
    switch (op) {
      case BinOp::kAdd:
        return Value::real(x + y);
      case BinOp::kSub:
        return Value::real(x - y);
      case BinOp::kMul:
        return Value::real(x * y);
      case BinOp::kDiv:
        if (y == 0) fail("division by zero");
        return Value::real(x / y);
      case BinOp::kFloorDiv:
        if (y == 0) fail("float floor division by zero");
        return Value::real(std::floor(x / y));
      case BinOp::kMod: {
        if (y == 0) fail("float modulo");
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::real(m);
      }
      case BinOp::kPow:
        return Value::real(std::pow(x, y));
      default:
        break;
    }
    fail_operands(sym, a, b);
  }

  const RenderOptions& opt_;
  const Limits& lim_;
  Heap heap_;
  std::vector<Frame> frames_;
  size_t floor_ = 1;
  std::vector<std::string> out_;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> Template::render(const nlohmann::ordered_json& vars,
                                     const RenderOptions& opt) const {
  static const nlohmann::json kNone = nlohmann::json::object();
  return render(vars, kNone, opt);
}

Result<std::string> Template::render(const nlohmann::ordered_json& vars, const nlohmann::json& more,
                                     const RenderOptions& opt) const {
  if (!impl_) return make_error("render of an empty template");
  try {
    Render r(opt);
    return r.run(impl_->body, vars, &more);
  } catch (const JinjaError& e) {
    if (e.line == 0) return make_error(e.message);
    return make_error("line " + std::to_string(e.line) + ", column " + std::to_string(e.col) +
                      ": " + e.message);
  }
}

}  // namespace rw::jinja
