// What a file is, and the one check of a command's files by role (see file_roles.h). Kinds are
// told apart by what dit_mp writes: the seal, HDF5 groups (/config with /weights, /classifier,
// /samples and /labels, /images) and root attributes (a checkpoint index's format_version and step,
// a shard's coord, Inception's format), a run config's header line, a report's first line, PNG and zip signatures.
#include "io/file_roles.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/h5.h"
#include "core/quote.h"
#include "io/png.h"
#include "io/utf8.h"
#include "io/sealed_h5.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

struct KindText {
  FileKind kind;
  const char* id;
  const char* name;
};
constexpr KindText kKinds[] = {
    {FileKind::Missing, "missing", "missing"},
    {FileKind::Special, "special", "a FIFO, device or socket"},
    {FileKind::Folder, "folder", "a folder"},
    {FileKind::Unknown, "unknown", "a file of unknown kind"},
    {FileKind::Weights, "weights", "a weights file"},
    {FileKind::Golden, "golden", "a golden file"},
    {FileKind::Dataset, "dataset", "a dataset"},
    {FileKind::RawSamples, "raw_samples", "a raw samples file (samples, labels)"},
    {FileKind::Classifier, "classifier", "a classifier"},
    {FileKind::CheckpointIndex, "checkpoint_index", "a checkpoint's index"},
    {FileKind::CheckpointShard, "checkpoint_shard", "a checkpoint's shard"},
    {FileKind::Inception, "inception", "an Inception-V3 weights file"},
    {FileKind::OtherH5, "hdf5", "an HDF5 file that dit_mp did not write"},
    {FileKind::DamagedSeal, "damaged", "a sealed HDF5 file whose seal does not match its bytes"},
    {FileKind::Checkpoint, "checkpoint", "a checkpoint folder"},
    {FileKind::CheckpointRoot, "checkpoint_root", "a checkpoint root (step folders and latest)"},
    {FileKind::RunFolder, "run_folder", "a run folder"},
    {FileKind::Config, "config", "a TOML config"},
    {FileKind::RunConfig, "run_config", "a run's config.toml written by dit_mp"},
    {FileKind::Json, "json", "a JSON file"},
    {FileKind::Png, "png", "a sample grid (PNG)"},
    {FileKind::Zip, "zip", "a zip archive (.npz or .pt)"},
    {FileKind::Safetensors, "safetensors", "a safetensors file (a VAE's weights)"},
    {FileKind::Text, "text", "a text file"},
    {FileKind::ForeignPng, "foreign_png", "a PNG image that dit_mp did not write"},
    {FileKind::Report, "report", "a run's report page (HTML)"},
    {FileKind::Empty, "empty", "an empty file (0 bytes)"},
    {FileKind::Lock, "lock", "a lock file (host=, pid= lines)"},
    {FileKind::WorkFolder, "work_folder", "a preparation's work folder (settings.txt, part-*.bin)"},
    {FileKind::WeightsOrCheckpoint, "weights_or_checkpoint", "a weights file or a checkpoint"},
    {FileKind::CheckpointOrSafetensors, "checkpoint_or_safetensors", "a checkpoint or a safetensors file"},
};

const KindText& text_of(FileKind k) {
  for (const KindText& t : kKinds)
    if (t.kind == k) return t;
  return kKinds[3];
}

constexpr off_t kSealCheckBytes = off_t(256) << 20;
constexpr const char* kSealMagic = "dit_mp sealed hdf5 1\n";
constexpr const char* kRunConfigHeader = "# dit_mp run configuration";

bool sealed(const std::string& head) { return head.rfind(kSealMagic, 0) == 0; }

// The first `n` bytes of a regular file (the caller has ruled out FIFOs and devices).
std::string head_of(const std::string& path, std::size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) return {};
  std::string s(n, '\0');
  const ssize_t got = ::pread(fd, s.data(), n, 0);
  ::close(fd);
  s.resize(got > 0 ? std::size_t(got) : 0);
  return s;
}

bool hdf5_signature(const std::string& head) {
  static const std::string sig("\x89HDF\r\n\x1a\n", 8);
  for (std::size_t at = 0; at + sig.size() <= head.size(); at = at ? at * 2 : 512)
    if (head.compare(at, sig.size(), sig) == 0) return true;
  return false;
}

FileKind hdf5_kind(const std::string& path) {
  h5::silence_errors();
  try {
    const h5::File f = h5::File::open_read(path);
    if (f.exists("/classifier")) return FileKind::Classifier;
    if (f.has_attr("/", "format_version") && f.has_attr("/", "step")) return FileKind::CheckpointIndex;
    if (f.has_attr("/", "coord")) return FileKind::CheckpointShard;
    if (f.has_attr("/", "format")) return FileKind::Inception;
    if (f.exists("/samples") && f.exists("/labels")) return FileKind::RawSamples;
    if (f.exists("/images")) return FileKind::Dataset;
    if (f.exists("/config")) {
      for (const char* g : {"forward", "loss", "schedule", "sample", "adamw", "ema", "prune", "distill", "timesteps",
                            "sample_loop"})
        if (f.exists(std::string("/") + g)) return FileKind::Golden;
      if (f.exists("/weights")) return FileKind::Weights;
    }
    return FileKind::OtherH5;
  } catch (const std::exception&) {
    return FileKind::Unknown;
  }
}

// Whether `head` is UTF-8, a sequence cut at its end (the head of a longer file) aside.
bool utf8_head(const std::string& head) {
  std::size_t end = head.size();
  for (std::size_t back = 0; back < 3 && end > 0 && (static_cast<unsigned char>(head[end - 1]) & 0xC0) == 0x80; ++back)
    --end;
  if (end > 0 && static_cast<unsigned char>(head[end - 1]) >= 0xC0) --end;  // a lead byte whose sequence was cut
  if (head.size() < 4096) end = head.size();  // the whole file: nothing was cut
  try {
    check_utf8(head.substr(0, end), "");
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Text is UTF-8 without NULs (binary bytes, such as a damaged safetensors header's length, are not).
FileKind text_kind(const std::string& head) {
  if (head.find('\0') != std::string::npos || !utf8_head(head)) return FileKind::Unknown;
  if (head.rfind(kRunConfigHeader, 0) == 0) return FileKind::RunConfig;
  if (head.rfind(kReportHead, 0) == 0) return FileKind::Report;
  if (head.rfind("host=", 0) == 0 && head.find("\npid=") != std::string::npos) return FileKind::Lock;
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (head[first] == '{' || head[first] == '[')) {
    // "[section]" (or "[[section]]") opens a TOML table: a bare key starts with a letter or '_',
    // which no JSON value does (true/false/null aside), however long the header line; else
    // JSON's '[' is followed by a value, and a TOML header closes before a newline, comma,
    // brace or quote.
    std::size_t key = first + 1;
    if (key < head.size() && head[key] == '[') ++key;
    key = head.find_first_not_of(" \t", key);
    const bool bare_key = key != std::string::npos &&
                          (std::isalpha(static_cast<unsigned char>(head[key])) || head[key] == '_') &&
                          head.compare(key, 4, "true") != 0 && head.compare(key, 5, "false") != 0 &&
                          head.compare(key, 4, "null") != 0;
    const std::size_t close = head.find(']', first);
    const bool toml_table = head[first] == '[' &&
                            (bare_key || (close != std::string::npos && head.find_first_of("\n,{\"", first) > close));
    if (!toml_table) return FileKind::Json;
  }
  return FileKind::Text;
}

FileKind folder_kind(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / ckpt::kIndexFile, ec)) return FileKind::Checkpoint;
  if (fs::exists(fs::path(path) / "config.toml", ec)) return FileKind::RunFolder;
  if (fs::is_regular_file(fs::path(path) / "settings.txt", ec) &&
      head_of((fs::path(path) / "settings.txt").string(), 12) == "work dit_mp ")
    return FileKind::WorkFolder;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string n = e.path().filename().string();
    if (n == "latest" || n.rfind("step_", 0) == 0) return FileKind::CheckpointRoot;
  }
  return FileKind::Folder;
}

bool folder_kind_p(FileKind k) {
  return k == FileKind::Folder || k == FileKind::Checkpoint || k == FileKind::CheckpointRoot ||
         k == FileKind::RunFolder || k == FileKind::WorkFolder;
}

// What to give instead of a FIFO or device: a folder for a folder's role.
const char* regular_advice(FileKind expected) {
  return folder_kind_p(expected) ? "give a folder" : "give a regular file";
}

// Whether a file of kind `actual` serves where `expected` is declared.
bool fits(FileKind expected, FileKind actual) {
  if (expected == actual) return true;
  switch (expected) {
    case FileKind::Config: return actual == FileKind::Text || actual == FileKind::RunConfig || actual == FileKind::Empty;
    case FileKind::Folder: return folder_kind_p(actual);
    case FileKind::RunFolder: return folder_kind_p(actual);
    case FileKind::WorkFolder: return actual == FileKind::Folder;  // its reader names what else it holds
    case FileKind::CheckpointRoot: return actual == FileKind::Folder || actual == FileKind::Checkpoint;
    case FileKind::Checkpoint: return actual == FileKind::CheckpointRoot || actual == FileKind::CheckpointIndex;
    case FileKind::CheckpointOrSafetensors:
      return actual == FileKind::Safetensors || fits(FileKind::Checkpoint, actual);
    case FileKind::WeightsOrCheckpoint:
      return actual == FileKind::Weights || actual == FileKind::Checkpoint || actual == FileKind::CheckpointRoot ||
             actual == FileKind::CheckpointIndex;
    default: return false;
  }
}

// Kinds whose reader gives the precise message (a damaged or foreign HDF5 file, no file at all).
bool left_to_reader(FileKind actual) {
  return actual == FileKind::Missing || actual == FileKind::Unknown || actual == FileKind::OtherH5 ||
         actual == FileKind::DamagedSeal;
}

// What to give instead, for the mistakes that have a usual cause.
std::string hint(FileKind expected, FileKind actual, const std::string& path) {
  const bool ckpt_given = actual == FileKind::CheckpointIndex || actual == FileKind::CheckpointShard ||
                          actual == FileKind::Checkpoint || actual == FileKind::CheckpointRoot;
  if (expected == FileKind::Weights && ckpt_given) {
    fs::path run = fs::path(path);
    while (!run.empty() && run.filename() != "ckpt" && run.has_parent_path() && run != run.parent_path())
      run = run.parent_path();
    const std::string r = run.filename() == "ckpt" ? run.parent_path().string() : "RUN";
    return ": give a weights file, e.g. the run's " + (fs::path(r) / "ema.h5").string() +
           " (a checkpoint's weights are written there when the run finishes)";
  }
  if (expected == FileKind::Checkpoint && (actual == FileKind::Weights || actual == FileKind::Golden))
    return ": give a checkpoint step folder or its root, e.g. RUN/ckpt";
  if (expected == FileKind::Golden) return ": golden files come from tools/make_golden.py (tests/data/*_golden.h5)";
  if (expected == FileKind::RawSamples)
    return ": expected datasets 'samples' (N, C, H, W) and 'labels' (N,), as dit_mp sample writes";
  if (expected == FileKind::Config) return ": give a TOML file (e.g. configs/fashion_mnist.toml)";
  return "";
}

struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string canonical;  // for a path not yet there
  bool operator==(const Identity& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : canonical == o.canonical);
  }
};

Identity identity_of(const std::string& path) {
  Identity id;
  struct stat st {};
  std::error_code ec;
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  id.canonical = fs::weakly_canonical(fs::absolute(path, ec), ec).lexically_normal().string();
  return id;
}

// Whether `file` lies inside `folder`: one of its ancestors is the folder by device and inode (also
// when a bind mount or another name reaches it), or, for a folder not yet there, by path.
bool inside(const Identity& file, const Identity& folder) {
  const std::string& c = file.canonical;
  const std::string& f = folder.canonical;
  if (c.size() > f.size() && c.compare(0, f.size(), f) == 0 && c[f.size()] == '/') return true;
  if (!folder.exists) return false;
  for (fs::path p = fs::path(c).parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && st.st_dev == folder.dev && st.st_ino == folder.ino) return true;
    if (p == p.root_path()) break;
  }
  return false;
}

// "input --weights W.h5 (the weights being sampled)"
std::string role_text(const FileUse& u) {
  return (u.role == FileRole::Input ? "input " : "output ") + u.name + " " + u.path + " (" + u.what + ")";
}

}  // namespace

std::string kind_name(FileKind kind) { return text_of(kind).name; }
std::string kind_id(FileKind kind) { return text_of(kind).id; }

FileKind detect_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return FileKind::Missing;
  if (S_ISDIR(st.st_mode)) return folder_kind(path);
  if (!S_ISREG(st.st_mode)) return FileKind::Special;
  if (st.st_size == 0) return FileKind::Empty;
  const std::string head = head_of(path, 4096);
  if (sealed(head)) {
    // The seal before HDF5 parses a byte (damaged structure can crash it); a large file's seal is
    // left to its reader, which checks it anyway, rather than read twice at start.
    if (st.st_size <= kSealCheckBytes) try {
        h5::verify_seal(path, "");
      } catch (const std::exception&) {
        return FileKind::DamagedSeal;
      }
    return hdf5_kind(path);
  }
  if (hdf5_signature(head)) return hdf5_kind(path);
  if (head.rfind("\x89PNG", 0) == 0) return png_written_by_dit_mp(head) ? FileKind::Png : FileKind::ForeignPng;
  if (head.rfind("PK\x03\x04", 0) == 0 || head.rfind("PK\x05\x06", 0) == 0) return FileKind::Zip;
  // safetensors: an 8-byte little-endian header length, then the header's JSON object.
  if (head.size() > 9 && head[8] == '{' && static_cast<unsigned char>(head[7]) == 0 &&
      static_cast<unsigned char>(head[6]) == 0)
    return FileKind::Safetensors;
  return text_kind(head);
}

void expect_kind(const std::string& name, const std::string& path, FileKind expected) {
  expect_kind_of(name, path, expected, detect_kind(path));
}

std::string with_json_mark(const std::string& json, const std::string& what) {
  const std::size_t brace = json.find('{');
  if (brace == std::string::npos) return json;
  const std::size_t next = json.find_first_not_of(" \t\r\n", brace + 1);
  const bool empty = next != std::string::npos && json[next] == '}';
  return json.substr(0, brace + 1) + "\"dit_mp\": " + quote_string(what) + (empty ? "" : ", ") + json.substr(brace + 1);
}

bool json_written_by_dit_mp(const std::string& head) {
  std::size_t at = head.find_first_not_of(" \t\r\n");
  if (at != std::string::npos && head[at] == '[') at = head.find_first_not_of(" \t\r\n", at + 1);
  if (at == std::string::npos || head[at] != '{') return false;
  at = head.find_first_not_of(" \t\r\n", at + 1);
  return at != std::string::npos && head.compare(at, 8, "\"dit_mp\"") == 0;
}

void expect_kind_of(const std::string& name, const std::string& path, FileKind expected, FileKind actual) {
  if (actual == FileKind::Special)
    DIT_FAIL(name, " ", path, " is a FIFO, device or socket, expected ", kind_name(expected), ": ",
             regular_advice(expected), " (dit_mp does not read from pipes)");
  if (left_to_reader(actual) || fits(expected, actual)) return;
  if (folder_kind_p(actual) && !folder_kind_p(expected))
    DIT_FAIL(name, " = ", path, ": is not a file (a folder; expected ", kind_name(expected), ")");
  // A golden file where a sealed file belongs: its reader's words ("no dit_mp seal") and what it is.
  const bool wants_seal = expected == FileKind::Weights || expected == FileKind::Dataset;
  if (wants_seal && actual == FileKind::Golden)
    DIT_FAIL(name, " = ", path, ": no dit_mp seal: it is ", kind_name(actual), ", expected ", kind_name(expected),
             hint(expected, actual, path));
  DIT_FAIL(name, " ", path, " is ", kind_name(actual), ", expected ", kind_name(expected), hint(expected, actual, path));
}

std::string beside_path(const std::string& value, const std::string& suffix) {
  fs::path p = fs::absolute(fs::path(value)).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "runs/x/" -> "runs/x"
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(p, ec);
  if (!ec && real.has_filename()) p = real;
  return p.string() + suffix;
}

std::string derived_path(const FileDecl& decl, const std::string& value) {
  const std::string d = decl.derive;
  if (d.rfind("beside:", 0) == 0) return beside_path(value, d.substr(7));
  if (d.rfind("dir:", 0) == 0) return (fs::path(value) / d.substr(4)).string();
  if (d.rfind("ext:", 0) == 0) return fs::path(value).replace_extension(d.substr(4)).string();
  return value;
}

void FilePlan::bind(const std::vector<FileDecl>& decls, const std::function<std::string(const FileDecl&)>& value) {
  for (const FileDecl& d : decls) {
    const std::string v = value(d);
    if (v.empty()) continue;
    const std::string option = *d.key ? d.key : d.option[0] == '@' ? d.option + 1 : d.option;
    std::string name = option;
    const std::string derive = d.derive;
    if (derive.rfind("beside:", 0) == 0) name += ": its " + derive.substr(7) + " beside it";
    else if (!derive.empty()) name += ": its " + derive.substr(4) + (derive[0] == 'e' ? " file" : "");
    FileUse use{name, option, d.what, derived_path(d, v), d.role, d.kind};
    use.in_folder = std::string(d.derive).rfind("dir:", 0) == 0;
    add(std::move(use));
  }
}

void FilePlan::check() const {
  std::vector<Identity> ids;
  std::vector<FileKind> kinds;  // each file looked at once (a seal's check reads the whole file)
  for (const FileUse& u : uses_) {
    ids.push_back(identity_of(u.path));
    kinds.push_back(detect_kind(u.path));
    DIT_CHECK(kinds.back() != FileKind::Special, command_, ": ", u.name, " ", u.path,
              " is a FIFO, device or socket, expected ", kind_name(u.kind), ": ", regular_advice(u.kind));
  }
  for (std::size_t o = 0; o < uses_.size(); ++o) {
    const FileUse& out = uses_[o];
    if (out.role != FileRole::Output) continue;
    for (std::size_t i = 0; i < uses_.size(); ++i) {
      const FileUse& other = uses_[i];
      if (i == o) continue;
      const bool same = ids[i] == ids[o];
      if (other.role == FileRole::Input && (same || (out.replaced_whole && inside(ids[i], ids[o]))))
        DIT_FAIL(command_, ": ", role_text(out), same ? " is " : " would replace ", role_text(other),
                 same ? "" : " inside it", ": no output may overwrite an input; choose another ", out.option);
      // An input folder is read whole (prepare-data's pictures, features, labels): an output inside
      // it, with its lock, work folder and temporaries beside it, would be read as part of it (a
      // killed preparation's .parts folder as a class) by the next run of the same command.
      if (other.role == FileRole::Input && other.kind == FileKind::Folder && !same && inside(ids[o], ids[i]))
        DIT_FAIL(command_, ": ", role_text(out), " lies inside ", role_text(other),
                 ", which is read whole: its lock, work folder and temporaries would be read as part of it; choose an ",
                 out.option, " outside that folder");
      if (other.role == FileRole::Output && same && i > o)
        DIT_FAIL(command_, ": ", role_text(out), " and ", role_text(other), " are one file: give them different names");
    }
  }
  for (std::size_t i = 0; i < uses_.size(); ++i) {
    const FileUse& u = uses_[i];
    const FileKind actual = kinds[i];
    if (u.role == FileRole::Input) {
      expect_kind_of(u.name, u.path, u.kind, actual);
      continue;
    }
    // A folder where a file goes is the writer's to name (its message says which file name to give);
    // an empty file holds nothing to lose (a run stopped before its first metrics line).
    const bool empty = actual == FileKind::Empty;
    // A JSON output fits a JSON file by format, and must also carry dit_mp's mark; the files a
    // folder option names are the folder's (a run folder is dit_mp's, or refused as a whole).
    if (u.kind == FileKind::Json && actual == FileKind::Json && !u.in_folder && !u.overwrite &&
        !json_written_by_dit_mp(head_of(u.path, 256)))
      DIT_FAIL(command_, ": output ", u.name, " ", u.path, " (", u.what, ") exists and is a JSON file that dit_mp ",
               "did not write (its first key is not \"dit_mp\"): dit_mp replaces only its own outputs; move it or ",
               "choose another ", u.option);
    if (actual == FileKind::Missing || fits(u.kind, actual) || empty || (folder_kind_p(actual) && !folder_kind_p(u.kind)))
      continue;
    // A picture of the grid's format: replaced only when asked (the user's photo.png, a class
    // folder's 0.png).
    const bool same_format = u.kind == FileKind::Png && actual == FileKind::ForeignPng;
    if (same_format && u.overwrite) continue;
    DIT_FAIL(command_, ": output ", u.name, " ", u.path, " (", u.what, ") exists and is ", kind_name(actual),
             ", not ", kind_name(u.kind), " that dit_mp wrote: dit_mp replaces only its own outputs; move it",
             same_format ? ", pass --overwrite" : "", " or choose another ", u.option);
  }
}

std::string describe_file_roles(const std::vector<CommandFiles>& commands) {
  std::ostringstream os;
  for (const CommandFiles& c : commands)
    for (const FileDecl& d : c.files)
      os << c.command << ' ' << (d.role == FileRole::Input ? "input" : "output") << ' ' << d.option << ' '
         << kind_id(d.kind) << ' ' << (*d.derive ? d.derive : "-") << (*d.key ? " " : "") << d.key << '\n';
  return os.str();
}

}  // namespace dit
