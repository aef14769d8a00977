// The files of a command by role: each subcommand declares its input and output files (implicit
// ones included: the raw samples beside a grid, a run folder's files), and one check, before any
// file is read or created, compares them by real identity (device and inode; for an output not yet
// there, its parent's and its name): no output may be an input, and an existing output must be a
// file of the kind dit_mp writes there. The same check is the one opener of every file option: a
// regular file (or folder) of the expected kind, never a FIFO or device, told apart by the HDF5
// groups and attributes dit_mp writes, with a message naming what the file is and what was expected.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dit {

// What a file is; detect_kind() tells them apart without reading a FIFO or device.
enum class FileKind {
  Missing, Special, Folder, Unknown,  // no file; FIFO, device or socket; a folder; unrecognised bytes
  Weights, Golden, Dataset, RawSamples, Classifier, CheckpointIndex, CheckpointShard, Inception, OtherH5,
  DamagedSeal,                          // a sealed HDF5 file whose seal does not match its bytes
  Checkpoint, CheckpointRoot, RunFolder,  // folders: a step folder, a checkpoint root, a run folder
  Config, RunConfig, Json, Png, Zip, Safetensors, Text,
  ForeignPng,  // a PNG without write_png's mark (io/png.h): a user's picture, never replaced unasked
  Report,      // a run's report page, told by the line kReportHead it opens with (dit_mp report)
  Empty,       // a regular file of 0 bytes
  Lock,        // a lock dit_mp takes beside a folder or file it writes for a while (run/run_lock.h)
  WorkFolder,  // a resumable preparation's work folder, <out>.parts (io/latent_work.h)
  WeightsOrCheckpoint,  // expected only: a weights file or a checkpoint (--init-from)
  CheckpointOrSafetensors,  // expected only: a checkpoint or a safetensors file (inspect)
};

// The first bytes of every report page dit_mp writes (run/report_page.cpp): what tells a report it
// may replace from a user's HTML file.
inline constexpr const char* kReportHead = "<!DOCTYPE html>\n<!-- dit_mp report";
// dit_mp's JSON outputs (evaluate's result, plan's layouts) carry the key "dit_mp" first, naming
// what wrote them, as its PNGs carry a tEXt chunk: a JSON file without it (a VAE's config.json, a
// run's accounting.json or metrics.jsonl) is one a --json output never replaces.
// with_json_mark puts the key first in the object (or in an array's first object).
std::string with_json_mark(const std::string& json, const std::string& what);
bool json_written_by_dit_mp(const std::string& head);  // `head`: the file's first bytes

std::string kind_name(FileKind kind);  // "a weights file", "a checkpoint's index", ...
std::string kind_id(FileKind kind);    // "weights", "checkpoint_index", ... (help files)
FileKind detect_kind(const std::string& path);

enum class FileRole { Input, Output };

// One line of a command's declaration. `derive` says where the file is relative to the option's
// value: "" the value itself, "dir:NAME" the file NAME in that folder, "ext:.h5" the value with its
// extension replaced, "beside:.lock" the value's real path with ".lock" appended (a lock or work
// folder beside it). A derived file is one the command finds or makes on its own.
struct FileDecl {
  const char* option;  // "--weights", "@dir" (positional), or a config key without a flag ("eval.reference")
  FileRole role;
  FileKind kind;
  const char* what;      // its part in the command, for messages: "the weights being sampled"
  const char* derive = "";
  const char* key = "";  // train: the config key the option sets ("distill.teacher"), which messages name
};

struct CommandFiles {
  const char* command;
  std::vector<FileDecl> files;
};

// A declared file bound to its path.
struct FileUse {
  std::string name;    // "--out: its .h5 file", "distill.teacher"
  std::string option;  // what the user changes: "--out"
  std::string what;    // "the raw samples"
  std::string path;
  FileRole role = FileRole::Input;
  FileKind kind = FileKind::Unknown;
  bool replaced_whole = false;  // an output folder whose contents are replaced (--overwrite)
  bool overwrite = false;       // --overwrite given: a PNG output may replace a picture dit_mp did not write
  bool in_folder = false;       // a file a folder option names ("dir:"): the folder's own check vouches for it
};

class FilePlan {
 public:
  explicit FilePlan(std::string command) : command_(std::move(command)) {}
  // Binds every declaration of `decls` to the path `value` returns for it (its option's value,
  // before `derive`); an empty value leaves it out.
  void bind(const std::vector<FileDecl>& decls, const std::function<std::string(const FileDecl&)>& value);
  void add(FileUse use) { uses_.push_back(std::move(use)); }
  // Marks the outputs of `kind` as folders whose contents are replaced: no input may lie inside.
  void replace_whole(FileKind kind) {
    for (FileUse& u : uses_) u.replaced_whole = u.replaced_whole || (u.role == FileRole::Output && u.kind == kind);
  }
  // --overwrite: the outputs may replace a file of their format that dit_mp did not write (a PNG).
  void overwrite() {
    for (FileUse& u : uses_) u.overwrite = u.overwrite || u.role == FileRole::Output;
  }
  const std::vector<FileUse>& uses() const { return uses_; }
  // The one check: FIFOs and devices refused, every output against every input by identity, two
  // outputs at one file, each existing input and output of its kind. Throws one line naming both
  // roles (or the file, what it is and what was expected).
  void check() const;

 private:
  std::string command_;
  std::vector<FileUse> uses_;
};

// The checked opener of one file option: throws unless `path` is a regular file (or, for folder
// kinds, a folder) of kind `expected`, without opening a FIFO or device. A file that does not exist
// or whose kind cannot be told is left to its reader, whose message is the precise one.
void expect_kind(const std::string& name, const std::string& path, FileKind expected);
// The same for a file already looked at (`actual` = detect_kind(path)).
void expect_kind_of(const std::string& name, const std::string& path, FileKind expected, FileKind actual);

// `value`'s real path (absolute, its folder's links resolved, no trailing '/') with `suffix` appended:
// "runs/x/" -> "<cwd>/runs/x.lock", where a lock beside it lives whatever name reaches it.
std::string beside_path(const std::string& value, const std::string& suffix);

// The path a declaration names for an option's value `value` (applies `derive`).
std::string derived_path(const FileDecl& decl, const std::string& value);

// One line per declared file: "<command> <input|output> <option> <kind> <derive or -> [<key>]".
std::string describe_file_roles(const std::vector<CommandFiles>& commands);

}  // namespace dit
