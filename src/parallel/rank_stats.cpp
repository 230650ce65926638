#include "parallel/rank_stats.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>

namespace mla {

void read_resident_memory(RankStats& s, const std::string& model_path) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "VmRSS:") s.rss_bytes = kib * 1024;
    if (key == "RssFile:") s.rss_file_bytes = kib * 1024;
    if (key == "RssAnon:") s.rss_anon_bytes = kib * 1024;
  }
  // smaps: a mapping's header line ends with its path; its "Rss:" line follows.
  std::ifstream smaps("/proc/self/smaps");
  bool in_model = false;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < line.find(' ')) {
      in_model = line.size() >= model_path.size() && line.ends_with(model_path);
      continue;
    }
    if (in_model && line.starts_with("Rss:")) s.model_rss_bytes += std::stoll(line.substr(4)) * 1024;
  }
}

}  // namespace mla
