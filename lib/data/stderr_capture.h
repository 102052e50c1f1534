// Captures what is written to file descriptor 2 while a StderrCapture lives, so the warnings
// libpng and libjpeg print there themselves when OpenCV decodes ("libpng warning: iCCP: ...",
// "Corrupt JPEG data: ...") reach our log instead of raw stderr. OpenCV gives no hook for them:
// libpng's and libjpeg's message handlers are set per decoder object inside OpenCV.
// Trap: fd 2 is process-wide, so one capture runs at a time (a mutex) and anything another thread
// writes to stderr meanwhile is captured too (and comes back from finish(), not lost).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace cnn {

class StderrCapture {
public:
  // Redirects fd 2 to an anonymous temporary file; when that fails, captures nothing.
  StderrCapture();
  // Restores fd 2 if finish() wasn't called, writing what was captured to it, so an exception
  // between the two loses nothing.
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores fd 2 and returns the captured lines (at most the first 64 KiB of them).
  std::vector<std::string> finish();

private:
  std::string restore();
  int m_saved = -1;
  std::FILE* m_tmp = nullptr;
  bool m_locked = false;
};

// "line (3 times); other line": identical lines counted, in order of first appearance, at most
// `max_distinct` of them (then "... and N more").
std::string summarize_lines(const std::vector<std::string>& lines, size_t max_distinct = 5);

}  // namespace cnn
