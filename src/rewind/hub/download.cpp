#include "rewind/hub/download.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "rewind/hub/sha256.h"
#include "rewind/hub/store.h"

namespace rw::hub {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxTextBody = size_t{64} << 20;  // a listing page, config.json, error bodies

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::string base_name(const std::string& path) {
  const size_t k = path.rfind('/');
  return k == std::string::npos ? path : path.substr(k + 1);
}

// The final response of one GET (after redirects).
struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string error_body;                      // the body of a >= 300 response (capped)
  CURLcode code = CURLE_OK;
  std::string curl_error;
  bool stopped = false;  // the sink asked to stop (not an error by itself)
};

// Receives the body of a 2xx response; returns false to stop the transfer.
using Sink = std::function<bool(const char* data, size_t n, const Response& r)>;

class Client {
 public:
  explicit Client(const PullOptions& opt) : opt_(opt) {
    static const bool init = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
    (void)init;
    curl_ = curl_easy_init();
  }
  ~Client() {
    if (curl_) curl_easy_cleanup(curl_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // GET url; `range` "" or "FROM-" / "FROM-TO".
  Response get(const std::string& url, const std::string& range, const Sink& sink) {
    Response r;
    if (!curl_) {
      r.code = CURLE_FAILED_INIT;
      r.curl_error = "libcurl could not start";
      return r;
    }
    State st{&r, &sink};
    curl_easy_reset(curl_);
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl_, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl_, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl_, CURLOPT_USERAGENT, "rewind-pull/0.1");
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT, 30L);
    // A transfer that moves under 1 byte/s for 60 s is dropped (and resumed by the caller).
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_TIME, 60L);
    if (!range.empty()) curl_easy_setopt(curl_, CURLOPT_RANGE, range.c_str());
    curl_slist* headers = nullptr;
    std::string auth;
    if (!opt_.token.empty()) {
      // libcurl sends a custom Authorization header only to the host of `url`, not to the CDN a
      // redirect leads to (CURLOPT_UNRESTRICTED_AUTH stays off).
      auth = "Authorization: Bearer " + opt_.token;
      headers = curl_slist_append(headers, auth.c_str());
      curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    }
    curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &Client::on_header);
    curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &st);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &Client::on_body);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &st);
    r.code = curl_easy_perform(curl_);
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &r.status);
    if (r.code != CURLE_OK) r.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(r.code);
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    std::fill(auth.begin(), auth.end(), '\0');
    return r;
  }

 private:
  struct State {
    Response* r;
    const Sink* sink;
  };

  static size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* st = static_cast<State*>(user);
    const std::string line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response (redirects send several)
      st->r->headers.clear();
      const size_t sp = line.find(' ');
      st->r->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
      st->r->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    }
    return size * n;
  }

  static size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* st = static_cast<State*>(user);
    const size_t bytes = size * n;
    if (st->r->status < 200 || st->r->status >= 300) {
      if (st->r->error_body.size() < 4096)
        st->r->error_body.append(data, std::min(bytes, 4096 - st->r->error_body.size()));
      return bytes;
    }
    if (!(*st->sink)(data, bytes, *st->r)) {
      st->r->stopped = true;
      return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
    }
    return bytes;
  }

  const PullOptions& opt_;
  CURL* curl_ = nullptr;
};

bool transient(const Response& r) {
  if (r.stopped) return false;
  switch (r.code) {
    case CURLE_OK:
      return r.status >= 500 || r.status == 429 || r.status == 408;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

// One line on what went wrong with a request and what to do about it. Never names the token.
std::string describe(const Response& r, const std::string& what, const std::string& repo,
                     const PullOptions& opt) {
  const std::string endpoint = normalise_endpoint(opt.endpoint);
  if (r.code != CURLE_OK && !(r.stopped))
    return what + ": " + r.curl_error + " (" + endpoint + ")" +
           (r.code == CURLE_COULDNT_RESOLVE_HOST || r.code == CURLE_COULDNT_CONNECT
                ? "; check the network, or HF_ENDPOINT"
                : "");
  std::string hub_msg;
  if (auto it = r.headers.find("x-error-message"); it != r.headers.end()) hub_msg = it->second;
  const std::string said = hub_msg.empty() ? "" : " (the Hub says: " + hub_msg + ")";
  const std::string code = "HTTP " + std::to_string(r.status);
  switch (r.status) {
    case 401:
      if (opt.token.empty())
        return what + ": " + code + " Unauthorized" + said + ": " + repo +
               " is private or gated, or does not exist; check the name, and set HF_TOKEN to a "
               "token that can read it (" +
               endpoint + "/settings/tokens)";
      return what + ": " + code + " Unauthorized" + said +
             ": the Hub refused HF_TOKEN (expired, or without access to " + repo +
             "), or the repository does not exist";
    case 403:
      return what + ": " + code + " Forbidden" + said + ": " + repo +
             " is gated; accept its licence at " + endpoint + "/" + repo +
             " with the account of HF_TOKEN" + (opt.token.empty() ? " (HF_TOKEN is not set)" : "");
    case 404:
      return what + ": " + code + " Not Found" + said + ": check the repository name " + repo +
             " and the revision '" + opt.revision + "' (--revision)";
    default: {
      std::string body = r.error_body.substr(0, 200);
      std::replace(body.begin(), body.end(), '\n', ' ');
      return what + ": " + code + said + (body.empty() || !hub_msg.empty() ? "" : ": " + body);
    }
  }
}

class Puller {
 public:
  Puller(const RepoRef& ref, const PullOptions& opt) : ref_(ref), opt_(opt), client_(opt) {}

  Result<PullResult> run() {
    REWIND_TRY(std::vector<RepoFile> listing, list());
    REWIND_TRY(Selection sel, select_files(listing, ref_.repo, ref_.file));
    result_.selection = sel;
    for (const RepoFile& f : sel.files) result_.bytes_total += f.size;
    if (!sel.note.empty()) say(ref_.repo + ": " + sel.note);
    dir_ = store_model_dir(opt_.store_root, ref_.repo);

    std::string config_text;
    if (sel.kind == Selection::Kind::Hf) {
      REWIND_TRY(config_text, fetch_text(sel.files[0]));
      REWIND_TRY_STATUS(check_hf_config(config_text, ref_.repo + "/config.json"));
    } else {
      REWIND_TRY_STATUS(probe_gguf(sel.files[0]));
    }
    say(ref_.repo + ": " + std::to_string(sel.files.size()) + " file" +
        (sel.files.size() == 1 ? "" : "s") + ", " + format_bytes(result_.bytes_total) + " -> " +
        dir_);

    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) return make_error(dir_ + ": cannot be created: " + ec.message());
    REWIND_TRY_STATUS(check_space(sel));
    for (size_t i = 0; i < sel.files.size(); ++i) {
      const RepoFile& f = sel.files[i];
      const std::string dest = dest_of(sel, f);
      if (sel.kind == Selection::Kind::Hf && i == 0) {
        REWIND_TRY_STATUS(write_small(dest, config_text));
        report(i, sel.files.size(), f, f.size, 0, 0, true);
        continue;
      }
      if (fs::file_size(dest, ec) == f.size && !ec && is_recorded(dir_, f)) {
        report(i, sel.files.size(), f, f.size, f.size, 0, true);
        continue;
      }
      REWIND_TRY_STATUS(download(i, sel.files.size(), f, dest));
    }
    REWIND_TRY_STATUS(record_pull(dir_, ref_.repo, opt_.revision, sel));
    if (sel.kind == Selection::Kind::Hf) {
      result_.path = dir_;
      result_.name = ref_.repo;
    } else {
      result_.path = dest_of(sel, sel.files[0]);
      result_.name = ref_.repo + ":" + quant_label(sel.files[0].path);
    }
    return result_;
  }

 private:
  void say(const std::string& s) {
    if (opt_.note) opt_.note(s);
  }

  void report(size_t i, size_t n, const RepoFile& f, uint64_t done, uint64_t resumed,
              double seconds, bool finished) {
    if (!opt_.progress) return;
    FileProgress p;
    p.index = i;
    p.count = n;
    p.path = f.path;
    p.done = done;
    p.total = f.size;
    p.resumed_from = resumed;
    p.seconds = seconds;
    p.finished = finished;
    opt_.progress(p);
  }

  std::string dest_of(const Selection& sel, const RepoFile& f) const {
    return (fs::path(dir_) / (sel.kind == Selection::Kind::Gguf ? base_name(f.path) : f.path))
        .string();
  }

  Result<std::vector<RepoFile>> list() {
    std::vector<RepoFile> all;
    std::string url = tree_url(opt_.endpoint, ref_.repo, opt_.revision);
    const std::string what = "listing " + ref_.repo + " at '" + opt_.revision + "'";
    for (int page = 0; !url.empty(); ++page) {
      if (page == 10000) return make_error(what + ": more than 10000 pages");
      std::string body;
      Response r = client_.get(url, "", [&](const char* d, size_t n, const Response&) {
        if (body.size() + n > kMaxTextBody) return false;
        body.append(d, n);
        return true;
      });
      if (r.stopped) return make_error(what + ": a listing page is larger than 64 MiB");
      if (r.code != CURLE_OK || r.status != 200)
        return make_error(describe(r, what, ref_.repo, opt_));
      REWIND_TRY(auto files, parse_tree_listing(body, what));
      all.insert(all.end(), files.begin(), files.end());
      url = next_page_url(r.headers.count("link") ? r.headers.at("link") : "");
      if (!url.empty() && url[0] == '/') url = normalise_endpoint(opt_.endpoint) + url;
    }
    return all;
  }

  std::string url_of(const RepoFile& f) const {
    return resolve_url(opt_.endpoint, ref_.repo, opt_.revision, f.path);
  }

  // A small file (config.json) in memory, checked against the listing.
  Result<std::string> fetch_text(const RepoFile& f) {
    const std::string what = ref_.repo + "/" + f.path;
    for (int attempt = 1;; ++attempt) {
      std::string body;
      Response r = client_.get(url_of(f), "", [&](const char* d, size_t n, const Response&) {
        if (body.size() + n > kMaxTextBody) return false;
        body.append(d, n);
        return true;
      });
      if (r.code == CURLE_OK && r.status == 200) {
        result_.bytes_fetched += body.size();
        if (body.size() != f.size)
          return make_error(what + ": got " + std::to_string(body.size()) +
                            " bytes, the listing says " + std::to_string(f.size));
        if (!f.sha256.empty() && sha256_hex(body) != f.sha256)
          return make_error(what + ": the sha256 differs from the Hub's listing");
        return body;
      }
      if (r.stopped) return make_error(what + ": larger than 64 MiB");
      if (!transient(r) || attempt >= opt_.max_attempts)
        return make_error(describe(r, what, ref_.repo, opt_));
      pause(attempt);
    }
  }

  Status write_small(const std::string& dest, const std::string& text) {
    const std::string part = dest + ".part";
    {
      std::ofstream out(part, std::ios::binary | std::ios::trunc);
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      if (!out) return make_error(part + ": cannot be written");
    }
    std::error_code ec;
    fs::rename(part, dest, ec);
    if (ec) return make_error(dest + ": cannot be written: " + ec.message());
    return Ok{};
  }

  // Reads general.architecture from the first bytes (on disk if a partial download has them).
  Status probe_gguf(const RepoFile& f) {
    const std::string what = ref_.repo + "/" + f.path;
    const uint64_t want = std::min<uint64_t>(opt_.gguf_probe_bytes, f.size);
    std::string head;
    const fs::path local =
        fs::path(store_model_dir(opt_.store_root, ref_.repo)) / base_name(f.path);
    for (const fs::path& p : {local, fs::path(local.string() + ".part")}) {
      std::error_code ec;
      if (head.empty() && fs::file_size(p, ec) >= want && !ec) {
        std::ifstream in(p, std::ios::binary);
        head.resize(want);
        in.read(head.data(), static_cast<std::streamsize>(want));
        if (!in) head.clear();
      }
    }
    for (int attempt = 1; head.size() < want; ++attempt) {
      head.clear();
      Response r = client_.get(url_of(f), "0-" + std::to_string(want - 1),
                               [&](const char* d, size_t n, const Response&) {
                                 head.append(d, std::min<uint64_t>(n, want - head.size()));
                                 return head.size() < want;
                               });
      result_.bytes_fetched += head.size();
      if ((r.status == 200 || r.status == 206) && head.size() >= want) break;
      if (r.code == CURLE_OK && (r.status == 200 || r.status == 206))
        return make_error(what + ": the first " + std::to_string(want) + " bytes came back short");
      if (!transient(r) || attempt >= opt_.max_attempts)
        return make_error(
            describe(r, what + " (its first " + format_bytes(want) + ")", ref_.repo, opt_));
      pause(attempt);
    }
    auto arch = gguf_architecture(head.data(), head.size());
    if (!arch.ok()) return make_error(what + ": " + arch.error_message());
    REWIND_TRY_STATUS(check_gguf_architecture(arch.value(), what));
    say(what + ": GGUF architecture " + arch.value());
    return Ok{};
  }

  Status check_space(const Selection& sel) {
    uint64_t need = 0;
    std::error_code ec;
    for (const RepoFile& f : sel.files) {
      const std::string dest = dest_of(sel, f);
      if (fs::file_size(dest, ec) == f.size && !ec) continue;
      const auto part = fs::file_size(dest + ".part", ec);
      need += f.size - (ec || part > f.size ? 0 : part);
    }
    const auto sp = fs::space(dir_, ec);
    if (!ec && sp.available < need)
      return make_error("the pull needs " + format_bytes(need) + " more, and " + dir_ + " has " +
                        format_bytes(sp.available) +
                        " free; free some space or set REWIND_HOME to a larger disk");
    return Ok{};
  }

  void pause(int attempt) {
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.retry_pause_s * attempt));
  }

  // Downloads f into dest via dest.part: resumes what is there, retries transient failures,
  // checks size and sha256, renames into place. A failed check removes the partial file.
  Status download(size_t index, size_t count, const RepoFile& f, const std::string& dest) {
    const std::string part = dest + ".part";
    const std::string what = ref_.repo + "/" + f.path;
    Sha256 hash;
    uint64_t hashed = 0;  // bytes of `part` that `hash` has seen
    bool hash_valid = false;
    std::string last_error;
    std::error_code ec;
    if (f.size == 0) std::ofstream(part, std::ios::binary | std::ios::trunc);  // nothing to fetch
    for (int attempt = 1;; ++attempt) {
      uint64_t offset = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
      if (ec) return make_error(part + ": " + ec.message());
      if (offset > f.size) {
        fs::remove(part, ec);
        offset = 0;
      }
      if (!hash_valid || hashed != offset) {
        REWIND_TRY_STATUS(hash_file(part, offset, &hash));
        hashed = offset;
        hash_valid = true;
      }
      if (offset == f.size) break;
      if (attempt > opt_.max_attempts)
        return make_error(what + ": gave up after " + std::to_string(opt_.max_attempts) +
                          " attempts (" + last_error + "); " + std::to_string(offset) + " of " +
                          std::to_string(f.size) +
                          " bytes are kept in the .part file: run the pull again to resume");
      FILE* out = std::fopen(part.c_str(), "ab");
      if (!out) return make_error(part + ": cannot be written");
      const uint64_t resumed = offset;
      const double t0 = now_s();
      double last_report = 0;
      std::string sink_error;
      bool first = true;
      Response r =
          client_.get(url_of(f), offset > 0 ? std::to_string(offset) + "-" : "",
                      [&](const char* d, size_t n, const Response& resp) {
                        if (first) {
                          first = false;
                          if (offset > 0 && resp.status == 200) {  // the server ignored the range
                            if (std::fflush(out) != 0 || ::ftruncate(fileno(out), 0) != 0) {
                              sink_error = part + ": cannot be truncated";
                              return false;
                            }
                            hash.reset();
                            hashed = 0;
                            offset = 0;
                          } else if (offset > 0) {
                            auto cr = resp.headers.find("content-range");
                            const std::string want = "bytes " + std::to_string(offset) + "-";
                            if (cr == resp.headers.end() || cr->second.rfind(want, 0) != 0) {
                              sink_error = "the server answered the range request from byte " +
                                           std::to_string(offset) + " with another range";
                              return false;
                            }
                          }
                        }
                        if (hashed + n > f.size) {
                          sink_error = "the server sent more than the listing's " +
                                       std::to_string(f.size) + " bytes";
                          return false;
                        }
                        if (std::fwrite(d, 1, n, out) != n) {
                          sink_error = part + ": write failed (disk full?)";
                          return false;
                        }
                        hash.update(d, n);
                        hashed += n;
                        result_.bytes_fetched += n;
                        const double t = now_s();
                        if (t - last_report >= 0.1) {
                          last_report = t;
                          report(index, count, f, hashed, resumed, t - t0, false);
                        }
                        return true;
                      });
      const bool closed = std::fclose(out) == 0;
      if (!sink_error.empty()) {
        hash_valid = false;
        fs::remove(part, ec);
        return make_error(what + ": " + sink_error + "; the partial file was removed");
      }
      if (!closed) return make_error(part + ": write failed (disk full?)");
      if (r.status == 416) {  // the range starts past the file: start over
        fs::remove(part, ec);
        hash_valid = false;
        last_error = "HTTP 416 for the range from byte " + std::to_string(offset);
        continue;
      }
      if (r.code == CURLE_OK && (r.status == 200 || r.status == 206)) {
        last_error = "the transfer ended early";
        continue;  // the top of the loop sees whether the file is complete
      }
      if (!transient(r)) return make_error(describe(r, what, ref_.repo, opt_));
      last_error = describe(r, "the last try", ref_.repo, opt_);
      say(what + ": " + r.curl_error +
          (r.code == CURLE_OK ? "HTTP " + std::to_string(r.status) : "") + " at " +
          format_bytes(hashed) + "; resuming");
      pause(attempt);
    }
    const std::string got = hash.hex_digest();
    if (!f.sha256.empty() && got != f.sha256) {
      fs::remove(part, ec);
      return make_error(what + ": the sha256 of the download is " + got + " but the Hub lists " +
                        f.sha256 +
                        "; the download was removed. Run the pull again; if it fails the same way, "
                        "the file on the server or a proxy in between is at fault");
    }
    fs::rename(part, dest, ec);
    if (ec) return make_error(dest + ": cannot be renamed into place: " + ec.message());
    report(index, count, f, f.size, f.size, 0, true);
    return Ok{};
  }

  // Hashes the first `n` bytes of `path` into a fresh `hash` (a resumed download's start).
  static Status hash_file(const std::string& path, uint64_t n, Sha256* hash) {
    hash->reset();
    if (n == 0) return Ok{};
    std::ifstream in(path, std::ios::binary);
    std::vector<char> buf(size_t{1} << 20);
    uint64_t left = n;
    while (left > 0) {
      const auto k = static_cast<std::streamsize>(std::min<uint64_t>(left, buf.size()));
      in.read(buf.data(), k);
      if (in.gcount() != k) return make_error(path + ": cannot be read back to resume");
      hash->update(buf.data(), static_cast<size_t>(k));
      left -= static_cast<uint64_t>(k);
    }
    return Ok{};
  }

  RepoRef ref_;
  const PullOptions& opt_;
  Client client_;
  std::string dir_;
  PullResult result_;
};

}  // namespace

Result<PullResult> pull(const RepoRef& ref, const PullOptions& opt) {
  if (opt.store_root.empty()) return make_error("no model store (set REWIND_HOME)");
  Puller p(ref, opt);
  return p.run();
}

}  // namespace rw::hub
