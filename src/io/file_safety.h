// Checks and messages for the files a run writes: a folder is probed for writability at start
// (a probe file created and removed) rather than found read-only at the first save, and an
// operating-system error becomes one readable line naming the file and the cause ("the disk is full").
#pragma once

#include <string>

namespace dit {

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
