// TensorBoard event files, written by the trainer (rank 0): what `tensorboard --logdir RUN/tb`
// shows while a run trains. One file per process, `events.out.tfevents.<seconds>.<host>.<pid>.dit_mp`
// in the folder given: records in TFRecord framing (little-endian length, its masked CRC-32C, the
// bytes, their masked CRC-32C) each holding one `Event` protobuf, encoded here by hand: the
// schema's few fields need no protobuf library.
//
//   Event        1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary, 7 session_log
//   Summary      1 value (repeated)
//   Value        1 tag, 2 simple_value (float), 4 image, 8 tensor, 9 metadata
//   Image        1 height, 2 width, 3 colorspace (1 grey, 3 RGB, 4 RGBA), 4 encoded_image_string (PNG)
//   SessionLog   1 status (START = 1)
//   text         a Value whose metadata names plugin "text" and whose tensor is one DT_STRING (7)
//
// A resumed run writes a new file into the same folder, beginning with a SessionLog START at the
// first step it logs: TensorBoard then drops what an earlier process logged at that step and after
// (its purge of orphaned data), so a step the crashed process logged past its last checkpoint is not
// shown twice. Every record is flushed as it is written, so a live TensorBoard sees each step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dit {

// CRC-32C (Castagnoli) of `n` bytes, and TFRecord's mask of it.
std::uint32_t crc32c(const void* data, std::size_t n);
std::uint32_t masked_crc32c(const void* data, std::size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` if missing and a new events file in it. `first_step` > 1 (a resume) writes the
  // SessionLog START there.
  TensorBoardWriter(const std::string& dir, std::int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }
  void scalar(const std::string& tag, std::int64_t step, double value);
  // A picture already encoded as PNG, of the given size and channels (1, 3 or 4).
  void image(const std::string& tag, std::int64_t step, const std::string& png, int width, int height, int channels);
  void text(const std::string& tag, std::int64_t step, const std::string& text);

 private:
  void write_event(std::int64_t step, const std::string& body);  // body: the Event's fields past wall_time, step
  std::string path_;
  std::FILE* f_ = nullptr;
};

struct LogRow;
// A logged step's numbers as scalars train/<name>, the names of metrics.jsonl (loss, mse, vb or cos,
// the distillation terms, grad_norm, lr, images_per_s, tflops, mfu, peak_mem_bytes, elapsed_s,
// loss_scale, skipped_steps).
void tensorboard_scalars(TensorBoardWriter& tb, const LogRow& r);
// The PNG file at `png_path` as image `tag` (its size and channels read from its header).
void tensorboard_grid(TensorBoardWriter& tb, const std::string& tag, std::int64_t step, const std::string& png_path);

}  // namespace dit
