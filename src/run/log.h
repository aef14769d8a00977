// What a training run reports: rank 0's log lines (a live progress bar on a terminal, plain lines
// in a batch job), the metrics file (one JSON object per logged step), and process memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/resources.h"

namespace dit {

struct LogRow {
  std::int64_t step = 0, total = 0;  // step counts from 1 here
  double loss = 0, mse = 0, second = 0, grad_norm = 0, lr = 0;
  // The recipe loss's second term, named in the log and the metrics file as what it is: "vb"
  // (DDPM's learned-variance bound) or "cos" (the flow objective's cosine term).
  const char* second_name = "vb";
  // Further named terms, in order, after the recipe's (distillation: target, kd, feature; loss is
  // their weighted sum); empty for a plain run.
  std::vector<std::pair<std::string, double>> terms;
  double images_per_s = 0, tflops = 0, mfu = 0;
  std::uint64_t peak_mem_bytes = 0;
  double elapsed_s = 0, eta_s = 0;
  double loss_scale = 1;           // fp16 dynamic loss scale of the step (1 without fp16)
  std::int64_t skipped_steps = 0;  // fp16 updates skipped for overflow, since the run began
  std::string note;                // said at the end of the console line (low memory), or ""
};

// A number as the metrics files write it: every bit (%.17g), and null for NaN or Inf (JSON has none).
std::string json_number(double v);

class MetricsWriter {
 public:
  // Appends to `path` (rank 0 only opens it; other ranks pass "").
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  // One JSON line, flushed; throws naming the file and the cause (a full disk) when it cannot be
  // written.
  void write(const LogRow& r);
  // {"step": N, "eval": <json>}: a sample-quality measurement (train.eval_every).
  void write_eval(std::int64_t step, const std::string& json);
  // One line as given (a JSON object), flushed.
  void write_line(const std::string& json);

 private:
  void flush_or_fail();
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Console output of rank 0: progress bar when stdout is a terminal, else plain lines.
class ConsoleLog {
 public:
  ConsoleLog();
  void step(const LogRow& r);
  void line(const std::string& text);  // ends any progress bar first

 private:
  bool tty_;
  bool bar_open_ = false;
};

// Progress of a long loop on rank 0 (e.g. sampling): a bar with the ETA on a terminal, else a
// line about every 10% of the way. Other ranks pass enabled = false and print nothing.
class Progress {
 public:
  Progress(std::string what, std::int64_t total, bool enabled);
  void update(std::int64_t done);  // done of total; the last call (done == total) ends the bar
  void advance() { update(++done_); }

 private:
  std::string what_;
  std::int64_t total_;
  bool enabled_, tty_;
  double start_s_;
  std::int64_t next_line_ = 0, done_ = 0;
};

}  // namespace dit
