// Log lines, metrics.jsonl and memory readings (see log.h).
#include "run/log.h"

#include <unistd.h>

#include <cmath>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"

namespace dit {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "a");
  DIT_CHECK(f_, path, ": cannot open the metrics file for writing (", std::strerror(errno), ")");
}

void MetricsWriter::flush_or_fail() {
  errno = 0;
  if (std::ferror(f_) == 0 && std::fflush(f_) == 0) return;
  const int err = errno;
  std::clearerr(f_);
  DIT_FAIL(path_, ": cannot write the metrics (", err ? std::strerror(err) : "write error", ")");
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);  // every bit, so runs and resumes compare exactly
  return b;
}

namespace {
std::string num(double v) { return json_number(v); }
}  // namespace

void MetricsWriter::write_eval(std::int64_t step, const std::string& json) {
  if (!f_) return;
  std::fprintf(f_, "{\"step\": %lld, \"eval\": %s}\n", static_cast<long long>(step), json.c_str());
  flush_or_fail();
}

void MetricsWriter::write(const LogRow& r) {
  if (!f_) return;
  std::string terms;
  for (const auto& [name, value] : r.terms) terms += ", \"" + name + "\": " + num(value);
  std::fprintf(f_,
               "{\"step\": %lld, \"loss\": %s, \"mse\": %s, \"%s\": %s, \"grad_norm\": %s, \"lr\": %s, "
               "\"images_per_s\": %s, \"tflops\": %s, \"mfu\": %s, \"peak_mem_bytes\": %llu, "
               "\"elapsed_s\": %s, \"loss_scale\": %s, \"skipped_steps\": %lld%s}\n",
               static_cast<long long>(r.step), num(r.loss).c_str(), num(r.mse).c_str(), r.second_name,
               num(r.second).c_str(),
               num(r.grad_norm).c_str(), num(r.lr).c_str(), num(r.images_per_s).c_str(),
               num(r.tflops).c_str(), num(r.mfu).c_str(), static_cast<unsigned long long>(r.peak_mem_bytes),
               num(r.elapsed_s).c_str(), num(r.loss_scale).c_str(), static_cast<long long>(r.skipped_steps),
               terms.c_str());
  flush_or_fail();
}

void MetricsWriter::write_line(const std::string& json) {
  if (!f_) return;
  std::fprintf(f_, "%s\n", json.c_str());
  flush_or_fail();
}

namespace {
// Whether the process that started us writes to a terminal. mpirun hands its ranks a
// pseudo-terminal even when its own output goes to a file, so a rank's isatty() alone would draw
// progress bars into batch logs.
bool parent_writes_to_terminal() {
  char link[256] = {0};
  const std::string fd = "/proc/" + std::to_string(getppid()) + "/fd/1";
  const ssize_t n = readlink(fd.c_str(), link, sizeof link - 1);
  if (n <= 0) return true;  // unknown: trust our own isatty()
  const std::string target(link, static_cast<std::size_t>(n));
  return target.rfind("/dev/pts/", 0) == 0 || target.rfind("/dev/tty", 0) == 0;
}

// DIT_PROGRESS=bar|lines overrides the detection.
bool use_progress_bar() {
  if (const char* v = std::getenv("DIT_PROGRESS")) return std::string(v) == "bar";
  return isatty(STDOUT_FILENO) == 1 && parent_writes_to_terminal();
}
}  // namespace

ConsoleLog::ConsoleLog() : tty_(use_progress_bar()) {}

void ConsoleLog::step(const LogRow& r) {
  char text[768];
  std::snprintf(text, sizeof text,
                "step %lld/%lld  loss %.4f (mse %.4f %s %.4f)  grad %.3f  lr %.2e  %.1f img/s  "
                "%.3f TFLOP/s  MFU %.1f%%  mem %s  ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(r.total), r.loss, r.mse, r.second_name, r.second,
                r.grad_norm, r.lr, r.images_per_s, r.tflops, 100 * r.mfu,
                format_bytes(static_cast<double>(r.peak_mem_bytes)).c_str(), format_duration(r.eta_s).c_str());
  for (std::size_t i = 0; i < r.terms.size(); ++i) {
    const std::size_t used = std::strlen(text);
    std::snprintf(text + used, sizeof text - used, "%s%s %.4f", i == 0 ? "  " : " ", r.terms[i].first.c_str(),
                  r.terms[i].second);
  }
  if (r.loss_scale != 1 || r.skipped_steps > 0) {
    const std::size_t used = std::strlen(text);
    std::snprintf(text + used, sizeof text - used, "  scale %g (%lld skipped)", r.loss_scale,
                  static_cast<long long>(r.skipped_steps));
  }
  if (!r.note.empty()) {
    const std::size_t used = std::strlen(text);
    std::snprintf(text + used, sizeof text - used, "  %s", r.note.c_str());
  }
  if (!tty_) {
    std::printf("%s\n", text);
    std::fflush(stdout);
    return;
  }
  const int width = 24, done = r.total > 0 ? static_cast<int>(width * r.step / r.total) : 0;
  std::string bar(static_cast<std::size_t>(done), '#');
  bar.resize(width, '.');
  std::printf("\r\033[K[%s] %s", bar.c_str(), text);
  std::fflush(stdout);
  bar_open_ = true;
}

Progress::Progress(std::string what, std::int64_t total, bool enabled)
    : what_(std::move(what)), total_(std::max<std::int64_t>(total, 1)), enabled_(enabled),
      tty_(enabled && use_progress_bar()),
      start_s_(now_s()) {}

void Progress::update(std::int64_t done) {
  if (!enabled_) return;
  const double now = now_s();
  const double elapsed = now - start_s_;
  const double eta = done > 0 ? elapsed * double(total_ - done) / double(done) : -1;
  char text[256];
  std::snprintf(text, sizeof text, "%s %lld/%lld  %s elapsed  ETA %s", what_.c_str(), static_cast<long long>(done),
                static_cast<long long>(total_), format_duration(elapsed).c_str(),
                done > 0 ? format_duration(eta).c_str() : "?");
  if (tty_) {
    const int width = 24, filled = static_cast<int>(width * done / total_);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(width, '.');
    std::printf("\r\033[K[%s] %s%s", bar.c_str(), text, done >= total_ ? "\n" : "");
  } else if (done >= next_line_ || done >= total_) {
    std::printf("%s\n", text);
    next_line_ = done + std::max<std::int64_t>(1, total_ / 10);
  }
  std::fflush(stdout);
}

void ConsoleLog::line(const std::string& text) {
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace dit
