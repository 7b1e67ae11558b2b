#pragma once
// A headless Chromium driven through the DevTools protocol over --remote-debugging-pipe (Chromium
// reads commands on fd 3 and writes replies and events on fd 4, each message JSON ended by a NUL
// byte), for tests/test_report_browser.cpp. No npm package and no network: Debian's `chromium`
// and this header. One page (a target attached with flatten: true); every event is kept, so a test
// can look for console errors, exceptions and network requests afterwards.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gf::test {

// The browser to run: $GRADFLOW_CHROMIUM, else Debian's /usr/bin/chromium; "" when neither exists.
inline std::string chromium_binary() {
  if (const char* env = std::getenv("GRADFLOW_CHROMIUM"); env && *env) return env;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// Base64 to bytes (what Page.captureScreenshot returns).
inline std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0, acc = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding, line breaks
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

class Browser {
 public:
  using json = nlohmann::json;

  // Starts the browser with a new empty profile in profile_dir and opens one blank page. Throws
  // std::runtime_error when it cannot start or does not answer within `seconds`.
  Browser(const std::string& binary, const std::filesystem::path& profile_dir, int width = 1280, int height = 900, double seconds = 60)
      : seconds_(seconds) {
    std::filesystem::create_directories(profile_dir);
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    const std::string log = (profile_dir / "chromium.log").string();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // fds 3 and 4 are the protocol's; everything else of the parent's is closed by exec (or moved).
      const int in = ::dup(to_child[0]), out = ::dup(from_child[1]);
      ::dup2(in, 3), ::dup2(out, 4);
      const int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
      if (logfd >= 0) ::dup2(logfd, 1), ::dup2(logfd, 2);
      for (int fd = 5; fd < 1024; ++fd) ::close(fd);
      ::setpgid(0, 0);  // its own process group: the renderer and GPU processes end with it
      const std::string profile = "--user-data-dir=" + profile_dir.string(), size = fmt_size(width, height);
      // As root Chromium needs --no-sandbox; the rest keep it from reaching for the network,
      // updates or a GPU (CI has none of them).
      std::vector<std::string> args{binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                    "--disable-dev-shm-usage", "--remote-debugging-pipe", "--hide-scrollbars", profile, size, "about:blank"};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(to_child[0]), ::close(from_child[1]);
    write_fd_ = to_child[1], read_fd_ = from_child[0];
    ::signal(SIGPIPE, SIG_IGN);  // a browser that died shows as a failed write, not a killed test
    const json target = call("Target.createTarget", {{"url", "about:blank"}});
    session_ = call("Target.attachToTarget", {{"targetId", target.at("targetId")}, {"flatten", true}}).at("sessionId");
    for (const char* domain : {"Runtime.enable", "Log.enable", "Page.enable", "Network.enable"}) page(domain);
    page("Emulation.setDeviceMetricsOverride", {{"width", width}, {"height", height}, {"deviceScaleFactor", 1}, {"mobile", false}});
  }

  ~Browser() {
    if (pid_ <= 0) return;
    try {
      send("Browser.close", json::object(), "");
    } catch (...) {
    }
    for (int i = 0; i < 50; ++i) {  // up to 5 s to close, then it is killed
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(write_fd_), ::close(read_fd_);
  }
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;

  // A browser-level command; its "result", or std::runtime_error with the protocol's error.
  json call(const std::string& method, const json& params = json::object()) { return wait_reply(send(method, params, "")); }
  // A command to the page.
  json page(const std::string& method, const json& params = json::object()) { return wait_reply(send(method, params, session_)); }

  // Opens url and waits for its load event.
  void navigate(const std::string& url) {
    const size_t from = events_.size();
    page("Page.navigate", {{"url", url}});
    wait_event("Page.loadEventFired", from);
  }

  // The value of a JavaScript expression (awaited when it is a promise); throws on an exception.
  json eval(const std::string& expression) {
    const json r = page("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails")) throw std::runtime_error("JavaScript exception: " + r["exceptionDetails"].dump());
    return r.at("result").contains("value") ? r["result"]["value"] : json();
  }

  // Waits until the expression is true; false after `seconds`.
  bool wait_for(const std::string& expression, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (eval("Boolean(" + expression + ")") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // A PNG of the page region (x, y, w, h in CSS pixels), or of the whole page when w is 0.
  void screenshot(const std::filesystem::path& file, double x = 0, double y = 0, double w = 0, double h = 0) {
    json params = {{"format", "png"}, {"captureBeyondViewport", true}};
    if (w > 0) params["clip"] = {{"x", x}, {"y", y}, {"width", w}, {"height", h}, {"scale", 1}};
    const json r = page("Page.captureScreenshot", params);
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << base64_decode(r.at("data").get<std::string>());
  }

  // Every event received so far (method and params).
  const std::vector<json>& events() const { return events_; }

  // The page's console errors, uncaught exceptions and error log entries, as text.
  std::vector<std::string> errors() const {
    std::vector<std::string> out;
    for (const json& e : events_) {
      const std::string m = e.value("method", "");
      const json& p = e.contains("params") ? e["params"] : json::object();
      if (m == "Runtime.consoleAPICalled" && (p.value("type", "") == "error" || p.value("type", "") == "assert")) out.push_back("console: " + p.dump());
      if (m == "Runtime.exceptionThrown") {
        const json& d = p.value("exceptionDetails", json::object());
        out.push_back("exception: " + (d.contains("exception") ? d["exception"].value("description", d.dump()) : d.dump()));
      }
      if (m == "Log.entryAdded" && p.contains("entry") && p["entry"].value("level", "") == "error") out.push_back("log: " + p["entry"].dump());
    }
    return out;
  }

  // URLs the page asked for beyond its own file (anything but file: and data:).
  std::vector<std::string> outside_requests() const {
    std::vector<std::string> out;
    for (const json& e : events_)
      if (e.value("method", "") == "Network.requestWillBeSent") {
        const std::string url = e["params"]["request"].value("url", "");
        if (url.rfind("file:", 0) != 0 && url.rfind("data:", 0) != 0 && url != "about:blank") out.push_back(url);
      }
    return out;
  }

 private:
  static std::string fmt_size(int w, int h) { return "--window-size=" + std::to_string(w) + "," + std::to_string(h); }

  int send(const std::string& method, const json& params, const std::string& session) {
    json msg = {{"id", ++next_id_}, {"method", method}, {"params", params}};
    if (!session.empty()) msg["sessionId"] = session;
    std::string text = msg.dump();
    text.push_back('\0');
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(write_fd_, text.data() + done, text.size() - done);
      if (n <= 0) throw std::runtime_error("the browser closed its pipe (sending " + method + ")");
      done += static_cast<size_t>(n);
    }
    return next_id_;
  }

  // Reads messages until the reply with this id; events on the way are kept.
  json wait_reply(int id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds_ * 1000));
    for (;;) {
      json m = next_message(deadline);
      if (m.contains("id") && m["id"] == id) {
        if (m.contains("error")) throw std::runtime_error("DevTools error: " + m["error"].dump());
        return m.value("result", json::object());
      }
      if (m.contains("method")) events_.push_back(std::move(m));
    }
  }

  void wait_event(const std::string& method, size_t from) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds_ * 1000));
    for (;;) {
      for (size_t i = from; i < events_.size(); ++i)
        if (events_[i].value("method", "") == method) return;
      from = events_.size();
      json m = next_message(deadline);
      if (m.contains("method")) events_.push_back(std::move(m));
    }
  }

  json next_message(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (const size_t end = buffer_.find('\0'); end != std::string::npos) {
        json m = json::parse(buffer_.substr(0, end));
        buffer_.erase(0, end + 1);
        return m;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) throw std::runtime_error("the browser did not answer in time");
      pollfd p{read_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::read(read_fd_, chunk, sizeof chunk);
      if (n <= 0) throw std::runtime_error("the browser closed its pipe");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int write_fd_ = -1, read_fd_ = -1, next_id_ = 0;
  double seconds_;
  std::string session_, buffer_;
  std::vector<json> events_;
};

}  // namespace gf::test
