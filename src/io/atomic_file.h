// The one way dit_mp writes a file: completely or not at all. A reader never sees a partial or
// zero-byte file, the previous file stays intact until its replacement is complete and on disk
// (file and folder fsynced), and no temporary is left behind on any failure, including SIGKILL.
//
// How:
// - write_file_atomic (bytes held in memory) writes into an unnamed file (open(O_TMPFILE) in the
//   target's folder): until it is complete and fsynced it has no name, so a process killed midway
//   leaves nothing; the kernel frees it. It is then linked under a temporary name and renamed over
//   the target. Where the file system refuses O_TMPFILE (NFS, some parallel file systems) a named
//   temporary is used instead. The HDF5 files of weights, samples, the classifier and checkpoint
//   indexes are built in memory (h5::build_in_memory, HDF5's core driver) and written through it, so
//   HDF5 never meets a full disk (HDF5 1.10 does not recover from a failed flush: the process crashed at
//   exit); PNGs are encoded in memory likewise. The cost is the file's size in memory while it is
//   written.
// - write_atomically (a library fills a file given its path; used for dataset files and checkpoint
//   shards, which can be far larger than memory, with their disk space reserved first:
//   h5::DiskFile::create_reserved)
//   fills a named temporary "<target>.tmp-<host>-<pid>" in the same folder, fsyncs and renames it.
//   A process killed during the fill leaves that temporary, and the next write of the same target
//   (by any process on the same host) removes it once its writer pid is gone; the named-temporary
//   fallback above and the instant between link and rename are covered the same way.
// Every failure is one line: "<what> <path>: cannot write (<cause>)", the cause in errno's words.
#pragma once

#include <functional>
#include <string>

namespace dit {

// Writes `bytes` to `path` completely or not at all (see above). Throws dit::Error
// "<what> <path>: cannot write (<errno text>)", e.g. "samples /r/s.h5: cannot write (No space left
// on device (the disk is full))".
void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what);

// For writers that fill a file through a library given a path: `fill(tmp_path)` writes the whole
// file at tmp_path; then it is fsynced and renamed over `path`. Any exception from fill, or a failed
// fsync/rename, removes the temporary and rethrows naming `path` and the cause. (A dit::Error from
// fill that does not name tmp_path is about something else, e.g. an input file found bad while
// filling, and passes through unchanged once the temporary is gone.)
void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp_path)>& fill);

// Refuses (throws, one line) a target that is an existing directory or other non-regular file
// (a device, a pipe), an empty path, or one whose folder does not exist. Writes nothing.
void check_writable_target(const std::string& path, const std::string& what);

// The temporary name write_atomically fills for `path` in this process: "<path>.tmp-<host>-<pid>".
std::string temporary_name(const std::string& path);

// Removes the temporaries of `path` ("<path>.tmp-<host>-<pid>") whose writer was a process on this
// host that no longer runs. Returns how many were removed. Temporaries of live processes or of other
// hosts (a shared file system) are left alone.
int remove_stale_temporaries(const std::string& path);

// Flushes a file, or a folder's entries, to disk; throws "<what> <path>: cannot write (<errno
// text>)". A file system that cannot sync folders (EINVAL) is accepted for folders.
void fsync_file(const std::string& path, const std::string& what);
void fsync_folder(const std::string& path, const std::string& what);

}  // namespace dit
