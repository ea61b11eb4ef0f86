// parse_json_ordered (chat_template.h): JSON text to nlohmann::ordered_json in linear time.
// nlohmann's own ordered_json parser checks every new key against all earlier keys of its
// object (quadratic; a 200k-key object takes half a minute), so this SAX handler appends keys
// directly and finds repeated ones through a hash map per open object. A repeated key keeps
// its first position and takes the last value, as Python's json.loads does. Nesting is
// limited (kMaxDepth) so that the recursive copy, dump and destruction of the result are safe.
#include <unordered_map>

#include "rewind/chat/chat_template.h"

namespace rw {

namespace {

// nlohmann's message without its own labels ("[json.exception.parse_error.101] parse error at
// line 1, column 2: "): what is left says what was wrong, in words a client can act on.
std::string plain_message(std::string m) {
  if (!m.empty() && m[0] == '[') {
    const size_t e = m.find("] ");
    if (e != std::string::npos) m.erase(0, e + 2);
  }
  const size_t colon = m.find(": ");
  if (m.rfind("parse error", 0) == 0 && colon != std::string::npos) m.erase(0, colon + 2);
  return m;
}

using ojson = nlohmann::ordered_json;
constexpr size_t kMaxDepth = 256;

class OrderedBuilder final : public nlohmann::json_sax<ojson> {
 public:
  explicit OrderedBuilder(ojson* root) : root_(root) {}

  bool null() override { return put(ojson(nullptr)); }
  bool boolean(bool v) override { return put(ojson(v)); }
  bool number_integer(number_integer_t v) override { return put(ojson(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(ojson(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(ojson(v)); }
  bool string(string_t& v) override { return put(ojson(std::move(v))); }
  bool binary(binary_t&) override { return false; }

  bool start_object(std::size_t) override { return open(ojson::object()); }
  bool start_array(std::size_t) override { return open(ojson::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_ = "invalid JSON at byte " + std::to_string(position) + ": " + plain_message(ex.what());
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Open {
    ojson* value;
    std::unordered_map<std::string, size_t> keys;  // objects only: key -> position
  };

  // Stores v where the parser is (root, array element or object member); returns its address.
  ojson* place(ojson v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      top.value->get_ref<ojson::array_t&>().push_back(std::move(v));
      return &top.value->get_ref<ojson::array_t&>().back();
    }
    auto& members = static_cast<std::vector<std::pair<const std::string, ojson>>&>(
        top.value->get_ref<ojson::object_t&>());
    auto [it, added] = top.keys.emplace(key_, members.size());
    if (!added) {
      members[it->second].second = std::move(v);
      return &members[it->second].second;
    }
    members.emplace_back(key_, std::move(v));
    return &members.back().second;
  }

  bool put(ojson v) {
    place(std::move(v));
    return true;
  }
  bool open(ojson v) {
    if (stack_.size() >= kMaxDepth) {
      error_ = "JSON nested deeper than " + std::to_string(kMaxDepth);
      return false;
    }
    ojson* at = place(std::move(v));
    stack_.push_back(Open{at, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  ojson* root_;
  std::vector<Open> stack_;
  std::string key_;
  std::string error_;
};

}  // namespace

Result<nlohmann::ordered_json> parse_json_ordered(std::string_view text) {
  ojson out;
  OrderedBuilder b(&out);
  bool ok = false;
  try {
    ok = ojson::sax_parse(text.begin(), text.end(), &b);
  } catch (const nlohmann::json::exception& e) {
    return make_error("invalid JSON: " + plain_message(e.what()));
  }
  if (!ok) return make_error(b.error().empty() ? "invalid JSON" : b.error());
  return out;
}

}  // namespace rw
