#pragma once
// MLA_* environment variables are read on rank 0 and sent to the workers, so a switch set where
// mpirun was typed (MLA_TRACE, MLA_LOG_LEVEL, ...) acts on every rank, not only where the
// launcher happened to forward it. A worker whose own environment disagrees says so.
#include <string>
#include <vector>

namespace mla {

// The "NAME=VALUE" entries of env (a null-terminated environ array) whose name starts MLA_,
// sorted by name.
std::vector<std::string> mla_env_entries(char** env);

// One warning per name whose value differs between rank 0's entries and this rank's (set on one
// side only counts), naming the variable and both values.
std::vector<std::string> env_mismatches(const std::vector<std::string>& root, const std::vector<std::string>& mine);

// Makes this process's MLA_* variables exactly `root`'s: unsets its own, sets rank 0's.
void adopt_env(const std::vector<std::string>& root);

// The entries joined by '\0' (for one broadcast) and split back.
std::string join_env(const std::vector<std::string>& entries);
std::vector<std::string> split_env(const std::string& joined);

}  // namespace mla
