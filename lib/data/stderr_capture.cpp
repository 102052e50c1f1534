// StderrCapture (see stderr_capture.h): dup2 of a tmpfile() over fd 2, and back.
// Trap: stdio's stderr is unbuffered, but flush it (and std::cerr) on both edges anyway, so text
// written just before or after the capture lands on the right side of it.
#include "data/stderr_capture.h"

#include <unistd.h>

#include <iostream>
#include <map>
#include <mutex>

#include <fmt/format.h>

namespace cnn {

namespace {

constexpr size_t kMaxCaptured = size_t{64} << 10;

// fd 2 is one per process, and so is the right to redirect it.
std::mutex& capture_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

StderrCapture::StderrCapture() {
  capture_mutex().lock();
  m_locked = true;
  std::cerr.flush();
  std::fflush(stderr);
  m_tmp = std::tmpfile();
  if (!m_tmp) return;
  m_saved = ::dup(2);
  if (m_saved < 0 || ::dup2(::fileno(m_tmp), 2) < 0) {
    if (m_saved >= 0) ::close(m_saved);
    m_saved = -1;
    std::fclose(m_tmp);
    m_tmp = nullptr;
  }
}

std::string StderrCapture::restore() {
  std::string text;
  if (m_tmp) {
    std::cerr.flush();
    std::fflush(stderr);
    ::dup2(m_saved, 2);
    ::close(m_saved);
    m_saved = -1;
    std::rewind(m_tmp);
    text.resize(kMaxCaptured);
    text.resize(std::fread(text.data(), 1, text.size(), m_tmp));
    std::fclose(m_tmp);
    m_tmp = nullptr;
  }
  if (m_locked) {
    m_locked = false;
    capture_mutex().unlock();
  }
  return text;
}

StderrCapture::~StderrCapture() {
  std::string text = restore();
  if (!text.empty()) {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
}

std::vector<std::string> StderrCapture::finish() {
  const std::string text = restore();
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    begin = end + 1;
  }
  return lines;
}

std::string summarize_lines(const std::vector<std::string>& lines, size_t max_distinct) {
  std::vector<std::string> order;
  std::map<std::string, size_t> counts;
  for (const std::string& l : lines) {
    if (counts[l]++ == 0) order.push_back(l);
  }
  std::string out;
  for (size_t i = 0; i < order.size() && i < max_distinct; ++i) {
    const size_t n = counts[order[i]];
    out += fmt::format("{}{}{}", i ? "; " : "", order[i], n > 1 ? fmt::format(" ({} times)", n) : "");
  }
  if (order.size() > max_distinct) out += fmt::format("; ... and {} more", order.size() - max_distinct);
  return out;
}

}  // namespace cnn
