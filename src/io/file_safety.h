// Checks and messages for the files dit_mp reads and writes: the one opener of a file it reads
// (its own files found in folders included: a checkpoint's latest, index and shards, a lock, a
// work folder's parts), which refuses a FIFO, device, socket or folder instead of blocking on it; a
// folder is probed for writability at start (a probe file created and removed) rather than found
// read-only at the first save, and an operating-system error becomes one readable line naming the
// file and the cause ("the disk is full").
#pragma once

#include <fcntl.h>

#include <string>

namespace dit {

// The one opener of a file dit_mp reads: opens `path` with `flags` without blocking (a FIFO opens at
// once), throws one line naming `what`, the path and what it is unless it is a regular file, then
// restores blocking reads. Returns -1 (errno set) when the file cannot be opened: the caller says why.
int open_regular(const std::string& path, const std::string& what, int flags = O_RDONLY);
// The same check for a reader that opens by path (HDF5, a stream): throws unless `path` is a regular
// file (a symbolic link to one passes) or does not exist (the reader's message names that).
void require_regular(const std::string& path, const std::string& what);
// Why an entry a folder's listing found is no regular file to read ("" when it is one, or a link to
// one): "a FIFO, not a regular file ...", "a symbolic link to T, which does not exist", ...
std::string not_a_regular_file(const std::string& path);
// The whole of the regular file `path` ("" when it does not exist), through open_regular.
std::string read_regular(const std::string& path, const std::string& what);

// Creates `dir` (and its parents) when missing, then creates and removes a probe file named after
// `probe_name` in it. Throws one line naming `what` (e.g. "run.checkpoint_dir"), the folder and the
// cause when any of that fails.
void probe_writable(const std::string& dir, const std::string& what, const std::string& probe_name);

// "No space left on device (the disk is full)" and the like, for an errno value.
std::string describe_errno(int err);

// The errno-style cause of the last failed write to `path`'s file system, worded for a user:
// checks free space (statvfs) and writability, since HDF5's own error stack does not keep errno.
// Returns e.g. "the disk is full (0 bytes free on /mnt/x)" or "" when nothing is found.
std::string write_failure_cause(const std::string& path);

}  // namespace dit
